//! A batch's progress bar (completed, failed, cancelled and pending runs as segments, with
//! counts and percent) and the batches table (the batches page lists them in it).

use chrono::{DateTime, Utc};
use maud::{Markup, html};

use super::view::{ago, encode, short, state};
use crate::run::Batch;

/// The share of `n` in `total`, in percent (0 for an empty batch).
fn pct(n: i64, total: i64) -> f64 {
    if total <= 0 {
        0.0
    } else {
        (n as f64 / total as f64 * 100.0).clamp(0.0, 100.0)
    }
}

/// A batch's progress: one segment per kind of end and one for the runs not yet final.
/// `compact` (in a table) leaves out the counts line.
pub fn batch_bar(b: &Batch, compact: bool) -> Markup {
    let segments = [
        ("c", "completed", b.completed),
        ("f", "failed", b.failed),
        ("x", "cancelled", b.cancelled),
        ("p", "pending", b.pending),
    ];
    let finished = b.completed + b.failed + b.cancelled;
    let done = pct(finished, b.total);
    html! {
        div.batchprogress {
            div.segbar title=(format!("{finished} of {} runs final", b.total)) {
                @for (class, label, n) in segments {
                    @if n > 0 {
                        div class={ "seg " (class) } style={ "width:" (format!("{:.2}", pct(n, b.total))) "%" }
                            title=(format!("{n} {label}")) {}
                    }
                }
            }
            span.pct { (format!("{done:.0}%")) }
            @if !compact {
                div.counts {
                    span { (finished) " of " (b.total) " final" }
                    @for (class, label, n) in segments {
                        " · " span class={ "cnt " (class) } { span class={ "k " (class) } {} (n) " " (label) }
                    }
                }
            }
        }
    }
}

/// A table of batches, newest first.
pub fn batches_table(now: DateTime<Utc>, batches: &[Batch]) -> Markup {
    html! {
        @if !batches.is_empty() {
            table.dense.batches {
                thead { tr {
                    th { "Batch" } th { "State" } th { "Title" } th { "Session" } th { "Progress" }
                    th.n { "Runs" } th.n { "Completed" } th.n { "Failed" } th.n { "Cancelled" } th.n { "Pending" }
                    th { "Created" } th { "Finished" }
                } }
                tbody {
                    @for b in batches {
                        tr data-id=(b.id.as_str()) {
                            td.mono { a href={ "/batches/" (b.id.as_str()) } { (short(b.id.as_str())) } }
                            td { (state(b.state)) }
                            td.title { a href={ "/batches/" (b.id.as_str()) } { (b.title) } }
                            td { a href={ "/sessions/" (encode(&b.session_id)) } { (b.session_id) } }
                            td { (batch_bar(b, true)) }
                            td.n { (b.total) }
                            td.n { (b.completed) }
                            td.n { @if b.failed > 0 { span.bad { (b.failed) } } @else { (b.failed) } }
                            td.n { (b.cancelled) }
                            td.n { (b.pending) }
                            td title=(b.created_at.to_rfc3339()) { (ago(now, b.created_at)) }
                            td { @if let Some(t) = b.completed_at { span title=(t.to_rfc3339()) { (ago(now, t)) } } }
                        }
                    }
                }
            }
        }
    }
}
