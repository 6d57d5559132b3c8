//! Which engine a database location names, and how to show a Postgres URL without its
//! password. Pure string work: the config, the CLI and both engines use it.

/// Whether `location` is a Postgres URL (`postgres://` or `postgresql://`) rather than the
/// path of a SQLite file.
pub fn is_postgres(location: &str) -> bool {
    let l = location.trim_start();
    ["postgres://", "postgresql://"].iter().any(|scheme| {
        l.get(..scheme.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(scheme))
    })
}

/// `location` with any password replaced by `***`: the one in the user part
/// (`postgres://user:secret@host/db`) and a `password=` query parameter. Anything that is not
/// a Postgres URL is returned as it is. Every message, log line and report that shows a
/// database location goes through this.
pub fn redact(location: &str) -> String {
    if !is_postgres(location) {
        return location.to_string();
    }
    let Some(scheme_end) = location.find("://").map(|i| i + 3) else {
        return location.to_string();
    };
    let (scheme, rest) = location.split_at(scheme_end);
    // The authority ends at the first '/', '?' or '#'; its user part at its last '@'.
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rfind('@') {
        Some(at) => {
            let (user, host) = authority.split_at(at);
            match user.find(':') {
                Some(colon) => format!("{}:***{host}", &user[..colon]),
                None => authority.to_string(),
            }
        }
        None => authority.to_string(),
    };
    format!("{scheme}{authority}{}", redact_query(tail))
}

/// A URL tail (`/db?a=b&password=x`) with the value of every `password` parameter hidden.
fn redact_query(tail: &str) -> String {
    let Some(q) = tail.find('?') else {
        return tail.to_string();
    };
    let (path, query) = tail.split_at(q + 1);
    let parts: Vec<String> = query
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
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
}
