//! An issuer's signing keys: found through its OpenID discovery document,
//! fetched from its `jwks_uri`, kept, and fetched again when a token names
//! a key we do not have (the provider rotated) — at most once per
//! [`REFETCH_COOLDOWN`], one fetch at a time, so tokens with made-up key
//! ids cannot make this server hammer the provider. A failed fetch keeps
//! the keys fetched last.

use std::{
    sync::{Arc, RwLock},
    time::{Duration, Instant},
};

use jsonwebtoken::{
    jwk::{Jwk, KeyAlgorithm, PublicKeyUse},
    Algorithm, DecodingKey,
};
use reqwest::Url;
use serde::Deserialize;
use serde_json::Value;

use super::config::{loopback, Issuer};

/// Bound on one discovery or JWKS request, connect included.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(3);
/// Bound on a discovery document or key set; real ones are a few KiB.
pub const MAX_DOCUMENT_BYTES: usize = 256 * 1024;
/// Keys kept from one set; providers publish a handful.
pub const MAX_KEYS: usize = 64;
/// The least time between two fetches a token's unknown `kid` causes.
pub const REFETCH_COOLDOWN: Duration = Duration::from_secs(30);
/// The least time between tries while the provider cannot be reached.
pub const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(5);
/// Keys older than this are fetched again on next use (a key the
/// provider withdrew stops being accepted within this time).
pub const MAX_KEY_AGE: Duration = Duration::from_secs(3600);
/// Keys that could not be fetched again for this long are dropped: a
/// provider unreachable for a day may have withdrawn them meanwhile.
pub const KEYS_EXPIRE: Duration = Duration::from_secs(24 * 3600);

/// Why no key could be had for a token.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The provider could not be asked (down, slow, refused, answered
    /// nonsense), and no key is known: the token cannot be judged now.
    /// (`reason` goes to the log only: it may quote the provider's
    /// answer, which is not for unauthenticated clients.)
    #[error("the keys of issuer {issuer} cannot be fetched right now; retry shortly")]
    Unavailable { issuer: String, reason: String },
    /// The provider publishes no key by that id (after fetching again,
    /// or too soon after the last fetch to fetch again).
    #[error("issuer {issuer} publishes no signing key {kid}")]
    Unknown { issuer: String, kid: String },
    /// The published key does not fit the token's algorithm.
    #[error("{0}")]
    Unusable(String),
}

struct Fetched {
    keys: Vec<Jwk>,
    at: Instant,
}

/// One issuer's keys.
pub struct IssuerKeys {
    issuer: String,
    discovery: String,
    /// Whether the issuer itself is plain HTTP on loopback (then, and
    /// only then, its `jwks_uri` may be too).
    loopback_http: bool,
    http: reqwest::Client,
    /// The keys fetched last; read without waiting.
    current: RwLock<Option<Arc<Fetched>>>,
    /// Held while fetching (one fetch at a time); remembers the
    /// `jwks_uri` and when a fetch was last tried.
    fetching: tokio::sync::Mutex<FetchState>,
}

#[derive(Default)]
struct FetchState {
    jwks_uri: Option<Url>,
    /// The last fetch of any kind.
    tried: Option<Instant>,
    /// The last fetch a token's unknown `kid` caused.
    for_unknown_kid: Option<Instant>,
    last_error: Option<String>,
}

impl FetchState {
    /// Whether fetching again now would be too soon: within
    /// [`RETRY_AFTER_FAILURE`] of a failed fetch, or (`for_kid`) within
    /// [`REFETCH_COOLDOWN`] of the last fetch an unknown `kid` caused.
    fn too_soon(&self, now: Instant, for_kid: bool) -> bool {
        let within = |at: Option<Instant>, wait| at.is_some_and(|t| now.duration_since(t) < wait);
        if self.last_error.is_some() {
            return within(self.tried, RETRY_AFTER_FAILURE);
        }
        for_kid && within(self.for_unknown_kid, REFETCH_COOLDOWN)
    }
}

impl IssuerKeys {
    pub fn new(issuer: &Issuer) -> Result<Self, String> {
        let tls = outbound_tls(issuer.ca_file.as_deref())
            .map_err(|e| format!("issuer {}: {e}", issuer.issuer))?;
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(FETCH_TIMEOUT)
            .timeout(FETCH_TIMEOUT)
            .build()
            .map_err(|e| format!("issuer {}: HTTP client: {e}", issuer.issuer))?;
        Ok(Self {
            discovery: format!(
                "{}/.well-known/openid-configuration",
                issuer.issuer.trim_end_matches('/')
            ),
            loopback_http: Url::parse(&issuer.issuer)
                .is_ok_and(|u| u.scheme() == "http" && loopback(&u)),
            issuer: issuer.issuer.clone(),
            http,
            current: RwLock::new(None),
            fetching: tokio::sync::Mutex::new(FetchState::default()),
        })
    }

    /// Fetches the keys now (at start: a provider that is down is logged,
    /// not fatal; tokens wait for it, bearer keys work meanwhile).
    pub async fn warm(&self) -> Result<usize, String> {
        let mut state = self.fetching.lock().await;
        self.fetch(&mut state).await
    }

    /// The key to check a token signed with `alg` by key `kid` (or, with
    /// no `kid`, by the issuer's only key that fits `alg`).
    pub async fn key_for(
        &self,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> Result<DecodingKey, KeyError> {
        let now = Instant::now();
        let held = self.current();
        if let Some(f) = &held {
            if let Some(jwk) = pick(&f.keys, kid, alg)? {
                if now.duration_since(f.at) > MAX_KEY_AGE {
                    self.refresh_stale().await;
                    return self.key_in_current(kid, alg, || "no keys fetched yet".into());
                }
                return decoding_key(jwk, alg);
            }
        }
        // Not known: fetch again, unless a fetch was tried too recently.
        let mut state = self.fetching.lock().await;
        let fresher = self.current();
        let changed = match (&held, &fresher) {
            (Some(a), Some(b)) => !Arc::ptr_eq(a, b),
            (None, Some(_)) => true,
            _ => false,
        };
        if !changed && !state.too_soon(now, true) {
            state.for_unknown_kid = Some(now);
            // A failure is recorded in `state`; the answer below says it.
            let _ = self.fetch(&mut state).await;
        }
        self.key_in_current(kid, alg, || {
            state
                .last_error
                .clone()
                .unwrap_or_else(|| "no keys fetched yet".into())
        })
    }

    /// The key among those held now, after any fetch: unknown if they
    /// lack it, unavailable (`why`, for the log) if none are held.
    fn key_in_current(
        &self,
        kid: Option<&str>,
        alg: Algorithm,
        why: impl FnOnce() -> String,
    ) -> Result<DecodingKey, KeyError> {
        let f = self.current().ok_or_else(|| KeyError::Unavailable {
            issuer: self.issuer.clone(),
            reason: why(),
        })?;
        match pick(&f.keys, kid, alg)? {
            Some(jwk) => decoding_key(jwk, alg),
            None => Err(KeyError::Unknown {
                issuer: self.issuer.clone(),
                kid: kid.unwrap_or("(none given)").chars().take(64).collect(),
            }),
        }
    }

    /// Old keys: fetch again unless another request is already doing so
    /// or one was tried recently; on failure the old keys stay.
    async fn refresh_stale(&self) {
        let Ok(mut state) = self.fetching.try_lock() else {
            return;
        };
        if !state.too_soon(Instant::now(), false) {
            let _ = self.fetch(&mut state).await;
        }
    }

    /// The keys fetched last, unless they have [`KEYS_EXPIRE`]d.
    fn current(&self) -> Option<Arc<Fetched>> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .filter(|f| f.at.elapsed() < KEYS_EXPIRE)
    }

    async fn fetch(&self, state: &mut FetchState) -> Result<usize, String> {
        state.tried = Some(Instant::now());
        let result = self.fetch_keys(state).await;
        match &result {
            Ok(keys) => {
                let n = keys.len();
                *self.current.write().unwrap_or_else(|p| p.into_inner()) =
                    Some(Arc::new(Fetched {
                        keys: keys.clone(),
                        at: Instant::now(),
                    }));
                state.last_error = None;
                tracing::info!(issuer = %self.issuer, keys = n, "fetched the issuer's signing keys");
            }
            Err(e) => {
                tracing::warn!(issuer = %self.issuer, error = %e, "cannot fetch the issuer's signing keys; keeping the ones fetched before, if any");
                state.last_error = Some(e.clone());
            }
        }
        result.map(|k| k.len())
    }

    async fn fetch_keys(&self, state: &mut FetchState) -> Result<Vec<Jwk>, String> {
        let uri = match &state.jwks_uri {
            Some(u) => u.clone(),
            None => {
                let u = self.discover().await?;
                state.jwks_uri = Some(u.clone());
                u
            }
        };
        let set: JwkSetDoc = self.get_json(uri.as_str(), "key set").await?;
        let keys: Vec<Jwk> = set
            .keys
            .into_iter()
            // A key this library cannot read (another key type) is not
            // fatal: the others still serve.
            .filter_map(|k| serde_json::from_value::<Jwk>(k).ok())
            .filter(|k| k.common.public_key_use != Some(PublicKeyUse::Encryption))
            .take(MAX_KEYS)
            .collect();
        if keys.is_empty() {
            return Err("the key set holds no signing key this server can use".into());
        }
        Ok(keys)
    }

    async fn discover(&self) -> Result<Url, String> {
        let doc: Discovery = self.get_json(&self.discovery, "discovery document").await?;
        if doc.issuer != self.issuer {
            return Err(format!(
                "the discovery document names issuer `{}`, not the configured `{}` (check [[oauth.issuers]] issuer: it must match exactly)",
                truncated(&doc.issuer),
                self.issuer
            ));
        }
        let uri = Url::parse(&doc.jwks_uri)
            .map_err(|e| format!("the discovery document's jwks_uri is not a URL ({e})"))?;
        match uri.scheme() {
            "https" => {}
            "http" if self.loopback_http && loopback(&uri) => {}
            _ => return Err("the discovery document's jwks_uri is not https://".into()),
        }
        Ok(uri)
    }

    async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        url: &str,
        what: &str,
    ) -> Result<T, String> {
        let request = self
            .http
            .get(url)
            .header(reqwest::header::ACCEPT, "application/json");
        self.json(request, what).await
    }

    /// Sends `request` (within [`FETCH_TIMEOUT`], no redirects) and reads
    /// a JSON answer of at most [`MAX_DOCUMENT_BYTES`]; a status other
    /// than 200 is an error naming only the status (the body may quote
    /// what we sent).
    async fn json<T: serde::de::DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
        what: &str,
    ) -> Result<T, String> {
        let mut response = request
            .send()
            .await
            .map_err(|e| format!("{what}: {}", describe(&e)))?;
        if response.status() != reqwest::StatusCode::OK {
            return Err(format!(
                "{what}: the provider answered {}",
                response.status()
            ));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| format!("{what}: {}", describe(&e)))?
        {
            if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
                return Err(format!(
                    "{what}: larger than {} KiB",
                    MAX_DOCUMENT_BYTES / 1024
                ));
            }
            body.extend_from_slice(&chunk);
        }
        serde_json::from_slice(&body).map_err(|e| format!("{what}: not the expected JSON ({e})"))
    }

    /// The provider's authorization and token endpoints, from its
    /// discovery document (checked as the key set's address is: the
    /// issuer must match, and each must be https://, or plain HTTP on
    /// loopback for a loopback issuer).
    pub(crate) async fn sign_in_endpoints(&self) -> Result<(Url, Url), String> {
        let doc: Discovery = self.get_json(&self.discovery, "discovery document").await?;
        if doc.issuer != self.issuer {
            return Err(format!(
                "the discovery document names issuer `{}`, not the configured `{}`",
                truncated(&doc.issuer),
                self.issuer
            ));
        }
        let endpoint = |value: Option<String>, name: &str| -> Result<Url, String> {
            let value = value.ok_or_else(|| format!("the discovery document has no {name}"))?;
            let url = Url::parse(&value)
                .map_err(|e| format!("the discovery document's {name} is not a URL ({e})"))?;
            match url.scheme() {
                "https" => Ok(url),
                "http" if self.loopback_http && loopback(&url) => Ok(url),
                _ => Err(format!("the discovery document's {name} is not https://")),
            }
        };
        Ok((
            endpoint(doc.authorization_endpoint, "authorization_endpoint")?,
            endpoint(doc.token_endpoint, "token_endpoint")?,
        ))
    }

    /// POSTs `form` (already encoded) to `url` with HTTP basic client
    /// authentication and reads the JSON answer, bounded as every fetch.
    pub(crate) async fn post_form<T: serde::de::DeserializeOwned>(
        &self,
        url: &Url,
        form: String,
        basic: &str,
        what: &str,
    ) -> Result<T, String> {
        let request = self
            .http
            .post(url.clone())
            .header(reqwest::header::ACCEPT, "application/json")
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .header(reqwest::header::AUTHORIZATION, basic)
            .body(form);
        self.json(request, what).await
    }
}

#[derive(Deserialize)]
struct Discovery {
    issuer: String,
    jwks_uri: String,
    #[serde(default)]
    authorization_endpoint: Option<String>,
    #[serde(default)]
    token_endpoint: Option<String>,
}

#[derive(Deserialize)]
struct JwkSetDoc {
    keys: Vec<Value>,
}

/// The key `kid` names, or with no `kid` the only key that fits `alg`;
/// `None` when there is none (fetching again may help).
fn pick<'a>(
    keys: &'a [Jwk],
    kid: Option<&str>,
    alg: Algorithm,
) -> Result<Option<&'a Jwk>, KeyError> {
    match kid {
        Some(kid) => {
            let named = |k: &&Jwk| k.common.key_id.as_deref() == Some(kid);
            // Two keys may share a kid across key types: the one that fits.
            Ok(keys
                .iter()
                .filter(named)
                .find(|k| fits(k, alg))
                .or_else(|| keys.iter().find(named)))
        }
        None => {
            let fits: Vec<&Jwk> = keys.iter().filter(|k| fits(k, alg)).collect();
            match fits.len() {
                0 => Ok(None),
                1 => Ok(Some(fits[0])),
                n => Err(KeyError::Unusable(format!(
                    "the token names no key (kid) and the issuer publishes {n} keys for {alg:?}; the provider must set kid"
                ))),
            }
        }
    }
}

/// Whether the key's type (and its declared algorithm, if any) can
/// verify `alg`.
fn fits(jwk: &Jwk, alg: Algorithm) -> bool {
    let declared_ok = match jwk.common.key_algorithm {
        Some(declared) => key_algorithm(alg) == Some(declared),
        None => true,
    };
    declared_ok
        && DecodingKey::from_jwk(jwk)
            .map(|k| k.family() == alg.family())
            .unwrap_or(false)
}

fn decoding_key(jwk: &Jwk, alg: Algorithm) -> Result<DecodingKey, KeyError> {
    if !fits(jwk, alg) {
        return Err(KeyError::Unusable(format!(
            "the key the token names does not verify {alg:?} signatures"
        )));
    }
    DecodingKey::from_jwk(jwk)
        .map_err(|e| KeyError::Unusable(format!("the published key is unreadable ({e})")))
}

fn key_algorithm(alg: Algorithm) -> Option<KeyAlgorithm> {
    Some(match alg {
        Algorithm::RS256 => KeyAlgorithm::RS256,
        Algorithm::RS384 => KeyAlgorithm::RS384,
        Algorithm::RS512 => KeyAlgorithm::RS512,
        Algorithm::PS256 => KeyAlgorithm::PS256,
        Algorithm::PS384 => KeyAlgorithm::PS384,
        Algorithm::PS512 => KeyAlgorithm::PS512,
        Algorithm::ES256 => KeyAlgorithm::ES256,
        Algorithm::ES384 => KeyAlgorithm::ES384,
        Algorithm::EdDSA => KeyAlgorithm::EdDSA,
        _ => return None,
    })
}

/// TLS for a request to a service on the network (an issuer, a webhook):
/// the CA certificates in `ca_file` (PEM) when given, else the system's
/// trust store.
pub fn outbound_tls(ca_file: Option<&std::path::Path>) -> Result<rustls::ClientConfig, String> {
    match ca_file {
        Some(path) => airlock_edge::tls::client_config(&airlock_edge::tls::Trust::CaBundle(
            path.to_path_buf(),
        ))
        .map_err(|e| format!("ca_file: {e}")),
        None => system_trust(),
    }
}

/// The system's trust store, for an issuer on the public internet or a
/// CA the machine already trusts.
fn system_trust() -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    let found = rustls_native_certs::load_native_certs();
    for cert in found.certs {
        let _ = roots.add(cert);
    }
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())
        .map(|b| b.with_root_certificates(roots).with_no_client_auth())
}

fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        format!("no answer within {} s", FETCH_TIMEOUT.as_secs())
    } else if e.is_connect() {
        "cannot connect".into()
    } else {
        e.to_string()
    }
}

fn truncated(s: &str) -> String {
    s.chars().take(200).collect()
}
