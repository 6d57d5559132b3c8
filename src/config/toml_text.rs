//! Places in TOML text: the line of a syntax error (shown with the line itself) and the
//! line where a key is written, for the layers to name a value's origin.

use crate::error::ConfigError;

/// A TOML syntax error (or a table defined twice): the line, the message and the line's text.
pub(crate) fn parse_error(e: &toml::de::Error, text: &str, name: &str) -> ConfigError {
    let line = e.span().map(|s| line_at(text, s.start));
    let mut message = e.message().trim().to_string();
    if let Some(l) = line {
        // The line may hold a database URL with its password: it is shown redacted.
        let line_text = crate::db_url::redact_text(text.lines().nth(l - 1).unwrap_or(""));
        let shown = line_text.trim_end();
        let header = shown
            .trim()
            .strip_prefix('[')
            .and_then(|h| h.split(']').next())
            .map(str::trim);
        if message.contains("duplicate") {
            message = match header {
                Some(h) if h.starts_with("tools.") => format!(
                    "tool `{}` is defined twice\n  each [tools.NAME] table may appear once: remove or rename one",
                    &h["tools.".len()..]
                ),
                Some(h) => format!("table [{h}] is defined twice\n  merge the two tables into one"),
                None => message,
            };
        }
        message.push_str(&format!("\n  {l} | {shown}"));
    }
    ConfigError::Parse {
        path: match line {
            Some(l) => format!("{name}, line {l}"),
            None => name.into(),
        },
        message,
    }
}

/// 1-based line of byte offset `at`.
fn line_at(text: &str, at: usize) -> usize {
    text.as_bytes()[..at.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The line where the key at `path` (or, failing that, its nearest written parent) is
/// written in `text`.
pub(crate) fn line_of(text: &str, path: &[String]) -> Option<usize> {
    let doc = toml::de::DeTable::parse(text).ok()?;
    let mut table = doc.get_ref();
    let mut found = None;
    for (i, key) in path.iter().enumerate() {
        let (k, v) = table.iter().find(|(k, _)| k.get_ref() == key)?;
        found = Some(line_at(text, k.span().start));
        match v.get_ref() {
            toml::de::DeValue::Table(t) if i + 1 < path.len() => table = t,
            _ => break,
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_found_for_nested_and_dotted_keys() {
        let text = "# c\n[worker]\nconcurrency = 3\n\n[tools.x]\ncommand = [\"df\"]\n";
        let p = |s: &str| s.split('.').map(String::from).collect::<Vec<_>>();
        assert_eq!(line_of(text, &p("worker.concurrency")), Some(3));
        assert_eq!(line_of(text, &p("tools.x.command")), Some(6));
        assert_eq!(line_of(text, &p("tools.x")), Some(5));
        assert_eq!(
            line_of("worker.lease = \"1s\"\n", &p("worker.lease")),
            Some(1)
        );
        assert_eq!(line_of(text, &p("runs.timeout")), None);
    }
}
