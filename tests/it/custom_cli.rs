//! `toolq::cli::main_with`: a host's binary (examples/custom_cli.rs) runs the stock CLI with its
//! own Rust tool, through enqueue, worker and result.

use std::process::Command;

use serde_json::Value;

fn run(db: &std::path::Path, args: &[&str]) -> String {
    let o = Command::new(crate::support::custom_cli_example())
        .arg("--db")
        .arg(db)
        .args(args)
        .env_remove("TOOLQ_CONFIG")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn a_host_binary_runs_its_rust_tool_through_the_stock_cli() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let tools = run(&db, &["tools"]);
    assert!(tools.contains("shout") && tools.contains("echo"), "{tools}");
    let id = run(&db, &["enqueue", "shout", "--args", r#"{"text":"hi"}"#]);
    let id = id.trim();
    run(&db, &["worker", "--drain"]);
    run(&db, &["wait", id]);
    let v: Value = serde_json::from_str(&run(&db, &["result", id])).unwrap();
    assert_eq!(v["result"]["shouted"], "HI", "{v}");
    // The stock binary does not know the host's tool.
    let o = crate::support::toolq(&db, &["enqueue", "shout", "--args", r#"{"text":"x"}"#]);
    assert_eq!(o.status.code(), Some(2));
}
