use serde_json::json;
use toolq::EnqueueRequest;

use crate::support::TestEnv;

#[tokio::test]
async fn bad_requests_write_nothing() {
    let env = TestEnv::new();
    let e = env
        .client
        .enqueue(EnqueueRequest::new("nope", json!({})))
        .await
        .unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(e.to_string().contains("\"nope\""), "{e}");
    let e = env
        .client
        .enqueue(EnqueueRequest::new("add", json!({"a": 1})))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("\"b\""), "{e}");
    let e = env
        .client
        .enqueue_batch(vec![
            EnqueueRequest::new("echo", json!({"message": "hi"})),
            EnqueueRequest::new("echo", json!({"message": 5})),
        ])
        .await
        .unwrap_err();
    assert!(e.to_string().starts_with("request 2: "), "{e}");
    // Stored times are fixed-width text: a year past 9999 would be written as "+10000-..."
    // and sort before every due time, and could not be read back.
    for year in [10_000, -1] {
        let mut req = EnqueueRequest::new("echo", json!({"message": "later"}));
        req.run_at = Some(
            chrono::NaiveDate::from_ymd_opt(year, 1, 1)
                .unwrap()
                .and_hms_opt(0, 0, 0)
                .unwrap()
                .and_utc(),
        );
        let e = env.client.enqueue(req).await.unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(
            e.to_string().contains("run_at") && e.to_string().contains("years 1 and 9999"),
            "{e}"
        );
    }
    assert_eq!(env.count("SELECT count(*) FROM runs"), 0);
}

#[tokio::test]
async fn idempotency_key_returns_the_existing_run() {
    let env = TestEnv::new();
    let mut req = EnqueueRequest::new("echo", json!({"message": "a"}));
    req.idempotency_key = Some("k1".into());
    let a = env.client.enqueue(req.clone()).await.unwrap();
    let b = env.client.enqueue(req).await.unwrap();
    assert!(a.created && !b.created);
    assert_eq!(a.run_id, b.run_id);
    assert_eq!(env.count("SELECT count(*) FROM runs"), 1);
}

#[tokio::test]
async fn a_batch_inserts_in_order_and_a_repeated_key_within_it_returns_the_first_run() {
    let env = TestEnv::new();
    let keyed = |m: &str| {
        let mut req = EnqueueRequest::new("echo", json!({"message": m}));
        req.idempotency_key = Some("same".into());
        req
    };
    let out = env
        .client
        .enqueue_batch(vec![
            keyed("first"),
            EnqueueRequest::new("echo", json!({"message": "plain"})),
            keyed("first"),
        ])
        .await
        .unwrap();
    assert_eq!(out.len(), 3);
    assert!(out[0].created && out[1].created && !out[2].created);
    assert_eq!(out[0].run_id, out[2].run_id);
    assert_eq!(env.count("SELECT count(*) FROM runs"), 2);
    let first = env.client.get(&out[0].run_id).await.unwrap();
    assert_eq!(first.args, json!({"message": "first"}));
    let plain = env.client.get(&out[1].run_id).await.unwrap();
    assert_eq!(plain.args, json!({"message": "plain"}));
    assert_eq!(plain.run_at, plain.created_at);
}

/// The same key with other args is almost always a caller's bug: an error (exit 2) that names
/// the key and the run holding it, and nothing is written, also within a batch.
#[tokio::test]
async fn the_same_idempotency_key_with_other_args_is_an_error_naming_both() {
    let env = TestEnv::new();
    let keyed = |m: &str| {
        let mut req = EnqueueRequest::new("echo", json!({"message": m}));
        req.idempotency_key = Some("k".into());
        req
    };
    let first = env.client.enqueue(keyed("a")).await.unwrap().run_id;
    let e = env.client.enqueue(keyed("b")).await.unwrap_err();
    assert_eq!(e.exit_code(), 2, "{e}");
    let text = e.to_string();
    assert!(
        text.contains("idempotency key \"k\"")
            && text.contains(&format!("already names run {first} with different args")),
        "{text}"
    );
    let e = env
        .client
        .enqueue_batch(vec![
            EnqueueRequest::new("echo", json!({"message": "x"})),
            keyed("a"),
            keyed("c"),
        ])
        .await
        .unwrap_err();
    assert!(e.to_string().starts_with("request 3: "), "{e}");
    assert_eq!(e.exit_code(), 2);
    assert_eq!(
        env.count("SELECT count(*) FROM runs"),
        1,
        "the batch wrote nothing"
    );
    // The same tool and args (keys in any order) is still the same run.
    let mut same = EnqueueRequest::new("echo", json!({"message": "a"}));
    same.idempotency_key = Some("k".into());
    assert_eq!(env.client.enqueue(same).await.unwrap().run_id, first);
}

#[tokio::test]
async fn unique_runs_return_the_matching_run_within_their_states_and_period() {
    use toolq::run::Unique;
    let env = TestEnv::new();
    // `counter` takes any object, so canonical args can be nested and reordered.
    let unique =
        |args: serde_json::Value, u: Unique| EnqueueRequest::new("counter", args).unique(u);
    let first = env
        .client
        .enqueue(unique(
            json!({"a": 1, "b": {"y": 2, "x": 1}}),
            Unique::default(),
        ))
        .await
        .unwrap();
    assert!(first.created);
    // The same args in another key order are the same canonical args.
    let again = env
        .client
        .enqueue(unique(
            json!({"b": {"x": 1, "y": 2}, "a": 1}),
            Unique::default(),
        ))
        .await
        .unwrap();
    assert_eq!(
        (again.run_id.clone(), again.created),
        (first.run_id.clone(), false)
    );
    // Other args, another tool, or an enqueue that is not unique: new runs.
    let other = env
        .client
        .enqueue(unique(json!({"a": 2}), Unique::default()))
        .await
        .unwrap();
    assert!(other.created);
    let add = env
        .client
        .enqueue(EnqueueRequest::new("add", json!({"a": 1, "b": 2})).unique(Unique::default()))
        .await
        .unwrap();
    assert!(add.created);
    let plain = env
        .client
        .enqueue(EnqueueRequest::new(
            "counter",
            json!({"a": 1, "b": {"y": 2, "x": 1}}),
        ))
        .await
        .unwrap();
    assert!(plain.created);

    // Cancelled: no longer in the default states, so the next unique enqueue inserts...
    env.client.cancel(&first.run_id).await.unwrap();
    let args = json!({"a": 1, "b": {"x": 1, "y": 2}});
    let second = env
        .client
        .enqueue(unique(args.clone(), Unique::default()))
        .await
        .unwrap();
    assert!(second.created);
    // ... while one that counts cancelled runs within an hour returns the cancelled one,
    let cancelled_within_1h = Unique {
        within: Some(std::time::Duration::from_secs(3600)),
        states: vec![toolq::RunState::Cancelled],
        ..Unique::default()
    };
    let hit = env
        .client
        .enqueue(unique(args.clone(), cancelled_within_1h.clone()))
        .await
        .unwrap();
    assert_eq!((hit.run_id, hit.created), (first.run_id.clone(), false));
    // ... until the hour has passed.
    env.clock.advance(chrono::Duration::minutes(61));
    let late = env
        .client
        .enqueue(unique(args.clone(), cancelled_within_1h))
        .await
        .unwrap();
    assert!(late.created);

    // Within one batch, the second of two equal unique requests returns the first.
    let out = env
        .client
        .enqueue_batch(vec![
            unique(json!({"n": 1}), Unique::default()),
            unique(json!({"n": 1}), Unique::default()),
        ])
        .await
        .unwrap();
    assert!(out[0].created && !out[1].created);
    assert_eq!(out[0].run_id, out[1].run_id);

    let e = env
        .client
        .enqueue(unique(
            json!({}),
            Unique {
                states: vec![],
                ..Unique::default()
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(e.exit_code(), 2, "{e}");
}

/// Unique enqueues from several processes at once make one run: the check and the insert
/// are one write transaction. The CLI's flags and a file line say the same.
#[test]
fn unique_enqueues_from_several_processes_make_one_run() {
    use crate::support::toolq;
    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    assert!(toolq(&db, &["init"]).status.success());
    let children: Vec<_> = (0..6)
        .map(|_| {
            std::process::Command::new(env!("CARGO_BIN_EXE_toolq"))
                .arg("--db")
                .arg(&db)
                .args(["--json", "enqueue", "echo", "--args", r#"{"message":"xy"}"#])
                .args(["--unique-by", "args", "--unique-for", "1h"])
                .env_remove("TOOLQ_CONFIG")
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let answers: Vec<serde_json::Value> = children
        .into_iter()
        .map(|c| {
            let o = c.wait_with_output().unwrap();
            assert!(o.status.success(), "{o:?}");
            serde_json::from_slice(&o.stdout).unwrap()
        })
        .collect();
    let id = answers[0]["run_id"].clone();
    assert!(answers.iter().all(|a| a["run_id"] == id), "{answers:?}");
    assert_eq!(
        answers
            .iter()
            .filter(|a| a["created"] == json!(true))
            .count(),
        1
    );

    let file = dir.path().join("runs.jsonl");
    std::fs::write(
        &file,
        "{\"tool\":\"echo\",\"args\":{\"message\":\"xy\"},\"unique_by\":\"args\",\"unique_states\":[\"queued\"]}\n\
         {\"tool\":\"echo\",\"args\":{\"message\":\"x2\"},\"unique_by\":\"args\",\"unique_for\":\"10m\",\"unique_states\":\"queued,running\"}\n",
    )
    .unwrap();
    let o = toolq(
        &db,
        &["--json", "enqueue", "--file", file.to_str().unwrap()],
    );
    assert!(o.status.success(), "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["runs"][0]["run_id"].clone(), v["created"].clone()),
        (id, json!(1))
    );

    // Bad unique input and a key reused with other args are input errors (exit 2), and the
    // message names the flag (the args are valid, so the refusal is the flag's).
    let valid = ["--args", r#"{"message":"u"}"#];
    for (args, flag) in [
        (
            vec!["enqueue", "echo", "--unique-by", "tool"],
            "--unique-by",
        ),
        (
            vec![
                "enqueue",
                "echo",
                "--unique-by",
                "args",
                "--unique-states",
                "done",
            ],
            "--unique-states",
        ),
        (
            vec![
                "enqueue",
                "echo",
                "--unique-by",
                "args",
                "--unique-for",
                "0s",
            ],
            "--unique-for",
        ),
    ] {
        let o = toolq(&db, &[&args[..], &valid[..]].concat());
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(flag), "{args:?}: {err}");
    }
    let keyed = |m: &str| {
        toolq(
            &db,
            &[
                "enqueue",
                "echo",
                "--idempotency-key",
                "k",
                "--args",
                &format!(r#"{{"message":"{m}"}}"#),
            ],
        )
    };
    assert!(keyed("a").status.success());
    let o = keyed("b");
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with("toolq: idempotency key \"k\": already names run bg_")
            && err
                .contains(r#"with different args: stored {"message":"a"}, given {"message":"b"}"#),
        "{err}"
    );
}

/// A batch larger than one multi-row INSERT (64 runs), with keyed runs between plain ones:
/// every run is stored with every column it was given, and a key repeated after many plain
/// runs still finds its first run.
#[tokio::test]
async fn a_large_mixed_batch_stores_every_column_of_every_run() {
    let env = TestEnv::new();
    let now = env.client.now();
    let request = |i: usize| {
        let mut req = EnqueueRequest::new("echo", json!({"message": format!("m{i}")}));
        req.title = Some(format!("title {i}"));
        req.priority = i as i64 - 70;
        req.max_attempts = Some(1 + (i % 5) as i64);
        req.timeout = i
            .is_multiple_of(3)
            .then(|| std::time::Duration::from_millis(1000 + i as u64));
        req.signal_on_completion = i.is_multiple_of(2);
        req.delivery = if i.is_multiple_of(4) {
            toolq::Delivery::Silent
        } else {
            toolq::Delivery::WhenIdle
        };
        req.run_at = i
            .is_multiple_of(7)
            .then(|| now + chrono::Duration::seconds(i as i64));
        req.session = format!("s{}", i % 3);
        if i == 66 || i == 140 {
            req.idempotency_key = Some("k".into());
            req.args = json!({"message": "keyed"});
        }
        req
    };
    let n = 150;
    let out = env
        .client
        .enqueue_batch((0..n).map(request).collect())
        .await
        .unwrap();
    assert_eq!(out.len(), n);
    assert!(!out[140].created && out[140].run_id == out[66].run_id);
    assert!(out.iter().enumerate().all(|(i, o)| o.created == (i != 140)));
    assert_eq!(env.count("SELECT count(*) FROM runs"), n as i64 - 1);
    // Ids are time-ordered and made in request order.
    let stored = env.db.column("SELECT id FROM runs ORDER BY id");
    let created: Vec<String> = out
        .iter()
        .filter(|o| o.created)
        .map(|o| o.run_id.to_string())
        .collect();
    assert_eq!(stored, created, "the runs the batch says it created");
    for (i, o) in out.iter().enumerate().filter(|(_, o)| o.created) {
        let run = env.client.get(&o.run_id).await.unwrap();
        let want = request(i);
        assert!(
            want.title.is_some() && want.max_attempts.is_some(),
            "run {i}"
        );
        assert_stored_as_requested(&run, &want, i);
    }
}

/// Every column `want` sets, as `run` (request `i` of a batch) stored it; defaults where the
/// request left one out (max attempts 3, the due time the creation time).
fn assert_stored_as_requested(run: &toolq::Run, want: &EnqueueRequest, i: usize) {
    assert_eq!(run.args, want.args, "run {i}");
    assert_eq!(run.tool, want.tool, "run {i}");
    assert_eq!(run.session_id, want.session, "run {i}");
    if let Some(title) = &want.title {
        assert_eq!(&run.title, title, "run {i}");
    }
    assert_eq!(run.priority, want.priority, "run {i}");
    assert_eq!(run.max_attempts, want.max_attempts.unwrap_or(3), "run {i}");
    assert_eq!(
        run.timeout_ms,
        want.timeout.map(|t| t.as_millis() as i64),
        "run {i}"
    );
    assert_eq!(
        run.signal_on_completion, want.signal_on_completion,
        "run {i}"
    );
    assert_eq!(run.delivery, want.delivery, "run {i}");
    assert_eq!(run.run_at, want.run_at.unwrap_or(run.created_at), "run {i}");
    assert_eq!(run.state, toolq::RunState::Queued, "run {i}");
    assert_eq!(run.ticks, 1, "run {i}");
}

/// A batch's chunks bind the values their runs share once (`runs::Shared`): chunks that share
/// everything but the args, the names only, the options only, or nothing, each store every
/// column of every run, and the whole batch has one creation time.
#[tokio::test]
async fn a_batch_whose_chunks_share_different_columns_stores_each_runs_own_values() {
    let env = TestEnv::new();
    let now = env.client.now();
    let request = |i: usize| {
        let mut req = EnqueueRequest::new("echo", json!({"message": format!("m{i}")}));
        match i / 64 {
            // Everything but the args shared.
            0 => {}
            // Names shared, options not.
            1 => {
                req.priority = i as i64;
                req.timeout = i
                    .is_multiple_of(2)
                    .then(|| std::time::Duration::from_millis(500 + i as u64));
            }
            // Options shared, names not.
            2 => {
                req.session = format!("s{i}");
                req.title = Some(format!("title {i}"));
                req.max_attempts = Some(7);
                req.delivery = toolq::Delivery::Interrupt;
                req.signal_on_completion = false;
            }
            // Due times differ; the rest shared.
            _ => {
                req.run_at = Some(now + chrono::Duration::seconds(i as i64));
            }
        }
        req
    };
    let n = 64 * 3 + 13; // full chunks and power-of-two remainders
    let out = env
        .client
        .enqueue_batch((0..n).map(request).collect())
        .await
        .unwrap();
    assert_eq!(out.len(), n);
    let mut created = None;
    for (i, o) in out.iter().enumerate() {
        assert!(o.created, "run {i}");
        let run = env.client.get(&o.run_id).await.unwrap();
        assert_stored_as_requested(&run, &request(i), i);
        assert_eq!(
            *created.get_or_insert(run.created_at),
            run.created_at,
            "run {i}"
        );
    }
    let stored = env.db.column("SELECT id FROM runs ORDER BY id");
    let ids: Vec<String> = out.iter().map(|o| o.run_id.to_string()).collect();
    assert_eq!(stored, ids, "ids keep the request order");
}
