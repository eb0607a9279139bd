//! The operator console: the requests waiting for a person, what each
//! would change, and a form to approve or deny it with a reason, at
//! `/console` on `airlock serve --http`.
//!
//! It decides through the same store and the same four-eyes rule as
//! `airlock approvals approve` (`Gateway::decide`), so a request filed on
//! one replica is decided on any other that shares its state, once. A
//! person signs in with their console key, or through the deployment's
//! OpenID provider (`[console.oidc]`: the authorization code grant with
//! PKCE, Airlock a confidential client); their role comes from
//! `[console]` (approver, auditor, or none), worked out again on every
//! request, so a change to it takes effect at once. Every page carries a
//! strict Content-Security-Policy and no script; every form a decision
//! is posted with carries the session's CSRF token, and the session
//! cookie is HttpOnly, Secure and SameSite=Strict.

pub mod config;
pub mod pages;
mod provider;
pub mod sessions;
pub mod trail;
mod trail_pages;
pub mod webhook;

use std::{collections::HashMap, net::SocketAddr, sync::Arc};

use airlock_gateway::{
    approval::{refusal, ApprovalError, Decider, Request, Status},
    Caller, Gateway,
};
use airlock_oauth::SignIn;
use axum::{
    extract::{ConnectInfo, DefaultBodyLimit, Path, Query, State},
    http::{header, HeaderMap, HeaderValue, StatusCode},
    middleware,
    response::{IntoResponse, Response},
    routing::{get, post},
    Extension, Form, Router,
};
use maud::Markup;

pub use config::{ConsoleConfig, OidcConfig, Role};
use pages::Offer;
use provider::{oidc_callback, oidc_start, sign_in};
use sessions::{Proof, Session, Sessions};

/// The cookie a sign-in through the provider waits in (state, nonce and
/// PKCE verifier) while the browser is away; sent back only to the
/// callback, and (SameSite=Lax) on the provider's redirect back to it.
pub const LOGIN_COOKIE: &str = "__Host-airlock_console_login";
/// How long a person has to sign in at the provider.
pub const LOGIN_SECS: u64 = 600;

/// Why a key did not sign anyone in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoginRefused {
    /// Not a key this deployment knows.
    Unknown,
    /// An agent's key (`alk_…`): people sign in with console keys.
    AgentKey,
    /// Too many failures from this address; try again in this many s.
    TooMany { retry_after_secs: u64 },
}

/// The keys people sign in with, as the host keeps them: the console
/// shares the MCP server's key store and its door.
pub trait Keys: Send + Sync {
    /// Checks a console key presented from `peer` (counting a failure
    /// against the client's address): the identity it belongs to, or why
    /// not.
    fn sign_in(
        &self,
        key: &str,
        peer: Option<SocketAddr>,
        headers: &HeaderMap,
    ) -> Result<String, LoginRefused>;

    /// Whether the key with this SHA-256 still belongs to `identity`: a
    /// sign-in whose key was revoked opens nothing.
    fn still_enrolled(&self, key_sha256: &[u8; 32], identity: &str) -> bool;

    /// Takes one of the failed-sign-in tokens of the client at `peer`
    /// before a sign-in through the provider is finished (each costs a
    /// request to the provider): the address to give it back to when the
    /// sign-in succeeds, or the seconds to wait when none is left.
    fn try_sign_in(
        &self,
        peer: Option<SocketAddr>,
        headers: &HeaderMap,
    ) -> Result<Option<String>, u64>;

    /// The sign-in through the provider succeeded: the token goes back.
    fn sign_in_passed(&self, address: &str);
}

/// The console's state: the gateway it decides through, who may do
/// what, and who is signed in.
pub struct Console {
    gateway: Arc<Gateway>,
    config: ConsoleConfig,
    sessions: Sessions,
    keys: Arc<dyn Keys>,
    /// Signing in through the OpenID provider, when configured.
    provider: Option<SignIn>,
    /// Held while the audit chain is read for a page: one pass at a time.
    reading: Arc<tokio::sync::Semaphore>,
}

impl Console {
    pub fn new(
        gateway: Arc<Gateway>,
        config: ConsoleConfig,
        keys: Arc<dyn Keys>,
    ) -> Result<Self, String> {
        config.check()?;
        let provider = match &config.oidc {
            Some(o) => Some(sign_in(o).map_err(|e| format!("[console.oidc] {e}"))?),
            None => None,
        };
        if let Some(file) = &config.webhook_url_file {
            let url = config::secret_from_file(file, "[console] webhook_url_file")?;
            let public = config.public_url().unwrap_or_default();
            let hook = webhook::Webhook::start(&url, &public, config.webhook_ca_file.as_deref())
                .map_err(|e| format!("[console] {e}"))?;
            if gateway.on_filed(hook).is_err() {
                return Err("[console] a webhook is already set for this gateway".into());
            }
        }
        let shared = gateway.state().console.clone();
        Ok(Self {
            gateway,
            config,
            sessions: Sessions::new(shared),
            keys,
            provider,
            reading: Arc::new(tokio::sync::Semaphore::new(1)),
        })
    }

    /// The sign-in page, with the provider's button when there is one.
    fn login_page(&self, problem: Option<&str>) -> Markup {
        pages::login(problem, self.provider.is_some())
    }

    /// The routes under `/console`, each answer with the console's
    /// security headers.
    pub fn router(self: Arc<Self>) -> Router {
        Router::new()
            .route("/console", get(home))
            .route("/console/", get(home))
            .route("/console/style.css", get(style))
            .route("/console/login", get(login_page).post(login))
            .route("/console/oidc/start", get(oidc_start))
            .route("/console/oidc/callback", get(oidc_callback))
            .route("/console/logout", post(logout))
            .route("/console/requests/{id}", get(request))
            .route("/console/executions", get(executions))
            .route("/console/audit", get(audit_trail))
            .route("/console/requests/{id}/decide", post(decide))
            .route("/console/executions/{id}/cancel", post(cancel))
            .route("/console/{*rest}", get(nowhere).post(nowhere))
            // A form is a key, a reason and a token: kilobytes at most,
            // read before anyone is known.
            .layer(DefaultBodyLimit::max(MAX_FORM_BYTES))
            .layer(middleware::map_response(secure_headers))
            .with_state(self)
    }

    /// `s` deciding here, allowed to approve their own requests where
    /// the operator lets their identity.
    fn decider(&self, s: &Session) -> Decider {
        let own = self
            .gateway
            .may_approve_own(&Caller::new(s.identity.clone()));
        Decider::console(s.identity.clone(), own)
    }

    fn session(&self, headers: &HeaderMap) -> Option<(String, Session)> {
        let id = sessions::cookie_value(
            headers
                .get_all(header::COOKIE)
                .iter()
                .filter_map(|v| v.to_str().ok()),
        )?;
        // A store that cannot be asked signs nobody in (fail closed).
        let s = match self.sessions.get(id, self.gateway.now_ms()) {
            Ok(s) => s?,
            Err(e) => {
                tracing::error!(error = %e, "the console could not read its sign-ins");
                return None;
            }
        };
        let mut s = s;
        if s.provider {
            // Not kept: the provider's sign-in ends with its session
            // (`session_minutes`); one no longer configured opens nothing.
            if self.provider.is_none() {
                let _ = self.sessions.close(id);
                return None;
            }
        } else {
            let key: Option<[u8; 32]> = hex::decode(&s.key_sha256)
                .ok()
                .and_then(|k| k.try_into().ok());
            if !key.is_some_and(|k| self.keys.still_enrolled(&k, &s.identity)) {
                tracing::info!(identity = %s.identity, "a console sign-in whose key was revoked ended");
                let _ = self.sessions.close(id);
                return None;
            }
        }
        // The role as `[console]` gives it now, not as it was at sign-in.
        match self.config.role_with_groups(&s.identity, &s.groups) {
            Some(role) => s.role = role,
            None => {
                tracing::info!(identity = %s.identity, "a console sign-in whose identity no longer has a role ended");
                let _ = self.sessions.close(id);
                return None;
            }
        }
        Some((id.to_string(), s))
    }
}

/// No script, no inline style, no framing, forms only to ourselves;
/// nothing cached, no referrer sent on.
async fn secure_headers(mut r: Response) -> Response {
    let h = r.headers_mut();
    let set = |h: &mut HeaderMap, name: header::HeaderName, value: &'static str| {
        h.insert(name, HeaderValue::from_static(value));
    };
    set(
        h,
        header::CONTENT_SECURITY_POLICY,
        "default-src 'none'; style-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    );
    set(h, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(h, header::REFERRER_POLICY, "no-referrer");
    set(h, header::CACHE_CONTROL, "no-store");
    set(h, header::X_FRAME_OPTIONS, "DENY");
    r
}

/// The largest form the console reads.
pub const MAX_FORM_BYTES: usize = 16 * 1024;

async fn nowhere() -> Response {
    page(
        StatusCode::NOT_FOUND,
        pages::message("Not found", None, "The console has no such page.", true),
    )
}

fn page(status: StatusCode, markup: Markup) -> Response {
    (status, markup).into_response()
}

fn see_other(to: &str) -> Response {
    (StatusCode::SEE_OTHER, [(header::LOCATION, to.to_string())]).into_response()
}

/// A form posted from another site is refused whatever it carries: a
/// browser says so in `Sec-Fetch-Site`, or (older ones) in an `Origin`
/// that is not this host's.
fn cross_site(headers: &HeaderMap) -> bool {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = text("sec-fetch-site") {
        return !matches!(site, "same-origin" | "none");
    }
    match (text("origin"), text("host")) {
        (None, _) => false,
        (Some(origin), Some(host)) => {
            let bare = origin
                .strip_prefix("https://")
                .or_else(|| origin.strip_prefix("http://"));
            bare != Some(host)
        }
        (Some(_), None) => true,
    }
}

async fn style() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        pages::STYLE,
    )
        .into_response()
}

async fn home(State(c): State<Arc<Console>>, headers: HeaderMap) -> Response {
    let Some((_, s)) = c.session(&headers) else {
        return see_other("/console/login");
    };
    let now = c.gateway.now_ms();
    match c.gateway.approvals().list(now, false) {
        Ok(list) => page(StatusCode::OK, pages::list(&s, &list, now)),
        Err(e) => unavailable(&s, e),
    }
}

/// One pass over the audit chain for `s`, off the async workers, one at
/// a time: the page drawn from it, or why not.
async fn read_trail(
    c: &Arc<Console>,
    s: &Session,
    search: trail::Search,
    draw: impl FnOnce(&trail::Trail) -> Markup,
) -> Response {
    // The turn goes with the pass, not the request: a browser that gives
    // up (a reload) does not free it while the pass still runs.
    let Ok(turn) = c.reading.clone().try_acquire_owned() else {
        return page(
            StatusCode::SERVICE_UNAVAILABLE,
            pages::message(
                "Busy",
                Some(s),
                "Another page is reading the audit chain just now; try again in a moment.",
                true,
            ),
        );
    };
    let audit = c.gateway.state().audit.clone();
    let read = tokio::task::spawn_blocking(move || {
        let read = trail::read(audit.as_ref(), &search);
        drop(turn);
        read
    })
    .await;
    match read {
        Ok(Ok(t)) => page(StatusCode::OK, draw(&t)),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "the console could not read the audit chain");
            page(
                StatusCode::SERVICE_UNAVAILABLE,
                pages::message(
                    "Unavailable",
                    Some(s),
                    "The audit chain cannot be read just now; try again shortly.",
                    true,
                ),
            )
        }
        Err(e) => {
            tracing::error!(error = %e, "the console's audit read stopped");
            page(
                StatusCode::INTERNAL_SERVER_ERROR,
                pages::message("Failed", Some(s), "Reading the audit chain failed.", true),
            )
        }
    }
}

async fn executions(State(c): State<Arc<Console>>, headers: HeaderMap) -> Response {
    let Some((_, s)) = c.session(&headers) else {
        return see_other("/console/login");
    };
    // The durable executions kept in the state, beside the chain.
    let (store, now) = (c.gateway.state().parked.clone(), c.gateway.now_ms());
    let parked =
        tokio::task::spawn_blocking(move || store.list(None, now, trail::MAX_SHOWN as u32)).await;
    let parked = match parked {
        Ok(Ok(rows)) => Some(rows),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "the console could not read the durable executions");
            None
        }
        Err(_) => None,
    };
    let who = s.clone();
    read_trail(&c, &s, trail::Search::default(), move |t| {
        trail_pages::executions(&who, t, parked.as_deref(), now)
    })
    .await
}

/// An approver ends a durable execution that waits: it never goes on,
/// and its end line says `Cancelled` and who, as `airlock executions
/// cancel` writes it. The approval requests it waited for stay open.
async fn cancel(
    State(c): State<Arc<Console>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let s = match approver_form(&c, &headers, &form, Act::Cancel) {
        Ok(s) => s,
        Err(refused) => return *refused,
    };
    if !plausible_execution(&id) {
        return not_found(&s);
    }
    let state = c.gateway.state();
    let (parked, audit, now) = (
        state.parked.clone(),
        state.audit.clone(),
        c.gateway.now_ms(),
    );
    let by = s.identity.clone();
    let cancelled = tokio::task::spawn_blocking(move || {
        airlock_gateway::parked::cancel(parked.as_ref(), audit.as_ref(), &id, &by, now)
    })
    .await;
    use airlock_gateway::parked::CancelError;
    match cancelled {
        Ok(Ok(gone)) => {
            tracing::info!(execution = %gone.execution, identity = %s.identity, "execution cancelled in the console");
            see_other("/console/executions")
        }
        Ok(Err(e @ CancelError::NotWaiting(_))) => page(
            StatusCode::CONFLICT,
            pages::message("Not cancelled", Some(&s), &e.to_string(), true),
        ),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "the console could not cancel an execution");
            let told = match e {
                CancelError::EndLine { .. } => "The execution is cancelled (it never goes on), but its end line could not be written to the audit just now; `airlock audit close` writes it later.",
                _ => "The store of durable executions cannot be reached just now; nothing was cancelled. Try again shortly.",
            };
            page(
                StatusCode::SERVICE_UNAVAILABLE,
                pages::message("Unavailable", Some(&s), told, true),
            )
        }
        Err(_) => page(
            StatusCode::SERVICE_UNAVAILABLE,
            pages::message(
                "Unavailable",
                Some(&s),
                "The cancel did not finish; look at the executions page again.",
                true,
            ),
        ),
    }
}

/// An execution id as the host makes them (`<process>-x<n>`): short,
/// letters, digits and dashes.
fn plausible_execution(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

async fn audit_trail(
    State(c): State<Arc<Console>>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let Some((_, s)) = c.session(&headers) else {
        return see_other("/console/login");
    };
    let search = match trail::Search::from_query(&query) {
        Ok(search) => search,
        Err(why) => {
            return page(
                StatusCode::BAD_REQUEST,
                pages::message("Bad search", Some(&s), &why, true),
            )
        }
    };
    let (who, shown) = (s.clone(), search.clone());
    read_trail(&c, &s, search, move |t| trail_pages::audit(&who, &shown, t)).await
}

fn unavailable(s: &Session, e: ApprovalError) -> Response {
    tracing::error!(error = %e, "the console could not read the approval store");
    page(
        StatusCode::SERVICE_UNAVAILABLE,
        pages::message(
            "Unavailable",
            Some(s),
            "The approval store cannot be read just now; try again shortly.",
            true,
        ),
    )
}

async fn login_page(State(c): State<Arc<Console>>) -> Response {
    page(StatusCode::OK, c.login_page(None))
}

async fn login(
    State(c): State<Arc<Console>>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    if cross_site(&headers) {
        return page(
            StatusCode::FORBIDDEN,
            c.login_page(Some("Sign in from this page, not from another site.")),
        );
    }
    let key = form.get("key").map(|k| k.trim()).unwrap_or("");
    let identity = match c.keys.sign_in(key, peer.map(|p| (p.0).0), &headers) {
        Ok(identity) => identity,
        Err(LoginRefused::Unknown) => {
            return page(
                StatusCode::UNAUTHORIZED,
                c.login_page(Some("That key is not one this deployment knows.")),
            )
        }
        Err(LoginRefused::AgentKey) => {
            return page(
                StatusCode::UNAUTHORIZED,
                c.login_page(Some(
                    "That is an agent's key, which calls tools and signs no one in here: sign in with your console key (`airlock enroll IDENTITY --console`).",
                )),
            )
        }
        Err(LoginRefused::TooMany { retry_after_secs }) => {
            let mut r = page(
                StatusCode::TOO_MANY_REQUESTS,
                c.login_page(Some(&format!(
                    "Too many failed sign-ins from this address; try again in {retry_after_secs} s."
                ))),
            );
            r.headers_mut()
                .insert(header::RETRY_AFTER, retry_after_secs.into());
            return r;
        }
    };
    let Some(role) = c.config.role_of(&identity) else {
        tracing::warn!(identity = %identity, "a console sign-in by an identity [console] gives no role");
        return page(
            StatusCode::FORBIDDEN,
            c.login_page(Some(
                "This identity has no role in the console: an operator adds it to [console] approvers or auditors.",
            )),
        );
    };
    let now = c.gateway.now_ms();
    let lasts = c.config.session_ms();
    let proof = Proof::Key(airlock_gateway::keys::hash(key));
    let id = match c.sessions.open(&identity, role, &proof, now, now + lasts) {
        Ok(id) => id,
        Err(e) => {
            tracing::error!(error = %e, "the console could not keep a sign-in");
            return page(
                StatusCode::SERVICE_UNAVAILABLE,
                c.login_page(Some(
                    "Signing in is not possible just now; try again shortly.",
                )),
            );
        }
    };
    tracing::info!(identity = %identity, role = role.as_str(), "console sign-in");
    let mut r = see_other("/console");
    if let Ok(v) = HeaderValue::from_str(&sessions::set_cookie(&id, lasts / 1000)) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

async fn logout(
    State(c): State<Arc<Console>>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    if cross_site(&headers) {
        return page(
            StatusCode::FORBIDDEN,
            pages::message(
                "Not allowed",
                None,
                "That form did not come from this console's page.",
                true,
            ),
        );
    }
    if let Some((id, s)) = c.session(&headers) {
        if !s.csrf_matches(form.get("csrf").map_or("", |t| t)) {
            return forbidden(&s, "That form did not come from this console's page.");
        }
        if let Err(e) = c.sessions.close(&id) {
            tracing::error!(error = %e, "the console could not end a sign-in");
        }
    }
    let mut r = see_other("/console/login");
    if let Ok(v) = HeaderValue::from_str(&sessions::clear_cookie()) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

fn forbidden(s: &Session, why: &str) -> Response {
    page(
        StatusCode::FORBIDDEN,
        pages::message("Not allowed", Some(s), why, true),
    )
}

/// Request ids are `ap-` or `pl-` and hex; anything else is not looked up.
fn plausible_id(id: &str) -> bool {
    id.len() <= 64
        && (id.starts_with("ap-") || id.starts_with("pl-"))
        && id[3..].bytes().all(|b| b.is_ascii_hexdigit())
}

/// What `s` may do with `r`: the four-eyes rule the store keeps
/// (`approval::refusal`), asked before the buttons are drawn.
fn offer(c: &Console, s: &Session, r: &Request) -> Offer {
    if s.role != Role::Approver || r.status != Status::Pending {
        return Offer::Nothing;
    }
    if refusal(r, &c.decider(s), Status::Approved).is_some() {
        return Offer::DenyOnly;
    }
    Offer::Both
}

async fn request(
    State(c): State<Arc<Console>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let Some((_, s)) = c.session(&headers) else {
        return see_other("/console/login");
    };
    if !plausible_id(&id) {
        return not_found(&s);
    }
    let now = c.gateway.now_ms();
    match c.gateway.approvals().get(&id) {
        Ok(r) => {
            let offer = offer(&c, &s, &r);
            page(StatusCode::OK, pages::request(&s, &r, offer, now))
        }
        Err(ApprovalError::NotFound(_)) => not_found(&s),
        Err(e) => unavailable(&s, e),
    }
}

fn not_found(s: &Session) -> Response {
    page(
        StatusCode::NOT_FOUND,
        pages::message(
            "No such request",
            Some(s),
            "No request has that id; it may have expired and been removed.",
            true,
        ),
    )
}

/// What an approver's form does, for what a refusal of it says.
enum Act {
    Decide,
    Cancel,
}

/// The signed-in approver who posted `form` from this console's own page
/// (its session's CSRF token, same origin), or the answer refusing it.
fn approver_form(
    c: &Console,
    headers: &HeaderMap,
    form: &HashMap<String, String>,
    act: Act,
) -> Result<Session, Box<Response>> {
    let Some((_, s)) = c.session(headers) else {
        return Err(Box::new(
            (
                StatusCode::UNAUTHORIZED,
                c.login_page(Some("Sign in first.")),
            )
                .into_response(),
        ));
    };
    let (what, again, only) = match act {
        Act::Decide => (
            "decision",
            "open the request again and decide there",
            "Only approvers decide requests.",
        ),
        Act::Cancel => (
            "cancel",
            "open the executions page again and cancel there",
            "Only approvers cancel executions.",
        ),
    };
    if cross_site(headers) || !s.csrf_matches(form.get("csrf").map_or("", |t| t)) {
        tracing::warn!(identity = %s.identity, "a console {what} without this session's CSRF token was refused");
        return Err(Box::new(forbidden(
            &s,
            &format!("That form did not come from this console's page; {again}."),
        )));
    }
    if s.role != Role::Approver {
        return Err(Box::new(forbidden(&s, only)));
    }
    Ok(s)
}

async fn decide(
    State(c): State<Arc<Console>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let s = match approver_form(&c, &headers, &form, Act::Decide) {
        Ok(s) => s,
        Err(refused) => return *refused,
    };
    if !plausible_id(&id) {
        return not_found(&s);
    }
    let to = match form.get("decision").map(String::as_str) {
        Some("approve") => Status::Approved,
        Some("deny") => Status::Denied,
        _ => {
            return page(
                StatusCode::BAD_REQUEST,
                pages::message("Nothing decided", Some(&s), "Choose Approve or Deny.", true),
            )
        }
    };
    let reason = form.get("reason").map_or("", |r| r);
    let decided = c
        .decider(&s)
        .with_reason(reason)
        .and_then(|d| c.gateway.decide(&id, &d, to));
    match decided {
        Ok(r) => {
            tracing::info!(request = %r.id, identity = %s.identity, status = r.status.as_str(), "decided in the console");
            see_other(&format!("/console/requests/{}", r.id))
        }
        Err(e) => {
            let status = match &e {
                ApprovalError::OwnRequest { .. } | ApprovalError::Approver(_) => {
                    StatusCode::FORBIDDEN
                }
                ApprovalError::NotFound(_) => StatusCode::NOT_FOUND,
                ApprovalError::NotPending { .. } | ApprovalError::Expired(_) => {
                    StatusCode::CONFLICT
                }
                ApprovalError::ReasonTooLong { .. } | ApprovalError::ReasonControl(_) => {
                    StatusCode::BAD_REQUEST
                }
                ApprovalError::Storage(_) | ApprovalError::StateDir(_) => {
                    return unavailable(&s, e);
                }
            };
            page(
                status,
                pages::message("Not decided", Some(&s), &e.to_string(), true),
            )
        }
    }
}
