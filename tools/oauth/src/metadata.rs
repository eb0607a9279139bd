//! What this server tells clients about itself: the Protected Resource
//! Metadata document (RFC 9728) and the `WWW-Authenticate` challenge that
//! points to it, so a client that got a 401 can find the issuer, get a
//! token for this resource, and retry.

use reqwest::Url;
use serde_json::{json, Value};

use super::{config::ConfigError, token::TokenError, OAuthConfig, Tokens};

/// The well-known prefix RFC 9728 puts the metadata under.
pub const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// This server as an OAuth resource server: its metadata and its tokens.
pub struct ResourceServer {
    metadata_url: String,
    paths: Vec<String>,
    document: Value,
    scopes: Vec<String>,
    pub tokens: Tokens,
}

impl ResourceServer {
    pub fn new(config: &OAuthConfig) -> Result<Self, ConfigError> {
        let (resource, issuers) = config.check()?;
        let document = json!({
            "resource": config.resource,
            "authorization_servers": issuers.iter().map(|i| i.issuer.clone()).collect::<Vec<_>>(),
            "scopes_supported": config.scopes,
            "bearer_methods_supported": ["header"],
            "resource_name": "Airlock",
        });
        let tokens =
            Tokens::new(issuers, config.scopes.clone(), config.leeway_secs).map_err(ConfigError)?;
        let suffixed = metadata_path(&resource);
        let mut paths = vec![suffixed.clone()];
        if suffixed != WELL_KNOWN {
            // Clients that predate path-suffixed discovery ask the root.
            paths.push(WELL_KNOWN.to_string());
        }
        let mut url = resource.clone();
        url.set_path(&suffixed);
        url.set_query(None);
        Ok(Self {
            metadata_url: url.to_string(),
            paths,
            document,
            scopes: config.scopes.clone(),
            tokens,
        })
    }

    /// The paths this server answers the metadata at.
    pub fn metadata_paths(&self) -> &[String] {
        &self.paths
    }

    pub fn document(&self) -> &Value {
        &self.document
    }

    /// The `WWW-Authenticate` value for a request without a usable token
    /// (`error`: why the one given was refused).
    pub fn challenge(&self, error: Option<&TokenError>) -> String {
        match error {
            Some(e) if e.is_scope() => {
                self.header(Some(("insufficient_scope", Some(e.to_string()))))
            }
            Some(e) => self.header(Some(("invalid_token", Some(e.to_string())))),
            None => self.header(None),
        }
    }

    /// The challenge for a request with no credential (`refused`: false)
    /// or with a bearer key that is not enrolled.
    pub fn challenge_for_key(&self, refused: bool) -> String {
        self.header(refused.then_some(("invalid_token", None)))
    }

    /// `Bearer [error=…, error_description=…,] resource_metadata=…[, scope=…]`
    fn header(&self, error: Option<(&str, Option<String>)>) -> String {
        let mut parts = Vec::new();
        if let Some((code, description)) = error {
            parts.push(format!("error=\"{code}\""));
            if let Some(d) = description {
                parts.push(format!("error_description=\"{}\"", quotable(&d)));
            }
        }
        parts.push(format!("resource_metadata=\"{}\"", self.metadata_url));
        if !self.scopes.is_empty() {
            parts.push(format!("scope=\"{}\"", quotable(&self.scopes.join(" "))));
        }
        format!("Bearer {}", parts.join(", "))
    }
}

/// RFC 9728 §3.1: the well-known prefix goes between the host and the
/// resource's path.
fn metadata_path(resource: &Url) -> String {
    let path = resource.path().trim_end_matches('/');
    format!("{WELL_KNOWN}{path}")
}

/// Text that fits in a quoted-string of a header (RFC 6750 allows no `"`
/// or `\` in error_description, and only printable ASCII).
fn quotable(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '"' | '\\' => '\'',
            c if (' '..='~').contains(&c) => c,
            _ => '?',
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(resource: &str, scopes: &[&str]) -> ResourceServer {
        let config = OAuthConfig {
            resource: resource.into(),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            leeway_secs: 30,
            issuers: vec![
                toml::from_str("issuer = \"https://idp.example.test/realms/ops\"").unwrap(),
            ],
        };
        ResourceServer::new(&config).unwrap()
    }

    #[test]
    fn metadata_sits_where_rfc_9728_puts_it() {
        let s = server("https://airlock.example.test/mcp", &["mcp"]);
        assert_eq!(
            s.metadata_paths(),
            ["/.well-known/oauth-protected-resource/mcp", WELL_KNOWN]
        );
        assert_eq!(s.document()["resource"], "https://airlock.example.test/mcp");
        assert_eq!(
            s.document()["authorization_servers"][0],
            "https://idp.example.test/realms/ops"
        );
        assert_eq!(
            s.challenge(None),
            "Bearer resource_metadata=\"https://airlock.example.test/.well-known/oauth-protected-resource/mcp\", scope=\"mcp\""
        );
        let root = server("https://airlock.example.test/", &[]);
        assert_eq!(root.metadata_paths(), [WELL_KNOWN]);
    }

    #[test]
    fn a_refusal_says_why_in_a_quotable_form() {
        let s = server("https://airlock.example.test/mcp", &[]);
        let c = s.challenge(Some(&TokenError::MissingClaim("na\"me\u{7}".into())));
        assert!(
            c.starts_with("Bearer error=\"invalid_token\", error_description=\"the token lacks the claim na'me?\""),
            "{c}"
        );
        let c = s.challenge(Some(&TokenError::InsufficientScope("mcp".into())));
        assert!(c.contains("error=\"insufficient_scope\""), "{c}");
    }
}
