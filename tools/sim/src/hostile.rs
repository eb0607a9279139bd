//! A hostile HTTP server on loopback, for tests of what a backend can
//! send: it answers every request with what the test decides (endless
//! bodies, lying lengths, huge JSON), over TLS (a fresh self-signed
//! certificate) or plain TCP, and reports how many body bytes it managed
//! to write on each connection.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    net::TcpListener,
    sync::mpsc,
};

/// What the server received.
#[derive(Clone, Debug)]
pub struct Request {
    pub method: String,
    /// With the query string.
    pub path: String,
}

/// What the server sends back.
#[derive(Clone, Debug)]
pub enum Answer {
    /// A complete answer with a `Content-Length`.
    Json { status: u16, body: String },
    /// A 200 with no length: `{"data":"aaa…` for `total` bytes or until
    /// the client goes away, then the connection is closed.
    Endless { total: u64 },
    /// A 200 that declares `Content-Length: length` and then sends
    /// nothing, waiting for the client to give up.
    Declares { length: u64 },
}

impl Answer {
    pub fn data(value: serde_json::Value) -> Self {
        Answer::Json {
            status: 200,
            body: serde_json::json!({ "data": value }).to_string(),
        }
    }
}

type Respond = Arc<dyn Fn(&Request) -> Answer + Send + Sync>;

pub struct Server {
    pub addr: SocketAddr,
    /// `AB:CD:…` of the certificate (TLS servers only).
    pub fingerprint: String,
    pub certificate_pem: String,
    /// Body bytes written on each connection, sent when it ends.
    ended: mpsc::UnboundedReceiver<u64>,
}

/// The size of one write of an endless body.
const CHUNK: usize = 64 << 10;
/// A request head larger than this is not read further.
const MAX_HEAD: usize = 64 << 10;

impl Server {
    /// HTTPS with a certificate for `names`.
    pub async fn tls(
        names: &[&str],
        respond: impl Fn(&Request) -> Answer + Send + Sync + 'static,
    ) -> Self {
        let cert = rcgen::generate_simple_self_signed(
            names.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
        )
        .unwrap();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into());
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let fingerprint = crate::pve::fingerprint_of(cert.cert.der().as_ref());
        Self::start(
            Some(acceptor),
            Arc::new(respond),
            fingerprint,
            cert.cert.pem(),
        )
        .await
    }

    /// Plain HTTP.
    pub async fn plain(respond: impl Fn(&Request) -> Answer + Send + Sync + 'static) -> Self {
        Self::start(None, Arc::new(respond), String::new(), String::new()).await
    }

    async fn start(
        acceptor: Option<tokio_rustls::TlsAcceptor>,
        respond: Respond,
        fingerprint: String,
        certificate_pem: String,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, ended) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (respond, tx, acceptor) = (respond.clone(), tx.clone(), acceptor.clone());
                tokio::spawn(async move {
                    let written = match acceptor {
                        Some(a) => match a.accept(tcp).await {
                            Ok(tls) => serve(tls, &respond).await,
                            Err(_) => 0, // the client refused the handshake
                        },
                        None => serve(tcp, &respond).await,
                    };
                    let _ = tx.send(written);
                });
            }
        });
        Self {
            addr,
            fingerprint,
            certificate_pem,
            ended,
        }
    }

    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    pub fn http_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Body bytes written on the next connection to end. Waits for the
    /// connection to end (the guard only keeps a broken test from hanging).
    pub async fn next_ended(&mut self) -> u64 {
        tokio::time::timeout(Duration::from_secs(120), self.ended.recv())
            .await
            .expect("a connection ended")
            .expect("the server is running")
    }
}

/// Serves one request; returns the body bytes written.
async fn serve<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, respond: &Respond) -> u64 {
    let Some(request) = read_request(&mut stream).await else {
        return 0;
    };
    match respond(&request) {
        Answer::Json { status, body } => {
            let head = format!(
                "HTTP/1.1 {status} Answer\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            if stream.write_all(head.as_bytes()).await.is_err()
                || stream.write_all(body.as_bytes()).await.is_err()
            {
                return 0;
            }
            let _ = stream.shutdown().await;
            body.len() as u64
        }
        Answer::Endless { total } => {
            let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n{\"data\":\"";
            if stream.write_all(head.as_bytes()).await.is_err() {
                return 0;
            }
            let chunk = vec![b'a'; CHUNK];
            let mut written = 0u64;
            while written < total {
                if stream.write_all(&chunk).await.is_err() || stream.flush().await.is_err() {
                    break;
                }
                written += CHUNK as u64;
            }
            let _ = stream.shutdown().await;
            written
        }
        Answer::Declares { length } => {
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n\r\n"
            );
            if stream.write_all(head.as_bytes()).await.is_ok() {
                let _ = stream.flush().await;
                // Hold the connection until the client closes it.
                let mut sink = [0u8; 1024];
                while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
            }
            0
        }
    }
}

/// Reads the head and any body of one request.
async fn read_request<S: AsyncRead + Unpin>(stream: &mut S) -> Option<Request> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 4096];
    let end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        if buf.len() > MAX_HEAD {
            return None;
        }
        let n = stream.read(&mut byte).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&byte[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut first = head.lines().next()?.split(' ');
    let (method, path) = (first.next()?.to_string(), first.next()?.to_string());
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut body = buf.len() - end;
    while body < length.min(MAX_HEAD) {
        let n = stream.read(&mut byte).await.ok()?;
        if n == 0 {
            break;
        }
        body += n;
    }
    Some(Request { method, path })
}
