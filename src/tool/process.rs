//! Running a child process for a tool: argv without a shell, its own process group, stdin
//! bytes in, stdout and stderr streamed line by line into the run's sink while they are read.
//!
//! Guarantees:
//! - The pipes are drained for as long as the child runs, whatever the log cap: a child
//!   writing gigabytes never blocks on a full pipe, and memory stays bounded (the sink keeps
//!   at most its cap plus a tail; a line longer than [`MAX_LINE`] is passed on in pieces).
//! - Cancel or timeout: SIGTERM to the whole group, SIGKILL after the grace period, so
//!   grandchildren end too. When the child exits on its own, whatever is left of its group
//!   is killed once the pipes are drained (or the drain window passes), so a grandchild
//!   holding a pipe open cannot hang the run. Dropping the future kills the group as well.
//! - Bytes are passed on as they are (non-UTF-8 and NUL included).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

use super::sink::{RunSink, Stream};

mod pipe;

pub use pipe::{LineFilter, MAX_FILTERED_LINE, MAX_LINE, Prefixes};
use pipe::{Pumped, pump};

/// What to run.
pub struct ProcessSpec {
    /// Program and arguments; never passed through a shell.
    pub argv: Vec<String>,
    /// Working directory (the worker's when unset).
    pub cwd: Option<PathBuf>,
    /// Extra environment variables (the worker's environment is inherited).
    pub env: Vec<(String, String)>,
    /// Bytes written to the child's stdin, which is then closed.
    pub stdin: Vec<u8>,
    /// Ends the child (as a timeout) after this long, if set.
    pub timeout: Option<Duration>,
    /// Between SIGTERM and SIGKILL.
    pub kill_grace: Duration,
    /// After the child exits, how long to keep reading pipes that grandchildren hold open.
    pub drain_window: Duration,
    /// Bytes of stdout kept for [`ProcessOutput::stdout_tail`].
    pub tail_bytes: usize,
    /// Optional filter of the stdout lines that start with one of the given prefixes (the
    /// command-tool protocol); other lines never reach it.
    pub stdout_filter: Option<(Prefixes, LineFilter)>,
}

impl ProcessSpec {
    /// A spec with defaults: no cwd, env, stdin or timeout; 5 s kill grace; 1 s drain window.
    pub fn new(argv: Vec<String>) -> Self {
        Self {
            argv,
            cwd: None,
            env: Vec::new(),
            stdin: Vec::new(),
            timeout: None,
            kill_grace: Duration::from_secs(5),
            drain_window: Duration::from_secs(1),
            tail_bytes: 4096,
            stdout_filter: None,
        }
    }
}

/// Why the runner stopped the child early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// The cancellation token fired.
    Cancelled,
    /// The spec's timeout passed.
    TimedOut,
}

/// How the child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this code.
    Code(i32),
    /// A signal ended it.
    Signal(i32),
}

/// The end of a process run.
#[derive(Debug, Clone)]
pub struct ProcessOutput {
    /// How the child ended.
    pub exit: Exit,
    /// Set when the runner stopped it.
    pub stopped: Option<Stopped>,
    /// The last bytes of stdout (protocol lines excluded).
    pub stdout_tail: Vec<u8>,
    /// Bytes read from stdout and stderr.
    pub bytes_read: u64,
}

/// Why a process could not be run.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The argv was empty.
    #[error("command is empty")]
    EmptyArgv,
    /// Spawning failed (program missing, not executable, bad cwd...).
    #[error("cannot start {program:?}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The working directory is missing or not a directory.
    #[error("working directory {0:?} does not exist or is not a directory")]
    Cwd(PathBuf),
    /// Waiting for the child failed.
    #[error("waiting for {program:?} failed: {source}")]
    Wait {
        /// The program.
        program: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Kills the child's process group when dropped (the run's future was dropped or aborted).
struct GroupGuard {
    pgid: Option<Pid>,
}

impl GroupGuard {
    fn signal(&self, sig: Signal) {
        if let Some(pgid) = self.pgid {
            // ESRCH (the group is gone) is the normal end; nothing else can be done anyway.
            let _ = killpg(pgid, sig);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.signal(Signal::SIGKILL);
    }
}

/// Runs the process to its end, streaming output into `sink`; `cancel` stops it.
pub async fn run(
    mut spec: ProcessSpec,
    sink: &RunSink,
    cancel: &CancellationToken,
) -> Result<ProcessOutput, ProcessError> {
    let program = spec.argv.first().cloned().ok_or(ProcessError::EmptyArgv)?;
    let mut child = spawn(&spec, &program)?;
    let guard = GroupGuard {
        pgid: child.id().map(|p| Pid::from_raw(p as i32)),
    };
    let readers = attach(&mut child, &mut spec, sink);
    let (status, stopped) = wait_or_stop(&mut child, &guard, spec.timeout, spec.kill_grace, cancel)
        .await
        .map_err(|source| ProcessError::Wait {
            program: program.clone(),
            source,
        })?;
    // The child is gone; give grandchildren holding the pipes a short window, then end the
    // whole group so the readers see EOF.
    let (stdout_tail, bytes_read) = drain(readers, &guard, sink, spec.drain_window).await;
    Ok(ProcessOutput {
        exit: exit_of(status),
        stopped,
        stdout_tail,
        bytes_read,
    })
}

/// Starts `program` with the spec's arguments, environment and working directory, in a
/// process group of its own, with all three pipes.
fn spawn(spec: &ProcessSpec, program: &str) -> Result<tokio::process::Child, ProcessError> {
    let mut cmd = Command::new(program);
    cmd.args(&spec.argv[1..])
        .envs(spec.env.iter().cloned())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(cwd) = &spec.cwd {
        // Checked here so the error names the directory, not the program.
        if !cwd.is_dir() {
            return Err(ProcessError::Cwd(cwd.clone()));
        }
        cmd.current_dir(cwd);
    }
    cmd.spawn().map_err(|source| ProcessError::Spawn {
        program: program.to_string(),
        source,
    })
}

/// Feeds the spec's stdin bytes to the child and starts a reader on each output pipe
/// (stdout's first). Takes the stdin bytes and the stdout filter out of `spec`.
fn attach(
    child: &mut tokio::process::Child,
    spec: &mut ProcessSpec,
    sink: &RunSink,
) -> Vec<Reader> {
    if let Some(mut stdin) = child.stdin.take() {
        let bytes = std::mem::take(&mut spec.stdin);
        // A child that does not read its stdin closes the pipe: that is not an error.
        tokio::spawn(async move {
            let _ = stdin.write_all(&bytes).await;
        });
    }
    let out = child.stdout.take().map(|p| {
        let (sink, filter, tail) = (sink.clone(), spec.stdout_filter.take(), spec.tail_bytes);
        tokio::spawn(pump(p, Stream::Stdout, sink, filter, tail))
    });
    let err = child.stderr.take().map(|p| {
        let sink = sink.clone();
        tokio::spawn(pump(p, Stream::Stderr, sink, None, 0))
    });
    out.into_iter().chain(err).collect()
}

/// Waits for the child to exit, or ends its group (SIGTERM, SIGKILL after `grace`) on a
/// cancel or when `timeout` passes; says which. (Takes the two durations, not the spec: the
/// spec's filter is not `Sync`, so a borrow of it could not be held across an await.)
async fn wait_or_stop(
    child: &mut tokio::process::Child,
    guard: &GroupGuard,
    timeout: Option<Duration>,
    grace: Duration,
    cancel: &CancellationToken,
) -> std::io::Result<(std::process::ExitStatus, Option<Stopped>)> {
    let timeout = async {
        match timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    let stopped = tokio::select! {
        st = child.wait() => return Ok((st?, None)),
        _ = cancel.cancelled() => Stopped::Cancelled,
        _ = timeout => Stopped::TimedOut,
    };
    let status = terminate(child, guard, grace).await?;
    Ok((status, Some(stopped)))
}

type Reader = tokio::task::JoinHandle<Pumped>;

/// After the child exited: reads what is left in the pipes for up to `window`, kills what is
/// left of the group (so held pipes reach EOF), then collects the readers. Returns the
/// stdout tail and the bytes read.
async fn drain(
    readers: Vec<Reader>,
    guard: &GroupGuard,
    sink: &RunSink,
    window: Duration,
) -> (Vec<u8>, u64) {
    let mut readers: Vec<Option<Reader>> = readers.into_iter().map(Some).collect();
    let mut done = Vec::new();
    let drained = tokio::time::timeout(window, async {
        for slot in readers.iter_mut() {
            if let Some(h) = slot.as_mut() {
                let res = h.await;
                *slot = None;
                done.extend(res.ok());
            }
        }
    })
    .await
    .is_ok();
    guard.signal(Signal::SIGKILL);
    if !drained {
        sink.system("the command exited but something it started kept its output open; stopped it");
    }
    for mut h in readers.into_iter().flatten() {
        // A pipe held by a process outside the group is abandoned after a moment.
        match tokio::time::timeout(Duration::from_millis(500), &mut h).await {
            Ok(res) => done.extend(res.ok()),
            Err(_) => h.abort(),
        }
    }
    let mut tail = Vec::new();
    let mut bytes = 0;
    for p in done {
        bytes += p.bytes;
        if p.stream == Stream::Stdout {
            tail = p.tail;
        }
    }
    (tail, bytes)
}

/// SIGTERM to the group, SIGKILL after `grace`, then reap the child.
async fn terminate(
    child: &mut tokio::process::Child,
    guard: &GroupGuard,
    grace: Duration,
) -> std::io::Result<std::process::ExitStatus> {
    guard.signal(Signal::SIGTERM);
    match tokio::time::timeout(grace, child.wait()).await {
        Ok(st) => st,
        Err(_) => {
            guard.signal(Signal::SIGKILL);
            child.wait().await
        }
    }
}

fn exit_of(status: std::process::ExitStatus) -> Exit {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => Exit::Code(c),
        (None, Some(s)) => Exit::Signal(s),
        (None, None) => Exit::Code(-1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::sink::SinkLimits;

    fn argv(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[tokio::test]
    async fn streams_both_outputs_and_exit_code() {
        let sink = RunSink::new(SinkLimits::default());
        let mut spec = ProcessSpec::new(argv(&[
            "sh",
            "-c",
            "printf 'a\\nb'; printf 'e\\n' >&2; exit 3",
        ]));
        spec.stdin = b"ignored".to_vec();
        let out = run(spec, &sink, &CancellationToken::new()).await.unwrap();
        assert_eq!(out.exit, Exit::Code(3));
        assert_eq!(out.stdout_tail, b"a\nb");
        let log = String::from_utf8(sink.final_snapshot().log.unwrap().0).unwrap();
        // The partial line "b" is flushed at EOF, possibly after stderr's line.
        assert!(
            log.contains("[stdout] a\n") && log.contains("[stdout] b\n"),
            "{log}"
        );
        assert!(log.contains("[stderr] e\n"), "{log}");
    }

    #[tokio::test]
    async fn stdin_reaches_the_child_and_missing_program_is_named() {
        let sink = RunSink::new(SinkLimits::default());
        let mut spec = ProcessSpec::new(argv(&["cat"]));
        spec.stdin = b"{\"x\":1}".to_vec();
        let out = run(spec, &sink, &CancellationToken::new()).await.unwrap();
        assert_eq!(out.stdout_tail, b"{\"x\":1}");
        let mut spec = ProcessSpec::new(argv(&["true"]));
        spec.cwd = Some("/no/such/dir".into());
        let e = run(spec, &sink, &CancellationToken::new())
            .await
            .unwrap_err();
        assert!(e.to_string().contains("/no/such/dir"), "{e}");
        let e = run(
            ProcessSpec::new(argv(&["/no/such/program"])),
            &sink,
            &CancellationToken::new(),
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(e.contains("/no/such/program"), "{e}");
    }

    #[tokio::test]
    async fn timeout_ends_the_group() {
        let sink = RunSink::new(SinkLimits::default());
        let mut spec = ProcessSpec::new(argv(&["sleep", "30"]));
        spec.timeout = Some(Duration::from_millis(50));
        let out = run(spec, &sink, &CancellationToken::new()).await.unwrap();
        assert_eq!(out.stopped, Some(Stopped::TimedOut));
        assert_eq!(out.exit, Exit::Signal(15));
    }
}
