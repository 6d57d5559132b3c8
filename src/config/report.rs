//! Config errors for people: the file and line, the key, what was found and what is allowed,
//! and the likely key when one is misspelt. One fact per line.

use figment::error::{Actual, Kind};

use super::layers::{DEFAULTS, Layers};
use crate::error::ConfigError;

/// The dotted key of an error's path.
fn dotted(path: &[String]) -> String {
    path.join(".")
}

/// How a table reads in messages: `[worker]`, `[tools.x]`, or "the top level".
fn section(path: &[String]) -> String {
    if path.is_empty() {
        "the top level".into()
    } else {
        format!("[{}]", dotted(path))
    }
}

/// The allowed name closest to `typo`, if one is close enough to be the likely meaning.
pub(crate) fn suggest<'a>(typo: &str, allowed: &[&'a str]) -> Option<&'a str> {
    allowed
        .iter()
        .map(|a| (strsim::jaro_winkler(typo, a), *a))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|x, y| x.0.total_cmp(&y.0))
        .map(|(_, a)| a)
}

/// A value as found, for "found: ...".
fn found(a: &Actual) -> String {
    match a {
        Actual::Str(s) => format!("the string {s:?}"),
        Actual::Signed(n) => format!("the integer {n}"),
        Actual::Unsigned(n) => format!("the integer {n}"),
        Actual::Float(n) => format!("the number {n}"),
        Actual::Bool(b) => format!("the boolean {b}"),
        Actual::Seq => "an array".into(),
        Actual::Map => "a table".into(),
        other => other.to_string(),
    }
}

/// serde's name of an expected type, as a person says it.
fn expected(e: &str) -> String {
    match e {
        "i8" | "i16" | "i32" | "i64" | "u8" | "u16" | "u32" | "u64" | "usize" | "isize" => {
            "an integer".into()
        }
        "a sequence" => "an array".into(),
        "a map" => "a table".into(),
        "a boolean" | "bool" => "true or false".into(),
        other if other.starts_with("struct ") => "a table".into(),
        other => other.into(),
    }
}

/// Whether keys named `key` hold durations: those whose built-in default is one, and the
/// duration keys of `[tools.NAME]` (which have no defaults in config.toml).
fn is_duration_key(key: &str) -> bool {
    fn walk(t: &toml::Table, key: &str) -> bool {
        t.iter().any(|(k, v)| match v {
            toml::Value::Table(t) => walk(t, key),
            toml::Value::String(s) => k == key && crate::config::parse_duration(s).is_ok(),
            _ => false,
        })
    }
    matches!(
        key,
        "timeout" | "approval_deadline" | "kill_grace" | "deadline"
    ) || toml::from_str::<toml::Table>(DEFAULTS).is_ok_and(|t| walk(&t, key))
}

/// Turns figment's errors (unknown key, wrong type, missing key) into one [`ConfigError`]
/// whose lines name where each came from.
pub(crate) fn from_figment(err: figment::Error, layers: &Layers) -> ConfigError {
    let mut parts: Vec<(String, String)> = err.into_iter().map(|e| one(&e, layers)).collect();
    let (origin, mut message) = parts.remove(0);
    for (o, m) in parts {
        message.push_str(&format!("\n{o}: {m}"));
    }
    ConfigError::Key { origin, message }
}

/// (where, what) of one figment error.
fn one(e: &figment::Error, layers: &Layers) -> (String, String) {
    let origin_at = |path: &[String]| layers.origin_of(path).to_string();
    match &e.kind {
        Kind::UnknownField(field, allowed) => {
            let (key, message) = unknown_field(&e.path, field, allowed);
            (origin_at(&key), message)
        }
        Kind::InvalidType(actual, exp) => (origin_at(&e.path), wrong_type(&e.path, actual, exp)),
        Kind::InvalidValue(actual, exp) => (
            origin_at(&e.path),
            format!(
                "{} has a bad value\n  found:    {}\n  expected: {}",
                dotted(&e.path),
                found(actual),
                exp
            ),
        ),
        Kind::MissingField(field) => (
            origin_at(&e.path),
            format!("{} is missing the required key `{field}`", section(&e.path)),
        ),
        other => (
            origin_at(&e.path),
            if e.path.is_empty() {
                other.to_string()
            } else {
                format!("{}: {other}", dotted(&e.path))
            },
        ),
    }
}

/// (the unknown key's path, what to say) of an unknown key or section at `path`: the likely
/// meant name and the names allowed there.
fn unknown_field(path: &[String], field: &str, allowed: &[&str]) -> (Vec<String>, String) {
    // figment's path may or may not end with the field itself.
    let mut table = path.to_vec();
    if table.last().map(String::as_str) == Some(field) {
        table.pop();
    }
    let mut key = table.clone();
    key.push(field.to_string());
    let what = if table.is_empty() {
        format!("unknown section `{field}`")
    } else {
        format!("unknown key `{field}` in {}", section(&table))
    };
    let mut m = match suggest(field, allowed) {
        Some(s) => format!("{what}; did you mean `{s}`?"),
        None => what,
    };
    let list = allowed.join(", ");
    if table.is_empty() {
        m.push_str(&format!("\n  allowed sections: {list}"));
    } else {
        m.push_str(&format!("\n  allowed keys in {}: {list}", section(&table)));
    }
    (key, m)
}

/// A value of the wrong type at `path`: what was found and what is expected (a number where
/// a duration goes is told how to write one).
fn wrong_type(path: &[String], actual: &Actual, exp: &str) -> String {
    let numeric = matches!(
        actual,
        Actual::Signed(_) | Actual::Unsigned(_) | Actual::Float(_)
    );
    let exp = match path.last() {
        Some(k) if numeric && exp == "a string" && is_duration_key(k) => {
            "a duration: a quoted string with a unit, like \"30s\" or \"500ms\"".into()
        }
        _ => expected(exp),
    };
    format!(
        "{} has the wrong type\n  found:    {}\n  expected: {exp}",
        dotted(path),
        found(actual),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_pick_the_close_key_only() {
        let allowed = ["concurrency", "per_session", "poll_interval"];
        assert_eq!(suggest("concurency", &allowed), Some("concurrency"));
        assert_eq!(suggest("poll_intervall", &allowed), Some("poll_interval"));
        assert_eq!(suggest("zzz", &allowed), None);
    }
}
