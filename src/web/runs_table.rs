//! The runs table (the runs, session and approval pages list runs in it) and a run's
//! progress bar (compact in the table, with its detail on a run's page).

use chrono::{DateTime, Utc};
use maud::{Markup, html};

use super::view::{ago, encode, run_state, short};
use crate::run::Run;

/// A table of runs (also used by the approvals and session pages).
pub fn runs_table(now: DateTime<Utc>, runs: &[Run]) -> Markup {
    html! {
        @if !runs.is_empty() {
            table.dense.runs {
                thead { tr {
                    th { "Run" } th { "State" } th { "Title" } th { "Tool" } th { "Session" }
                    th.n { "Attempt" } th { "Progress" } th { "Created" } th { "Finished" }
                } }
                tbody {
                    @for r in runs {
                        tr data-id=(r.id.as_str()) {
                            td.mono { a href={ "/runs/" (r.id.as_str()) } { (short(r.id.as_str())) } }
                            td { (run_state(r)) }
                            td.title {
                                (r.title)
                                // Each tag links to the runs that carry it.
                                @for (k, v) in r.tags.iter() {
                                    " " (tag_link(k, v))
                                }
                            }
                            td { (r.tool) }
                            td { a href={ "/sessions/" (encode(&r.session_id)) } { (r.session_id) } }
                            td.n { (r.attempt) "/" (r.max_attempts) }
                            td { (progress_bar(r, true)) }
                            td title=(r.created_at.to_rfc3339()) { (ago(now, r.created_at)) }
                            td { @if let Some(t) = r.finished_at { span title=(t.to_rfc3339()) { (ago(now, t)) } } }
                        }
                    }
                }
            }
        }
    }
}

/// A tag as a chip linking to the runs list filtered by it.
pub fn tag_link(key: &str, value: &str) -> Markup {
    let tag = format!("{key}={value}");
    html! { a.tag href={ "/runs?tag=" (encode(&tag)) } { (tag) } }
}

/// A run's progress (nothing when it reported none); `compact` leaves out the detail line.
pub fn progress_bar(r: &Run, compact: bool) -> Markup {
    let Some(p) = &r.progress else {
        return html! {};
    };
    let pct = p
        .total
        .filter(|t| *t > 0.0)
        .map(|t| (p.current / t * 100.0).clamp(0.0, 100.0));
    html! {
        div.progress title=(format!("{} / {}", p.current, p.total.map(|t| t.to_string()).unwrap_or_else(|| "?".into()))) {
            @if let Some(pct) = pct {
                div.bar { div.fill style={ "width:" (format!("{pct:.1}")) "%" } {} }
                span.pct { (format!("{pct:.0}%")) }
            } @else {
                span { (p.current) }
            }
            @if !compact {
                span.detail {
                    (p.current) @if let Some(t) = p.total { " / " (t) } @if let Some(u) = &p.unit { " " (u) }
                    @if let Some(l) = &p.label { " · " (l) }
                }
            }
        }
    }
}
