//! The Python client (`clients/python/toolq_client.py`) against a real `toolq web` and a
//! worker: `clients/python/test_client.py` asserts what it gets. python3 is needed: without
//! it these tests fail (they never skip silently).

use std::process::Command;

use crate::api::Api;

/// Runs `test_client.py BASE_URL part` and fails with its output unless it exits 0.
fn run_script(api: &Api, part: &str) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/clients/python/test_client.py");
    let out = match Command::new("python3")
        .arg(script)
        .arg(&api.base)
        .arg(part)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
    {
        Ok(out) => out,
        Err(e) => panic!("python3 is needed to test the Python client and could not be run: {e}"),
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "test_client.py {part} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.contains("all ok"), "{stdout}\n{stderr}");
}

#[test]
fn the_python_client_drives_schedules_and_batches() {
    let api = Api::new();
    let _worker = api.site.worker();
    run_script(&api, "batches");
}

#[test]
fn the_python_client_enqueues_waits_signals_and_streams_the_inbox() {
    let api = Api::new();
    let _worker = api.site.worker();
    run_script(&api, "runs");
}
