//! Connection failures in Airlock's words. The texts of rustls, hyper and
//! the resolver carry the cluster's host name or URL ("certificate not
//! valid for name …", "error sending request for url (…)"); those texts
//! are only looked at here, never passed on. What comes out is a fixed
//! phrase per cause, plus the fingerprint the server presented when it
//! does not match the pin (the operator needs it, and it names no host).

use std::error::Error as StdError;

use rustls::CertificateError;

use airlock_edge::tls::PinMismatch;

/// What went wrong, for `PveError::Connect`.
pub fn describe(e: &reqwest::Error) -> String {
    let mut dns = false;
    let mut io_kind = None;
    let mut cause: Option<&(dyn StdError + 'static)> = e.source();
    while let Some(c) = cause {
        if let Some(tls) = rustls_error(c) {
            return format!("TLS: {}", describe_tls(tls));
        }
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            io_kind.get_or_insert(io.kind());
        }
        // hyper-util's resolver failure reads "dns error"; the text is
        // only matched, never shown.
        dns |= c.to_string().starts_with("dns error");
        cause = c.source();
    }
    use std::io::ErrorKind as K;
    let what = if dns {
        "the host name does not resolve"
    } else {
        match io_kind {
            Some(K::ConnectionRefused) => {
                "the connection was refused (is pveproxy listening on that port?)"
            }
            Some(K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe) => {
                "the connection was reset"
            }
            Some(K::UnexpectedEof) => "the connection was closed early",
            Some(K::HostUnreachable | K::NetworkUnreachable) => "the host is unreachable",
            Some(K::TimedOut) => "the connection timed out",
            _ if e.is_connect() => "the host is unreachable",
            _ => "the connection failed",
        }
    };
    what.to_string()
}

/// A rustls error in `c`, directly or inside `io::Error`s (reqwest's
/// connector wraps tokio-rustls' `io::Error` in another; an `io::Error`'s
/// `source()` skips the error it wraps, so `get_ref` is followed here).
fn rustls_error<'a>(c: &'a (dyn StdError + 'static)) -> Option<&'a rustls::Error> {
    let mut at: &(dyn StdError + 'static) = c;
    // A few levels are all the stack has; the bound keeps this a loop
    // over what is there, whatever wraps what.
    for _ in 0..8 {
        if let Some(tls) = at.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        let inner = at.downcast_ref::<std::io::Error>()?.get_ref()?;
        at = inner;
    }
    None
}

fn describe_tls(e: &rustls::Error) -> String {
    use rustls::Error as E;
    let text = match e {
        E::InvalidCertificate(c) => return describe_certificate(c),
        E::NoCertificatesPresented => "the server presented no certificate",
        E::AlertReceived(alert) => {
            return format!("the server ended the handshake ({alert:?})");
        }
        E::PeerIncompatible(_) => {
            "the server offers no TLS version or cipher Airlock accepts (TLS 1.2+)"
        }
        E::InvalidMessage(_)
        | E::InappropriateMessage { .. }
        | E::InappropriateHandshakeMessage { .. } => {
            "the server does not speak TLS as expected (is it an https port?)"
        }
        _ => "the handshake failed",
    };
    text.to_string()
}

fn describe_certificate(c: &CertificateError) -> String {
    use CertificateError as C;
    let text = match c {
        C::Other(other) => {
            if let Some(pin) = other.0.downcast_ref::<PinMismatch>() {
                return pin.to_string();
            }
            "the certificate was refused"
        }
        C::UnknownIssuer => "the certificate is not signed by a CA in the target's ca_file",
        C::NotValidForName | C::NotValidForNameContext { .. } => {
            "the certificate is not valid for the host name in the target's url"
        }
        C::Expired | C::ExpiredContext { .. } => "the certificate has expired",
        C::NotValidYet | C::NotValidYetContext { .. } => "the certificate is not valid yet",
        C::Revoked => "the certificate was revoked",
        C::BadSignature
        | C::UnsupportedSignatureAlgorithmContext { .. }
        | C::UnsupportedSignatureAlgorithmForPublicKeyContext { .. } => {
            "the certificate's signature does not verify against the target's ca_file"
        }
        C::InvalidPurpose | C::InvalidPurposeContext { .. } => {
            "the certificate is not meant for a TLS server"
        }
        _ => "the certificate was refused",
    };
    text.to_string()
}
