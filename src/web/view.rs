//! Small view helpers every page uses: state badges, instants, ages, sizes, JSON blocks,
//! action buttons, and the links' query encoding and short ids.

use chrono::{DateTime, Utc};
use maud::{Markup, html};

use super::AppState;

/// A state badge.
pub fn state(s: &str) -> Markup {
    html! { span class={ "state s-" (s) } { (s.replace('_', " ")) } }
}

/// A run's state badge, and for a suspended (queued) run a short note of what it waits for:
/// `queued · waiting event go`.
pub fn run_state(r: &crate::run::Run) -> Markup {
    html! {
        (state(r.state.as_str()))
        @if let Some(w) = &r.waiting {
            " " span.waits title=(w.describe()) {
                "· " @match (&w.event, w.kind) {
                    (Some(name), _) => { "waiting event " (name) }
                    (None, crate::run::WaitKind::Sleep) => { "sleeping" }
                    (None, crate::run::WaitKind::Snooze) => { "snoozed" }
                    (None, crate::run::WaitKind::Check) => { "next check later" }
                    (None, crate::run::WaitKind::Event) => { "waiting an event" }
                    (None, crate::run::WaitKind::Resume) => { "resuming its steps" }
                    (None, crate::run::WaitKind::Children) => { "waiting for its children" }
                    (None, crate::run::WaitKind::Parents) => { "blocked by its parents" }
                }
            }
        }
    }
}

/// Text cut to `max` characters on one line (the whole text stays in the cell's title).
pub fn cut(s: &str, max: usize) -> String {
    let one = s.replace(['\n', '\r', '\t'], " ");
    if one.chars().count() > max {
        format!(
            "{}…",
            one.chars().take(max.saturating_sub(1)).collect::<String>()
        )
    } else {
        one
    }
}

/// An instant as UTC text, or a dash.
pub fn at(t: Option<DateTime<Utc>>) -> Markup {
    match t {
        Some(t) => {
            html! { time datetime=(t.to_rfc3339()) title=(t.to_rfc3339()) { (t.format("%Y-%m-%d %H:%M:%SZ")) } }
        }
        None => html! { span.dim { "—" } },
    }
}

/// How long ago `t` was, from `now` ("3s ago", "in 2m").
pub fn ago(now: DateTime<Utc>, t: DateTime<Utc>) -> String {
    let secs = (now - t).num_seconds();
    let (n, future) = if secs < 0 {
        (-secs, true)
    } else {
        (secs, false)
    };
    let span = match n {
        0..=59 => format!("{n}s"),
        60..=3599 => format!("{}m", n / 60),
        3600..=86399 => format!("{}h", n / 3600),
        _ => format!("{}d", n / 86400),
    };
    if future {
        format!("in {span}")
    } else {
        format!("{span} ago")
    }
}

/// JSON pretty-printed in a `pre`.
pub fn json_block(v: &serde_json::Value) -> Markup {
    let text = serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string());
    html! { pre.json { (text) } }
}

/// A POST form with the CSRF field and one button; nothing under `--read-only`.
pub fn action(st: &AppState, href: &str, label: &str, class: &str, extra: Markup) -> Markup {
    if !super::role::can_act(st) {
        return html! {};
    }
    html! {
        form.inline method="post" action=(href) {
            input type="hidden" name="csrf" value=(st.csrf);
            (extra)
            button type="submit" class=(class) { (label) }
        }
    }
}

/// Bytes as "12.3 MiB".
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Percent-encodes a query value.
pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The id's tail: ids share their time prefix within a burst, the end tells them apart.
pub fn short(id: &str) -> String {
    let tail: String = id
        .chars()
        .rev()
        .take(12)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    format!("…{tail}")
}
