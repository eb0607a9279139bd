//! HTTP to the collector: the service key on every request, a timeout, a
//! cap on the answer's size, and errors that name what went wrong without
//! the collector's address or the key.

use std::{sync::Arc, time::Duration};

use reqwest::{header::HeaderValue, StatusCode};
use serde_json::Value;

use crate::CollectorError;
use airlock_edge::{
    json_budget::{self, ParseError},
    tls::{self, Trust},
};

pub const KEY_HEADER: &str = "X-Service-Key";

/// A client bound to one collector and its key.
pub struct Client {
    http: reqwest::Client,
    base: String,
    key: HeaderValue,
    max_bytes: u64,
    timeout: Duration,
}

impl Client {
    /// `trust` is needed for an `https://` collector (a CA bundle or the
    /// certificate's pin, as for Proxmox targets).
    pub fn new(
        base: &str,
        key: &str,
        trust: Option<&Trust>,
        timeout: Duration,
        max_bytes: u64,
    ) -> Result<Self, CollectorError> {
        let mut key = HeaderValue::from_str(key).map_err(|_| {
            CollectorError::Config(
                "the collector service key has characters a header cannot carry".into(),
            )
        })?;
        key.set_sensitive(true);
        let tls = match trust {
            Some(t) => tls::client_config(t).map_err(|e| CollectorError::Config(e.to_string()))?,
            None if base.starts_with("https://") => {
                return Err(CollectorError::Config(
                    "an https:// collector needs collector.ca_file or collector.fingerprint".into(),
                ))
            }
            // Plain HTTP: no certificate is ever checked, so no roots.
            None => rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .map_err(|e| CollectorError::Config(e.to_string()))?
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth(),
        };
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(5).min(timeout))
            .timeout(timeout)
            .build()
            .map_err(|e| CollectorError::Config(format!("HTTP client: {}", e.without_url())))?;
        Ok(Self {
            http,
            base: base.trim_end_matches('/').to_string(),
            key,
            max_bytes,
            timeout,
        })
    }

    pub async fn get(&self, path: &str, query: &[(&str, &str)]) -> Result<Value, CollectorError> {
        let request = self
            .http
            .get(format!("{}{path}", self.base))
            .query(query)
            .header(KEY_HEADER, self.key.clone());
        self.send(request).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, CollectorError> {
        let request = self
            .http
            .post(format!("{}{path}", self.base))
            .header(KEY_HEADER, self.key.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(body).unwrap_or_default());
        self.send(request).await
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Result<Value, CollectorError> {
        let mut response = request.send().await.map_err(|e| self.transport(e))?;
        let status = response.status();
        // Read at most max_bytes + 1: enough to know it is too large.
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.transport(e))? {
            body.extend_from_slice(&chunk);
            if body.len() as u64 > self.max_bytes {
                return Err(CollectorError::TooLarge {
                    limit: self.max_bytes,
                });
            }
        }
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(CollectorError::KeyRefused(status.as_u16()));
        }
        // Counted before it is parsed (`json_budget`), and parsed off this
        // task when large.
        let max_values = json_budget::max_values(self.max_bytes);
        let json = json_budget::parse(body, max_values).await;
        if !status.is_success() {
            return Err(CollectorError::Status {
                status: status.as_u16(),
                message: collector_message(json.ok()),
            });
        }
        json.map_err(|e| match e {
            ParseError::TooManyValues { limit } => CollectorError::TooManyValues {
                limit,
                cap: self.max_bytes,
            },
            ParseError::Malformed(e) => CollectorError::Malformed(e),
        })
    }

    /// Maps a transport failure; the URL (an internal address) is dropped.
    fn transport(&self, e: reqwest::Error) -> CollectorError {
        if e.is_timeout() {
            CollectorError::Timeout(self.timeout)
        } else if e.is_connect() {
            CollectorError::Unreachable { sent: false }
        } else {
            CollectorError::Unreachable { sent: true }
        }
    }
}

/// The collector's own error text, if its body says one, shortened and
/// without addresses, URLs or paths (`sanitize`).
fn collector_message(body: Option<Value>) -> String {
    let text = body
        .and_then(|v| {
            v.get("error")
                .or_else(|| v.get("detail"))
                .or_else(|| v.get("message"))
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_default();
    crate::sanitize::sanitize(&text).chars().take(300).collect()
}
