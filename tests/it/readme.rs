//! The README's "Try it" runs exactly as written: its shell block, read from README.md, on a
//! fresh directory, with the built binary on PATH as `toolq` (what `cargo install` gives).

use std::process::Command;

const README: &str = include_str!("../../README.md");

/// The ```sh blocks of the "## Try it" section, joined.
fn try_it_script() -> String {
    let start = README
        .find("\n## Try it\n")
        .expect("README has a Try it section");
    let section = &README[start + 1..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let mut script = String::new();
    let mut in_sh = false;
    for line in section.lines() {
        match (in_sh, line.trim_end()) {
            (false, "```sh") => in_sh = true,
            (true, "```") => in_sh = false,
            (true, l) => {
                script.push_str(l);
                script.push('\n');
            }
            _ => {}
        }
    }
    script
}

#[test]
fn the_readme_try_it_runs_as_written_on_a_fresh_database() {
    let script = try_it_script();
    assert!(
        script.contains("toolq enqueue") && script.contains("toolq worker"),
        "the Try it block lost its commands:\n{script}"
    );
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_toolq"), bin.join("toolq")).unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("bash");
    cmd.args(["-euo", "pipefail", "-x", "-c", &script])
        .current_dir(&work)
        .env("PATH", path)
        .env_remove("RUST_LOG");
    for (k, _) in std::env::vars() {
        if k.starts_with("TOOLQ_") {
            cmd.env_remove(k);
        }
    }
    let o = cmd.output().expect("bash runs");
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(
        o.status.success(),
        "the Try it block failed:\n{script}\n--- stdout\n{out}\n--- stderr (bash -x)\n{err}"
    );
    // It did what it says: the run completed, its result and message are there.
    assert!(work.join("toolq.db").exists());
    assert!(out.contains("completed"), "{out}");
    assert!(out.contains("hi"), "{out}");
    assert!(out.contains("# config file: built-in defaults"), "{out}");
}

/// Issue 33 item 5: the README says why `Registry` is not the executor and how a host that used
/// the seed's registry as one moves over, and "Embedding in an agent host" ends with the table
/// of deliberate differences from the reference contract.
#[test]
fn issue_33_the_embedding_section_explains_the_registry_and_ends_with_the_differences() {
    let start = README
        .find("\n## Embedding in an agent host\n")
        .expect("README has the Embedding section");
    let section = &README[start + 1..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    assert!(
        section.contains("`Registry` is not a `ToolExecutor`"),
        "{section}"
    );
    assert!(section.contains("passes `client.executor()`"), "{section}");
    let table = section
        .rfind("### Deliberate differences from the reference contract")
        .expect("the differences table");
    let table = &section[table..];
    for row in [
        "`{\"status\": \"completed\", \"result\": value}`",
        "raw_output.txt",
        "media_type",
        "`ToolRegistry` is a `ToolExecutor`",
    ] {
        assert!(table.contains(row), "{row:?} missing:\n{table}");
    }
    let last = table.trim_end().lines().last().unwrap_or_default();
    assert!(
        last.starts_with('|'),
        "the table ends the section: {last:?}"
    );
}
