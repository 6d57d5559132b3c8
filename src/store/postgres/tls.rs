//! TLS for Postgres connections, with libpq's `sslmode` and `sslrootcert` URL options.
//!
//! tokio-postgres knows `sslmode` `disable`, `prefer` and `require` only and refuses options it
//! does not know, so [`TlsUrl::parse`] takes libpq's verifying modes and `sslrootcert` out of the
//! URL and hands tokio-postgres the rest; [`TlsUrl::connector`] builds the one rustls connector
//! every connection of a store uses (the pool, the schema setup and the change feed).
//!
//! The modes, as libpq has them: `disable` (plain), `prefer` (the default: TLS when the server
//! offers it, else plain; the certificate is not checked), `require` (TLS; the certificate is
//! not checked unless `sslrootcert` is given, then as `verify-ca`), `verify-ca` (the certificate
//! chains to `sslrootcert`, or to the system's roots) and `verify-full` (`verify-ca`, and it
//! names the host connected to). `sslrootcert=system` means the system's roots, and, as in
//! libpq, then demands `verify-full`.
//!
//! `sslcert` and `sslkey` give a client certificate (a PEM chain) and its private key, for a
//! server whose `pg_hba.conf` asks for `cert` authentication (or `clientcert=verify-full`).
//! As in libpq, an option missing from the URL is read from the environment: `PGSSLMODE`,
//! `PGSSLROOTCERT`, `PGSSLCERT`, `PGSSLKEY`; the URL wins, and errors name where a value
//! came from.

use std::path::PathBuf;

use percent_encoding::percent_decode_str;
use tokio_postgres_rustls::MakeRustlsConnect;

mod connector;
mod verify;

pub(crate) use verify::explain;

/// The connector every connection of a store uses.
pub(crate) type Connector = MakeRustlsConnect;

/// How a connection uses TLS: libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SslMode {
    /// Plain text only.
    Disable,
    /// TLS when the server offers it, else plain; the certificate is not checked.
    Prefer,
    /// TLS or nothing; the certificate is checked only when `sslrootcert` is given.
    Require,
    /// TLS, with a certificate that chains to a trusted root.
    VerifyCa,
    /// `VerifyCa`, and the certificate names the host.
    VerifyFull,
}

impl SslMode {
    /// `label` names where `s` came from (`sslmode` or `PGSSLMODE`).
    fn parse(s: &str, label: &str) -> Result<SslMode, String> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(format!(
                    "{label}={other} is not supported (use disable, prefer, require, verify-ca \
                     or verify-full)"
                ));
            }
        })
    }

    /// The name in a URL.
    pub(crate) fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// The mode tokio-postgres enforces for us: whether TLS is optional, required or off (the
    /// checks beyond that are the connector's).
    fn for_driver(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => "require",
        }
    }
}

/// Where trusted root certificates come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Roots {
    /// No `sslrootcert`: the system's roots, for the verifying modes.
    Default,
    /// `sslrootcert=system`.
    System,
    /// `sslrootcert=FILE`: PEM certificates.
    File(PathBuf),
}

/// A file named by a TLS option, with the option's name as the user gave it (`sslcert` in the
/// URL, `PGSSLCERT` from the environment), for error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NamedFile {
    pub(crate) label: &'static str,
    pub(crate) path: PathBuf,
}

impl std::fmt::Display for NamedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.label, self.path.display())
    }
}

/// The certificate this client presents, and its private key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClientCert {
    pub(crate) cert: NamedFile,
    pub(crate) key: NamedFile,
}

/// A Postgres URL split into what tokio-postgres parses and the TLS settings it does not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsUrl {
    /// The URL for tokio-postgres: no `sslrootcert`, `sslcert` or `sslkey`, `sslmode` one it
    /// knows.
    pub(crate) driver_url: String,
    /// The mode asked for (libpq's default, `prefer`, when none is).
    pub(crate) mode: SslMode,
    /// Where trusted roots come from.
    pub(crate) roots: Roots,
    /// `sslrootcert`'s name as given (`sslrootcert` or `PGSSLROOTCERT`).
    roots_label: &'static str,
    /// The client certificate, if one is given.
    pub(crate) client: Option<ClientCert>,
}

impl TlsUrl {
    /// Splits `url`, taking options it lacks from libpq's environment variables; an error
    /// says which option is wrong and how (it never holds the URL, so never a password).
    pub(crate) fn parse(url: &str) -> Result<TlsUrl, String> {
        TlsUrl::parse_with_env(url, |name| std::env::var(name).ok())
    }

    /// [`TlsUrl::parse`] with `env` for the environment (tests pass their own).
    pub(crate) fn parse_with_env(
        url: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<TlsUrl, String> {
        let (head, query) = match url.split_once('?') {
            Some((head, query)) => (head, query),
            None => (url, ""),
        };
        let (mut kept, [mode, roots, cert, key]) = take_options(query, env)?;
        let mode = mode
            .map(|(label, v)| SslMode::parse(&v, label).map(|m| (label, m)))
            .transpose()?;
        let roots_label = roots.as_ref().map_or("sslrootcert", |(label, _)| *label);
        let roots = match roots.as_ref().map(|(_, v)| v.as_str()) {
            None | Some("") => Roots::Default,
            Some("system") => Roots::System,
            Some(path) => Roots::File(PathBuf::from(path)),
        };
        let mode = mode_with_roots(mode, &roots, roots_label)?;
        let client = client_cert(cert, key)?;
        let driver_mode = format!("sslmode={}", mode.for_driver());
        kept.push(&driver_mode);
        Ok(TlsUrl {
            driver_url: format!("{head}?{}", kept.join("&")),
            mode,
            roots,
            roots_label,
            client,
        })
    }
}

/// An option given, with the name it was given by (the URL's or the environment variable's).
type Given = Option<(&'static str, String)>;

/// The TLS options tokio-postgres does not know, by name and environment variable.
const TLS_OPTIONS: [(&str, &str); 4] = [
    ("sslmode", "PGSSLMODE"),
    ("sslrootcert", "PGSSLROOTCERT"),
    ("sslcert", "PGSSLCERT"),
    ("sslkey", "PGSSLKEY"),
];

/// Takes [`TLS_OPTIONS`] out of a URL's `query` (the last occurrence wins, as in libpq and
/// tokio-postgres), reading those it lacks from `env`: the pairs kept for the driver, and
/// `sslmode`, `sslrootcert`, `sslcert`, `sslkey` as given.
fn take_options(
    query: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<(Vec<&str>, [Given; 4]), String> {
    let mut given: [Given; 4] = [None, None, None, None];
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let key = decode(k, "option name")?;
        match TLS_OPTIONS.iter().position(|(name, _)| *name == key) {
            Some(i) => given[i] = Some((TLS_OPTIONS[i].0, decode(v, TLS_OPTIONS[i].0)?)),
            None => kept.push(pair),
        }
    }
    for (slot, (_, var)) in given.iter_mut().zip(TLS_OPTIONS) {
        if slot.is_none() {
            *slot = env(var).filter(|v| !v.is_empty()).map(|v| (var, v));
        }
    }
    Ok((kept, given))
}

/// The mode: as given, else `prefer`; `sslrootcert=system` demands (and defaults to)
/// `verify-full`, as in libpq.
fn mode_with_roots(
    mode: Option<(&'static str, SslMode)>,
    roots: &Roots,
    roots_label: &str,
) -> Result<SslMode, String> {
    Ok(match (mode, roots) {
        (None, Roots::System) => SslMode::VerifyFull,
        (Some((label, m)), Roots::System) if m != SslMode::VerifyFull => {
            return Err(format!(
                "{roots_label}=system needs sslmode=verify-full (or no sslmode), not \
                 {label}={}: the system's roots vouch for any host they signed",
                m.name()
            ));
        }
        (m, _) => m.map_or(SslMode::Prefer, |(_, m)| m),
    })
}

/// The client certificate: `sslcert` and `sslkey` together, or neither.
fn client_cert(cert: Given, key: Given) -> Result<Option<ClientCert>, String> {
    let file = |(label, path): (&'static str, String)| NamedFile {
        label,
        path: PathBuf::from(path),
    };
    match (cert.map(file), key.map(file)) {
        (None, None) => Ok(None),
        (Some(cert), Some(key)) => Ok(Some(ClientCert { cert, key })),
        (Some(cert), None) => Err(format!(
            "{cert} needs sslkey=FILE (or PGSSLKEY), the certificate's private key"
        )),
        (None, Some(key)) => Err(format!(
            "{key} needs sslcert=FILE (or PGSSLCERT), the certificate it signs for"
        )),
    }
}

fn decode(s: &str, what: &str) -> Result<String, String> {
    percent_decode_str(s)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| format!("the {what} is not valid UTF-8 once percent-decoded"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> TlsUrl {
        TlsUrl::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"))
    }

    #[test]
    fn prefer_is_the_default_and_the_driver_gets_a_mode_it_knows() {
        let t = parse("postgres://u:pw@h:5432/db");
        assert_eq!(t.mode, SslMode::Prefer);
        assert_eq!(t.roots, Roots::Default);
        assert_eq!(t.driver_url, "postgres://u:pw@h:5432/db?sslmode=prefer");
        for (given, driver) in [
            ("disable", "disable"),
            ("prefer", "prefer"),
            ("require", "require"),
            ("verify-ca", "require"),
            ("verify-full", "require"),
        ] {
            let t = parse(&format!("postgres://h/db?sslmode={given}"));
            assert_eq!(t.mode.name(), given);
            assert_eq!(t.driver_url, format!("postgres://h/db?sslmode={driver}"));
        }
    }

    #[test]
    fn sslrootcert_is_taken_out_and_other_options_kept_in_order() {
        let t = parse(
            "postgresql://h/db?application_name=x&sslrootcert=%2Fetc%2Fca%20dir%2Fca.pem\
             &sslmode=verify-full&connect_timeout=3",
        );
        assert_eq!(t.mode, SslMode::VerifyFull);
        assert_eq!(t.roots, Roots::File("/etc/ca dir/ca.pem".into()));
        assert_eq!(
            t.driver_url,
            "postgresql://h/db?application_name=x&connect_timeout=3&sslmode=require"
        );
        // The last sslmode wins, as in libpq.
        let t = parse("postgres://h/db?sslmode=disable&sslmode=verify-ca");
        assert_eq!(t.mode, SslMode::VerifyCa);
        assert_eq!(t.driver_url, "postgres://h/db?sslmode=require");
    }

    #[test]
    fn sslrootcert_system_means_verify_full() {
        let t = parse("postgres://h/db?sslrootcert=system");
        assert_eq!((t.mode, t.roots), (SslMode::VerifyFull, Roots::System));
        let e = TlsUrl::parse("postgres://h/db?sslrootcert=system&sslmode=require").unwrap_err();
        assert!(e.contains("verify-full"), "{e}");
    }

    #[test]
    fn an_unknown_sslmode_is_named() {
        let e = TlsUrl::parse("postgres://u:secret@h/db?sslmode=allow").unwrap_err();
        assert!(e.contains("sslmode=allow is not supported"), "{e}");
        assert!(!e.contains("secret"), "{e}");
    }

    #[test]
    fn the_verifying_modes_read_sslrootcert_and_name_it_when_it_fails() {
        let dir = std::env::temp_dir().join(format!("toolq-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.pem");
        let e = parse(&format!(
            "postgres://h/db?sslmode=verify-full&sslrootcert={}",
            missing.display()
        ))
        .connector()
        .err()
        .unwrap();
        assert!(e.contains("missing.pem cannot be read"), "{e}");
        let garbage = dir.join("garbage.pem");
        std::fs::write(&garbage, "not a certificate\n").unwrap();
        let e = parse(&format!(
            "postgres://h/db?sslmode=verify-ca&sslrootcert={}",
            garbage.display()
        ))
        .connector()
        .err()
        .unwrap();
        assert!(e.contains("garbage.pem holds no PEM certificate"), "{e}");
        // Not verifying: the file is not needed, as in libpq under prefer.
        assert!(
            parse(&format!(
                "postgres://h/db?sslmode=prefer&sslrootcert={}",
                missing.display()
            ))
            .connector()
            .is_ok()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn parse_env(url: &str, vars: &[(&str, &str)]) -> Result<TlsUrl, String> {
        TlsUrl::parse_with_env(url, |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn options_missing_from_the_url_come_from_libpqs_environment_variables() {
        let env = [
            ("PGSSLMODE", "verify-ca"),
            ("PGSSLROOTCERT", "/env/ca.pem"),
            ("PGSSLCERT", "/env/client.crt"),
            ("PGSSLKEY", "/env/client.key"),
        ];
        let t = parse_env("postgres://h/db", &env).unwrap();
        assert_eq!(t.mode, SslMode::VerifyCa);
        assert_eq!(t.roots, Roots::File("/env/ca.pem".into()));
        let client = t.client.unwrap();
        assert_eq!(client.cert.to_string(), "PGSSLCERT=/env/client.crt");
        assert_eq!(client.key.to_string(), "PGSSLKEY=/env/client.key");
        assert_eq!(t.driver_url, "postgres://h/db?sslmode=require");
        // The URL wins, option by option; an empty variable counts as unset.
        let t = parse_env(
            "postgres://h/db?sslmode=require&sslcert=/url/c.crt&sslkey=/url/c.key",
            &[("PGSSLMODE", "disable"), ("PGSSLROOTCERT", "")],
        )
        .unwrap();
        assert_eq!((t.mode, t.roots), (SslMode::Require, Roots::Default));
        assert_eq!(t.client.unwrap().cert.to_string(), "sslcert=/url/c.crt");
        // sslcert and sslkey never reach tokio-postgres, which refuses options it does not know.
        assert_eq!(
            parse_env("postgres://h/db?sslcert=/a&sslkey=/b", &[])
                .unwrap()
                .driver_url,
            "postgres://h/db?sslmode=prefer"
        );
    }

    #[test]
    fn errors_name_the_variable_a_bad_value_came_from() {
        let e = parse_env("postgres://h/db", &[("PGSSLMODE", "allow")]).unwrap_err();
        assert!(e.contains("PGSSLMODE=allow is not supported"), "{e}");
        let e = parse_env(
            "postgres://h/db?sslmode=require",
            &[("PGSSLROOTCERT", "system")],
        )
        .unwrap_err();
        assert!(
            e.contains("PGSSLROOTCERT=system needs sslmode=verify-full"),
            "{e}"
        );
        assert!(e.contains("not sslmode=require"), "{e}");
    }

    #[test]
    fn a_client_certificate_needs_its_key_and_the_key_its_certificate() {
        let e = parse_env("postgres://h/db?sslcert=/c.crt", &[]).unwrap_err();
        assert!(e.contains("sslcert=/c.crt needs sslkey=FILE"), "{e}");
        let e = parse_env("postgres://h/db", &[("PGSSLKEY", "/c.key")]).unwrap_err();
        assert!(e.contains("PGSSLKEY=/c.key needs sslcert=FILE"), "{e}");
    }

    #[test]
    fn unreadable_or_wrong_client_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.crt");
        let not_pem = dir.path().join("not.pem");
        std::fs::write(&not_pem, "just text\n").unwrap();
        let url = |cert: &std::path::Path, key: &std::path::Path| {
            format!(
                "postgres://h/db?sslmode=require&sslcert={}&sslkey={}",
                cert.display(),
                key.display()
            )
        };
        let e = parse(&url(&missing, &not_pem)).connector().err().unwrap();
        assert!(e.contains("missing.crt cannot be read"), "{e}");
        let e = parse(&url(&not_pem, &not_pem)).connector().err().unwrap();
        assert!(e.contains("not.pem holds no PEM certificate"), "{e}");
        // A real certificate, and a key file with no key in it.
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["client".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let crt = dir.path().join("client.crt");
        std::fs::write(&crt, cert.pem()).unwrap();
        let e = parse(&url(&crt, &crt)).connector().err().unwrap();
        assert!(e.contains("client.crt holds no PEM private key"), "{e}");
        let key_file = dir.path().join("client.key");
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        assert!(parse(&url(&crt, &key_file)).connector().is_ok());
        // Under disable the files are not read, as in libpq.
        let off = format!(
            "postgres://h/db?sslmode=disable&sslcert={}&sslkey={}",
            missing.display(),
            missing.display()
        );
        assert!(parse(&off).connector().is_ok());
    }
}
