//! The worker's one INFO line per run end is written only once the end is recorded: an end
//! whose lease was taken away (fenced out) gets the warning, never the "run ended" line.

use std::io::Write;
use std::sync::Mutex;

use async_trait::async_trait;
use serde_json::{Value, json};
use toolq::{Client, RegistryBuilder, Tool, ToolContext, ToolDef, ToolOutcome};

/// Takes its own run's lease away (as a rescue elsewhere would), then returns success.
struct LosesLease(crate::support::TestDb);

#[async_trait]
impl Tool for LosesLease {
    fn definition(&self) -> ToolDef {
        ToolDef::new("loses_lease", "loses its lease", json!({"type": "object"}))
    }
    async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        self.0.exec(&format!(
            "UPDATE runs SET lease_token = 'stolen' WHERE id = '{}'",
            ctx.run_id
        ));
        ToolOutcome::ok(Value::Null)
    }
}

/// Every log line of this test binary, from the subscriber this test installs.
static LINES: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct Lines;

impl Write for Lines {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        LINES.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// The global subscriber (no other test sets one): a thread-scoped one misses lines when other
// tests register the same callsites concurrently. Other tests' lines land here too; this test
// reads only the lines of its own runs.
#[tokio::test]
async fn a_fenced_out_end_logs_the_warning_and_no_run_ended_line() {
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .with_writer(|| Lines)
        .finish();
    tracing::subscriber::set_global_default(subscriber)
        .expect("no other test sets a global subscriber");

    let dir = tempfile::tempdir().unwrap();
    let db = crate::support::TestDb::at(dir.path());
    let config = db.config();
    let registry = RegistryBuilder::new()
        .with_builtins()
        .tool(LosesLease(db.clone()))
        .build()
        .unwrap();
    let client = Client::open(config, registry).unwrap();
    let lost = client
        .enqueue(toolq::EnqueueRequest::new("loses_lease", json!({})).session("s"))
        .await
        .unwrap()
        .run_id;
    let kept = client
        .enqueue(toolq::EnqueueRequest::new("echo", json!({"message": "hi"})).session("s"))
        .await
        .unwrap()
        .run_id;
    let report = client
        .worker(toolq::WorkerOptions { drain: true })
        .run(Default::default())
        .await
        .unwrap();
    assert_eq!((report.recorded, report.fenced_out), (1, 1), "{report:?}");

    let log = String::from_utf8_lossy(&LINES.lock().unwrap()).into_owned();
    let ours: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(&lost.to_string()) || l.contains(&kept.to_string()))
        .collect();
    let ended: Vec<&&str> = ours.iter().filter(|l| l.contains("run ended")).collect();
    assert_eq!(ended.len(), 1, "{ours:#?}");
    assert!(ended[0].contains(&format!("run_id={kept}")), "{ours:#?}");
    assert!(
        ours.iter()
            .any(|l| l.contains("lease lost before the end was recorded")
                && l.contains(&lost.to_string())),
        "{ours:#?}"
    );
}
