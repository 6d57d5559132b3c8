//! Certificate verification beyond rustls's own (libpq's `prefer`/`require` and `verify-ca`),
//! and TLS failures explained in an operator's words.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};

use super::SslMode;

/// `prefer` and `require` without a root: any certificate, as libpq. The handshake's own
/// signatures are still checked, so the session is encrypted to whoever holds the key.
#[derive(Debug)]
pub(super) struct Unverified(pub(super) WebPkiSupportedAlgorithms);

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
pub(super) struct AnyName(pub(super) Arc<WebPkiServerVerifier>);

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
