//! A run's sink: status text, output per stream and progress, kept in memory with the log
//! capped as it is written, and snapshotted by the worker's throttled flush.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use crate::run::Progress;

/// Which stream an output chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
    /// toolq's own notes.
    System,
}

impl Stream {
    fn prefix(self) -> &'static [u8] {
        match self {
            Stream::Stdout => b"[stdout] ",
            Stream::Stderr => b"[stderr] ",
            Stream::System => b"[system] ",
        }
    }
}

/// Limits of a sink.
#[derive(Debug, Clone, Copy)]
pub struct SinkLimits {
    /// The log keeps at most this many bytes, then ends with a truncation note.
    pub log_cap: usize,
    /// The run row's output_tail keeps this many characters.
    pub tail_chars: usize,
}

impl Default for SinkLimits {
    fn default() -> Self {
        Self {
            log_cap: 256 * 1024,
            tail_chars: 2048,
        }
    }
}

#[derive(Debug, Default)]
struct State {
    log: Vec<u8>,
    truncated: bool,
    tail: VecDeque<u8>,
    status: Option<String>,
    progress: Option<Progress>,
    dirty: bool,
    log_dirty: bool,
    operation: Option<String>,
    stages: Vec<serde_json::Value>,
    op_dirty: bool,
    cap: Option<usize>,
}

/// A running attempt's reporting channel. Cheap to clone; clones share one state.
#[derive(Debug, Clone)]
pub struct RunSink {
    limits: SinkLimits,
    state: Arc<Mutex<State>>,
    /// Wakes the worker's flush at once when an operation id is set (see
    /// [`RunSink::flush_on_operation`]).
    flush_now: Option<Arc<tokio::sync::Notify>>,
    /// Held from taking the operation's stages until they are written: writes run on
    /// concurrent connections, so without it a periodic flush could commit after the
    /// attempt's last write (and its finish), be fenced out, and lose its stages.
    op_write: Arc<tokio::sync::Mutex<()>>,
}

/// What the worker writes to the run row and log blob on a flush or at the end.
#[derive(Debug, Clone, Default)]
pub struct SinkSnapshot {
    /// Latest status line.
    pub status_text: Option<String>,
    /// Latest progress as JSON text.
    pub progress: Option<String>,
    /// Last characters of output, escaped.
    pub output_tail: Option<String>,
    /// The log bytes and whether they were cut, when asked for.
    pub log: Option<(Vec<u8>, bool)>,
}

impl RunSink {
    /// An empty sink.
    pub fn new(limits: SinkLimits) -> Self {
        Self {
            limits,
            state: Arc::new(Mutex::new(State::default())),
            flush_now: None,
            op_write: Arc::default(),
        }
    }

    /// Makes [`RunSink::set_operation`] wake `flush` so the operation id is stored at once,
    /// not at the next periodic flush: the shorter that window, the less a crash right after
    /// an operation started can make a later attempt start it again.
    pub fn flush_on_operation(mut self, flush: Arc<tokio::sync::Notify>) -> Self {
        self.flush_now = Some(flush);
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A tool that panicked while reporting leaves consistent data behind: every update is
        // a single assignment or append.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the status line.
    pub fn status(&self, text: impl Into<String>) {
        let mut s = self.lock();
        s.status = Some(text.into());
        s.dirty = true;
    }

    /// Sets the progress.
    pub fn progress(&self, p: Progress) {
        let mut s = self.lock();
        s.progress = Some(p);
        s.dirty = true;
    }

    /// Appends a chunk of output from `stream`, each line prefixed with `[stdout] ` etc.
    /// The bytes are kept as they are (non-UTF-8 and NUL included).
    pub fn output(&self, stream: Stream, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let mut line = Vec::with_capacity(bytes.len() + 10);
        for piece in bytes.split_inclusive(|b| *b == b'\n') {
            line.extend_from_slice(stream.prefix());
            line.extend_from_slice(piece);
        }
        if line.last() != Some(&b'\n') {
            line.push(b'\n');
        }
        self.append(&line);
    }

    /// Like [`RunSink::output`], for a reader passing on whole lines: once the log is full,
    /// only the end of the chunk that can still reach the tail is processed (a flood costs
    /// no more than reading it).
    pub fn output_lines(&self, stream: Stream, bytes: &[u8]) {
        let keep = 4 * self.limits.tail_chars + 16;
        if bytes.len() > keep && self.lock().truncated {
            let from = bytes.len() - keep;
            let start = bytes[from..]
                .iter()
                .position(|b| *b == b'\n')
                .map_or(from, |i| from + i + 1);
            self.output(stream, &bytes[start..]);
        } else {
            self.output(stream, bytes);
        }
    }

    /// Puts back the log an earlier invocation of the same attempt wrote before it
    /// suspended, as it was stored: this invocation's output follows it.
    pub(crate) fn restore_log(&self, log: &[u8]) {
        if !log.is_empty() {
            self.append(log);
        }
    }

    /// Lowers this run's log cap (a tool's own output cap); never raises it.
    pub fn limit_log(&self, cap: usize) {
        self.lock().cap = Some(cap);
    }

    /// Appends a `[system]` line.
    pub fn system(&self, text: &str) {
        self.output(Stream::System, text.as_bytes());
    }

    /// Records an async operation id (and optionally a stage) to be stored on the run at the
    /// next flush (fenced by the lease); a later attempt gets it as `ctx.operation_id`.
    pub fn set_operation(&self, id: impl Into<String>, stage: Option<serde_json::Value>) {
        let mut s = self.lock();
        s.operation = Some(id.into());
        s.stages.extend(stage);
        s.op_dirty = true;
        drop(s);
        if let Some(f) = &self.flush_now {
            f.notify_one();
        }
    }

    /// Appends a stage to the run's stage history (after [`RunSink::set_operation`]); every
    /// stage is kept, even when several arrive between two flushes.
    pub fn stage(&self, stage: serde_json::Value) {
        let mut s = self.lock();
        s.stages.push(stage);
        s.op_dirty = true;
    }

    /// The lock to hold from [`RunSink::take_operation`] until its write has committed.
    pub(crate) fn operation_write_lock(&self) -> Arc<tokio::sync::Mutex<()>> {
        self.op_write.clone()
    }

    /// Takes the pending operation id and the stages added since the last take.
    pub(crate) fn take_operation(&self) -> Option<(String, Vec<serde_json::Value>)> {
        let mut s = self.lock();
        if !std::mem::take(&mut s.op_dirty) {
            return None;
        }
        let stages = std::mem::take(&mut s.stages);
        Some((s.operation.clone()?, stages))
    }

    fn append(&self, bytes: &[u8]) {
        let mut s = self.lock();
        s.dirty = true;
        // The tail follows the output even after the log stops growing.
        let keep = 4 * self.limits.tail_chars + 16;
        if bytes.len() >= keep {
            s.tail.clear();
            s.tail.extend(&bytes[bytes.len() - keep..]);
        } else {
            s.tail.extend(bytes);
            let excess = s.tail.len().saturating_sub(keep);
            s.tail.drain(..excess);
        }
        if s.truncated {
            return;
        }
        s.log_dirty = true;
        let cap = s
            .cap
            .map_or(self.limits.log_cap, |c| c.min(self.limits.log_cap));
        let room = cap.saturating_sub(s.log.len());
        if bytes.len() <= room {
            s.log.extend_from_slice(bytes);
            return;
        }
        let cut = cut_at(bytes, room, line_near(cap));
        s.log.extend_from_slice(&bytes[..cut]);
        let kept = s.log.len();
        if s.log.last() != Some(&b'\n') {
            s.log.push(b'\n');
        }
        s.log.extend_from_slice(
            format!(
                "[system] background output truncated at {kept} bytes (the log keeps at most \
                 {cap} bytes)\n"
            )
            .as_bytes(),
        );
        s.truncated = true;
    }

    /// Whether anything changed since the last snapshot.
    pub fn is_dirty(&self) -> bool {
        self.lock().dirty
    }

    /// Takes what changed for a live flush (log included only if it grew), clearing the flags.
    pub fn take_changes(&self) -> Option<SinkSnapshot> {
        let mut s = self.lock();
        if !s.dirty {
            return None;
        }
        s.dirty = false;
        let with_log = std::mem::take(&mut s.log_dirty);
        Some(self.snapshot_of(&s, with_log))
    }

    /// Everything, for the end of the attempt.
    pub fn final_snapshot(&self) -> SinkSnapshot {
        let s = self.lock();
        self.snapshot_of(&s, true)
    }

    fn snapshot_of(&self, s: &State, with_log: bool) -> SinkSnapshot {
        let tail_bytes: Vec<u8> = s.tail.iter().copied().collect();
        let escaped = escape_bytes(&tail_bytes);
        let n = escaped.chars().count();
        let tail: String = escaped
            .chars()
            .skip(n.saturating_sub(self.limits.tail_chars))
            .collect();
        SinkSnapshot {
            status_text: s.status.clone(),
            progress: s
                .progress
                .as_ref()
                .and_then(|p| serde_json::to_string(p).ok()),
            output_tail: (!tail.is_empty()).then_some(tail),
            log: with_log.then(|| (s.log.clone(), s.truncated)),
        }
    }
}

/// How far back from the cap a line end still counts as near: an eighth of the cap, at most
/// 4 KiB (a log cut there loses at most that much more than it must).
fn line_near(cap: usize) -> usize {
    (cap / 8).min(4096)
}

/// Where to cut `chunk` when only `room` bytes of it fit (the log before it ends with a
/// line): after the last line end within `near` bytes of the cut, or before the whole chunk
/// when `room` is that short and holds no line end, so that no line is cut in half;
/// otherwise at `room`, moved back to a character boundary when the text is UTF-8 there.
fn cut_at(chunk: &[u8], room: usize, near: usize) -> usize {
    let fits = &chunk[..room.min(chunk.len())];
    match fits.iter().rposition(|b| *b == b'\n') {
        Some(i) if fits.len() - (i + 1) <= near => return i + 1,
        None if fits.len() <= near => return 0,
        _ => {}
    }
    let mut cut = fits.len();
    while cut > 0 && cut < chunk.len() && (chunk[cut] & 0b1100_0000) == 0b1000_0000 {
        cut -= 1;
    }
    cut
}

/// Renders bytes as text: valid UTF-8 is kept, newlines and tabs too; other control
/// characters (NUL included) and invalid bytes are shown as `\xNN`.
pub fn escape_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c.is_control() && c != '\n' && c != '\t' {
                out.push_str(&format!("\\x{:02x}", c as u32));
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sink(cap: usize) -> RunSink {
        RunSink::new(SinkLimits {
            log_cap: cap,
            tail_chars: 8,
        })
    }

    #[test]
    fn lines_are_prefixed_per_stream() {
        let s = sink(1024);
        s.output(Stream::Stdout, b"a\nb");
        s.output(Stream::Stderr, b"c\n");
        let log = s.final_snapshot().log.unwrap().0;
        assert_eq!(log, b"[stdout] a\n[stdout] b\n[stderr] c\n");
    }

    #[test]
    fn log_at_exactly_the_cap_is_not_truncated() {
        let s = sink(20);
        s.output(Stream::Stdout, b"0123456789"); // 9 + 10 + 1 = 20 bytes
        let (log, truncated) = s.final_snapshot().log.unwrap();
        assert_eq!(log.len(), 20);
        assert!(!truncated);
    }

    #[test]
    fn log_one_past_the_cap_is_truncated_with_a_note() {
        let s = sink(20);
        s.output(Stream::Stdout, b"01234567890");
        let (log, truncated) = s.final_snapshot().log.unwrap();
        assert!(truncated);
        // No line end near the cap: the line is cut there.
        assert_eq!(
            String::from_utf8(log).unwrap(),
            "[stdout] 01234567890\n[system] background output truncated at 20 bytes \
             (the log keeps at most 20 bytes)\n"
        );
        // Later output still moves the tail but not the log.
        s.output(Stream::Stdout, b"zz");
        let snap = s.final_snapshot();
        assert!(snap.output_tail.unwrap().ends_with("] zz\n"));
        assert!(snap.log.unwrap().0.ends_with(b"20 bytes)\n"));
    }

    #[test]
    fn the_log_is_cut_at_a_line_end_near_the_cap_and_the_note_counts_bytes() {
        // 40 lines of 24 bytes (with the prefix) in one chunk, a 300-byte cap: 12 whole lines
        // (288 bytes) fit, and the 13th is left out rather than cut after 12 of its bytes.
        let s = sink(300);
        let text: String = (0..40).map(|i| format!("line {i:>2} ééé\n")).collect();
        s.output(Stream::Stdout, text.as_bytes());
        let (log, truncated) = s.final_snapshot().log.unwrap();
        assert!(truncated);
        let log = String::from_utf8(log).unwrap();
        let (kept, note) = log.rsplit_once("[system] ").unwrap();
        assert!(kept.lines().all(|l| l.ends_with(" ééé")), "{log}");
        assert_eq!(
            note,
            format!(
                "background output truncated at {} bytes (the log keeps at most 300 bytes)\n",
                kept.len()
            )
        );
        assert!(
            kept.len() <= 300 && kept.len() > 300 - line_near(300),
            "{log}"
        );
        // Several chunks: the one that does not fit is left out whole.
        let s = sink(300);
        for line in text.lines() {
            s.output(Stream::Stdout, line.as_bytes());
        }
        let log = String::from_utf8(s.final_snapshot().log.unwrap().0).unwrap();
        let (kept, _) = log.rsplit_once("[system] ").unwrap();
        assert!(kept.lines().all(|l| l.ends_with(" ééé")), "{log}");
    }

    #[test]
    fn with_no_line_end_near_the_cap_the_cut_keeps_characters_whole() {
        assert_eq!(cut_at("abcdéf\n".as_bytes(), 5, 1), 4);
        assert_eq!(cut_at("abcdéf\n".as_bytes(), 6, 1), 6);
        assert_eq!(cut_at(b"ab\ncdefgh\n", 9, 2), 9);
        assert_eq!(cut_at(b"ab\ncdefgh\n", 9, 6), 3);
        assert_eq!(cut_at(b"abcdefgh\n", 4, 4), 0);
    }

    #[test]
    fn tail_keeps_the_last_characters() {
        let s = sink(1024);
        s.output(Stream::Stdout, b"abcdefghijklmnop");
        assert_eq!(s.final_snapshot().output_tail.unwrap(), "jklmnop\n");
    }

    #[test]
    fn non_utf8_and_nul_survive_and_are_escaped() {
        let s = sink(1024);
        s.output(Stream::Stdout, b"a\x00b\xffc");
        let (log, _) = s.final_snapshot().log.unwrap();
        assert_eq!(log, b"[stdout] a\x00b\xffc\n");
        assert_eq!(escape_bytes(b"a\x00b\xffc\n"), "a\\x00b\\xffc\n");
    }

    #[test]
    fn every_stage_is_kept_between_takes() {
        let s = sink(1024);
        assert!(s.take_operation().is_none());
        s.set_operation("op1", Some(serde_json::json!({"stage": "started"})));
        s.stage(serde_json::json!({"stage": "a"}));
        s.stage(serde_json::json!({"stage": "b"}));
        let (op, stages) = s.take_operation().unwrap();
        assert_eq!(op, "op1");
        assert_eq!(stages.len(), 3);
        assert!(s.take_operation().is_none());
        s.stage(serde_json::json!({"stage": "c"}));
        assert_eq!(s.take_operation().unwrap().1.len(), 1);
    }

    #[test]
    fn a_full_log_still_moves_the_tail_from_big_chunks() {
        let s = sink(32);
        s.output_lines(Stream::Stdout, &b"y\n".repeat(100));
        s.output_lines(Stream::Stdout, &b"z\n".repeat(1000));
        let snap = s.final_snapshot();
        assert!(snap.log.unwrap().1);
        assert!(snap.output_tail.unwrap().ends_with("] z\n"));
    }

    #[test]
    fn a_tool_cap_lowers_the_log_cap() {
        let s = sink(1024);
        s.limit_log(20);
        s.output(Stream::Stdout, b"01234567890");
        assert!(s.final_snapshot().log.unwrap().1);
    }

    #[test]
    fn changes_are_taken_once() {
        let s = sink(1024);
        assert!(s.take_changes().is_none());
        s.status("working");
        let c = s.take_changes().unwrap();
        assert_eq!(c.status_text.as_deref(), Some("working"));
        assert!(c.log.is_none());
        assert!(s.take_changes().is_none());
    }
}
