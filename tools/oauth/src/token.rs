//! Checking one access token: which issuer, which key, which algorithm,
//! for whom, until when — and who it makes the caller.

use std::collections::HashMap;

use airlock_gateway::{Caller, Mode};
use jsonwebtoken::{errors::ErrorKind, Validation};
use serde_json::{Map, Value};

use super::{config::Issuer, jwks::IssuerKeys, jwks::KeyError};

/// A token longer than this is refused unread; real ones are 1–2 KiB.
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;
/// An identity longer than this is refused: it names audit lines and
/// policy entries.
pub const MAX_IDENTITY_CHARS: usize = 256;

/// Why a token was not accepted. The texts name what failed and never
/// quote the token.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("the token is not a well-formed JWT (its {0} cannot be read)")]
    Malformed(&'static str),
    #[error("the token is longer than {} KiB", MAX_TOKEN_BYTES / 1024)]
    TooLong,
    #[error("the token's issuer is not one this server trusts")]
    UnknownIssuer,
    #[error("the token is signed with {alg}, which issuer {issuer} may not use here (allowed: {allowed})")]
    Algorithm {
        alg: String,
        issuer: String,
        allowed: String,
    },
    #[error(
        "the token's type ({0}) is not at+jwt: it is not an access token (an ID token, perhaps)"
    )]
    NotAnAccessToken(String),
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error("the token's signature does not verify")]
    Signature,
    #[error("the token has expired")]
    Expired,
    #[error("the token is not valid yet (nbf is in the future)")]
    NotYetValid,
    #[error("the token is not for this server: its audience (aud) does not name {0}")]
    Audience(String),
    #[error("the token lacks the claim {0}")]
    MissingClaim(String),
    #[error("the token's {claim} claim cannot name an identity ({why})")]
    BadIdentity { claim: String, why: &'static str },
    #[error("the token's email is not verified (email_verified is not true), so it cannot name an identity")]
    EmailNotVerified,
    #[error("the token lacks the scope {0}")]
    InsufficientScope(String),
}

impl TokenError {
    /// Whether the client may retry with the same token later (the
    /// provider's keys could not be fetched), rather than needing a new
    /// token.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, TokenError::Key(KeyError::Unavailable { .. }))
    }

    pub fn is_scope(&self) -> bool {
        matches!(self, TokenError::InsufficientScope(_))
    }

    /// A short label for metrics and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            TokenError::Malformed(_) | TokenError::TooLong => "malformed",
            TokenError::UnknownIssuer => "issuer",
            TokenError::Algorithm { .. } => "algorithm",
            TokenError::NotAnAccessToken(_) => "type",
            TokenError::Key(KeyError::Unavailable { .. }) => "keys_unavailable",
            TokenError::Key(_) => "key",
            TokenError::Signature => "signature",
            TokenError::Expired => "expired",
            TokenError::NotYetValid => "not_yet_valid",
            TokenError::Audience(_) => "audience",
            TokenError::MissingClaim(_)
            | TokenError::BadIdentity { .. }
            | TokenError::EmailNotVerified => "claims",
            TokenError::InsufficientScope(_) => "scope",
        }
    }
}

/// The issuers whose tokens this server accepts.
pub struct Tokens {
    issuers: HashMap<String, (Issuer, IssuerKeys)>,
    scopes: Vec<String>,
    leeway: u64,
}

impl Tokens {
    pub fn new(issuers: Vec<Issuer>, scopes: Vec<String>, leeway: u64) -> Result<Self, String> {
        let mut map = HashMap::new();
        for issuer in issuers {
            let keys = IssuerKeys::new(&issuer)?;
            map.insert(issuer.issuer.clone(), (issuer, keys));
        }
        Ok(Self {
            issuers: map,
            scopes,
            leeway,
        })
    }

    /// Fetches every issuer's keys once; failures are logged, not fatal.
    pub async fn warm(&self) {
        for (_, keys) in self.issuers.values() {
            let _ = keys.warm().await;
        }
    }

    /// Who `token` makes the caller, or why it is refused.
    pub async fn check(&self, token: &str) -> Result<Caller, TokenError> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(TokenError::TooLong);
        }
        // Fixed texts: a parser's message would quote what the sender wrote.
        let header =
            jsonwebtoken::decode_header(token).map_err(|_| TokenError::Malformed("header"))?;
        // Which issuer's rules apply is read before the signature is
        // checked; everything it says is verified against that issuer's
        // keys below.
        let unverified: Map<String, Value> = jsonwebtoken::dangerous::insecure_decode_claims(token)
            .map_err(|_| TokenError::Malformed("claims"))?;
        let iss = unverified.get("iss").and_then(Value::as_str);
        let (issuer, keys) = iss
            .and_then(|i| self.issuers.get(i))
            .ok_or(TokenError::UnknownIssuer)?;
        if !issuer.algorithms.contains(&header.alg) {
            return Err(TokenError::Algorithm {
                alg: format!("{:?}", header.alg),
                issuer: issuer.issuer.clone(),
                allowed: issuer
                    .algorithms
                    .iter()
                    .map(|a| format!("{a:?}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        if issuer.require_typ && !is_access_token_type(header.typ.as_deref()) {
            return Err(TokenError::NotAnAccessToken(
                header
                    .typ
                    .as_deref()
                    .map(|t| format!("`{}`", t.chars().take(32).collect::<String>()))
                    .unwrap_or_else(|| "missing".into()),
            ));
        }
        let key = keys.key_for(header.kid.as_deref(), header.alg).await?;
        let mut validation = Validation::new(header.alg);
        validation.algorithms = vec![header.alg];
        validation.set_issuer(&[&issuer.issuer]);
        validation.set_audience(&[&issuer.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.validate_nbf = true;
        validation.leeway = self.leeway;
        let data =
            jsonwebtoken::decode::<Map<String, Value>>(token, &key, &validation).map_err(|e| {
                match e.kind() {
                    ErrorKind::InvalidSignature => TokenError::Signature,
                    ErrorKind::ExpiredSignature => TokenError::Expired,
                    ErrorKind::ImmatureSignature => TokenError::NotYetValid,
                    ErrorKind::InvalidAudience => TokenError::Audience(issuer.audience.clone()),
                    ErrorKind::InvalidIssuer => TokenError::UnknownIssuer,
                    ErrorKind::MissingRequiredClaim(c) => TokenError::MissingClaim(c.clone()),
                    ErrorKind::InvalidAlgorithm => TokenError::Algorithm {
                        alg: format!("{:?}", header.alg),
                        issuer: issuer.issuer.clone(),
                        allowed: "a key of the matching type".into(),
                    },
                    _ => TokenError::Malformed("claims"),
                }
            })?;
        let claims = data.claims;
        if !issuer.require_typ && looks_like_id_token(&claims) {
            return Err(TokenError::NotAnAccessToken("an ID token's claims".into()));
        }
        for scope in &self.scopes {
            if !has_scope(&claims, scope) {
                return Err(TokenError::InsufficientScope(scope.clone()));
            }
        }
        let name = identity(&claims, &issuer.identity_claim)?;
        let mode = groups_mode(&claims, issuer).or(issuer.default_mode);
        let own = issuer.approve_own
            || groups_of(&claims, issuer).any(|g| issuer.approve_own_groups.iter().any(|o| o == g));
        Ok(Caller::new(format!("{}{name}", issuer.identity_prefix))
            .with_groups_mode(mode)
            .with_approve_own(own))
    }
}

/// RFC 9068's `at+jwt`, with or without the `application/` prefix.
fn is_access_token_type(typ: Option<&str>) -> bool {
    typ.is_some_and(|t| {
        let t = t.to_ascii_lowercase();
        t == "at+jwt" || t == "application/at+jwt"
    })
}

/// An ID token sent where an access token belongs, from a provider that
/// does not type its tokens: it carries a `nonce`, or (Keycloak) says
/// `"typ": "ID"` in its claims.
fn looks_like_id_token(claims: &Map<String, Value>) -> bool {
    claims.contains_key("nonce")
        || claims
            .get("typ")
            .and_then(Value::as_str)
            .is_some_and(|t| t.eq_ignore_ascii_case("id"))
}

/// The claim's value as a name: printable ASCII without spaces (no
/// lookalike letters, no invisible or right-to-left characters for an
/// operator reading the audit to mistake for someone else).
pub(crate) fn identity(claims: &Map<String, Value>, claim: &str) -> Result<String, TokenError> {
    let bad = |why| TokenError::BadIdentity {
        claim: claim.to_string(),
        why,
    };
    let value = claims
        .get(claim)
        .ok_or_else(|| TokenError::MissingClaim(claim.to_string()))?;
    let name = value.as_str().ok_or_else(|| bad("not a string"))?;
    if name.is_empty() {
        return Err(bad("empty"));
    }
    if name.len() > MAX_IDENTITY_CHARS {
        return Err(bad("longer than 256 characters"));
    }
    if !name.chars().all(|c| c.is_ascii_graphic()) {
        return Err(bad("not printable ASCII without spaces"));
    }
    if claim == "email" && claims.get("email_verified") != Some(&Value::Bool(true)) {
        return Err(TokenError::EmailNotVerified);
    }
    Ok(name.to_string())
}

/// The highest mode the caller's groups map to, if any do.
fn groups_mode(claims: &Map<String, Value>, issuer: &Issuer) -> Option<Mode> {
    if issuer.groups.is_empty() {
        return None;
    }
    groups_of(claims, issuer)
        .filter_map(|g| issuer.groups.get(g).copied())
        .max()
}

/// The caller's groups, from the issuer's groups claim (a list, or a
/// space-separated string).
fn groups_of<'a>(
    claims: &'a Map<String, Value>,
    issuer: &Issuer,
) -> Box<dyn Iterator<Item = &'a str> + 'a> {
    match claims.get(&issuer.groups_claim) {
        Some(Value::Array(items)) => Box::new(items.iter().filter_map(Value::as_str)),
        Some(Value::String(s)) => Box::new(s.split_whitespace()),
        _ => Box::new(std::iter::empty()),
    }
}

/// `scope` (RFC 9068: space-separated) or `scp` (Entra ID: a string or a
/// list) carries `wanted`.
fn has_scope(claims: &Map<String, Value>, wanted: &str) -> bool {
    ["scope", "scp"]
        .iter()
        .any(|claim| match claims.get(*claim) {
            Some(Value::String(s)) => s.split_whitespace().any(|x| x == wanted),
            Some(Value::Array(items)) => items.iter().any(|x| x.as_str() == Some(wanted)),
            _ => false,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::Algorithm;
    use serde_json::json;

    fn claims(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn groups_give_the_highest_mapped_mode() {
        let issuer = Issuer {
            issuer: "https://idp.example.test".into(),
            audience: "https://a.example.test/mcp".into(),
            algorithms: vec![Algorithm::ES256],
            identity_claim: "sub".into(),
            identity_prefix: "sso:".into(),
            default_mode: None,
            groups_claim: "groups".into(),
            groups: [
                ("ops".to_string(), Mode::Operator),
                ("admins".to_string(), Mode::Rw),
            ]
            .into(),
            approve_own: false,
            approve_own_groups: vec!["solo".into()],
            require_typ: true,
            ca_file: None,
        };
        let c = claims(json!({"groups": ["staff", "ops", "admins"]}));
        assert!(!groups_of(&c, &issuer).any(|g| g == "solo"));
        let solo = claims(json!({"groups": "staff solo"}));
        assert_eq!(
            groups_of(&solo, &issuer).collect::<Vec<_>>(),
            ["staff", "solo"]
        );
        assert_eq!(groups_mode(&c, &issuer), Some(Mode::Rw));
        let c = claims(json!({"groups": ["staff"]}));
        assert_eq!(groups_mode(&c, &issuer), None);
        let c = claims(json!({"groups": "ops staff"}));
        assert_eq!(groups_mode(&c, &issuer), Some(Mode::Operator));
        let c = claims(json!({"groups": 7}));
        assert_eq!(groups_mode(&c, &issuer), None);
    }

    #[test]
    fn identities_must_be_plain_names() {
        assert_eq!(
            identity(&claims(json!({"sub": "alice"})), "sub").unwrap(),
            "alice"
        );
        assert!(matches!(
            identity(&claims(json!({})), "email"),
            Err(TokenError::MissingClaim(c)) if c == "email"
        ));
        for bad in [
            json!({"sub": 3}),
            json!({"sub": ""}),
            json!({"sub": "a\nb"}),
            json!({"sub": "x".repeat(300)}),
            json!({"sub": "\u{0430}lice"}),
            json!({"sub": "al\u{200b}ice"}),
            json!({"sub": "al ice"}),
        ] {
            assert!(matches!(
                identity(&claims(bad), "sub"),
                Err(TokenError::BadIdentity { .. })
            ));
        }
    }

    #[test]
    fn an_email_names_an_identity_only_when_verified() {
        let c = claims(json!({"email": "a@example.test", "email_verified": true}));
        assert_eq!(identity(&c, "email").unwrap(), "a@example.test");
        for c in [
            json!({"email": "a@example.test"}),
            json!({"email": "a@example.test", "email_verified": "true"}),
            json!({"email": "a@example.test", "email_verified": false}),
        ] {
            assert!(matches!(
                identity(&claims(c), "email"),
                Err(TokenError::EmailNotVerified)
            ));
        }
    }

    #[test]
    fn id_tokens_are_told_apart_by_their_claims() {
        assert!(looks_like_id_token(&claims(json!({"nonce": "n"}))));
        assert!(looks_like_id_token(&claims(json!({"typ": "ID"}))));
        assert!(!looks_like_id_token(&claims(json!({"typ": "Bearer"}))));
    }

    #[test]
    fn scopes_come_from_scope_or_scp() {
        assert!(has_scope(&claims(json!({"scope": "openid mcp"})), "mcp"));
        assert!(has_scope(&claims(json!({"scp": ["mcp"]})), "mcp"));
        assert!(!has_scope(&claims(json!({"scope": "mcpx"})), "mcp"));
        assert!(!has_scope(&claims(json!({})), "mcp"));
    }

    #[test]
    fn access_token_types() {
        assert!(is_access_token_type(Some("at+jwt")));
        assert!(is_access_token_type(Some("application/AT+JWT")));
        assert!(!is_access_token_type(Some("JWT")));
        assert!(!is_access_token_type(None));
    }
}
