//! Which engine a database location names, which locations are refused, and how to show a
//! location without its password. Pure string work: the config, the CLI and both engines use
//! it.

/// Whether `location` is a Postgres URL (`postgres://` or `postgresql://`) rather than the
/// path of a SQLite file.
pub fn is_postgres(location: &str) -> bool {
    let l = location.trim_start();
    ["postgres://", "postgresql://"].iter().any(|scheme| {
        l.get(..scheme.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(scheme))
    })
}

/// libpq's connection keywords: a location where one of them starts a word and is followed
/// by `=` is a keyword string (`host=h dbname=d`), not a file name.
const KEYWORDS: &[&str] = &[
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "passfile",
    "require_auth",
    "channel_binding",
    "connect_timeout",
    "client_encoding",
    "options",
    "application_name",
    "fallback_application_name",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
    "replication",
    "gssencmode",
    "sslmode",
    "requiressl",
    "sslcompression",
    "sslcert",
    "sslkey",
    "sslpassword",
    "sslcertmode",
    "sslrootcert",
    "sslcrl",
    "sslcrldir",
    "sslsni",
    "requirepeer",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "krbsrvname",
    "gsslib",
    "gssdelegation",
    "service",
    "target_session_attrs",
    "load_balance_hosts",
];

/// The start of each word of `s` that is `keyword` then `=` (spaces allowed around the
/// `=`): (where the keyword starts, the keyword, where its value starts).
fn keyword_words(s: &str) -> Vec<(usize, &str, usize)> {
    let mut found = Vec::new();
    let bytes = s.as_bytes();
    for (start, _) in s.char_indices() {
        if start > 0 && !bytes[start - 1].is_ascii_whitespace() {
            continue;
        }
        let word_end = s[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(s.len(), |i| start + i);
        let word = &s[start..word_end];
        if !KEYWORDS.iter().any(|k| k.eq_ignore_ascii_case(word)) {
            continue;
        }
        let after = s[word_end..].trim_start();
        if let Some(value) = after.strip_prefix('=') {
            let value_start = s.len() - value.trim_start().len();
            found.push((start, word, value_start));
        }
    }
    found
}

/// Whether `location` reads as a libpq keyword string (`host=h password=x dbname=d`).
pub fn is_keyword_string(location: &str) -> bool {
    !keyword_words(location).is_empty()
}

/// Why `location`, given as a SQLite path (`--db`, `TOOLQ_DB`, `database.path`), is refused:
/// a URL of any scheme other than Postgres's, or a libpq keyword string. `None` for anything
/// else, which is a file path; so is anything that starts with `/` or `.` (`./host=x.db`).
/// The reason ends with a hint.
pub fn refuse_path(location: &str) -> Option<String> {
    let l = location.trim_start();
    if is_postgres(l) || l.starts_with('/') || l.starts_with('.') {
        return None;
    }
    let reason = if l.contains("://") {
        format!("is a URL, not a file path\n  {}", scheme_hint(l))
    } else if is_keyword_string(l) {
        KEYWORD_REASON.to_string()
    } else {
        return None;
    };
    Some(format!(
        "{reason}\n  (a SQLite file of that name can be given as ./NAME)"
    ))
}

/// Why a `database.url` that is not a Postgres URL is refused, with a hint.
pub fn refuse_url(url: &str) -> Option<String> {
    let u = url.trim_start();
    if is_postgres(u) {
        None
    } else if u.contains("://") {
        Some(format!("is not a Postgres URL\n  {}", scheme_hint(u)))
    } else if is_keyword_string(u) {
        Some(KEYWORD_REASON.into())
    } else {
        Some("must be a Postgres URL: postgres://user@host:port/dbname".into())
    }
}

/// What to write instead of the URL `url`, whose scheme is not Postgres's.
fn scheme_hint(url: &str) -> String {
    let scheme = url.split("://").next().unwrap_or_default().trim();
    if scheme.to_ascii_lowercase().starts_with("postgre") || scheme.eq_ignore_ascii_case("pg") {
        format!("`{scheme}://` is not a Postgres scheme; did you mean `postgres://`?")
    } else {
        format!(
            "`{scheme}://` URLs are not supported: give a Postgres URL \
             (postgres://user@host:port/dbname) or the path of a SQLite file"
        )
    }
}

const KEYWORD_REASON: &str = "looks like a libpq keyword string (host=... dbname=...); toolq \
     takes a URL: postgres://user@host:port/dbname\n  keep the password out of it: set \
     PGPASSWORD or use ~/.pgpass";

/// `location` with any password replaced by `***`: the one in the user part of a URL of any
/// scheme (`postgres://user:secret@host/db`, `mysql://u:secret@h`), a `password=` query
/// parameter, and the `password` (and `sslpassword`) value of a libpq keyword string. Anything
/// else, a file path, is returned as it is. Every message, log line and report that shows a
/// database location goes through this.
pub fn redact(location: &str) -> String {
    if location.contains("://") {
        redact_url(location)
    } else if is_keyword_string(location) {
        redact_keywords(location)
    } else {
        location.to_string()
    }
}

/// Any text (a config file's line) with the passwords of the URLs and keyword strings in it
/// hidden, as [`redact`] hides them in one location.
pub fn redact_text(text: &str) -> String {
    let text = redact_keywords(text);
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    // Each URL is the word around a `://`: from after the last space or quote before it to
    // the next space or quote.
    let stop = |c: char| c.is_whitespace() || c == '"' || c == '\'' || c == '`';
    while let Some(i) = rest.find("://") {
        let start = rest[..i].rfind(stop).map_or(0, |s| s + 1);
        let end = rest[i..].find(stop).map_or(rest.len(), |e| i + e);
        out.push_str(&rest[..start]);
        out.push_str(&redact_url(&rest[start..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// A URL of any scheme with the password of its user part and of its `password` query
/// parameters hidden.
fn redact_url(location: &str) -> String {
    let Some(scheme_end) = location.find("://").map(|i| i + 3) else {
        return location.to_string();
    };
    let (scheme, rest) = location.split_at(scheme_end);
    // The user part ends at the last '@' before the query: a password may hold an
    // unencoded '/', so the first '/' does not end it. Hiding too much is the safe side.
    let query_at = rest.find(['?', '#']).unwrap_or(rest.len());
    let (before_query, tail) = rest.split_at(query_at);
    let authority = match before_query.rfind('@') {
        Some(at) => {
            let (user, host) = before_query.split_at(at);
            match user.find(':') {
                Some(colon) => format!("{}:***{host}", &user[..colon]),
                None => before_query.to_string(),
            }
        }
        None => before_query.to_string(),
    };
    format!("{scheme}{authority}{}", redact_query(tail))
}

/// A keyword string with the value of every `password` and `sslpassword` hidden (a quoted
/// value, `'...'` with `\'` escapes, up to its closing quote).
fn redact_keywords(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut copied = 0;
    for (_, word, value_start) in keyword_words(s) {
        if !(word.eq_ignore_ascii_case("password") || word.eq_ignore_ascii_case("sslpassword")) {
            continue;
        }
        if value_start < copied {
            continue;
        }
        let value = &s[value_start..];
        let len = if let Some(quoted) = value.strip_prefix('\'') {
            let mut escaped = false;
            let mut end = value.len();
            for (i, c) in quoted.char_indices() {
                match c {
                    _ if escaped => escaped = false,
                    '\\' => escaped = true,
                    '\'' => {
                        end = i + 2;
                        break;
                    }
                    _ => {}
                }
            }
            end
        } else {
            value
                .find(|c: char| c.is_whitespace() || c == '"' || c == '\'')
                .unwrap_or(value.len())
        };
        out.push_str(&s[copied..value_start]);
        out.push_str("***");
        copied = value_start + len;
    }
    out.push_str(&s[copied..]);
    out
}
/// A URL tail (`/db?a=b&password=x`) with the value of every `password` (and
/// `sslpassword`) parameter hidden.
fn redact_query(tail: &str) -> String {
    let Some(q) = tail.find('?') else {
        return tail.to_string();
    };
    let (path, query) = tail.split_at(q + 1);
    let parts: Vec<String> = query
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, _)) if k.to_ascii_lowercase().ends_with("password") => format!("{k}=***"),
            _ => kv.to_string(),
        })
        .collect();
    format!("{path}{}", parts.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_urls_are_told_from_paths() {
        assert!(is_postgres("postgres://u@h/db"));
        assert!(is_postgres("POSTGRESQL://h/db"));
        assert!(!is_postgres("./toolq.db"));
        assert!(!is_postgres("/var/lib/postgres/toolq.db"));
    }

    #[test]
    fn passwords_never_show() {
        assert_eq!(
            redact("postgres://alice:s3cr:et@db.example:5432/toolq"),
            "postgres://alice:***@db.example:5432/toolq"
        );
        assert_eq!(
            redact("postgresql://alice@h/db?sslmode=disable&password=hunter2"),
            "postgresql://alice@h/db?sslmode=disable&password=***"
        );
        assert_eq!(redact("postgres://h/db"), "postgres://h/db");
        assert_eq!(redact("/tmp/a:b@c.db"), "/tmp/a:b@c.db");
        assert_eq!(redact("postgres://u:p@"), "postgres://u:***@");
    }

    #[test]
    fn passwords_of_other_schemes_and_keyword_strings_never_show() {
        assert_eq!(
            redact("postgress://u:Secret@h/db"),
            "postgress://u:***@h/db"
        );
        assert_eq!(redact("mysql://u:Secret@h/db"), "mysql://u:***@h/db");
        assert_eq!(
            redact("postgres://u:pa/ss@h/db?sslpassword=k"),
            "postgres://u:***@h/db?sslpassword=***"
        );
        assert_eq!(
            redact("host=h password=KV dbname=d"),
            "host=h password=*** dbname=d"
        );
        assert_eq!(
            redact("dbname = d password = 'a \\' b' user=u"),
            "dbname = d password = *** user=u"
        );
        assert_eq!(
            redact_text(r#"url = "postgres://u:Secret@h/db"#),
            r#"url = "postgres://u:***@h/db"#
        );
        assert_eq!(
            redact_text("url = 'host=h password=KV"),
            "url = 'host=h password=***"
        );
        assert_eq!(redact_text("a = 1 # no secret"), "a = 1 # no secret");
    }

    #[test]
    fn other_schemes_and_keyword_strings_are_refused_and_paths_are_not() {
        for bad in [
            "postgress://u@h/db",
            "mysql://h/db",
            "file:///tmp/x.db",
            "x://y",
            "host=h dbname=d",
            "dbname = d",
            "  user=x",
        ] {
            assert!(refuse_path(bad).is_some(), "{bad}");
            assert!(refuse_url(bad).is_some(), "{bad}");
        }
        assert!(
            refuse_path("postgress://h/db")
                .is_some_and(|r| r.contains("did you mean `postgres://`"))
        );
        for path in [
            "./toolq.db",
            "./host=x.db",
            "/var/lib/user=bob/toolq.db",
            "a:b@c.db",
            "postgres://h/db",
            "hostname.db",
            "./postgress://h/db",
        ] {
            assert_eq!(refuse_path(path), None, "{path}");
        }
        assert_eq!(refuse_url("postgresql://h/db"), None);
        assert!(refuse_url("./toolq.db").is_some());
    }
}
