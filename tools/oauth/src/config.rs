//! `[oauth]`: which issuers' tokens this server accepts, for which
//! resource, and how their claims become identities and modes.
//!
//! Everything is checked when the configuration is read, so a deployment
//! that would accept too much (an HMAC algorithm, an issuer over plain
//! HTTP on the network) never starts.

use std::{collections::BTreeMap, path::PathBuf, str::FromStr};

use airlock_gateway::Mode;
use jsonwebtoken::Algorithm;
use reqwest::Url;
use serde::Deserialize;

/// Seconds of clock difference tolerated on `exp` and `nbf` by default.
pub const DEFAULT_LEEWAY_SECS: u64 = 30;
/// A larger leeway would keep expired tokens alive for minutes.
pub const MAX_LEEWAY_SECS: u64 = 300;
/// The identity prefix of the only issuer, when it names none.
pub const DEFAULT_PREFIX: &str = "sso";

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthConfig {
    /// This server's MCP endpoint as clients reach it (through the proxy),
    /// e.g. `https://airlock.example.com/mcp`. A token is accepted only
    /// when its `aud` names it (RFC 8707), and the Protected Resource
    /// Metadata says it.
    pub resource: String,
    /// Scopes every token must carry; advertised in the metadata.
    #[serde(default)]
    pub scopes: Vec<String>,
    #[serde(default = "default_leeway")]
    pub leeway_secs: u64,
    pub issuers: Vec<IssuerConfig>,
}

fn default_leeway() -> u64 {
    DEFAULT_LEEWAY_SECS
}

/// One trusted issuer (an OpenID provider's realm or tenant).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssuerConfig {
    /// Exactly as the provider writes it in `iss` and in its discovery
    /// document.
    pub issuer: String,
    /// The `aud` this issuer's tokens carry for us, when the provider
    /// cannot put the resource URL there (Entra ID: `api://<app id>`).
    pub audience: Option<String>,
    /// Signature algorithms accepted (default RS256 and ES256). HMAC and
    /// `none` are refused: a public key must never act as a shared secret.
    #[serde(default = "default_algorithms")]
    pub algorithms: Vec<String>,
    /// The claim whose value names the identity (default `sub`; `email`
    /// only with `email_verified: true` in the token).
    #[serde(default = "default_identity_claim")]
    pub identity_claim: String,
    /// What this issuer's identities are called: `PREFIX:VALUE`. A `:`
    /// never appears in an enrolled key's identity, so a token can never
    /// act as a key's holder, nor one issuer as another's people. Default
    /// `sso` with one issuer; required, and distinct, with several.
    pub identity_prefix: Option<String>,
    /// The claim that lists the caller's groups (default `groups`).
    #[serde(default = "default_groups_claim")]
    pub groups_claim: String,
    /// Group → mode; a caller in several groups gets the highest mode.
    /// An identity listed under `[identities]` keeps its own mode.
    #[serde(default)]
    pub groups: BTreeMap<String, Mode>,
    /// The mode of a caller none of whose groups is mapped and whom
    /// `[identities]` does not list. Default: none, such tokens are
    /// refused (everyone the provider will issue a token to is not
    /// everyone who should read the infrastructure).
    pub default_mode: Option<Mode>,
    /// Whether every identity from this issuer may approve its own
    /// requests (default false: four eyes). An identity listed under
    /// `[identities]` with `approve_own` set keeps its own setting.
    #[serde(default)]
    pub approve_own: bool,
    /// Groups whose members may approve their own requests (as
    /// `approve_own`, for these groups only).
    #[serde(default)]
    pub approve_own_groups: Vec<String>,
    /// Require the header `typ` of an access token, `at+jwt` (RFC 9068).
    /// Providers that type their access tokens plain `JWT` (Keycloak,
    /// Entra ID) need `false`.
    #[serde(default = "yes")]
    pub require_typ: bool,
    /// CA certificates (PEM) for an `https://` issuer signed by a private
    /// CA; default: the system's trust store.
    pub ca_file: Option<PathBuf>,
}

fn default_algorithms() -> Vec<String> {
    vec!["RS256".into(), "ES256".into()]
}
fn default_identity_claim() -> String {
    "sub".into()
}
fn default_groups_claim() -> String {
    "groups".into()
}
fn yes() -> bool {
    true
}

/// A configuration that cannot be served; says which key and why.
#[derive(Debug, thiserror::Error)]
#[error("[oauth] {0}")]
pub struct ConfigError(pub String);

/// An issuer's settings, checked and parsed.
#[derive(Clone, Debug)]
pub struct Issuer {
    pub issuer: String,
    pub audience: String,
    pub algorithms: Vec<Algorithm>,
    pub identity_claim: String,
    /// `PREFIX:` included.
    pub identity_prefix: String,
    pub default_mode: Option<Mode>,
    pub groups_claim: String,
    pub groups: BTreeMap<String, Mode>,
    pub approve_own: bool,
    pub approve_own_groups: Vec<String>,
    pub require_typ: bool,
    pub ca_file: Option<PathBuf>,
}

impl OAuthConfig {
    /// The resource URL, and every issuer checked.
    pub fn check(&self) -> Result<(Url, Vec<Issuer>), ConfigError> {
        let resource = Url::parse(&self.resource).map_err(|e| {
            ConfigError(format!(
                "resource `{}` is not a URL ({e}); give this server's MCP endpoint as clients reach it, e.g. https://airlock.example.com/mcp",
                self.resource
            ))
        })?;
        if !matches!(resource.scheme(), "https" | "http")
            || resource.fragment().is_some()
            || resource.query().is_some()
        {
            return Err(ConfigError(format!(
                "resource `{}` must be an http(s) URL without a ?query or #fragment",
                self.resource
            )));
        }
        if resource.scheme() == "http" && !loopback(&resource) {
            return Err(ConfigError(format!(
                "resource `{}` is plain HTTP on the network: clients would send tokens in the clear; serve it behind TLS (https://)",
                self.resource
            )));
        }
        if self.leeway_secs > MAX_LEEWAY_SECS {
            return Err(ConfigError(format!(
                "leeway_secs = {} is above {MAX_LEEWAY_SECS}: expired tokens would stay good for minutes",
                self.leeway_secs
            )));
        }
        if self.issuers.is_empty() {
            return Err(ConfigError(
                "has no [[oauth.issuers]]: name at least one issuer whose tokens to accept".into(),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        let mut prefixes = std::collections::BTreeSet::new();
        let mut issuers = Vec::new();
        for cfg in &self.issuers {
            if !seen.insert(cfg.issuer.as_str()) {
                return Err(ConfigError(format!(
                    "issuer `{}` is listed twice",
                    cfg.issuer
                )));
            }
        }
        for cfg in &self.issuers {
            let prefix = match (&cfg.identity_prefix, self.issuers.len()) {
                (Some(p), _) => p.clone(),
                (None, 1) => DEFAULT_PREFIX.to_string(),
                (None, _) => {
                    return Err(ConfigError(format!(
                        "issuer `{}` needs identity_prefix: with several issuers each names its people apart (e.g. \"corp\", \"partners\"), or one issuer's `alice` would be another's",
                        cfg.issuer
                    )))
                }
            };
            if prefix.is_empty()
                || prefix.len() > 32
                || !prefix
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            {
                return Err(ConfigError(format!(
                    "issuer `{}`: identity_prefix `{prefix}` must be 1-32 of a-z, 0-9, -, _ and .",
                    cfg.issuer
                )));
            }
            if !prefixes.insert(prefix.clone()) {
                return Err(ConfigError(format!(
                    "identity_prefix `{prefix}` is used by two issuers; each needs its own"
                )));
            }
            issuers.push(cfg.check(&self.resource, &prefix)?);
        }
        Ok((resource, issuers))
    }
}

impl IssuerConfig {
    fn check(&self, resource: &str, prefix: &str) -> Result<Issuer, ConfigError> {
        let at = |what: String| ConfigError(format!("issuer `{}`: {what}", self.issuer));
        let url = Url::parse(&self.issuer).map_err(|e| at(format!("is not a URL ({e})")))?;
        match url.scheme() {
            "https" => {}
            "http" if loopback(&url) => {}
            _ => return Err(at(
                "must be https:// (plain http:// only on loopback): its keys decide who may act"
                    .into(),
            )),
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(at("must not carry a ?query or #fragment".into()));
        }
        if self.algorithms.is_empty() {
            return Err(at("algorithms is empty; e.g. [\"RS256\", \"ES256\"]".into()));
        }
        let mut algorithms = Vec::new();
        for name in &self.algorithms {
            let alg = Algorithm::from_str(name).map_err(|_| {
                at(format!(
                    "algorithm `{name}` is unknown; use RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384 or EdDSA"
                ))
            })?;
            if matches!(alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512) {
                return Err(at(format!(
                    "algorithm `{name}` is an HMAC: it would let anyone holding the issuer's public key mint tokens; use a public-key algorithm"
                )));
            }
            algorithms.push(alg);
        }
        for claim in [&self.identity_claim, &self.groups_claim] {
            if claim.is_empty() {
                return Err(at(
                    "identity_claim and groups_claim must name a claim".into()
                ));
            }
        }
        Ok(Issuer {
            issuer: self.issuer.clone(),
            audience: self
                .audience
                .clone()
                .unwrap_or_else(|| resource.to_string()),
            algorithms,
            identity_claim: self.identity_claim.clone(),
            identity_prefix: format!("{prefix}:"),
            default_mode: self.default_mode,
            groups_claim: self.groups_claim.clone(),
            groups: self.groups.clone(),
            approve_own: self.approve_own,
            approve_own_groups: self.approve_own_groups.clone(),
            require_typ: self.require_typ,
            ca_file: self.ca_file.clone(),
        })
    }
}

/// Whether `url` names this machine (tests, a walkthrough on one machine).
pub fn loopback(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(a)) => a.is_loopback(),
        Some(url::Host::Ipv6(a)) => a.is_loopback(),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Result<(Url, Vec<Issuer>), String> {
        let c: OAuthConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        c.check().map_err(|e| e.to_string())
    }

    const GOOD: &str = "resource = \"https://airlock.example.test/mcp\"\n\
        [[issuers]]\nissuer = \"https://idp.example.test/realms/ops\"\n";

    #[test]
    fn defaults_are_strict() {
        let (resource, issuers) = config(GOOD).unwrap();
        assert_eq!(resource.as_str(), "https://airlock.example.test/mcp");
        let i = &issuers[0];
        assert_eq!(i.audience, "https://airlock.example.test/mcp");
        assert_eq!(i.algorithms, vec![Algorithm::RS256, Algorithm::ES256]);
        assert!(i.require_typ);
        assert_eq!(i.identity_claim, "sub");
        assert_eq!(i.identity_prefix, "sso:");
        assert_eq!(
            i.default_mode, None,
            "tokens without a mapped group are refused"
        );
        assert!(
            !i.approve_own && i.approve_own_groups.is_empty(),
            "nobody approves their own requests"
        );
    }

    #[test]
    fn what_would_accept_too_much_is_refused() {
        let hs = config(&format!("{GOOD}algorithms = [\"HS256\"]\n")).unwrap_err();
        assert!(hs.contains("HMAC"), "{hs}");
        let none = config(&format!("{GOOD}algorithms = [\"none\"]\n")).unwrap_err();
        assert!(none.contains("unknown"), "{none}");
        let plain = config(
            "resource = \"https://a.example.test/mcp\"\n[[issuers]]\nissuer = \"http://idp.example.test\"\n",
        )
        .unwrap_err();
        assert!(plain.contains("must be https://"), "{plain}");
        let clear = config(
            "resource = \"http://a.example.test/mcp\"\n[[issuers]]\nissuer = \"https://idp.example.test\"\n",
        )
        .unwrap_err();
        assert!(clear.contains("in the clear"), "{clear}");
        let leeway = config(&format!("leeway_secs = 3600\n{GOOD}")).unwrap_err();
        assert!(leeway.contains("leeway_secs"), "{leeway}");
        let none = config("resource = \"https://a.example.test/mcp\"\nissuers = []\n").unwrap_err();
        assert!(none.contains("at least one issuer"), "{none}");
        let twice = config(&format!(
            "{GOOD}[[issuers]]\nissuer = \"https://idp.example.test/realms/ops\"\n"
        ))
        .unwrap_err();
        assert!(twice.contains("twice"), "{twice}");
        let query = config(
            "resource = \"https://a.example.test/mcp?x=1\"\n[[issuers]]\nissuer = \"https://idp.example.test\"\n",
        )
        .unwrap_err();
        assert!(query.contains("?query"), "{query}");
        let two = format!("{GOOD}[[issuers]]\nissuer = \"https://other.example.test\"\n");
        let unnamed = config(&two).unwrap_err();
        assert!(unnamed.contains("needs identity_prefix"), "{unnamed}");
        let same = config(
            "resource = \"https://a.example.test/mcp\"\n\
             [[issuers]]\nissuer = \"https://a.test\"\nidentity_prefix = \"x\"\n\
             [[issuers]]\nissuer = \"https://b.test\"\nidentity_prefix = \"x\"\n",
        )
        .unwrap_err();
        assert!(same.contains("used by two issuers"), "{same}");
        let colon = config(&format!("{GOOD}identity_prefix = \"a:b\"\n")).unwrap_err();
        assert!(colon.contains("identity_prefix"), "{colon}");
    }

    #[test]
    fn loopback_may_be_plain_http() {
        let (_, issuers) = config(
            "resource = \"http://127.0.0.1:8080/mcp\"\n[[issuers]]\nissuer = \"http://localhost:9000\"\n\
             groups = { ops = \"operator\" }\n",
        )
        .unwrap();
        assert_eq!(issuers[0].groups["ops"], Mode::Operator);
    }
}
