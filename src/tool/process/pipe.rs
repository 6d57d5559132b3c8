//! Reading one of a child's output pipes: to EOF, in chunks, whole lines into the run's sink
//! (and through the stdout filter), keeping a bounded tail. A line longer than [`MAX_LINE`]
//! is passed on in pieces, so memory stays bounded whatever the child writes.

use std::collections::VecDeque;

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::tool::sink::{RunSink, Stream};

/// A line longer than this is passed on in pieces (bounded memory for output without newlines).
pub const MAX_LINE: usize = 64 * 1024;

/// A line starting with one of the filter's prefixes (a protocol line, e.g. a result) may be
/// this long.
pub const MAX_FILTERED_LINE: usize = 4 * 1024 * 1024;

/// Looks at each complete stdout line (newline included) before it is logged; returns true
/// when it consumed the line (it is then not logged).
pub type LineFilter = Box<dyn FnMut(&[u8]) -> bool + Send>;

/// The prefixes of the lines a [`LineFilter`] sees (other lines never reach it).
pub type Prefixes = &'static [&'static [u8]];

/// Whether `line` starts with one of `prefixes`.
fn has_prefix(line: &[u8], prefixes: Prefixes) -> bool {
    prefixes.iter().any(|p| line.starts_with(p))
}

/// What a reader returns at EOF.
pub(super) struct Pumped {
    /// Which pipe it read.
    pub(super) stream: Stream,
    /// The last bytes it passed on (stdout: protocol lines excluded).
    pub(super) tail: Vec<u8>,
    /// Bytes read.
    pub(super) bytes: u64,
}

/// Reads a pipe to EOF in chunks, passing whole lines to the sink (and the filter).
pub(super) async fn pump(
    mut pipe: impl AsyncRead + Unpin,
    stream: Stream,
    sink: RunSink,
    mut filter: Option<(Prefixes, LineFilter)>,
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
            Some((prefixes, _)) if has_prefix(&pending, prefixes) => MAX_FILTERED_LINE,
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
    filter: &mut Option<(Prefixes, LineFilter)>,
    tail: &mut VecDeque<u8>,
    tail_bytes: usize,
) {
    let kept: std::borrow::Cow<'_, [u8]> = match filter {
        // Most chunks hold no protocol line: pass them on without looking at each line.
        Some((prefixes, _))
            if prefixes
                .iter()
                .all(|p| memchr::memmem::find(chunk, p).is_none()) =>
        {
            chunk.into()
        }
        None => chunk.into(),
        Some((prefixes, f)) => {
            let mut kept = Vec::with_capacity(chunk.len());
            for line in chunk.split_inclusive(|b| *b == b'\n') {
                if !(has_prefix(line, prefixes) && f(line)) {
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
