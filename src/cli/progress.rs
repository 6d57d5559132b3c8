//! Progress bars on stderr (done / total, rate, ETA), only when stderr is a terminal and the
//! output is not `--json`: scripts and pipes never see them.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar of `total` steps, or `None` when it must not be drawn.
pub fn bar(total: u64, json: bool, what: &str) -> Option<ProgressBar> {
    if json || !std::io::stderr().is_terminal() {
        return None;
    }
    let pb = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template(
        "{msg} [{bar:30}] {pos}/{len} ({per_sec}, ETA {eta}) {elapsed_precise}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ");
    pb.set_style(style);
    pb.set_message(what.to_string());
    Some(pb)
}
