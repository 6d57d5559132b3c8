//! The rustls connector for a [`TlsUrl`]: the roots it trusts, the verifier its mode asks
//! for, and the client certificate it presents. Errors name the file or what is missing.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::verify::{AnyName, Unverified};
use super::{ClientCert, Connector, NamedFile, Roots, SslMode, TlsUrl};

impl TlsUrl {
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
