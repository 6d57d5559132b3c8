//! Progress bars on stderr (done / total, rate, ETA), only when stderr is a terminal and the
//! output is not `--json`: scripts and pipes never see them.

use std::io::IsTerminal;

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressFinish, ProgressStyle};

/// A bar of `total` steps, or `None` when it must not be drawn.
pub fn bar(total: u64, json: bool, what: &str) -> Option<ProgressBar> {
    if json || !std::io::stderr().is_terminal() {
        return None;
    }
    // Cleared when dropped, so an error message is not left under a half-drawn bar.
    let pb = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr())
        .with_finish(ProgressFinish::AndClear);
    let style = ProgressStyle::with_template(
        "{msg} [{bar:30}] {pos}/{len} ({rate}, ETA {eta}) {elapsed_precise}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .with_key(
        "rate",
        |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = write!(w, "{:.0}/s", s.per_sec());
        },
    )
    .progress_chars("=> ");
    pb.set_style(style);
    pb.set_message(what.to_string());
    Some(pb)
}

/// A spinner with a message for a step whose progress cannot be counted (one transaction),
/// or `None` when it must not be drawn.
pub fn spinner(json: bool, what: String) -> Option<ProgressBar> {
    if json || !std::io::stderr().is_terminal() {
        return None;
    }
    let pb = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr())
        .with_finish(ProgressFinish::AndClear);
    pb.set_style(
        ProgressStyle::with_template("{spinner} {msg} {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    pb.set_message(what);
    pb.enable_steady_tick(Duration::from_millis(120));
    Some(pb)
}
