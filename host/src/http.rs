//! `airlock serve --http`: MCP over streamable HTTP at `/mcp`.
//!
//! In front of the MCP service: `/healthz`; a bearer key on every request
//! (compared in constant time against the SHA-256 hashes of the enrolled
//! keys: an enrollment file re-read on SIGHUP, or the deployment's
//! PostgreSQL database re-read every few seconds), or with `[oauth]` a JWT
//! access token from a configured issuer (see [`crate::oauth`]; its
//! metadata is served without a key); a per-client request
//! rate limit (per replica: it protects the replica's own capacity). The MCP service itself checks `Host`
//! and `Origin` against allowlists (DNS-rebinding protection) and caps the
//! request body. TLS is terminated by a reverse proxy in front (see the
//! README); this server speaks plain HTTP, by default on loopback only.

use std::{
    net::SocketAddr,
    path::PathBuf,
    sync::{Arc, RwLock},
    time::Instant,
};

use axum::{
    extract::{Request, State},
    http::{header, StatusCode},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::get,
    Router,
};
use rmcp::transport::streamable_http_server::{
    session::local::LocalSessionManager, StreamableHttpServerConfig, StreamableHttpService,
};
use subtle::ConstantTimeEq;

use airlock_gateway::{
    keys::{KeyHash, KeyStore},
    Caller,
};
use airlock_oauth::{OAuthConfig, ResourceServer, TokenError};
use airlock_state::local::EnrollmentFile;

use crate::mcp::{AirlockServer, Identity, Shared};

#[derive(Clone, Debug)]
pub struct HttpOptions {
    pub listen: SocketAddr,
    /// Enrollment file; without one, the keys the state backend keeps
    /// (PostgreSQL), else only `no_auth` serves.
    pub enrollment: Option<PathBuf>,
    /// Serve without keys, everyone as `default_identity`.
    pub no_auth: bool,
    pub default_identity: String,
    pub allowed_hosts: Vec<String>,
    pub allowed_origins: Vec<String>,
    pub max_body_bytes: usize,
    pub requests_per_minute: u32,
    /// Requests without a valid credential per client address and
    /// minute (0 = unlimited); past it, 429 before any check.
    pub failed_auth_per_minute: u32,
    /// Proxies whose `X-Forwarded-For` names the client.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// On SIGTERM/Ctrl-C: how long executions in flight may finish
    /// before the rest are cancelled.
    pub shutdown_grace: std::time::Duration,
    /// Prometheus metrics on a listener of their own.
    pub metrics: Option<crate::metrics::MetricsOptions>,
    /// Accept JWT access tokens from these issuers (`[oauth]`).
    pub oauth: Option<OAuthConfig>,
    /// Serve the operator console at `/console` (`[console]`).
    pub console: Option<airlock_console::ConsoleConfig>,
}

struct Gate {
    keys: RwLock<Vec<(KeyHash, String)>>,
    no_auth: bool,
    default_identity: String,
    /// Requests per identity (`--requests-per-minute`).
    requests: crate::door::Buckets,
    /// Failed authentications per client address
    /// (`--failed-auth-per-minute`).
    failures: crate::door::Buckets,
    trusted_proxies: Vec<ipnet::IpNet>,
    /// Access tokens that passed lately (let past an empty bucket).
    good_tokens: crate::door::GoodTokens,
    owners: crate::sessions::SessionOwners,
    /// The MCP library's sessions on this replica: one whose owner could
    /// not be recorded is closed here before it is refused.
    local_sessions: Arc<LocalSessionManager>,
    oauth: Option<Arc<ResourceServer>>,
    /// POST answers not yet sent in full.
    answers: tokio_util::task::TaskTracker,
    /// Set on SIGTERM: new sessions are sent elsewhere (503), the open
    /// ones are still served until they go quiet.
    draining: std::sync::atomic::AtomicBool,
    /// When the last request arrived (ms since [`STARTED`]), for the drain
    /// to tell when the open sessions have gone quiet.
    last_request_ms: std::sync::atomic::AtomicU64,
    /// Whom `[identities]` names: a token whose groups map to no mode is
    /// accepted only for them.
    listed: Arc<dyn Fn(&str) -> bool + Send + Sync>,
}

/// When this process's request buckets started counting: the clock their
/// sweeps are timed by.
static STARTED: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

/// One credential check at the door: the client's address, and whether
/// a token of its failure bucket was taken for it.
struct Attempt {
    address: Option<String>,
    took: bool,
}

impl Gate {
    /// Who is at the door: the client's address (through trusted
    /// proxies), keyed as its failure bucket is.
    fn address_of(
        &self,
        peer: Option<std::net::SocketAddr>,
        headers: &axum::http::HeaderMap,
    ) -> Option<String> {
        peer.map(|p| {
            let ip = crate::door::client_address(p.ip(), headers, &self.trusted_proxies);
            crate::door::address_key(ip)
        })
    }

    /// Takes a token of `address`'s failure bucket before a credential is
    /// checked (so a burst at once gets no more checks than the bucket
    /// holds). An empty bucket refuses with the seconds to wait, unless
    /// `known` recognises the credential: then it is let in without a
    /// token.
    fn enter(&self, address: Option<String>, known: impl FnOnce() -> bool) -> Result<Attempt, u64> {
        let took = match &address {
            Some(a) => match self.failures.take(a) {
                Ok(()) => true,
                Err(_) if known() => false,
                Err(wait) => {
                    crate::metrics::global().refused("auth_rate_limited");
                    return Err(wait);
                }
            },
            None => false,
        };
        Ok(Attempt { address, took })
    }

    /// The credential was good (or could not be judged): the token goes
    /// back.
    fn passed(&self, attempt: &Attempt) {
        if let (true, Some(a)) = (attempt.took, &attempt.address) {
            self.failures.refund(a);
        }
    }

    /// The identity whose key this is, compared in constant time.
    fn identify(&self, key: &str) -> Option<String> {
        let digest = airlock_gateway::keys::hash(key);
        let keys = self.keys.read().unwrap_or_else(|p| p.into_inner());
        let mut found = None;
        for (hash, identity) in keys.iter() {
            if bool::from(hash.ct_eq(digest.as_slice())) {
                found = Some(identity.clone());
            }
        }
        found
    }
}

fn plain(status: StatusCode, text: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain")],
        text.to_string(),
    )
        .into_response()
}

impl Gate {
    /// Who the request's credential makes the caller, or the answer that
    /// refuses it.
    async fn authenticate(&self, authorization: Option<&str>) -> Result<Caller, Response> {
        if self.no_auth {
            return Ok(Caller::new(self.default_identity.clone()));
        }
        let Some(bearer) = bearer_of(authorization) else {
            crate::metrics::global().refused("no_credential");
            return Err(self.unauthorized(None));
        };
        match &self.oauth {
            Some(server) if looks_like_jwt(bearer) => match server.tokens.check(bearer).await {
                Ok(caller) if caller.from_groups.is_some() || (self.listed)(&caller.identity) => {
                    Ok(caller)
                }
                Ok(caller) => {
                    crate::metrics::global().refused("no_mode");
                    Err(plain(
                        StatusCode::FORBIDDEN,
                        &format!(
                            "identity {} has no mode here: none of its groups is mapped in [oauth.issuers.groups], the issuer has no default_mode, and [identities] does not list it; ask an operator",
                            caller.identity
                        ),
                    ))
                }
                Err(e) => {
                    tracing::debug!(reason = e.reason(), error = %e, "refused an access token");
                    crate::metrics::global().refused(e.reason());
                    Err(self.refused(&e))
                }
            },
            _ if airlock_gateway::keys::KeyUse::of(bearer)
                == Some(airlock_gateway::keys::KeyUse::Console) =>
            {
                crate::metrics::global().refused("console_key");
                Err(self.unauthorized(Some(CONSOLE_KEY)))
            }
            _ => match self.identify(bearer) {
                Some(identity) => Ok(Caller::new(identity)),
                None => {
                    crate::metrics::global().refused("bad_key");
                    Err(self.unauthorized(Some(BAD_KEY)))
                }
            },
        }
    }

    /// 401 with the challenge: RFC 9728's pointer to our metadata when
    /// tokens are accepted.
    fn unauthorized(&self, why: Option<&str>) -> Response {
        let (text, challenge) = match &self.oauth {
            Some(server) => (
                why.map(str::to_string).unwrap_or_else(|| {
                    "a bearer token is required (Authorization: Bearer <token>): an access token from the issuer the resource metadata names, or a key from `airlock enroll`".into()
                }),
                server.challenge_for_key(why.is_some()),
            ),
            // A console key is told where it belongs; any other failure
            // hears the one sentence, whatever went wrong.
            None => (
                match why {
                    Some(CONSOLE_KEY) => CONSOLE_KEY.into(),
                    _ => "a valid bearer key is required (Authorization: Bearer <key>); `airlock enroll` issues one".into(),
                },
                "Bearer".into(),
            ),
        };
        with_challenge(plain(StatusCode::UNAUTHORIZED, &text), &challenge)
    }

    fn refused(&self, e: &TokenError) -> Response {
        let Some(server) = &self.oauth else {
            return self.unauthorized(Some(BAD_KEY));
        };
        if e.is_unavailable() {
            let mut r = plain(StatusCode::SERVICE_UNAVAILABLE, &e.to_string());
            r.headers_mut()
                .insert(header::RETRY_AFTER, "5".parse().expect("static header"));
            return r;
        }
        let status = if e.is_scope() {
            StatusCode::FORBIDDEN
        } else {
            StatusCode::UNAUTHORIZED
        };
        with_challenge(plain(status, &e.to_string()), &server.challenge(Some(e)))
    }
}

/// What a console key is told at the MCP endpoint.
const CONSOLE_KEY: &str = "a console key (alc_…) signs a person in at /console and calls no tool; give the client an agent's key (`airlock enroll IDENTITY`)";

const BAD_KEY: &str =
    "the bearer key is not enrolled (or was revoked); `airlock enroll` issues one";

/// The credential of an `Authorization: Bearer …` header.
fn bearer_of(authorization: Option<&str>) -> Option<&str> {
    let (scheme, rest) = authorization?.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
}

/// A JWT is three base64url parts; an enrolled key (`alk_…`) is one.
fn looks_like_jwt(bearer: &str) -> bool {
    bearer.split('.').count() == 3
}

fn with_challenge(mut r: Response, challenge: &str) -> Response {
    if let Ok(v) = challenge.parse() {
        r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    r
}

async fn guard(State(gate): State<Arc<Gate>>, mut req: Request, next: Next) -> Response {
    use std::sync::atomic::Ordering;
    if gate.draining.load(Ordering::SeqCst) && !req.headers().contains_key(SESSION_HEADER) {
        // A load balancer retries this on another replica; a client told
        // 503 on initialize tries again.
        let mut r = plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "this server is stopping: open the session again (on another replica)",
        );
        r.headers_mut().insert(header::RETRY_AFTER, 1.into());
        return r;
    }
    let authorization = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    // Who is at the door: an address whose failures used its bucket up
    // is refused before its credential costs anything.
    let peer = req
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0);
    let address = gate.address_of(peer, req.headers());
    // An enrolled key, or a token that passed lately, costs a hash to
    // recognise and is let in all the same: a crowd behind one address (a
    // proxy not declared with --trusted-proxy) failing does not lock
    // their holders out.
    let attempt = match gate.enter(address, || {
        bearer_of(authorization.as_deref()).is_some_and(|b| {
            gate.identify(b).is_some() || (looks_like_jwt(b) && gate.good_tokens.contains(b))
        })
    }) {
        Ok(attempt) => attempt,
        Err(wait) => {
            let mut r = plain(
                StatusCode::TOO_MANY_REQUESTS,
                &format!("too many requests without a valid credential from this address (serve --failed-auth-per-minute {}); the next is allowed in {wait} s", gate.failures.per_minute()),
            );
            r.headers_mut().insert(header::RETRY_AFTER, wait.into());
            return r;
        }
    };
    let caller = match gate.authenticate(authorization.as_deref()).await {
        Ok(c) => {
            gate.passed(&attempt);
            if let Some(b) = bearer_of(authorization.as_deref()).filter(|b| looks_like_jwt(b)) {
                gate.good_tokens.remember(b);
            }
            c
        }
        Err(refusal) => {
            // A provider that cannot be asked (503) is not the client's
            // failure.
            if refusal.status() == StatusCode::SERVICE_UNAVAILABLE {
                gate.passed(&attempt);
            } else if let Some(b) = bearer_of(authorization.as_deref()) {
                gate.good_tokens.forget(b);
            }
            return refusal;
        }
    };
    let identity = caller.identity.clone();
    if let Err(wait) = gate.requests.take(&identity) {
        crate::metrics::global().refused("rate_limited");
        let mut r = plain(
            StatusCode::TOO_MANY_REQUESTS,
            &format!("too many requests from this client (serve --requests-per-minute {}); the next is allowed in {wait} s", gate.requests.per_minute()),
        );
        r.headers_mut().insert(header::RETRY_AFTER, wait.into());
        return r;
    }
    let session = req
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    if let Some(id) = &session {
        match gate.owners.check(id, &identity).await {
            Ok(()) => {}
            Err(crate::sessions::NotYours::Other) => {
                crate::metrics::global().refused("not_your_session");
                return plain(
                    StatusCode::FORBIDDEN,
                    "this session was opened with another key; open a session of your own (initialize)",
                );
            }
            Err(crate::sessions::NotYours::NoOwner) => {
                crate::metrics::global().refused("unknown_session");
                // 404 is what MCP clients take as "open a new session".
                return plain(
                    StatusCode::NOT_FOUND,
                    "this session is not known here (it ended, or its owner was never recorded); open a new session (initialize)",
                );
            }
            Err(crate::sessions::NotYours::Unknown) => {
                return plain(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "cannot tell who opened this session right now; retry, or open a new session",
                )
            }
        }
    }
    if session.is_some() {
        // An open session's request: the drain waits for these to stop.
        gate.last_request_ms.fetch_max(
            STARTED.get_or_init(Instant::now).elapsed().as_millis() as u64,
            Ordering::SeqCst,
        );
    }
    req.extensions_mut().insert(Identity(caller));
    // A POST's answer (a tool call's result) is held open until its body
    // is sent, so a stopping server can wait for it; a GET's event stream
    // lives as long as the session and is not waited for.
    let answering = (req.method() == axum::http::Method::POST).then(|| gate.answers.token());
    let ending = req.method() == axum::http::Method::DELETE;
    let mut response = next.run(req).await;
    // The session is gone when the MCP library answers 202; clients check
    // for 200 or 204 (the Python SDK logs "Session termination failed:
    // 202"), and nothing more is coming, which is what 204 says.
    if ending && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
        *response.body_mut() = axum::body::Body::empty();
    }
    let response = match answering {
        Some(token) => response.map(|body| {
            use futures::StreamExt;
            axum::body::Body::from_stream(body.into_data_stream().map(move |chunk| {
                let _held = &token;
                chunk
            }))
        }),
        None => response,
    };
    if session.is_none() {
        if let Some(id) = response
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
        {
            if gate.owners.bind(id, &identity).await.is_err() {
                // Never a session the other replicas would answer 404:
                // forget it here and let the client open one when the
                // store is back (the SDKs surface 503; agents retry).
                use rmcp::transport::streamable_http_server::session::SessionManager;
                let _ = gate
                    .local_sessions
                    .close_session(&id.to_string().into())
                    .await;
                let mut r = plain(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the session could not be recorded where every replica finds it (the state store cannot be reached): open the session again in a moment",
                );
                r.headers_mut().insert(header::RETRY_AFTER, 2.into());
                return r;
            }
        }
    }
    response
}

/// The streamable HTTP transport's session header.
const SESSION_HEADER: &str = "mcp-session-id";

/// Serves until interrupted. Prints the address it listens on.
pub async fn serve(shared: Arc<Shared>, options: HttpOptions) -> Result<(), String> {
    let oauth = match &options.oauth {
        Some(_) if options.no_auth => {
            return Err("--no-auth and [oauth] contradict each other: remove one".into())
        }
        Some(config) => Some(Arc::new(
            ResourceServer::new(config).map_err(|e| e.to_string())?,
        )),
        None => None,
    };
    let store: Option<Arc<dyn KeyStore>> = match (&options.enrollment, options.no_auth) {
        (_, true) => {
            tracing::warn!("serving MCP over HTTP WITHOUT authentication (--no-auth): every client acts as identity {}", options.default_identity);
            None
        }
        (Some(path), false) => Some(Arc::new(EnrollmentFile::new(path))),
        (None, false) => match (shared.gateway.state().keys.clone(), &oauth) {
            (Some(keys), _) => Some(keys),
            (None, Some(_)) => None,
            (None, None) => return Err("serving over HTTP needs --enrollment FILE (keys for clients), [oauth] (access tokens from an OpenID provider), or [state] backend = \"postgres\" (keys from `airlock enroll` kept there), or --no-auth to opt out explicitly".into()),
        },
    };
    if let Some(server) = &oauth {
        server.tokens.warm().await;
    }
    let keys = match &store {
        Some(s) => s.all().map_err(|e| e.to_string())?,
        None => Vec::new(),
    };
    if let Some(s) = &store {
        tracing::info!(clients = keys.len(), from = %s.location(), "enrolled keys");
    }
    let gate = Arc::new(Gate {
        keys: RwLock::new(keys),
        no_auth: options.no_auth,
        default_identity: options.default_identity.clone(),
        requests: crate::door::Buckets::new(options.requests_per_minute),
        failures: crate::door::Buckets::new(options.failed_auth_per_minute),
        trusted_proxies: options.trusted_proxies.clone(),
        good_tokens: Default::default(),
        owners: crate::sessions::SessionOwners::new(shared.gateway.state().sessions.clone()),
        local_sessions: Arc::new(LocalSessionManager::default()),
        oauth: oauth.clone(),
        answers: tokio_util::task::TaskTracker::new(),
        draining: Default::default(),
        last_request_ms: Default::default(),
        listed: {
            let gateway = shared.gateway.clone();
            Arc::new(move |identity: &str| gateway.lists_identity(identity))
        },
    });
    let has_keys = store.is_some();
    let gateway = shared.gateway.clone();
    if let Some(store) = store {
        reload_keys(gate.clone(), store);
    }
    if let Some(m) = options.metrics.clone() {
        let at = crate::metrics::serve(m, shared.gateway.clone()).await?;
        eprintln!("airlock: metrics at http://{at}/metrics");
    }
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", options.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let cancel = tokio_util::sync::CancellationToken::new();
    let mut config = StreamableHttpServerConfig::default()
        .with_max_request_body_bytes(options.max_body_bytes)
        .with_cancellation_token(cancel.child_token());
    if !options.allowed_hosts.is_empty() {
        config = config.with_allowed_hosts(options.allowed_hosts.clone());
    }
    if let Some(records) = shared.gateway.state().sessions.clone() {
        config.session_store = Some(Arc::new(crate::sessions::SharedSessions(records)));
    }
    // A browser page may talk to us only from our own loopback origin
    // unless more are allowed; any other Origin is a cross-site request.
    let origins = if options.allowed_origins.is_empty() {
        loopback_origins(addr.port())
    } else {
        options.allowed_origins.clone()
    };
    config = config
        .with_allowed_origins(origins)
        .enforce_origin_validation();
    let default_identity = options.default_identity.clone();
    let draining = shared.clone();
    let service = StreamableHttpService::new(
        move || Ok(AirlockServer::new(shared.clone(), default_identity.clone())),
        gate.local_sessions.clone(),
        config,
    );
    let mcp = Router::new()
        .nest_service("/mcp", service)
        .layer(middleware::from_fn_with_state(gate.clone(), guard));
    let health = Arc::new(crate::health::Health::new(draining.gateway.clone()));
    let mut app = Router::new().route(
        "/healthz",
        get({
            let gate = gate.clone();
            // A load balancer stops sending new sessions here once the
            // server is stopping, and while the state store cannot be
            // reached (nothing could run here then).
            move || async move {
                if gate.draining.load(std::sync::atomic::Ordering::SeqCst) {
                    return (StatusCode::SERVICE_UNAVAILABLE, "stopping");
                }
                match health.state().await {
                    Ok(()) => (StatusCode::OK, "ok"),
                    Err(()) => (
                        StatusCode::SERVICE_UNAVAILABLE,
                        "not ready: the state store cannot be reached",
                    ),
                }
            }
        }),
    );
    if let Some(server) = &oauth {
        for path in server.metadata_paths() {
            let body = serde_json::to_string_pretty(server.document()).unwrap_or_default();
            app = app.route(
                path,
                // Public by design (RFC 9728), and read by browser-based
                // clients from other origins.
                get(move || async move {
                    (
                        [
                            (header::CONTENT_TYPE, "application/json"),
                            (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
                        ],
                        body,
                    )
                }),
            );
        }
    }
    if let Some(config) = options.console.clone() {
        if !has_keys && (config.oidc.is_none() || options.no_auth) {
            return Err("[console] signs people in with their console keys or through [console.oidc], and this server has no keys: give --enrollment FILE (or keep keys in PostgreSQL with [state]) or configure [console.oidc], and do not serve it with --no-auth".into());
        }
        app = app.merge(Arc::new(console(config, gate.clone(), gateway.clone())?).router());
        eprintln!("airlock: operator console at http://{addr}/console");
        if !addr.ip().is_loopback() {
            tracing::warn!(%addr, "the operator console is served over plain HTTP off loopback: put TLS in front of it (its cookie is Secure, and keys are typed into it)");
        }
    }
    let app = app
        .merge(mcp)
        .fallback(|| async { plain(StatusCode::NOT_FOUND, "not found; MCP is at /mcp") });
    let mut stop = crate::shutdown::StopSignal::register();
    eprintln!("airlock: serving MCP at http://{addr}/mcp");
    let grace = options.shutdown_grace;
    let (closed, sessions_closed) = tokio::sync::oneshot::channel::<()>();
    let served = axum::serve(
        crate::listener::no_delay(listener),
        app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown(async move {
        stop.received().await;
        drain(&gate, &draining, grace).await;
        // Stop accepting, and end the MCP sessions: what still runs
        // ends as Cancelled in the audit (a durable execution that has
        // recorded a change is let go of instead, to be resumed), and
        // open event streams close so the server can stop.
        draining.closing.cancel();
        cancel.cancel();
        let _ = closed.send(());
    });
    // A connection that holds on once the sessions are closed (a body
    // trickled in, an answer never read) does not keep the process up.
    let held_on = async {
        if sessions_closed.await.is_err() {
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(AFTER_SESSIONS_CLOSED).await;
    };
    tokio::select! {
        r = served => r.map_err(|e| e.to_string()),
        () = held_on => {
            tracing::warn!(after = ?AFTER_SESSIONS_CLOSED, "connections still open after the sessions were closed; stopping without them");
            Ok(())
        }
    }
}

/// The operator console, signing people in with the keys and the door
/// the MCP endpoint uses: a failed key costs the client's address a
/// token of `--failed-auth-per-minute`; an enrolled key is let past an
/// empty bucket. Only console keys (`alc_…`) sign a person in.
fn console(
    config: airlock_console::ConsoleConfig,
    gate: Arc<Gate>,
    gateway: Arc<airlock_gateway::Gateway>,
) -> Result<airlock_console::Console, String> {
    airlock_console::Console::new(gateway, config, Arc::new(ConsoleKeys(gate)))
}

struct ConsoleKeys(Arc<Gate>);

impl airlock_console::Keys for ConsoleKeys {
    fn sign_in(
        &self,
        key: &str,
        peer: Option<std::net::SocketAddr>,
        headers: &axum::http::HeaderMap,
    ) -> Result<String, airlock_console::LoginRefused> {
        use airlock_console::LoginRefused;
        use airlock_gateway::keys::KeyUse;
        let gate = &self.0;
        // Only a console key signs a person in: an agent holding its own
        // key (even an approver's identity's) cannot.
        let console_key = KeyUse::of(key) == Some(KeyUse::Console);
        let identity = || console_key.then(|| gate.identify(key)).flatten();
        let attempt = gate
            .enter(gate.address_of(peer, headers), || identity().is_some())
            .map_err(|wait| LoginRefused::TooMany {
                retry_after_secs: wait,
            })?;
        match identity() {
            Some(who) => {
                gate.passed(&attempt);
                Ok(who)
            }
            None => {
                crate::metrics::global().refused("bad_key");
                Err(if KeyUse::of(key) == Some(KeyUse::Agent) {
                    LoginRefused::AgentKey
                } else {
                    LoginRefused::Unknown
                })
            }
        }
    }

    fn try_sign_in(
        &self,
        peer: Option<std::net::SocketAddr>,
        headers: &axum::http::HeaderMap,
    ) -> Result<Option<String>, u64> {
        let gate = &self.0;
        let attempt = gate.enter(gate.address_of(peer, headers), || false)?;
        Ok(attempt.address.filter(|_| attempt.took))
    }

    fn sign_in_passed(&self, address: &str) {
        self.0.passed(&Attempt {
            address: Some(address.to_string()),
            took: true,
        });
    }

    fn still_enrolled(&self, key_sha256: &[u8; 32], identity: &str) -> bool {
        let keys = self.0.keys.read().unwrap_or_else(|p| p.into_inner());
        keys.iter()
            .any(|(hash, who)| bool::from(hash.ct_eq(key_sha256.as_slice())) && who == identity)
    }
}

/// How long connections may stay open once a stopping server has closed
/// its sessions.
const AFTER_SESSIONS_CLOSED: std::time::Duration = std::time::Duration::from_secs(5);

/// How long the open sessions must have sent nothing, once every answer
/// is out, before a stopping server closes them. Clients follow an answer
/// at once with what they need to read it (the Python SDK fetches
/// `tools/list` to check a result against its output schema, on a new
/// connection): a server that stopped listening with the answer made that
/// client fail the call it had just been answered.
const QUIET_BEFORE_STOP: std::time::Duration = std::time::Duration::from_millis(1000);

/// SIGTERM's drain, bounded by `grace`: new sessions are refused (503,
/// for the load balancer to send elsewhere) and new executions too; the
/// executions in flight finish and their answers are sent (durable ones
/// still running after half the grace park instead, answering that they
/// wait); then the open sessions are served until they have been quiet
/// for [`QUIET_BEFORE_STOP`].
async fn drain(gate: &Gate, shared: &Shared, grace: std::time::Duration) {
    use std::sync::atomic::Ordering;
    gate.draining.store(true, Ordering::SeqCst);
    tracing::info!("stopping: no new sessions or executions; those in flight finish and answer");
    let deadline = tokio::time::Instant::now() + grace;
    let mut left = shared.executions_ended(grace / 2).await;
    if left > 0 {
        // Half the grace is gone: durable executions still running answer
        // now and park (a read in flight is dropped, a change in flight
        // waited for), to go on when followed on another replica or after
        // the restart. The others go on meanwhile.
        tracing::info!(
            executions = left,
            "executions still running after half the shutdown grace: durable ones answer now and wait to be followed"
        );
        shared.stopping.cancel();
        // A quarter for them to park (or the rest to end), a quarter kept
        // for the answers to reach their clients.
        left = shared.executions_ended(grace / 4).await;
    }
    // Their answers still travel to their clients.
    gate.answers.close();
    let sent = tokio::time::timeout_at(deadline, gate.answers.wait())
        .await
        .is_ok();
    // The quiet is counted from the last answer sent, or the last
    // request after it.
    let started = *STARTED.get_or_init(Instant::now);
    gate.last_request_ms
        .fetch_max(started.elapsed().as_millis() as u64, Ordering::SeqCst);
    loop {
        let last = std::time::Duration::from_millis(gate.last_request_ms.load(Ordering::SeqCst));
        let quiet_at = tokio::time::Instant::from_std(started + last + QUIET_BEFORE_STOP);
        let now = tokio::time::Instant::now();
        if (quiet_at <= now && gate.answers.is_empty()) || now >= deadline {
            break;
        }
        tokio::time::sleep_until(
            quiet_at
                .max(now + std::time::Duration::from_millis(10))
                .min(deadline),
        )
        .await;
    }
    if left > 0 {
        tracing::warn!(executions = left, grace = ?grace, "cancelling the executions still running after the shutdown grace period");
    } else if sent {
        tracing::info!("every execution in flight finished and answered; stopping");
    } else {
        tracing::warn!(
            answers = gate.answers.len(),
            "answers still unsent after the shutdown grace period; stopping"
        );
    }
}

/// The origins of this server itself on loopback.
fn loopback_origins(port: u16) -> Vec<String> {
    ["localhost", "127.0.0.1", "[::1]"]
        .iter()
        .map(|h| format!("http://{h}:{port}"))
        .collect()
}

/// Re-reads the keys on SIGHUP, and every `refresh_every` when the store
/// is shared (another replica's `airlock enroll` shows up without a
/// signal). A store that cannot be read keeps the keys read last.
fn reload_keys(gate: Arc<Gate>, store: Arc<dyn KeyStore>) {
    let every = store.refresh_every();
    // Installed before the server says it is serving: a SIGHUP from then
    // on reloads, and never falls to the default action (exit).
    #[cfg(unix)]
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    tokio::spawn(async move {
        let mut failing = false;
        loop {
            let tick = async {
                match every {
                    Some(d) => tokio::time::sleep(d).await,
                    None => std::future::pending().await,
                }
            };
            #[cfg(unix)]
            let hangup = async {
                match hup.as_mut() {
                    Some(h) => h.recv().await,
                    None => std::future::pending().await,
                }
            };
            #[cfg(not(unix))]
            let hangup = std::future::pending::<Option<()>>();
            let signalled = tokio::select! {
                _ = tick => false,
                _ = hangup => true,
            };
            let read = {
                let store = store.clone();
                tokio::task::spawn_blocking(move || store.all()).await
            };
            match read {
                Ok(Ok(keys)) => {
                    let n = keys.len();
                    *gate.keys.write().unwrap_or_else(|p| p.into_inner()) = keys;
                    if signalled || failing {
                        tracing::info!(clients = n, from = %store.location(), "reloaded the enrolled keys");
                    }
                    failing = false;
                }
                Ok(Err(e)) => {
                    if signalled || !failing {
                        tracing::warn!(error = %e, "kept the previously read keys: the key store could not be read");
                    }
                    failing = true;
                }
                Err(e) => tracing::error!(error = %e, "reading the keys failed"),
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_gateway::keys::enroll;

    #[test]
    fn enrollment_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("clients.toml");
        let file = EnrollmentFile::new(&path);
        let a = enroll(&file, "alice").unwrap();
        let b = enroll(&file, "bob").unwrap();
        assert_ne!(a, b);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains(&a), "the key itself is never stored");
        let gate = Gate {
            keys: RwLock::new(file.all().unwrap()),
            no_auth: false,
            default_identity: "local".into(),
            requests: crate::door::Buckets::new(2),
            failures: crate::door::Buckets::new(0),
            trusted_proxies: Vec::new(),
            good_tokens: Default::default(),
            owners: crate::sessions::SessionOwners::new(None),
            local_sessions: Arc::new(LocalSessionManager::default()),
            oauth: None,
            answers: tokio_util::task::TaskTracker::new(),
            draining: Default::default(),
            last_request_ms: Default::default(),
            listed: Arc::new(|_: &str| false),
        };
        assert_eq!(gate.identify(&a).as_deref(), Some("alice"));
        assert_eq!(gate.identify(&b).as_deref(), Some("bob"));
        assert_eq!(gate.identify("alk_wrong"), None);
        assert!(gate.requests.take("alice").is_ok() && gate.requests.take("alice").is_ok());
        let wait = gate.requests.take("alice").unwrap_err();
        // 2 a minute: the next token is due in up to 30 s, not 1.
        assert!(
            (29..=30).contains(&wait),
            "the third request within a minute waits {wait} s"
        );
        assert!(gate.requests.take("bob").is_ok());
        assert!(enroll(&file, "evil\"]\n[x").is_err());
    }
}
