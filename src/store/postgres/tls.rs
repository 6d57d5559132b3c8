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
use std::sync::Arc;

use percent_encoding::percent_decode_str;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres_rustls::MakeRustlsConnect;

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
        // As in libpq and tokio-postgres, the last occurrence of an option wins.
        let mut given: [Option<(&'static str, String)>; 4] = [None, None, None, None];
        const NAMES: [(&str, &str); 4] = [
            ("sslmode", "PGSSLMODE"),
            ("sslrootcert", "PGSSLROOTCERT"),
            ("sslcert", "PGSSLCERT"),
            ("sslkey", "PGSSLKEY"),
        ];
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let key = decode(k, "option name")?;
            match NAMES.iter().position(|(name, _)| *name == key) {
                Some(i) => given[i] = Some((NAMES[i].0, decode(v, NAMES[i].0)?)),
                None => kept.push(pair),
            }
        }
        for (slot, (_, var)) in given.iter_mut().zip(NAMES) {
            if slot.is_none() {
                *slot = env(var).filter(|v| !v.is_empty()).map(|v| (var, v));
            }
        }
        let [mode, roots, cert, key] = given;
        let mode = mode
            .map(|(label, v)| SslMode::parse(&v, label).map(|m| (label, m)))
            .transpose()?;
        let roots_label = roots.as_ref().map_or("sslrootcert", |(label, _)| *label);
        let roots = match roots.as_ref().map(|(_, v)| v.as_str()) {
            None | Some("") => Roots::Default,
            Some("system") => Roots::System,
            Some(path) => Roots::File(PathBuf::from(path)),
        };
        let mode = match (mode, &roots) {
            (None, Roots::System) => SslMode::VerifyFull,
            (Some((label, m)), Roots::System) if m != SslMode::VerifyFull => {
                return Err(format!(
                    "{roots_label}=system needs sslmode=verify-full (or no sslmode), not \
                     {label}={}: the system's roots vouch for any host they signed",
                    m.name()
                ));
            }
            (m, _) => m.map_or(SslMode::Prefer, |(_, m)| m),
        };
        let file = |(label, path): (&'static str, String)| NamedFile {
            label,
            path: PathBuf::from(path),
        };
        let client = match (cert.map(file), key.map(file)) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some(ClientCert { cert, key }),
            (Some(cert), None) => {
                return Err(format!(
                    "{cert} needs sslkey=FILE (or PGSSLKEY), the certificate's private key"
                ));
            }
            (None, Some(key)) => {
                return Err(format!(
                    "{key} needs sslcert=FILE (or PGSSLCERT), the certificate it signs for"
                ));
            }
        };
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

    /// The rustls connector for these settings: reads `sslrootcert` (or the system's roots)
    /// when the mode verifies. An error names the file or what is missing.
    pub(crate) fn connector(&self) -> Result<Connector, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        // libpq: under `require`, a root certificate given makes it verify as `verify-ca`.
        let verify = match (self.mode, &self.roots) {
            (SslMode::VerifyCa | SslMode::VerifyFull, _) => Some(self.mode),
            (SslMode::Require, Roots::File(_)) => Some(SslMode::VerifyCa),
            _ => None,
        };
        let verifier: Arc<dyn ServerCertVerifier> = match verify {
            None => Arc::new(Unverified(provider.signature_verification_algorithms)),
            Some(mode) => {
                let roots = Arc::new(self.root_store()?);
                let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
                    .build()
                    .map_err(|e| format!("{}: {e}", self.roots_name()))?;
                if mode == SslMode::VerifyFull {
                    webpki
                } else {
                    Arc::new(AnyName(webpki))
                }
            }
        };
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS setup: {e}"))?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let config = match (&self.client, self.mode) {
            // libpq does not read the files for a connection that never uses TLS.
            (None, _) | (Some(_), SslMode::Disable) => builder.with_no_client_auth(),
            (Some(client), _) => {
                let (chain, key) = client.load()?;
                builder.with_client_auth_cert(chain, key).map_err(|e| {
                    format!(
                        "{} and {} cannot be used together: {e}",
                        client.cert, client.key
                    )
                })?
            }
        };
        Ok(MakeRustlsConnect::new(config))
    }

    fn roots_name(&self) -> String {
        let label = self.roots_label;
        match &self.roots {
            Roots::File(path) => format!("{label}={}", path.display()),
            Roots::System => format!("{label}=system"),
            Roots::Default => "the system's root certificates".to_string(),
        }
    }

    fn root_store(&self) -> Result<RootCertStore, String> {
        let mut store = RootCertStore::empty();
        match &self.roots {
            Roots::File(path) => {
                let name = self.roots_name();
                let pem = std::fs::read(path).map_err(|e| format!("{name} cannot be read: {e}"))?;
                let mut found = 0;
                for cert in CertificateDer::pem_slice_iter(&pem) {
                    let cert = cert.map_err(|e| {
                        format!("{name} is not a PEM certificate file: {}", pem_problem(&e))
                    })?;
                    store
                        .add(cert)
                        .map_err(|e| format!("{name} holds an invalid certificate: {e}"))?;
                    found += 1;
                }
                if found == 0 {
                    return Err(format!("{name} holds no PEM certificate"));
                }
            }
            Roots::Default | Roots::System => {
                let native = rustls_native_certs::load_native_certs();
                let (added, _) = store.add_parsable_certificates(native.certs);
                if added == 0 {
                    let why = native
                        .errors
                        .first()
                        .map_or_else(String::new, |e| format!(" ({e})"));
                    return Err(format!(
                        "sslmode={} found no system root certificates{why}: give \
                         sslrootcert=FILE with the server's CA, or install Debian package \
                         ca-certificates",
                        self.mode.name()
                    ));
                }
            }
        }
        Ok(store)
    }
}

impl ClientCert {
    /// Reads the certificate chain and the private key; an error names the file and what is
    /// wrong with it.
    fn load(&self) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
        let read =
            |f: &NamedFile| std::fs::read(&f.path).map_err(|e| format!("{f} cannot be read: {e}"));
        let pem = read(&self.cert)?;
        let chain = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| {
                format!(
                    "{} is not a PEM certificate file: {}",
                    self.cert,
                    pem_problem(&e)
                )
            })?;
        if chain.is_empty() {
            return Err(format!("{} holds no PEM certificate", self.cert));
        }
        let pem = read(&self.key)?;
        let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| match e {
            rustls::pki_types::pem::Error::NoItemsFound => format!(
                "{} holds no PEM private key (PKCS#8, PKCS#1 or SEC1)",
                self.key
            ),
            other => format!(
                "{} is not a PEM key file: {}",
                self.key,
                pem_problem(&other)
            ),
        })?;
        Ok((chain, key))
    }
}

/// A PEM error in words (the crate's own text shows marker lines as byte arrays).
fn pem_problem(e: &rustls::pki_types::pem::Error) -> String {
    use rustls::pki_types::pem::Error;
    match e {
        Error::MissingSectionEnd { end_marker } => format!(
            "its {} section has no END line",
            String::from_utf8_lossy(end_marker)
        ),
        Error::IllegalSectionStart { line } => {
            format!("bad BEGIN line \"{}\"", String::from_utf8_lossy(line))
        }
        Error::Base64Decode(why) => format!("bad base64 ({why})"),
        other => other.to_string(),
    }
}

fn decode(s: &str, what: &str) -> Result<String, String> {
    percent_decode_str(s)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| format!("the {what} is not valid UTF-8 once percent-decoded"))
}

/// `prefer` and `require` without a root: any certificate, as libpq. The handshake's own
/// signatures are still checked, so the session is encrypted to whoever holds the key.
#[derive(Debug)]
struct Unverified(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// `verify-ca`: the chain must reach a trusted root; the name in the certificate may be any.
/// webpki checks the chain before the name, so a name mismatch means the chain was good.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// Why a connection failed, in an operator's words, when TLS is the reason: the server
/// refused TLS that `mode` demands, or its certificate failed verification. None otherwise.
pub(crate) fn explain(e: &tokio_postgres::Error, mode: SslMode) -> Option<String> {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if s.to_string() == "server does not support TLS" {
            return Some(format!(
                "the server does not accept TLS connections, which sslmode={} demands (turn \
                 ssl on in the server's postgresql.conf)",
                mode.name()
            ));
        }
        let tls = s.downcast_ref::<rustls::Error>().or_else(|| {
            s.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(tls) = tls {
            return Some(match tls {
                rustls::Error::InvalidCertificate(c) => format!(
                    "the server's TLS certificate failed verification (sslmode={}): {}",
                    mode.name(),
                    certificate_problem(c)
                ),
                other => format!("the TLS handshake failed: {other}"),
            });
        }
        source = s.source();
    }
    None
}

fn certificate_problem(e: &CertificateError) -> String {
    match e {
        CertificateError::UnknownIssuer => "it is not signed by a trusted certificate authority \
             (give sslrootcert=FILE with the CA that signed it)"
            .to_string(),
        CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
            format!(
                "it does not name the host connected to ({e}); connect by a name it holds, or \
                 use sslmode=verify-ca"
            )
        }
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
            format!("it has expired ({e})")
        }
        other => other.to_string(),
    }
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
