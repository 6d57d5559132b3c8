//! The W3C trace context header (`traceparent`, <https://www.w3.org/TR/trace-context/>): the
//! text a run stores in `runs.traceparent`, checked where it comes in and turned into the
//! parent of the worker's spans.

use opentelemetry::trace::{SpanContext, TraceFlags, TraceState};
use opentelemetry::{SpanId, TraceId};

use crate::error::InputError;

/// Why `text` is not a `traceparent`, or None when it is one: `VERSION-TRACEID-SPANID-FLAGS`
/// in lower-case hex (2, 32, 16, 2 digits), version not `ff`, ids not all zeros. Version
/// `00` has exactly these four fields; a later version may add fields after a `-`.
pub fn refuse(text: &str) -> Option<&'static str> {
    const SHAPE: &str = "must be a W3C traceparent: 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>, lower case";
    let b = text.as_bytes();
    if b.len() < 55 || b[2] != b'-' || b[35] != b'-' || b[52] != b'-' {
        return Some(SHAPE);
    }
    let hex = |r: std::ops::Range<usize>| {
        b[r].iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
    };
    if !(hex(0..2) && hex(3..35) && hex(36..52) && hex(53..55)) {
        return Some(SHAPE);
    }
    let version = &text[0..2];
    if version == "ff" {
        return Some("version ff is not allowed (W3C trace context)");
    }
    if (version == "00" && b.len() != 55) || (b.len() > 55 && b[55] != b'-') {
        return Some(SHAPE);
    }
    if text[3..35].bytes().all(|c| c == b'0') {
        return Some("its trace id is all zeros (W3C trace context: invalid)");
    }
    if text[36..52].bytes().all(|c| c == b'0') {
        return Some("its span id is all zeros (W3C trace context: invalid)");
    }
    None
}

/// Checks a traceparent given as input (`field` names where: `traceparent`, `TRACEPARENT`).
pub fn check(field: &str, text: &str) -> Result<(), InputError> {
    match refuse(text) {
        Some(reason) => Err(InputError::new(field, text, reason)),
        None => Ok(()),
    }
}

/// The span context `text` names, as a remote parent; None when it is not a traceparent
/// (a stored one is checked at intake, so this only happens to a hand-edited row).
pub fn decode(text: &str) -> Option<SpanContext> {
    if refuse(text).is_some() {
        return None;
    }
    let trace_id = TraceId::from_hex(&text[3..35]).ok()?;
    let span_id = SpanId::from_hex(&text[36..52]).ok()?;
    let flags = u8::from_str_radix(&text[53..55], 16).ok()?;
    Some(SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags),
        true,
        TraceState::default(),
    ))
}

/// The traceparent of `sc` (version 00).
pub fn encode(sc: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        sc.trace_id(),
        sc.span_id(),
        sc.trace_flags().to_u8()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn round_trips() {
        let sc = decode(GOOD).expect("valid");
        assert!(sc.is_remote() && sc.is_sampled());
        assert_eq!(encode(&sc), GOOD);
    }

    #[test]
    fn refuses_each_bad_shape() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        ] {
            assert!(refuse(bad).is_some(), "{bad:?} accepted");
            assert!(decode(bad).is_none(), "{bad:?} decoded");
        }
        // A later version may carry more fields.
        assert_eq!(refuse(&format!("01{}-extra", &GOOD[2..])), None);
        let e = check("TRACEPARENT", "nope").unwrap_err().to_string();
        assert!(e.contains("TRACEPARENT") && e.contains("nope"), "{e}");
    }
}
