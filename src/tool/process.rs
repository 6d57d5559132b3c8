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

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

use super::sink::{RunSink, Stream};

/// A line longer than this is passed on in pieces (bounded memory for output without newlines).
pub const MAX_LINE: usize = 64 * 1024;

/// A line starting with the filter's prefix (a protocol line, e.g. a result) may be this long.
pub const MAX_FILTERED_LINE: usize = 4 * 1024 * 1024;

/// Looks at each complete stdout line (newline included) before it is logged; returns true
/// when it consumed the line (it is then not logged).
pub type LineFilter = Box<dyn FnMut(&[u8]) -> bool + Send>;

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
    /// Optional filter of the stdout lines that start with the given prefix (the
    /// command-tool protocol); other lines never reach it.
    pub stdout_filter: Option<(&'static [u8], LineFilter)>,
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
    let mut cmd = Command::new(&program);
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
    let mut child = cmd.spawn().map_err(|source| ProcessError::Spawn {
        program: program.clone(),
        source,
    })?;
    let guard = GroupGuard {
        pgid: child.id().map(|p| Pid::from_raw(p as i32)),
    };
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
    let timeout = async {
        match spec.timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    let wait_err = |source| ProcessError::Wait {
        program: program.clone(),
        source,
    };
    let (status, stopped) = tokio::select! {
        st = child.wait() => (st.map_err(wait_err)?, None),
        _ = cancel.cancelled() => (terminate(&mut child, &guard, spec.kill_grace).await.map_err(wait_err)?, Some(Stopped::Cancelled)),
        _ = timeout => (terminate(&mut child, &guard, spec.kill_grace).await.map_err(wait_err)?, Some(Stopped::TimedOut)),
    };
    // The child is gone; give grandchildren holding the pipes a short window, then end the
    // whole group so the readers see EOF.
    let (stdout_tail, bytes_read) = drain(
        out.into_iter().chain(err).collect(),
        &guard,
        sink,
        spec.drain_window,
    )
    .await;
    Ok(ProcessOutput {
        exit: exit_of(status),
        stopped,
        stdout_tail,
        bytes_read,
    })
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

struct Pumped {
    stream: Stream,
    tail: Vec<u8>,
    bytes: u64,
}

/// Reads a pipe to EOF in chunks, passing whole lines to the sink (and the filter).
async fn pump(
    mut pipe: impl AsyncRead + Unpin,
    stream: Stream,
    sink: RunSink,
    mut filter: Option<(&'static [u8], LineFilter)>,
    tail_bytes: usize,
) -> Pumped {
    let mut buf = vec![0u8; 64 * 1024];
    let mut pending: Vec<u8> = Vec::new();
    let mut tail: VecDeque<u8> = VecDeque::new();
    let mut bytes = 0u64;
    loop {
        let n = match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        bytes += n as u64;
        pending.extend_from_slice(&buf[..n]);
        // Pass on everything up to the last newline; keep the partial line unless it is long.
        // `pending` holds at most one partial line here (it is always cut at its last newline).
        let max = match &filter {
            Some((prefix, _)) if pending.starts_with(prefix) => MAX_FILTERED_LINE,
            _ => MAX_LINE,
        };
        let cut = match pending.iter().rposition(|b| *b == b'\n') {
            Some(i) => i + 1,
            None if pending.len() >= max => pending.len(),
            None => continue,
        };
        let rest = pending.split_off(cut);
        let lines = std::mem::replace(&mut pending, rest);
        emit(&lines, stream, &sink, &mut filter, &mut tail, tail_bytes);
    }
    if !pending.is_empty() {
        emit(&pending, stream, &sink, &mut filter, &mut tail, tail_bytes);
    }
    Pumped {
        stream,
        tail: tail.into_iter().collect(),
        bytes,
    }
}

fn emit(
    chunk: &[u8],
    stream: Stream,
    sink: &RunSink,
    filter: &mut Option<(&'static [u8], LineFilter)>,
    tail: &mut VecDeque<u8>,
    tail_bytes: usize,
) {
    let kept: std::borrow::Cow<'_, [u8]> = match filter {
        // Most chunks hold no protocol line: pass them on without looking at each line.
        Some((prefix, _)) if memchr::memmem::find(chunk, prefix).is_none() => chunk.into(),
        None => chunk.into(),
        Some((prefix, f)) => {
            let mut kept = Vec::with_capacity(chunk.len());
            for line in chunk.split_inclusive(|b| *b == b'\n') {
                if !(line.starts_with(prefix) && f(line)) {
                    kept.extend_from_slice(line);
                }
            }
            kept.into()
        }
    };
    if tail_bytes > 0 {
        let from = kept.len().saturating_sub(tail_bytes);
        tail.extend(&kept[from..]);
        let excess = tail.len().saturating_sub(tail_bytes);
        tail.drain(..excess);
    }
    sink.output_lines(stream, &kept);
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
