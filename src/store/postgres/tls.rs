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

use std::path::PathBuf;
use std::sync::Arc;

use percent_encoding::percent_decode_str;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
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
    fn parse(s: &str) -> Result<SslMode, String> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(format!(
                    "sslmode={other} is not supported (use disable, prefer, require, verify-ca \
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

/// A Postgres URL split into what tokio-postgres parses and the TLS settings it does not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsUrl {
    /// The URL for tokio-postgres: no `sslrootcert`, `sslmode` one it knows.
    pub(crate) driver_url: String,
    /// The mode asked for (libpq's default, `prefer`, when none is).
    pub(crate) mode: SslMode,
    /// Where trusted roots come from.
    pub(crate) roots: Roots,
}

impl TlsUrl {
    /// Splits `url`; an error says which option is wrong and how (it never holds the URL, so
    /// never a password).
    pub(crate) fn parse(url: &str) -> Result<TlsUrl, String> {
        let (head, query) = match url.split_once('?') {
            Some((head, query)) => (head, query),
            None => (url, ""),
        };
        let mut mode = None;
        let mut roots = Roots::Default;
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let key = decode(k, "option name")?;
            match key.as_str() {
                // As in libpq and tokio-postgres, the last occurrence wins.
                "sslmode" => mode = Some(SslMode::parse(&decode(v, "sslmode")?)?),
                "sslrootcert" => {
                    let value = decode(v, "sslrootcert")?;
                    roots = match value.as_str() {
                        "" => Roots::Default,
                        "system" => Roots::System,
                        path => Roots::File(PathBuf::from(path)),
                    };
                }
                _ => kept.push(pair),
            }
        }
        let mode = match (mode, &roots) {
            (None, Roots::System) => SslMode::VerifyFull,
            (Some(m), Roots::System) if m != SslMode::VerifyFull => {
                return Err(format!(
                    "sslrootcert=system needs sslmode=verify-full (or no sslmode), not \
                     sslmode={}: the system's roots vouch for any host they signed",
                    m.name()
                ));
            }
            (m, _) => m.unwrap_or(SslMode::Prefer),
        };
        let driver_mode = format!("sslmode={}", mode.for_driver());
        kept.push(&driver_mode);
        Ok(TlsUrl {
            driver_url: format!("{head}?{}", kept.join("&")),
            mode,
            roots,
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
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS setup: {e}"))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(MakeRustlsConnect::new(config))
    }

    fn roots_name(&self) -> String {
        match &self.roots {
            Roots::File(path) => format!("sslrootcert={}", path.display()),
            Roots::System => "sslrootcert=system".to_string(),
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
}
