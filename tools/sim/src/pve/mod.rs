//! A simulated Proxmox VE cluster: an HTTPS server on loopback that speaks
//! the PVE API for every curated tool, with real state (power, config,
//! snapshots, storage content, backups, tasks that run and finish), and
//! per-token privileges. The demo runs on it, and the Proxmox client is
//! tested against it over real TLS with a pinned certificate.

pub mod api;
pub mod cluster;
pub mod hold;
mod server;
pub mod task_id;

use std::{collections::HashMap, net::SocketAddr, sync::Arc, time::Duration};

use tokio::sync::{oneshot, Mutex};
use tokio_rustls::TlsAcceptor;

pub use api::Role;
use cluster::Cluster;

/// A token the simulator accepts.
#[derive(Clone, Debug)]
pub struct SimToken {
    /// `USER@REALM!TOKENID`
    pub id: String,
    pub secret: String,
    pub role: Role,
}

impl SimToken {
    /// `USER@REALM!TOKENID=SECRET`, as a token file holds it.
    pub fn line(&self) -> String {
        format!("{}={}", self.id, self.secret)
    }
}

#[derive(Clone, Debug)]
pub struct SimConfig {
    /// How long a task runs before it finishes.
    pub task_delay: Duration,
    pub tokens: Vec<SimToken>,
    /// Port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// The API viewer's `apidata.js` to serve, as a cluster with `pve-docs`
    /// installed does; `None` answers 404 there, as one without it does.
    /// The simulator does not describe itself: whoever starts it says what
    /// API it implements (the host passes the curated catalog's tree).
    pub api_viewer: Option<String>,
}

/// `AB:CD:...`: how PVE shows a certificate's SHA-256 fingerprint, and
/// what a client pins.
pub(crate) fn fingerprint_of(der: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let hex = hex::encode_upper(Sha256::digest(der));
    let pairs: Vec<&str> = (0..hex.len()).step_by(2).map(|i| &hex[i..i + 2]).collect();
    pairs.join(":")
}

fn random_secret() -> String {
    let mut b = [0u8; 16];
    let _ = getrandom::fill(&mut b);
    let h = hex::encode(b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

impl SimConfig {
    /// Three tokens, one per role, with fresh secrets.
    pub fn with_default_tokens(task_delay: Duration) -> Self {
        let token = |name: &str, role| SimToken {
            id: format!("airlock@pve!{name}"),
            secret: random_secret(),
            role,
        };
        Self {
            task_delay,
            tokens: vec![
                token("admin", Role::Admin),
                token("operator", Role::Operator),
                token("reader", Role::Reader),
            ],
            port: 0,
            api_viewer: None,
        }
    }

    pub fn token(&self, role: Role) -> Option<&SimToken> {
        self.tokens.iter().find(|t| t.role == role)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("simulator certificate: {0}")]
    Certificate(String),
    #[error("simulator listener: {0}")]
    Listen(#[from] std::io::Error),
}

pub struct Simulator {
    addr: SocketAddr,
    fingerprint: String,
    cert_pem: String,
    shared: Arc<server::Shared>,
    stop: Option<oneshot::Sender<()>>,
}

impl Simulator {
    pub async fn start(config: &SimConfig) -> Result<Self, SimError> {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()])
            .map_err(|e| SimError::Certificate(e.to_string()))?;
        let der = cert.cert.der().clone();
        let fingerprint = fingerprint_of(der.as_ref());
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into());
        let tls = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| SimError::Certificate(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(vec![der], key)
        .map_err(|e| SimError::Certificate(e.to_string()))?;
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", config.port)).await?;
        let addr = server::local_addr(&listener);
        let shared = Arc::new(server::Shared {
            cluster: Mutex::new(Cluster::demo(config.task_delay)),
            tokens: config
                .tokens
                .iter()
                .map(|t| (t.id.clone(), (t.secret.clone(), t.role)))
                .collect::<HashMap<_, _>>(),
            apidata: config.api_viewer.clone(),
            holds: hold::Holds::new(),
        });
        let (stop, stopped) = oneshot::channel();
        tokio::spawn(server::serve(
            listener,
            TlsAcceptor::from(Arc::new(tls)),
            shared.clone(),
            stopped,
        ));
        Ok(Self {
            addr,
            fingerprint,
            cert_pem: cert.cert.pem(),
            shared,
            stop: Some(stop),
        })
    }

    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// SHA-256 fingerprint of the certificate, `AB:CD:...`.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// The certificate as PEM, to use as a CA bundle.
    pub fn certificate_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Runs `f` on the cluster state (tasks due are finished first).
    pub async fn with_cluster<R>(&self, f: impl FnOnce(&mut Cluster) -> R) -> R {
        let mut c = self.shared.cluster.lock().await;
        c.advance();
        f(&mut c)
    }

    /// Holds every request of `method` (`"POST"`, `"GET"`) that arrives
    /// from now on, after it was received and before the cluster sees it,
    /// until the hold is dropped: what a client does while its request is
    /// in flight can be tested.
    pub fn hold(&self, method: &str) -> hold::Hold<'_> {
        self.shared.holds.hold(method)
    }

    /// Requests answered so far: method, `path?sorted&params`, token id.
    pub async fn requests(&self) -> Vec<(String, String, String)> {
        self.shared.cluster.lock().await.requests.clone()
    }
}

impl Drop for Simulator {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}
