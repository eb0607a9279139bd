//! The HTTP client for one Proxmox VE cluster: API-token auth, verified
//! TLS, no redirects, no proxies from the environment, timeouts, retries
//! for reads only, parameters encoded the way PVE expects, and PVE's
//! errors turned into messages an agent can act on.

use std::{path::Path, time::Duration};

use reqwest::{header::HeaderValue, StatusCode};
use serde_json::Value;

use crate::{
    apidata::Method,
    body::{read_capped, BodyCap, BodyError, DEFAULT_MAX_RESPONSE_BYTES},
    transport,
};
use airlock_edge::json_budget::{self, ParseError};
use airlock_edge::tls::{client_config, Trust};

/// Longest text taken from a PVE error answer (reason phrase, `message`,
/// one parameter's complaint); the cluster decides its length, so it is cut.
const MAX_ERROR_TEXT: usize = 300;
/// Most parameter complaints listed from one 400 answer.
const MAX_PARAMETER_ERRORS: usize = 20;

/// `USER@REALM!TOKENID=SECRET`. Its `Debug` shows only the token id.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiToken {
    id: String,
    secret: String,
}

impl std::fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiToken({}=***)", self.id)
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    #[error("an API token looks like USER@REALM!TOKENID=SECRET (the secret is not shown)")]
    Malformed,
    #[error("token file: {0}")]
    File(#[from] airlock_edge::credential_file::CredentialFileError),
}

impl ApiToken {
    pub fn parse(text: &str) -> Result<Self, TokenError> {
        let text = text.trim();
        let text = text.strip_prefix("PVEAPIToken=").unwrap_or(text);
        let (id, secret) = text.split_once('=').ok_or(TokenError::Malformed)?;
        let valid_id =
            id.contains('@') && id.contains('!') && id.chars().all(|c| c.is_ascii_graphic());
        let valid_secret = !secret.is_empty()
            && secret
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-');
        if !valid_id || !valid_secret {
            return Err(TokenError::Malformed);
        }
        Ok(Self {
            id: id.into(),
            secret: secret.into(),
        })
    }

    /// Reads a token file (one line, `USER@REALM!TOKENID=SECRET`).
    pub fn from_file(path: &Path) -> Result<Self, TokenError> {
        let text = airlock_edge::credential_file::read(path)?;
        Self::parse(&text)
    }

    /// `USER@REALM!TOKENID`, safe to show.
    pub fn id(&self) -> &str {
        &self.id
    }

    fn header(&self) -> HeaderValue {
        let mut v = HeaderValue::from_str(&format!("PVEAPIToken={}={}", self.id, self.secret))
            .expect("validated ASCII");
        v.set_sensitive(true);
        v
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timeouts {
    pub connect: Duration,
    pub request: Duration,
    /// Extra attempts for a GET after a connection failure, timeout or
    /// 502/503/504. Writes are never retried: they may have happened.
    pub get_retries: u32,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(5),
            request: Duration::from_secs(30),
            get_retries: 2,
        }
    }
}

/// One request: path already filled in (segments percent-encoded).
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub method: Method,
    pub path: String,
    pub params: Vec<(String, String)>,
}

/// What went wrong, in terms an agent can act on. Messages never contain
/// the token or the cluster's address.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PveError {
    #[error("the API token was rejected (401): check the token file")]
    Unauthorized,
    #[error("permission denied (403): {0}")]
    Forbidden(String),
    #[error("Proxmox rejected the parameters: {0}")]
    BadParameters(String),
    #[error("Proxmox error ({status}): {message}")]
    Server { status: u16, message: String },
    #[error("the node behind the Proxmox proxy did not answer (595/596): {0}")]
    NodeUnreachable(String),
    #[error("Proxmox did not answer within {0} s")]
    Timeout(u64),
    #[error("cannot connect to the cluster: {0}")]
    Connect(String),
    #[error("unexpected answer from Proxmox: {0}")]
    Protocol(String),
    #[error("the answer from Proxmox is larger than proxmox.{setting} ({limit} bytes) and was not read further; narrow the request (a node, a type or vmid filter) or raise proxmox.{setting}")]
    TooLarge { limit: u64, setting: &'static str },
    /// Within the byte cap, but too costly to parse: more values than
    /// one per `json_budget::BYTES_PER_VALUE` bytes of the cap.
    #[error("the answer from Proxmox holds more than {limit} JSON values (at most one per {} bytes of proxmox.{setting} = {cap}; a key counts as one value, an object or array as {}) and was not parsed; narrow the request (a node, a type or vmid filter) or raise proxmox.{setting}", json_budget::BYTES_PER_VALUE, json_budget::CONTAINER_WEIGHT)]
    TooManyValues {
        limit: u64,
        cap: u64,
        setting: &'static str,
    },
}

impl PveError {
    /// The tool error code.
    pub fn code(&self) -> &'static str {
        match self {
            PveError::Unauthorized => "unauthorized",
            PveError::Forbidden(_) => "permission_denied",
            PveError::BadParameters(_) => "invalid_arguments",
            PveError::Server { status: 404, .. } => "not_found",
            PveError::Server { .. } => "backend_error",
            PveError::NodeUnreachable(_) | PveError::Connect(_) => "unreachable",
            PveError::Timeout(_) => "timeout",
            PveError::Protocol(_) => "backend_error",
            PveError::TooLarge { .. } | PveError::TooManyValues { .. } => "response_too_large",
        }
    }

    fn retryable(&self) -> bool {
        matches!(
            self,
            PveError::Timeout(_)
                | PveError::Connect(_)
                | PveError::NodeUnreachable(_)
                | PveError::Server {
                    status: 502..=504,
                    ..
                }
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("target url `{0}` must be https://host[:port]")]
    Url(String),
    #[error(transparent)]
    Tls(#[from] airlock_edge::tls::TlsError),
    #[error("HTTP client: {0}")]
    Build(String),
}

pub struct PveClient {
    base: String,
    http: reqwest::Client,
    timeouts: Timeouts,
    /// At most this much of an API answer is read.
    max_response_bytes: u64,
}

impl PveClient {
    pub fn new(url: &str, trust: &Trust, timeouts: Timeouts) -> Result<Self, ClientError> {
        let base = url.trim_end_matches('/').to_string();
        let host = base
            .strip_prefix("https://")
            .ok_or_else(|| ClientError::Url(url.into()))?;
        if host.is_empty() || host.contains('/') || host.contains('@') {
            return Err(ClientError::Url(url.into()));
        }
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(client_config(trust)?)
            .https_only(true)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(timeouts.connect)
            .timeout(timeouts.request)
            .build()
            .map_err(|e| ClientError::Build(e.to_string()))?;
        Ok(Self {
            base,
            http,
            timeouts,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        })
    }

    /// Reads at most `bytes` of an API answer (`proxmox.max_response_bytes`).
    pub fn with_max_response_bytes(mut self, bytes: u64) -> Self {
        self.max_response_bytes = bytes;
        self
    }

    /// Sends `req` and returns PVE's `data`.
    pub async fn call(&self, token: &ApiToken, req: &Request) -> Result<Value, PveError> {
        let attempts = if req.method == Method::Get {
            1 + self.timeouts.get_retries
        } else {
            1
        };
        let mut delay = Duration::from_millis(200);
        let mut last = PveError::Protocol("no attempt made".into());
        for attempt in 0..attempts {
            if attempt > 0 {
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            match self.once(token, req).await {
                Ok(v) => return Ok(v),
                Err(e) if e.retryable() => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    async fn once(&self, token: &ApiToken, req: &Request) -> Result<Value, PveError> {
        let url = format!("{}/api2/json{}", self.base, req.path);
        let builder = match req.method {
            Method::Get => self.http.get(&url).query(&req.params),
            Method::Delete => self.http.delete(&url).query(&req.params),
            Method::Post => self.http.post(&url).form(&req.params),
            Method::Put => self.http.put(&url).form(&req.params),
        };
        let mut response = builder
            .header(reqwest::header::AUTHORIZATION, token.header())
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        let status = response.status();
        let reason = response
            .extensions()
            .get::<hyper::ext::ReasonPhrase>()
            .map(|r| String::from_utf8_lossy(r.as_bytes()).into_owned());
        let body = self
            .read_body(&mut response, BodyCap::response(self.max_response_bytes))
            .await?;
        // Counted before it is parsed (`json_budget`), and parsed off this
        // task when large.
        let max_values = json_budget::max_values(self.max_response_bytes);
        let json = json_budget::parse(body, max_values).await;
        if status.is_success() {
            return match json {
                Ok(mut v) => Ok(v.get_mut("data").map(Value::take).unwrap_or(Value::Null)),
                Err(ParseError::TooManyValues { limit }) => Err(PveError::TooManyValues {
                    limit,
                    cap: self.max_response_bytes,
                    setting: "max_response_bytes",
                }),
                Err(ParseError::Malformed(_)) => Err(PveError::Protocol(format!(
                    "a {status} answer that is not JSON"
                ))),
            };
        }
        Err(error_from(status, reason, json.ok()))
    }

    /// GETs a non-API path (the API viewer's script) as text, reading at
    /// most `cap`.
    pub async fn fetch_text(
        &self,
        token: &ApiToken,
        path: &str,
        cap: BodyCap,
    ) -> Result<String, PveError> {
        let mut response = self
            .http
            .get(format!("{}{path}", self.base))
            .header(reqwest::header::AUTHORIZATION, token.header())
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        let status = response.status();
        if !status.is_success() {
            return Err(error_from(status, None, None));
        }
        let body = self.read_body(&mut response, cap).await?;
        String::from_utf8(body)
            .map_err(|_| PveError::Protocol("the API schema is not UTF-8".into()))
    }

    async fn read_body(
        &self,
        response: &mut reqwest::Response,
        cap: BodyCap,
    ) -> Result<Vec<u8>, PveError> {
        read_capped(response, cap).await.map_err(|e| match e {
            BodyError::TooLarge(cap) => PveError::TooLarge {
                limit: cap.bytes,
                setting: cap.setting,
            },
            BodyError::Transport(e) => self.transport(e),
        })
    }

    /// Never shows the URL, the host name or the library's own text
    /// (`transport::describe`).
    fn transport(&self, e: reqwest::Error) -> PveError {
        if e.is_timeout() {
            return PveError::Timeout(self.timeouts.request.as_secs());
        }
        PveError::Connect(transport::describe(&e))
    }
}

/// `text` trimmed and cut at `MAX_ERROR_TEXT` characters.
fn shorten(text: &str) -> String {
    let text = text.trim();
    if text.chars().count() <= MAX_ERROR_TEXT {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(MAX_ERROR_TEXT).collect();
    cut.push('…');
    cut
}

fn error_from(status: StatusCode, reason: Option<String>, json: Option<Value>) -> PveError {
    let reason = reason
        .filter(|r| !r.trim().is_empty())
        .or_else(|| {
            json.as_ref()
                .and_then(|j| j.get("message"))
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_else(|| status.canonical_reason().unwrap_or("error").to_string());
    let reason = shorten(&reason);
    match status.as_u16() {
        401 => PveError::Unauthorized,
        403 => PveError::Forbidden(reason),
        400 => {
            let errors = json
                .as_ref()
                .and_then(|j| j.get("errors"))
                .and_then(Value::as_object)
                .map(|m| {
                    let mut listed: Vec<String> = m
                        .iter()
                        .take(MAX_PARAMETER_ERRORS)
                        .map(|(k, v)| {
                            format!(
                                "{}: {}",
                                shorten(k),
                                shorten(v.as_str().unwrap_or_default())
                            )
                        })
                        .collect();
                    if m.len() > MAX_PARAMETER_ERRORS {
                        listed.push(format!("and {} more", m.len() - MAX_PARAMETER_ERRORS));
                    }
                    listed.join("; ")
                })
                .filter(|s| !s.is_empty());
            PveError::BadParameters(errors.unwrap_or(reason))
        }
        595 | 596 => PveError::NodeUnreachable(reason),
        s => PveError::Server {
            status: s,
            message: reason,
        },
    }
}

/// A JSON argument as PVE wants it on the wire: booleans as 0/1.
pub fn wire_value(v: &Value) -> Vec<String> {
    match v {
        Value::Bool(b) => vec![if *b { "1" } else { "0" }.into()],
        Value::String(s) => vec![s.clone()],
        Value::Number(n) => vec![n.to_string()],
        Value::Null => vec![],
        Value::Array(items) => items.iter().flat_map(wire_value).collect(),
        Value::Object(_) => vec![v.to_string()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tokens() {
        let t = ApiToken::parse("root@pam!airlock=0b9c6a5e-1f1e-4c2a-9a0e-8f1c2d3e4f50\n").unwrap();
        assert_eq!(t.id(), "root@pam!airlock");
        assert!(!format!("{t:?}").contains("0b9c"));
        assert!(ApiToken::parse("PVEAPIToken=a@pve!x=abc").is_ok());
        for bad in [
            "",
            "root@pam=secret",
            "root@pam!x=",
            "root@pam!x=sec ret",
            "no-realm!x=abc",
        ] {
            assert!(ApiToken::parse(bad).is_err(), "{bad}");
        }
        assert!(t.header().is_sensitive());
    }

    /// A token file others can read is not used, and its secret is
    /// never in the error.
    #[test]
    fn token_files_must_be_this_users_alone() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("alice.token");
        let line = "alice@pve!airlock=0b9c6a5e-1f1e-4c2a-9a0e-8f1c2d3e4f50\n";
        airlock_edge::credential_file::write(&path, line).unwrap();
        assert_eq!(
            ApiToken::from_file(&path).unwrap().id(),
            "alice@pve!airlock"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = ApiToken::from_file(&path).unwrap_err().to_string();
        assert!(
            e.starts_with("token file: ") && e.contains(&format!("chmod 600 {}", path.display())),
            "{e}"
        );
        assert!(!e.contains("0b9c"), "{e}");
    }

    #[test]
    fn wire_values() {
        assert_eq!(wire_value(&json!(true)), ["1"]);
        assert_eq!(wire_value(&json!(false)), ["0"]);
        assert_eq!(wire_value(&json!(2.5)), ["2.5"]);
        assert_eq!(wire_value(&json!(["a", 1])), ["a", "1"]);
    }

    #[test]
    fn errors() {
        let e = error_from(
            StatusCode::BAD_REQUEST,
            Some("Parameter verification failed.".into()),
            Some(json!({"errors": {"vmid": "invalid format\n"}})),
        );
        assert_eq!(e, PveError::BadParameters("vmid: invalid format".into()));
        let e = error_from(
            StatusCode::INTERNAL_SERVER_ERROR,
            Some("VM 100 not running".into()),
            None,
        );
        assert_eq!(e.to_string(), "Proxmox error (500): VM 100 not running");
        assert_eq!(
            error_from(StatusCode::from_u16(596).unwrap(), None, None).code(),
            "unreachable"
        );
        assert_eq!(
            error_from(StatusCode::UNAUTHORIZED, None, None).code(),
            "unauthorized"
        );
        assert_eq!(
            error_from(
                StatusCode::FORBIDDEN,
                Some("Permission check failed (/vms/100, VM.PowerMgmt)".into()),
                None
            )
            .code(),
            "permission_denied"
        );
    }
}
