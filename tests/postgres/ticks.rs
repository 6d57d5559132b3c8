//! Exactly-once schedule ticks across workers on Postgres: three workers (three clients, each
//! with its own pool and change feed, on one database and one manual clock) and one cron
//! schedule give exactly one run per tick.

use std::sync::atomic::Ordering;

use chrono::Duration as Span;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use toolq::schedule::ScheduleRequest;

use crate::schedules::{rows, second_client};
use crate::support::{TestEnv, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_workers_and_one_cron_schedule_give_exactly_20_runs_in_20_ticks() {
    const TICKS: i64 = 20;
    let env = TestEnv::new();
    let (b, c) = (second_client(&env, |_| {}), second_client(&env, |_| {}));
    let s = env
        .client
        .create_schedule(ScheduleRequest::cron("counter", json!({}), "* * * * *"))
        .await
        .unwrap();
    let stop = CancellationToken::new();
    let workers: Vec<_> = [env.client.clone(), b, c]
        .into_iter()
        .map(|client| tokio::spawn(client.worker(Default::default()).run(stop.clone())))
        .collect();
    for i in 1..=TICKS {
        env.clock.advance(Span::minutes(1));
        wait_for("the tick's run to complete", async || {
            let n = env.count("SELECT count(*) FROM runs WHERE state = 'completed'");
            let seen = rows(&env, "SELECT state, fire_at, internal_error FROM runs");
            (
                (n == i).then_some(()),
                format!("{n} completed; runs {seen:?}"),
            )
        })
        .await;
    }
    stop.cancel();
    for w in workers {
        w.await.unwrap().unwrap();
    }
    assert_eq!(env.count("SELECT count(*) FROM runs"), TICKS);
    assert_eq!(env.count("SELECT count(DISTINCT fire_at) FROM runs"), TICKS);
    assert_eq!(env.counter.load(Ordering::SeqCst), TICKS as usize);
    assert_eq!(
        env.count("SELECT count(*) FROM schedule_occurrences WHERE outcome = 'fired'"),
        TICKS
    );
    assert_eq!(
        env.count("SELECT count(*) FROM inbox WHERE kind = 'completed'"),
        TICKS
    );
    let d = env.client.get_schedule(&s.id).await.unwrap();
    assert_eq!(d.schedule.trigger_count, TICKS);
}
