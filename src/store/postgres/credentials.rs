//! What a Postgres URL leaves out, filled in as libpq fills it: `PGHOST`, `PGPORT`, `PGUSER`,
//! `PGDATABASE` and `PGPASSWORD` from the environment, then the password file (`PGPASSFILE`,
//! else `~/.pgpass`), so that no password has to be written on a command line or in a config
//! file. The URL always wins; a password is never shown, not even in a debug log.
//!
//! The password file is libpq's: lines `hostname:port:database:username:password`, `*`
//! matching anything in the first four fields, `\:` and `\\` escaping a colon and a backslash,
//! `#` starting a comment line; the first matching line wins. A file that others can read
//! (group or world permissions) is ignored with a warning, as libpq ignores it. A host given
//! as a Unix socket directory matches `localhost`. tokio-postgres takes one password for all
//! the hosts of a URL: the first host's line gives it.

use std::path::{Path, PathBuf};

/// The default port, when neither the URL nor `PGPORT` names one.
const DEFAULT_PORT: u16 = 5432;

/// Where libpq looks for the server's socket when no host is given (Debian's directory,
/// then the upstream default).
const SOCKET_DIRS: [&str; 2] = ["/var/run/postgresql", "/tmp"];

/// Where the environment and the file system are read: the process's own, or a test's.
pub(crate) struct Sources<'a> {
    /// An environment variable's value.
    pub env: &'a dyn Fn(&str) -> Option<String>,
    /// The OS user's name (libpq's default user).
    pub os_user: &'a dyn Fn() -> Option<String>,
    /// Whether a Unix socket exists at this path.
    pub socket_exists: &'a dyn Fn(&Path) -> bool,
}

/// Fills in `config`, parsed from `url` a moment ago, from this process's environment and
/// password file (see the module docs). An error says which variable holds a bad value.
pub(crate) fn fill(config: &mut tokio_postgres::Config, url: &str) -> Result<(), String> {
    let env = |k: &str| std::env::var(k).ok();
    let os_user = || whoami::username().ok();
    let socket_exists = |p: &Path| {
        use std::os::unix::fs::FileTypeExt;
        std::fs::metadata(p).is_ok_and(|m| m.file_type().is_socket())
    };
    let src = Sources {
        env: &env,
        os_user: &os_user,
        socket_exists: &socket_exists,
    };
    fill_from(config, url, &src)
}

/// [`fill`] with the environment and file system of `src`.
pub(crate) fn fill_from(
    config: &mut tokio_postgres::Config,
    url: &str,
    src: &Sources,
) -> Result<(), String> {
    let env = |k: &str| (src.env)(k).filter(|v| !v.is_empty());
    if let Some(p) = env("PGPORT") {
        fill_port(config, url, &p)?;
    }
    let port = config.get_ports().first().copied().unwrap_or(DEFAULT_PORT);
    if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
        fill_host(config, env("PGHOST"), port, src);
    }
    if config.get_user().is_none()
        && let Some(user) = env("PGUSER").or_else(|| (src.os_user)())
    {
        config.user(user);
    }
    if config.get_dbname().is_none()
        && let Some(db) = env("PGDATABASE")
    {
        config.dbname(db);
    }
    if config.get_password().is_some_and(|p| !p.is_empty()) {
        return Ok(());
    }
    if let Some(password) = env("PGPASSWORD") {
        config.password(password);
        return Ok(());
    }
    let file = env("PGPASSFILE")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| Path::new(&h).join(".pgpass")));
    if let Some(file) = file {
        fill_from_passfile(config, &file, port);
    }
    Ok(())
}

/// PGPORT (`p`) for a URL that names no port.
fn fill_port(config: &mut tokio_postgres::Config, url: &str, p: &str) -> Result<(), String> {
    let port = p
        .trim()
        .parse::<u16>()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("PGPORT={p:?} is not a port number (1-65535)"))?;
    if config.get_ports().is_empty() {
        config.port(port);
    } else if let Some(with_port) = with_port(url, port) {
        // tokio-postgres gives each host of a URL 5432 when it names no port, and has no
        // way to take a port back: parse the URL again with PGPORT's written in.
        *config = std::str::FromStr::from_str(&with_port)
            .map_err(|e: tokio_postgres::Error| format!("with PGPORT={port}: {e}"))?;
    }
    Ok(())
}

/// PGHOST's hosts, else the first socket directory with a socket for `port`, else localhost.
fn fill_host(config: &mut tokio_postgres::Config, hosts: Option<String>, port: u16, src: &Sources) {
    if let Some(hosts) = hosts {
        for h in hosts.split(',').map(str::trim).filter(|h| !h.is_empty()) {
            if h.starts_with('/') {
                config.host_path(h);
            } else {
                config.host(h);
            }
        }
        return;
    }
    let socket = SOCKET_DIRS
        .iter()
        .find(|d| (src.socket_exists)(&Path::new(d).join(format!(".s.PGSQL.{port}"))));
    match socket {
        Some(dir) => config.host_path(dir),
        None => config.host("localhost"),
    };
}

/// The password the password file `file` holds for this host, port, database and user.
fn fill_from_passfile(config: &mut tokio_postgres::Config, file: &Path, port: u16) {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        // A socket directory (or none) is `localhost` to the password file.
        _ => "localhost".to_string(),
    };
    let user = config.get_user().unwrap_or_default().to_string();
    let db = config.get_dbname().unwrap_or(&user).to_string();
    if let Some(password) = read_passfile(file, &host, &port.to_string(), &db, &user) {
        config.password(password);
    }
}

/// `url` with `:port` after each of its hosts, when none of them and no `port=` parameter
/// names a port; `None` when the URL names one.
fn with_port(url: &str, port: u16) -> Option<String> {
    let scheme_end = url.find("://")? + 3;
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let hosts_start = rest[..authority_end].rfind('@').map_or(0, |at| at + 1);
    let hosts = &rest[hosts_start..authority_end];
    let query = &rest[authority_end..];
    let names_port = |chunk: &str| match chunk.strip_prefix('[') {
        Some(v6) => v6.contains("]:"),
        None => chunk.contains(':'),
    };
    if hosts.is_empty()
        || hosts.split(',').any(names_port)
        || query
            .split(['?', '&'])
            .any(|kv| kv.to_ascii_lowercase().starts_with("port="))
    {
        return None;
    }
    let hosts: Vec<String> = hosts.split(',').map(|h| format!("{h}:{port}")).collect();
    Some(format!(
        "{}{}{}{query}",
        &url[..scheme_end],
        &rest[..hosts_start],
        hosts.join(",")
    ))
}

/// The password of the first line of the password file at `path` that matches, if the file
/// is there, is a plain file and only its owner may read it (else a warning, as libpq gives).
fn read_passfile(path: &Path, host: &str, port: &str, db: &str, user: &str) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() {
        tracing::warn!(
            "password file {} is not a plain file; it is ignored",
            path.display()
        );
        return None;
    }
    if meta.permissions().mode() & 0o077 != 0 {
        tracing::warn!(
            "password file {} has group or world access; permissions should be u=rw (0600) \
             or less; it is ignored",
            path.display()
        );
        return None;
    }
    match std::fs::read_to_string(path) {
        Ok(text) => lookup(&text, host, port, db, user),
        Err(e) => {
            tracing::warn!(
                "password file {} could not be read: {e}; it is ignored",
                path.display()
            );
            None
        }
    }
}

/// The password of the first line of a password file's `text` whose fields match.
pub(crate) fn lookup(text: &str, host: &str, port: &str, db: &str, user: &str) -> Option<String> {
    text.lines()
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .find_map(|line| {
            let fields = split(line)?;
            let wanted = [host, port, db, user];
            fields[..4]
                .iter()
                .zip(wanted)
                .all(|((field, wild), want)| *wild || field == want)
                .then(|| fields[4].0.clone())
        })
}

/// A line's five fields, unescaped, each with whether it is the `*` wildcard (an escaped
/// `\*` is a literal star); `None` for a line with fewer fields.
fn split(line: &str) -> Option<Vec<(String, bool)>> {
    let mut fields = Vec::with_capacity(5);
    let (mut field, mut escaped_any) = (String::new(), false);
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next() {
                    field.push(next);
                    escaped_any = true;
                }
            }
            // As in libpq, an unescaped colon also ends the password.
            ':' if fields.len() == 4 => break,
            ':' => {
                let wild = field == "*" && !escaped_any;
                fields.push((std::mem::take(&mut field), wild));
                escaped_any = false;
            }
            c => field.push(c),
        }
    }
    if fields.len() < 4 {
        return None;
    }
    fields.push((field, false));
    Some(fields)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::str::FromStr;

    fn filled(url: &str, vars: &[(&str, &str)]) -> Result<tokio_postgres::Config, String> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let env = move |k: &str| vars.get(k).cloned();
        let os_user = || Some("osuser".to_string());
        let no_socket = |_: &Path| false;
        let mut c = tokio_postgres::Config::from_str(url).map_err(|e| e.to_string())?;
        fill_from(
            &mut c,
            url,
            &Sources {
                env: &env,
                os_user: &os_user,
                socket_exists: &no_socket,
            },
        )?;
        Ok(c)
    }

    #[test]
    fn the_environment_fills_only_what_the_url_leaves_out() {
        let env = [
            ("PGHOST", "db.example,/run/pg"),
            ("PGPORT", "6543"),
            ("PGUSER", "envuser"),
            ("PGDATABASE", "envdb"),
            ("PGPASSWORD", "envpw"),
        ];
        let c = filled("postgres://", &env).unwrap();
        assert_eq!(c.get_ports(), [6543]);
        assert_eq!(c.get_hosts().len(), 2);
        assert_eq!(c.get_user(), Some("envuser"));
        assert_eq!(c.get_dbname(), Some("envdb"));
        assert_eq!(c.get_password(), Some(&b"envpw"[..]));
        let c = filled("postgres://u:urlpw@h:1/d", &env).unwrap();
        assert_eq!(c.get_ports(), [1]);
        assert_eq!(
            c.get_hosts(),
            [tokio_postgres::config::Host::Tcp("h".into())]
        );
        assert_eq!(c.get_user(), Some("u"));
        assert_eq!(c.get_dbname(), Some("d"));
        assert_eq!(c.get_password(), Some(&b"urlpw"[..]));
        // Nothing set: localhost (no socket here), the OS user, no password.
        let c = filled("postgres://", &[]).unwrap();
        assert_eq!(
            c.get_hosts(),
            [tokio_postgres::config::Host::Tcp("localhost".into())]
        );
        assert_eq!(c.get_user(), Some("osuser"));
        assert_eq!(c.get_password(), None);
        // A URL's host without a port takes PGPORT's; a port in the URL wins.
        let c = filled("postgres://u@h,[::1]/d?sslmode=disable", &env).unwrap();
        assert_eq!(c.get_ports(), [6543, 6543]);
        assert_eq!(c.get_user(), Some("u"));
        assert_eq!(with_port("postgres://h/d?port=7", 1), None);
        assert_eq!(
            filled("postgres://h:8,g/d", &env).unwrap().get_ports(),
            [8, 5432]
        );
        let e = filled("postgres://h/d", &[("PGPORT", "port")]).unwrap_err();
        assert!(e.contains("PGPORT") && e.contains("port"), "{e}");
    }

    #[test]
    fn password_file_lines_match_with_wildcards_escapes_and_comments() {
        let text = "# comment\n\
                    \n\
                    other:5432:*:alice:nope\n\
                    db\\:1:*:toolq:alice:c0lon\\:and\\\\slash:tail\n\
                    *:5432:*:alice:first\n\
                    *:*:*:*:any\n\
                    short:line\n";
        assert_eq!(
            lookup(text, "db:1", "5432", "toolq", "alice").as_deref(),
            Some("c0lon:and\\slash")
        );
        assert_eq!(
            lookup(text, "h", "5432", "x", "alice").as_deref(),
            Some("first")
        );
        assert_eq!(
            lookup(text, "h", "6000", "x", "alice").as_deref(),
            Some("any")
        );
        assert_eq!(lookup("# only\n", "h", "1", "d", "u"), None);
        // An escaped star is a literal star.
        assert_eq!(lookup("\\*:*:*:*:pw\n", "h", "1", "d", "u"), None);
        assert_eq!(
            lookup("\\*:*:*:*:pw\r\n", "*", "1", "d", "u").as_deref(),
            Some("pw")
        );
    }

    #[test]
    fn the_password_file_is_read_only_when_no_password_is_given_and_only_if_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("pgpass");
        std::fs::write(&file, "h:5432:d:u:frompass\n").expect("write");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let passfile = file.display().to_string();
        let env = [("PGPASSFILE", passfile.as_str())];
        let c = filled("postgres://u@h/d", &env).unwrap();
        assert_eq!(c.get_password(), Some(&b"frompass"[..]));
        let c = filled("postgres://u:given@h/d", &env).unwrap();
        assert_eq!(c.get_password(), Some(&b"given"[..]));
        let both = [env[0], ("PGPASSWORD", "fromenv")];
        let c = filled("postgres://u@h/d", &both).unwrap();
        assert_eq!(c.get_password(), Some(&b"fromenv"[..]));
        // The database defaults to the user for matching.
        std::fs::write(&file, "h:5432:u:u:samename\n").expect("write");
        let c = filled("postgres://u@h", &env).unwrap();
        assert_eq!(c.get_password(), Some(&b"samename"[..]));
        // ~/.pgpass through HOME.
        let home = dir.path().display().to_string();
        std::fs::copy(&file, dir.path().join(".pgpass")).expect("copy");
        std::fs::set_permissions(
            dir.path().join(".pgpass"),
            std::fs::Permissions::from_mode(0o600),
        )
        .expect("chmod");
        let c = filled("postgres://u@h", &[("HOME", home.as_str())]).unwrap();
        assert_eq!(c.get_password(), Some(&b"samename"[..]));
        // Readable by the group: ignored, as libpq ignores it.
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).expect("chmod");
        let c = filled("postgres://u@h", &env).unwrap();
        assert_eq!(c.get_password(), None);
    }
}
