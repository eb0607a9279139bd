//! Signing a person in through the deployment's OpenID provider: the
//! authorization code grant with PKCE (RFC 7636), Airlock as a
//! confidential client (it authenticates to the token endpoint with its
//! secret), and the person named by their ID token.
//!
//! [`SignIn::begin`] makes the provider's address to send the browser to
//! and a [`Pending`] sign-in (state, nonce and PKCE verifier, all random)
//! for the caller to keep until the browser returns, in a cookie, so any
//! replica can finish it. [`SignIn::finish`] checks the returned `state`
//! against it, trades the code for tokens (the verifier and the client's
//! secret both go with it), and accepts the ID token only when its
//! signature verifies against the issuer's published keys with an
//! allowed algorithm, its `iss` is the issuer, its `aud` names this
//! client (and `azp` does, when present), it has not expired, and its
//! `nonce` is the pending one. The identity is `PREFIX:CLAIM`, as an
//! access token from the same issuer names it for the MCP endpoint, so a
//! person is the same identity in the console as in their agent's calls.

use std::{path::PathBuf, sync::RwLock, time::Duration};

use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use jsonwebtoken::{errors::ErrorKind, Algorithm, Validation};
use reqwest::Url;
use serde::Deserialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::{
    config::{loopback, Issuer},
    jwks::{IssuerKeys, RETRY_AFTER_FAILURE},
    token::{identity, TokenError, MAX_TOKEN_BYTES},
};

/// Where the provider sends the browser back to, under `/console`.
pub const CALLBACK_PATH: &str = "/console/oidc/callback";
/// The most token exchanges in flight at once: each may wait for the
/// provider for seconds, and anyone can start one with a code of their
/// own making.
pub const MAX_EXCHANGES: usize = 16;
/// Groups kept from an ID token; more are ignored.
pub const MAX_GROUPS: usize = 256;

/// How the console signs people in with the provider, checked. Its
/// `Debug` leaves the client secret out.
#[derive(Clone)]
pub struct SignInSettings {
    /// Exactly as the provider writes it in `iss`.
    pub issuer: String,
    pub client_id: String,
    pub client_secret: String,
    /// This console's callback as browsers reach it (through any proxy),
    /// ending in [`CALLBACK_PATH`]; registered with the provider.
    pub redirect_uri: String,
    /// The claim naming the person (`sub` by default; `email` only when
    /// `email_verified` is true).
    pub identity_claim: String,
    /// `PREFIX:` included.
    pub identity_prefix: String,
    pub groups_claim: String,
    pub algorithms: Vec<Algorithm>,
    /// Scopes asked for besides `openid`.
    pub scopes: Vec<String>,
    pub leeway_secs: u64,
    pub ca_file: Option<PathBuf>,
}

impl std::fmt::Debug for SignInSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignInSettings")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("client_secret", &"[redacted]")
            .field("redirect_uri", &self.redirect_uri)
            .field("identity_claim", &self.identity_claim)
            .field("identity_prefix", &self.identity_prefix)
            .finish_non_exhaustive()
    }
}

/// Who the provider says signed in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Person {
    /// `PREFIX:VALUE`.
    pub identity: String,
    pub groups: Vec<String>,
}

/// A sign-in sent to the provider and not yet back: kept by the browser
/// (in an HttpOnly cookie) until it returns. Its `Debug` shows nothing of
/// it.
#[derive(Clone, PartialEq, Eq)]
pub struct Pending {
    state: String,
    nonce: String,
    verifier: String,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pending([redacted])")
    }
}

impl Pending {
    fn new() -> Self {
        Self {
            state: random(),
            nonce: random(),
            verifier: random(),
        }
    }

    /// The cookie's value: three random hex strings.
    pub fn to_cookie(&self) -> String {
        format!("{}.{}.{}", self.state, self.nonce, self.verifier)
    }

    /// A pending sign-in read back from its cookie; `None` for anything
    /// that is not three 64-digit hex strings.
    pub fn from_cookie(value: &str) -> Option<Self> {
        let mut parts = value.split('.');
        let (state, nonce, verifier) = (parts.next()?, parts.next()?, parts.next()?);
        let ok = |p: &str| p.len() == 64 && p.bytes().all(|b| b.is_ascii_hexdigit());
        if parts.next().is_some() || !ok(state) || !ok(nonce) || !ok(verifier) {
            return None;
        }
        Some(Self {
            state: state.into(),
            nonce: nonce.into(),
            verifier: verifier.into(),
        })
    }

    fn state_is(&self, state: &str) -> bool {
        self.state.len() == state.len() && bool::from(self.state.as_bytes().ct_eq(state.as_bytes()))
    }
}

/// Why a sign-in did not happen. The texts are for the person signing
/// in: none quotes the provider's answer or a token.
#[derive(Debug, thiserror::Error)]
pub enum SignInError {
    /// The provider could not be asked (down, slow, answered nonsense).
    #[error("the sign-in provider cannot be reached just now; try again shortly")]
    Unavailable(String),
    /// The browser came back without the sign-in this console started
    /// (another tab, an old link, or a forged one).
    #[error("this sign-in was not started from this browser, or took longer than 10 minutes; start again")]
    NotStarted,
    /// The provider sent the browser back with an error (the person
    /// cancelled, or the provider refused).
    #[error("the sign-in provider did not sign you in ({0}); start again")]
    Provider(String),
    /// The provider would not trade the code for tokens.
    #[error("the sign-in provider refused to finish the sign-in; start again")]
    Exchange(String),
    /// The ID token failed a check.
    #[error(
        "the sign-in provider's answer failed a check ({0}); an operator can find it in the log"
    )]
    IdToken(String),
    /// Too many sign-ins are being finished at once.
    #[error("too many sign-ins at once; try again in a moment")]
    Busy,
}

/// Signing people in with one provider.
pub struct SignIn {
    settings: SignInSettings,
    keys: IssuerKeys,
    basic: String,
    endpoints: RwLock<Option<(Url, Url)>>,
    /// When discovery last failed: tried again only after
    /// [`RETRY_AFTER_FAILURE`], so a provider that is down is not asked
    /// once per visitor.
    failed_at: RwLock<Option<std::time::Instant>>,
    exchanges: tokio::sync::Semaphore,
}

impl SignIn {
    /// Checks the settings (issuer and redirect URI over https, or plain
    /// HTTP on loopback; the redirect URI ending in [`CALLBACK_PATH`]; no
    /// HMAC or `none` algorithm).
    pub fn new(settings: SignInSettings) -> Result<Self, String> {
        let issuer = Url::parse(&settings.issuer)
            .map_err(|e| format!("issuer `{}` is not a URL ({e})", settings.issuer))?;
        if !(issuer.scheme() == "https" || issuer.scheme() == "http" && loopback(&issuer)) {
            return Err(format!(
                "issuer `{}` must be https:// (plain http only on loopback, for tests)",
                settings.issuer
            ));
        }
        let redirect = Url::parse(&settings.redirect_uri).map_err(|e| {
            format!(
                "redirect_uri `{}` is not a URL ({e})",
                settings.redirect_uri
            )
        })?;
        if !(redirect.scheme() == "https" || redirect.scheme() == "http" && loopback(&redirect)) {
            return Err(format!(
                "redirect_uri `{}` must be https:// (plain http only on loopback): the browser carries the sign-in's code to it",
                settings.redirect_uri
            ));
        }
        if redirect.path() != CALLBACK_PATH || redirect.query().is_some() {
            return Err(format!(
                "redirect_uri `{}` must be this console's callback, https://HOST{CALLBACK_PATH}, as browsers reach it",
                settings.redirect_uri
            ));
        }
        if settings.client_id.is_empty() || settings.client_secret.is_empty() {
            return Err("client_id and the client secret must not be empty".into());
        }
        if let Some(bad) = settings
            .algorithms
            .iter()
            .find(|a| matches!(a, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512))
        {
            return Err(format!(
                "algorithm {bad:?} is a shared-secret one; ID tokens are checked with the provider's public keys (RS256, ES256, ...)"
            ));
        }
        let keys = IssuerKeys::new(&Issuer {
            issuer: settings.issuer.clone(),
            audience: settings.client_id.clone(),
            algorithms: settings.algorithms.clone(),
            identity_claim: settings.identity_claim.clone(),
            identity_prefix: settings.identity_prefix.clone(),
            default_mode: None,
            groups_claim: settings.groups_claim.clone(),
            groups: Default::default(),
            approve_own: false,
            approve_own_groups: Vec::new(),
            require_typ: false,
            ca_file: settings.ca_file.clone(),
        })?;
        // RFC 6749 2.3.1: both parts form-encoded before base64.
        let enc = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
        let basic = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!(
                "{}:{}",
                enc(&settings.client_id),
                enc(&settings.client_secret)
            ))
        );
        Ok(Self {
            settings,
            keys,
            basic,
            endpoints: RwLock::new(None),
            failed_at: RwLock::new(None),
            exchanges: tokio::sync::Semaphore::new(MAX_EXCHANGES),
        })
    }

    pub fn issuer(&self) -> &str {
        &self.settings.issuer
    }

    /// The provider's endpoints, discovered once.
    async fn endpoints(&self) -> Result<(Url, Url), SignInError> {
        if let Some(e) = self
            .endpoints
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            return Ok(e);
        }
        let failed = *self.failed_at.read().unwrap_or_else(|p| p.into_inner());
        if failed.is_some_and(|at| at.elapsed() < RETRY_AFTER_FAILURE) {
            return Err(SignInError::Unavailable(
                "the discovery document could not be fetched a moment ago".into(),
            ));
        }
        let found = match self.keys.sign_in_endpoints().await {
            Ok(found) => found,
            Err(e) => {
                *self.failed_at.write().unwrap_or_else(|p| p.into_inner()) =
                    Some(std::time::Instant::now());
                return Err(SignInError::Unavailable(e));
            }
        };
        *self.endpoints.write().unwrap_or_else(|p| p.into_inner()) = Some(found.clone());
        Ok(found)
    }

    /// Where to send the browser, and what to keep until it returns.
    pub async fn begin(&self) -> Result<(String, Pending), SignInError> {
        let (authorize, _) = self.endpoints().await?;
        let pending = Pending::new();
        let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(pending.verifier.as_bytes()));
        let mut scope = vec!["openid".to_string()];
        scope.extend(
            self.settings
                .scopes
                .iter()
                .filter(|s| *s != "openid")
                .cloned(),
        );
        let mut url = authorize;
        url.query_pairs_mut()
            .append_pair("response_type", "code")
            .append_pair("client_id", &self.settings.client_id)
            .append_pair("redirect_uri", &self.settings.redirect_uri)
            .append_pair("scope", &scope.join(" "))
            .append_pair("state", &pending.state)
            .append_pair("nonce", &pending.nonce)
            .append_pair("code_challenge", &challenge)
            .append_pair("code_challenge_method", "S256");
        Ok((url.into(), pending))
    }

    /// The person the provider signed in, from the browser's return
    /// (`state` and `code`, or `error`) and the pending sign-in it kept.
    pub async fn finish(
        &self,
        pending: Option<&Pending>,
        state: Option<&str>,
        code: Option<&str>,
        error: Option<&str>,
    ) -> Result<Person, SignInError> {
        let pending = match (pending, state) {
            (Some(p), Some(s)) if p.state_is(s) => p,
            _ => return Err(SignInError::NotStarted),
        };
        if let Some(error) = error {
            // The provider's error code only, and only if it looks like one.
            let code: String = error
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
                .take(40)
                .collect();
            return Err(SignInError::Provider(code));
        }
        let code = code
            .filter(|c| !c.is_empty() && c.len() <= 2048)
            .ok_or_else(|| SignInError::Provider("no code".into()))?;
        let _slot = self
            .exchanges
            .try_acquire()
            .map_err(|_| SignInError::Busy)?;
        let (_, token_endpoint) = self.endpoints().await?;
        let form = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("grant_type", "authorization_code")
            .append_pair("code", code)
            .append_pair("redirect_uri", &self.settings.redirect_uri)
            .append_pair("code_verifier", &pending.verifier)
            .finish();
        let answer: TokenAnswer = tokio::time::timeout(
            Duration::from_secs(10),
            self.keys
                .post_form(&token_endpoint, form, &self.basic, "token endpoint"),
        )
        .await
        .map_err(|_| SignInError::Exchange("no answer within 10 s".into()))?
        .map_err(SignInError::Exchange)?;
        let id_token = answer
            .id_token
            .ok_or_else(|| SignInError::IdToken("no ID token".into()))?;
        self.person(&id_token, &pending.nonce).await
    }

    /// The person an ID token names, if it passes every check.
    async fn person(&self, id_token: &str, nonce: &str) -> Result<Person, SignInError> {
        let bad = |why: &str| SignInError::IdToken(why.to_string());
        if id_token.len() > MAX_TOKEN_BYTES {
            return Err(bad("too long"));
        }
        let header = jsonwebtoken::decode_header(id_token).map_err(|_| bad("unreadable header"))?;
        if !self.settings.algorithms.contains(&header.alg) {
            return Err(SignInError::IdToken(format!(
                "signed with {:?}, not an allowed algorithm",
                header.alg
            )));
        }
        let key = self
            .keys
            .key_for(header.kid.as_deref(), header.alg)
            .await
            .map_err(|e| SignInError::IdToken(e.to_string()))?;
        let mut validation = Validation::new(header.alg);
        validation.algorithms = vec![header.alg];
        validation.set_issuer(&[&self.settings.issuer]);
        validation.set_audience(&[&self.settings.client_id]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.validate_nbf = true;
        validation.leeway = self.settings.leeway_secs;
        let claims = jsonwebtoken::decode::<Map<String, Value>>(id_token, &key, &validation)
            .map_err(|e| {
                bad(match e.kind() {
                    ErrorKind::InvalidSignature => "bad signature",
                    ErrorKind::ExpiredSignature => "expired",
                    ErrorKind::ImmatureSignature => "not yet valid",
                    ErrorKind::InvalidAudience => "not for this client",
                    ErrorKind::InvalidIssuer => "another issuer",
                    ErrorKind::MissingRequiredClaim(_) => "a required claim is missing",
                    _ => "unreadable claims",
                })
            })?
            .claims;
        let nonce_ok = claims
            .get("nonce")
            .and_then(Value::as_str)
            .is_some_and(|n| {
                n.len() == nonce.len() && bool::from(n.as_bytes().ct_eq(nonce.as_bytes()))
            });
        if !nonce_ok {
            return Err(bad("not this sign-in's nonce"));
        }
        // OpenID Connect Core 3.1.3.7: a token for several audiences must
        // name this client as the one it was issued to.
        let audiences = match claims.get("aud") {
            Some(Value::Array(a)) => a.len(),
            _ => 1,
        };
        match claims.get("azp") {
            Some(azp) if azp.as_str() != Some(self.settings.client_id.as_str()) => {
                return Err(bad("authorized for another client (azp)"));
            }
            None if audiences > 1 => {
                return Err(bad(
                    "for several audiences without naming this client (azp)",
                ));
            }
            _ => {}
        }
        let name = identity(&claims, &self.settings.identity_claim).map_err(|e| match e {
            TokenError::EmailNotVerified => bad("the email is not verified"),
            _ => bad("no usable identity claim"),
        })?;
        let groups = match claims.get(&self.settings.groups_claim) {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(Value::as_str)
                .take(MAX_GROUPS)
                .map(str::to_string)
                .collect(),
            Some(Value::String(s)) => s
                .split_whitespace()
                .take(MAX_GROUPS)
                .map(str::to_string)
                .collect(),
            _ => Vec::new(),
        };
        Ok(Person {
            identity: format!("{}{name}", self.settings.identity_prefix),
            groups,
        })
    }
}

#[derive(Deserialize)]
struct TokenAnswer {
    id_token: Option<String>,
}

/// 32 random bytes as hex.
fn random() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the system has randomness");
    hex::encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> SignInSettings {
        SignInSettings {
            issuer: "https://idp.example.test".into(),
            client_id: "airlock-console".into(),
            client_secret: "s3cret".into(),
            redirect_uri: "https://airlock.example.test/console/oidc/callback".into(),
            identity_claim: "sub".into(),
            identity_prefix: "sso:".into(),
            groups_claim: "groups".into(),
            algorithms: vec![Algorithm::ES256],
            scopes: vec!["email".into()],
            leeway_secs: 30,
            ca_file: None,
        }
    }

    #[test]
    fn debug_shows_no_secret() {
        let s = format!("{:?} {:?}", settings(), Pending::new());
        assert!(!s.contains("s3cret") && s.contains("[redacted]"), "{s}");
    }

    #[test]
    fn a_pending_sign_in_survives_its_cookie_and_nothing_else_does() {
        let p = Pending::new();
        assert_eq!(Pending::from_cookie(&p.to_cookie()), Some(p.clone()));
        assert!(p.state_is(&p.state));
        assert!(!p.state_is(&random()));
        for bad in [
            "",
            "a.b.c",
            &format!("{}.{}", p.state, p.nonce),
            &format!("{}.x", p.to_cookie()),
        ] {
            assert_eq!(Pending::from_cookie(bad), None, "{bad}");
        }
    }

    #[test]
    fn settings_that_would_leak_a_code_or_trust_too_much_are_refused() {
        SignIn::new(settings()).unwrap();
        let cases: Vec<(SignInSettings, &str)> = vec![
            (
                SignInSettings {
                    issuer: "http://idp.example.test".into(),
                    ..settings()
                },
                "must be https",
            ),
            (
                SignInSettings {
                    redirect_uri: "http://airlock.example.test/console/oidc/callback".into(),
                    ..settings()
                },
                "must be https",
            ),
            (
                SignInSettings {
                    redirect_uri: "https://airlock.example.test/elsewhere".into(),
                    ..settings()
                },
                "callback",
            ),
            (
                SignInSettings {
                    algorithms: vec![Algorithm::HS256],
                    ..settings()
                },
                "shared-secret",
            ),
            (
                SignInSettings {
                    client_secret: String::new(),
                    ..settings()
                },
                "must not be empty",
            ),
        ];
        for (s, needle) in cases {
            let e = SignIn::new(s).err().expect("refused");
            assert!(e.contains(needle), "{e}");
        }
    }

    #[tokio::test]
    async fn the_browser_must_bring_back_the_state_it_was_sent_with() {
        let s = SignIn::new(settings()).unwrap();
        let p = Pending::new();
        let other = random();
        for (pending, state) in [
            (None, Some(p.state.as_str())),
            (Some(&p), None),
            (Some(&p), Some(other.as_str())),
        ] {
            let e = s
                .finish(pending, state, Some("code"), None)
                .await
                .unwrap_err();
            assert!(matches!(e, SignInError::NotStarted), "{e:?}");
        }
        let e = s
            .finish(
                Some(&p),
                Some(&p.state),
                None,
                Some("access_denied<script>"),
            )
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "the sign-in provider did not sign you in (access_deniedscript); start again"
        );
    }
}
