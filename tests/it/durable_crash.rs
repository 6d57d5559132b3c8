//! Durable runs under kill -9, with real processes: workers of `examples/durable_steps`
//! (three recorded steps, each appending `step N run R` to a file outside the database, and a
//! wait for "go" between steps 2 and 3) killed with SIGKILL 200 times at random moments and
//! restarted, while the test sends "go" to each run at random times (before, during and
//! after its wait). The guarantees:
//! - a step's closure runs again only if its worker died after the closure started and before
//!   its record committed: once a step's record has committed, its line count never grows,
//!   and each step ran at most once more than the kills that caught it unrecorded;
//! - every run ends completed with its event's payload, its four records done, its event
//!   consumed once;
//! - exactly one inbox message per run (suspending, resuming and events write none).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolq::{Client, RegistryBuilder, RunId};

use crate::examples::example;
use crate::support::TestDb;

/// Kills in all.
const KILLS: usize = 200;
/// Runs enqueued per wave; a new wave comes when the last one has completed.
const WAVE: usize = 6;

fn spawn_worker(bin: &Path, db: &TestDb, dir: &Path) -> Child {
    let log =
        std::fs::File::create(dir.join(format!("worker-{}.log", rand::random::<u64>()))).unwrap();
    Command::new(bin)
        .arg("worker")
        .arg(db)
        .arg("2")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("the worker starts")
}

/// Lines per (run, step) of the steps' file.
fn lines(file: &Path) -> HashMap<(String, u32), usize> {
    let mut seen = HashMap::new();
    let text = std::fs::read_to_string(file).unwrap_or_default();
    for line in text.lines() {
        let mut words = line.split(' ');
        let (Some("step"), Some(n), Some("run"), Some(run), None) = (
            words.next(),
            words.next(),
            words.next(),
            words.next(),
            words.next(),
        ) else {
            panic!("a torn or unknown line in the steps' file: {line:?}");
        };
        *seen
            .entry((run.to_string(), n.parse().unwrap()))
            .or_insert(0) += 1;
    }
    seen
}

/// The (run, step number) whose record has committed as done.
fn recorded(db: &TestDb) -> Vec<(String, u32)> {
    db.rows("SELECT run_id, name FROM step_records WHERE status = 'done' AND kind = 'step'")
        .into_iter()
        .map(|r| {
            let name = r[1].clone().unwrap();
            let n = name.strip_prefix("step").unwrap().parse().unwrap();
            (r[0].clone().unwrap(), n)
        })
        .collect()
}

/// Sends "go" (payload `{"run": id}`) to each run at its time, from this process through the
/// library; per send, whether the run was already waiting for it (it woke).
fn signal_at(db: &TestDb, mut plan: Vec<(String, Instant)>) -> std::thread::JoinHandle<Vec<bool>> {
    let config = db.config();
    plan.sort_by_key(|(_, at)| *at);
    std::thread::spawn(move || {
        let registry = RegistryBuilder::new().build().unwrap();
        let client = Client::open(config, registry).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        plan.into_iter()
            .map(|(id, at)| {
                std::thread::sleep(at.saturating_duration_since(Instant::now()));
                let run: RunId = id.parse().unwrap();
                let sent = rt
                    .block_on(client.signal(&run, "go", json!({ "run": id }), Some("crash".into())))
                    .unwrap_or_else(|e| panic!("signal {id}: {e}"));
                sent.woke
            })
            .collect()
    })
}

fn enqueue(bin: &Path, db: &TestDb, file: &Path) -> Vec<String> {
    let out = Command::new(bin)
        .arg("enqueue")
        .arg(db)
        .arg(file)
        .arg(WAVE.to_string())
        .arg("150")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn kill_9_during_steps_and_waits_never_runs_a_recorded_step_again() {
    let bin = example("durable_steps");
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::at(dir.path());
    let file = dir.path().join("steps.log");
    let started = Instant::now();

    let mut runs: Vec<String> = Vec::new();
    let mut signallers = Vec::new();
    // Per (run, step): the kills that caught the run held by the dead worker with this step
    // not recorded yet (each may have run its closure once more).
    let mut unrecorded_kills: HashMap<(String, u32), usize> = HashMap::new();
    // Per (run, step) recorded at some kill: its line count then, which must never change.
    let mut frozen: HashMap<(String, u32), usize> = HashMap::new();
    let (mut kills, mut hits, mut early_kills) = (0, 0, 0);
    let mut child = spawn_worker(&bin, &db, dir.path());
    let mut spawned = Instant::now();
    while kills < KILLS {
        // (Before the first wave the worker may not have created the schema yet.)
        let unfinished = db
            .try_rows("SELECT count(*) FROM runs WHERE state != 'completed'")
            .map_or(0, |r| r[0][0].as_deref().map_or(0, |n| n.parse().unwrap()));
        if unfinished == 0 {
            let wave = enqueue(&bin, &db, &file);
            let now = Instant::now();
            let plan = wave
                .iter()
                .map(|id| {
                    let delay = Duration::from_millis(rand::random_range(0..=3000u64));
                    (id.clone(), now + delay)
                })
                .collect();
            signallers.push(signal_at(&db, plan));
            runs.extend(wave);
        }
        let pid = child.id();
        if kills % 4 == 3 {
            // Anywhere, start-up included.
            let at = spawned + Duration::from_millis(rand::random_range(0..=200u64));
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
            early_kills += 1;
        } else {
            let deadline = Instant::now() + Duration::from_secs(20);
            while db.count(&format!("SELECT count(*) FROM workers WHERE pid = {pid}")) == 0 {
                assert!(Instant::now() < deadline, "worker {pid} never registered");
                std::thread::sleep(Duration::from_millis(2));
            }
            std::thread::sleep(Duration::from_millis(rand::random_range(0..=500u64)));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        kills += 1;
        // Nothing runs now: the database and the file are as the dead worker left them.
        let held = db.column(&format!(
            "SELECT r.id FROM runs r JOIN workers w ON w.id = r.lease_owner \
             WHERE r.state = 'running' AND w.pid = {pid}"
        ));
        hits += held.len();
        let done = recorded(&db);
        let now_lines = lines(&file);
        for id in &held {
            for n in 1..=3 {
                let key = (id.clone(), n);
                if !done.contains(&key) {
                    *unrecorded_kills.entry(key).or_insert(0) += 1;
                }
            }
        }
        for key in done {
            let n = now_lines.get(&key).copied().unwrap_or(0);
            let first = *frozen.entry(key.clone()).or_insert(n);
            assert_eq!(
                n, first,
                "{key:?} ran again after its record committed ({first} lines then, {n} now)"
            );
        }
        child = spawn_worker(&bin, &db, dir.path());
        spawned = Instant::now();
    }
    let killing = started.elapsed();
    // The last worker lives: every run ends once its "go" has been sent.
    let woke: Vec<bool> = signallers
        .into_iter()
        .flat_map(|s| s.join().unwrap())
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while db.count("SELECT count(*) FROM runs WHERE state != 'completed'") > 0 {
        let states = db.rows(
            "SELECT id, state, attempt, wait_kind, error FROM runs WHERE state != 'completed'",
        );
        assert!(
            Instant::now() < deadline,
            "runs never completed: {states:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The runs may all have ended before the last worker started: SIGTERM once it runs.
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(20);
    while db.count(&format!("SELECT count(*) FROM workers WHERE pid = {pid}")) == 0 {
        assert!(Instant::now() < deadline, "worker {pid} never registered");
        std::thread::sleep(Duration::from_millis(2));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = crate::crash::wait_exit(&mut child, Duration::from_secs(20));
    assert!(status.success(), "the last worker exited {status:?}");
    let elapsed = started.elapsed();

    // Every run: completed with its payload, one message, four records done, one event
    // consumed.
    let final_lines = lines(&file);
    let mut reruns = 0;
    for id in &runs {
        let result = db.text(&format!(
            "SELECT {} FROM blobs WHERE run_id = '{id}' AND path = '/.background/{id}/result.json'",
            db.blob_as_text("content")
        ));
        let result: Value = serde_json::from_str(&result.unwrap()).unwrap();
        assert_eq!(result["result"], json!({ "run": id }), "run {id}: {result}");
        assert_eq!(
            db.count(&format!("SELECT count(*) FROM inbox WHERE run_id = '{id}'")),
            1,
            "run {id}: one message"
        );
        assert_eq!(
            db.count(&format!(
                "SELECT count(*) FROM inbox WHERE run_id = '{id}' AND kind = 'completed'"
            )),
            1
        );
        let steps: Vec<(String, String)> = db
            .rows(&format!(
                "SELECT name, status FROM step_records WHERE run_id = '{id}' ORDER BY seq"
            ))
            .into_iter()
            .map(|r| (r[0].clone().unwrap(), r[1].clone().unwrap()))
            .collect();
        let expected: Vec<(String, String)> = ["step1", "step2", "event:go", "step3"]
            .iter()
            .map(|n| (n.to_string(), "done".to_string()))
            .collect();
        assert_eq!(steps, expected, "run {id}");
        let output = db.text(&format!(
            "SELECT output FROM step_records WHERE run_id = '{id}' AND name = 'event:go'"
        ));
        let output: Value = serde_json::from_str(&output.unwrap()).unwrap();
        assert_eq!(output, json!({"event": {"run": id}}));
        assert_eq!(
            db.count(&format!(
                "SELECT count(*) FROM run_events WHERE run_id = '{id}' AND name = 'go' \
                 AND consumed_at IS NOT NULL"
            )),
            1,
            "run {id}: its event consumed"
        );
        for n in 1..=3 {
            let key = (id.clone(), n);
            let ran = final_lines.get(&key).copied().unwrap_or(0);
            let allowed = 1 + unrecorded_kills.get(&key).copied().unwrap_or(0);
            assert!(
                (1..=allowed).contains(&ran),
                "run {id} step {n} ran {ran} times; {} kill(s) caught it unrecorded",
                allowed - 1
            );
            if let Some(then) = frozen.get(&key) {
                assert_eq!(
                    ran, *then,
                    "run {id} step {n} ran after its record committed"
                );
            }
            reruns += ran - 1;
        }
    }
    assert_eq!(
        db.count("SELECT count(*) FROM run_events"),
        runs.len() as i64
    );
    assert_eq!(
        db.count("SELECT count(*) FROM inbox"),
        runs.len() as i64,
        "no message but the final ones"
    );
    let attempts: BTreeMap<i64, i64> = db
        .rows("SELECT attempt, count(*) FROM runs GROUP BY attempt")
        .into_iter()
        .map(|r| {
            (
                r[0].as_ref().unwrap().parse().unwrap(),
                r[1].as_ref().unwrap().parse().unwrap(),
            )
        })
        .collect();
    let woken = woke.iter().filter(|w| **w).count();
    eprintln!(
        "durable crash test: {kills} kills ({early_kills} anywhere from start-up on), {} runs in \
         {} waves, {hits} attempts in flight at a kill, {reruns} step closures run again \
         (each caught by a kill before its record committed), {} steps recorded at some kill \
         and never run again; \"go\" sent {} times, {woken} to a run already waiting, {} before \
         it waited; runs per attempt count {attempts:?}; {:.1}s killing, {:.1}s in all",
        runs.len(),
        runs.len() / WAVE,
        frozen.len(),
        woke.len(),
        woke.len() - woken,
        killing.as_secs_f64(),
        elapsed.as_secs_f64()
    );
    assert_eq!(kills, KILLS);
    assert!(hits > 0, "some kills caught runs in flight");
    assert!(
        woken > 0 && woken < woke.len(),
        "signals before and after the waits"
    );
    if crate::support::ENGINE == crate::support::Engine::Sqlite {
        assert_eq!(db.text("PRAGMA integrity_check").as_deref(), Some("ok"));
    }
}
