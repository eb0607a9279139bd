//! TLS towards a cluster: verified against a CA bundle, or against the
//! SHA-256 fingerprint of the cluster's own certificate (how Proxmox VE's
//! self-signed certificates are usually trusted).
//!
//! With a pin, the certificate is checked inside the handshake, so with a
//! wrong pin the connection fails before a single HTTP byte — let alone
//! the token — is sent.

use std::{path::Path, sync::Arc};

use rustls::{
    client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider},
    pki_types::{pem::PemObject, CertificateDer, ServerName, UnixTime},
    CertificateError, ClientConfig, DigitallySignedStruct, OtherError, RootCertStore,
    SignatureScheme,
};
use sha2::{Digest, Sha256};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TlsError {
    #[error("fingerprint `{0}` is not a SHA-256 fingerprint (64 hex digits, colons allowed)")]
    BadFingerprint(String),
    #[error("CA bundle {path}: {message}")]
    CaBundle { path: String, message: String },
    #[error("TLS setup: {0}")]
    Setup(String),
}

/// How a target's certificate is trusted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trust {
    /// SHA-256 of the end-entity certificate (DER).
    Pin([u8; 32]),
    /// PEM file of CA certificates.
    CaBundle(std::path::PathBuf),
}

/// Parses `AB:CD:...` (as the PVE web UI shows it) or plain hex.
pub fn parse_fingerprint(s: &str) -> Result<[u8; 32], TlsError> {
    let hex_digits: String = s
        .chars()
        .filter(|c| *c != ':' && !c.is_whitespace())
        .collect();
    let bytes = hex::decode(&hex_digits).map_err(|_| TlsError::BadFingerprint(s.into()))?;
    bytes
        .try_into()
        .map_err(|_| TlsError::BadFingerprint(s.into()))
}

/// The `AB:CD:...` form of a certificate's SHA-256 fingerprint.
pub fn fingerprint_of(der: &[u8]) -> String {
    Sha256::digest(der)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

pub fn client_config(trust: &Trust) -> Result<ClientConfig, TlsError> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Setup(e.to_string()))?;
    let config = match trust {
        Trust::Pin(pin) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(PinVerifier {
                pin: *pin,
                provider,
            }))
            .with_no_client_auth(),
        Trust::CaBundle(path) => builder
            .with_root_certificates(roots(path)?)
            .with_no_client_auth(),
    };
    Ok(config)
}

fn roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let err = |message: String| TlsError::CaBundle {
        path: path.display().to_string(),
        message,
    };
    let mut store = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(path).map_err(|e| err(e.to_string()))?;
    for cert in certs {
        let cert = cert.map_err(|e| err(e.to_string()))?;
        store.add(cert).map_err(|e| err(e.to_string()))?;
    }
    if store.is_empty() {
        return Err(err("no certificates in the file".into()));
    }
    Ok(store)
}

/// A certificate whose fingerprint is not the pinned one. Its own type, so
/// that the client can tell it from other TLS failures and say it in its
/// own words (rustls' texts name the host).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("the certificate's fingerprint {presented} does not match the configured pin")]
pub struct PinMismatch {
    /// The `AB:CD:...` fingerprint the server presented.
    pub presented: String,
}

/// Accepts exactly one certificate: the one whose SHA-256 is pinned. The
/// handshake signature is still verified, so the peer must hold its key.
#[derive(Debug)]
struct PinVerifier {
    pin: [u8; 32],
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PinVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if Sha256::digest(end_entity.as_ref()).as_slice() == self.pin {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(CertificateError::Other(
                OtherError(Arc::new(PinMismatch {
                    presented: fingerprint_of(end_entity.as_ref()),
                })),
            )))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints() {
        let fp = "AB:".repeat(31) + "AB";
        assert_eq!(parse_fingerprint(&fp).unwrap(), [0xAB; 32]);
        assert_eq!(parse_fingerprint(&"ab".repeat(32)).unwrap(), [0xAB; 32]);
        assert!(parse_fingerprint("AB:CD").is_err());
        assert!(parse_fingerprint(&"zz".repeat(32)).is_err());
        assert_eq!(fingerprint_of(b"").len(), 32 * 3 - 1);
    }
}
