//! HTTPS on loopback with a self-signed certificate, answering like
//! pveproxy: `/api2/json/...` with API-token auth, and the API viewer's
//! `apidata.js`.

use std::{collections::HashMap, convert::Infallible, net::SocketAddr, sync::Arc};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{
    body::Incoming, server::conn::http1, service::service_fn, Request, Response, StatusCode,
};
use hyper_util::rt::TokioIo;
use tokio::{net::TcpListener, sync::Mutex};
use tokio_rustls::TlsAcceptor;

use super::{
    api::{self, Method, Role},
    cluster::Cluster,
};

pub struct Shared {
    pub cluster: Mutex<Cluster>,
    /// token id → (secret, role)
    pub tokens: HashMap<String, (String, Role)>,
    pub apidata: Option<String>,
    pub(crate) holds: super::hold::Holds,
}

pub async fn serve(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    shared: Arc<Shared>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    loop {
        let (tcp, _) = tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(_) => continue,
            },
        };
        let (acceptor, shared) = (acceptor.clone(), shared.clone());
        tokio::spawn(async move {
            // A failed handshake (a client with a wrong pin) just ends here.
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            // A request that arrived is carried out even if its client
            // goes away meanwhile, as pveproxy's workers do.
            let service = service_fn(move |req| {
                let shared = shared.clone();
                async move {
                    tokio::spawn(answer(req, shared)).await.unwrap_or_else(|_| {
                        Ok(respond(
                            500,
                            "Internal Server Error",
                            String::new(),
                            "text/plain",
                        ))
                    })
                }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .await;
        });
    }
}

fn respond(status: u16, reason: &str, body: String, content_type: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(phrase) =
        hyper::ext::ReasonPhrase::try_from(reason.replace(['\r', '\n'], " ").into_bytes())
    {
        r.extensions_mut().insert(phrase);
    }
    if let Ok(v) = content_type.parse() {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

fn json(reply: api::Reply) -> Response<Full<Bytes>> {
    respond(
        reply.status,
        &reply.reason,
        reply.body.to_string(),
        "application/json;charset=UTF-8",
    )
}

fn authenticate(shared: &Shared, req: &Request<Incoming>) -> Option<(String, Role)> {
    let header = req
        .headers()
        .get(hyper::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let token = header.strip_prefix("PVEAPIToken=")?;
    let (id, secret) = token.split_once('=')?;
    let (expected, role) = shared.tokens.get(id)?;
    (expected.as_bytes() == secret.as_bytes()).then(|| (id.to_string(), *role))
}

async fn answer(
    req: Request<Incoming>,
    shared: Arc<Shared>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().to_string();
    if path == "/pve-docs/api-viewer/apidata.js" {
        return Ok(match &shared.apidata {
            Some(js) => respond(200, "OK", js.clone(), "application/javascript"),
            None => respond(404, "Not Found", String::new(), "text/plain"),
        });
    }
    let Some(api_path) = path.strip_prefix("/api2/json") else {
        return Ok(respond(404, "Not Found", String::new(), "text/plain"));
    };
    let method = match *req.method() {
        hyper::Method::GET => Method::Get,
        hyper::Method::POST => Method::Post,
        hyper::Method::PUT => Method::Put,
        hyper::Method::DELETE => Method::Delete,
        _ => return Ok(respond(501, "Not Implemented", String::new(), "text/plain")),
    };
    let verb = req.method().as_str().to_string();
    let Some((user, role)) = authenticate(&shared, &req) else {
        return Ok(json(api::Reply {
            status: 401,
            reason: "authentication failure".into(),
            body: serde_json::json!({"data": null}),
        }));
    };
    let mut params: HashMap<String, String> = HashMap::new();
    let mut add = |raw: &[u8]| {
        for (k, v) in form_urlencoded::parse(raw) {
            params
                .entry(k.into_owned())
                .and_modify(|e: &mut String| {
                    e.push(',');
                    e.push_str(&v);
                })
                .or_insert_with(|| v.into_owned());
        }
    };
    if let Some(q) = req.uri().query() {
        add(q.as_bytes());
    }
    if matches!(method, Method::Post | Method::Put) {
        let body = req
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        add(&body);
    }
    shared.holds.door(&verb).await;
    let reply = {
        let mut cluster = shared.cluster.lock().await;
        api::handle(&mut cluster, method, api_path, &params, &user, role)
    };
    Ok(json(reply))
}

pub fn local_addr(listener: &TcpListener) -> SocketAddr {
    listener
        .local_addr()
        .expect("a bound listener has an address")
}
