//! `[console]`: who may use the operator console, and as what.

use std::{collections::BTreeSet, path::PathBuf};

use serde::Deserialize;

/// The console's settings, as the operator writes them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsoleConfig {
    /// Identities that may decide requests (never their own, unless
    /// `[identities]` lets them approve their own).
    pub approvers: BTreeSet<String>,
    /// Identities that may read: pending requests and what they would
    /// change, without deciding.
    pub auditors: BTreeSet<String>,
    /// How long a sign-in lasts, in minutes (default 480: a working day).
    pub session_minutes: Option<u64>,
    /// Signing in through the deployment's OpenID provider, beside keys.
    pub oidc: Option<OidcConfig>,
    /// A file holding the URL of a webhook (Slack, Mattermost, or any
    /// receiver of a JSON POST) told of every request filed; the URL is a
    /// secret (anyone holding it can post), so it is never in this file.
    pub webhook_url_file: Option<PathBuf>,
    /// CA certificates (PEM) for a webhook signed by a private CA.
    pub webhook_ca_file: Option<PathBuf>,
    /// Where people reach the console, for the webhook's links (default:
    /// the origin of `[console.oidc] redirect_uri`).
    pub public_url: Option<String>,
}

/// The largest secret file read (a client secret, a webhook URL).
const MAX_SECRET_FILE_BYTES: u64 = 4096;

/// The one line a secret file holds (a final newline allowed), read now:
/// a missing, empty, multi-line or oversized file is named.
pub fn secret_from_file(path: &std::path::Path, what: &str) -> Result<String, String> {
    let size = std::fs::metadata(path)
        .map_err(|e| format!("{what} {}: {e}", path.display()))?
        .len();
    if size > MAX_SECRET_FILE_BYTES {
        return Err(format!(
            "{what} {} is {size} bytes; it must hold the one secret line only",
            path.display()
        ));
    }
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("{what} {}: {e}", path.display()))?;
    let line = text.trim_end_matches(['\r', '\n']);
    if line.is_empty() || line.contains(['\r', '\n']) {
        return Err(format!(
            "{what} {} must hold the secret on one line",
            path.display()
        ));
    }
    Ok(line.to_string())
}

/// `[console.oidc]`: people sign in with the deployment's OpenID
/// provider (authorization code with PKCE; Airlock a confidential client).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OidcConfig {
    /// Exactly as the provider writes it in `iss`.
    pub issuer: String,
    pub client_id: String,
    /// A file holding the client's secret (and nothing else but a final
    /// newline), readable by Airlock only: never in this file.
    pub client_secret_file: PathBuf,
    /// This console's callback as browsers reach it, registered with the
    /// provider: `https://HOST/console/oidc/callback`.
    pub redirect_uri: String,
    /// The ID token claim naming the person (default `sub`; `email` only
    /// when the token says `email_verified: true`). Keep it, and
    /// `identity_prefix`, as `[oauth]` names the same issuer's people, so
    /// a person is one identity in the console and in their agent's
    /// calls (and cannot approve their own).
    #[serde(default = "default_identity_claim")]
    pub identity_claim: String,
    /// Identities are `PREFIX:VALUE` (default `sso`, as `[oauth]`).
    pub identity_prefix: Option<String>,
    /// The claim listing the person's groups (default `groups`).
    #[serde(default = "default_groups_claim")]
    pub groups_claim: String,
    /// Members of these groups are approvers.
    #[serde(default)]
    pub approver_groups: BTreeSet<String>,
    /// Members of these groups are auditors.
    #[serde(default)]
    pub auditor_groups: BTreeSet<String>,
    /// Scopes asked for besides `openid` (default `email`); a provider
    /// that puts groups in the ID token only when asked needs its scope
    /// here too.
    pub scopes: Option<Vec<String>>,
    /// ID token signature algorithms accepted (default RS256 and ES256).
    pub algorithms: Option<Vec<String>>,
    /// CA certificates (PEM) for a provider signed by a private CA.
    pub ca_file: Option<PathBuf>,
    /// How long a sign-in through the provider lasts, in minutes (default
    /// 60, at most `[console] session_minutes`): Airlock cannot ask the
    /// provider whether the person is still in their groups, so this is
    /// how long a removal there takes to reach the console. Signing in
    /// again is one click while the provider's own session lasts.
    pub session_minutes: Option<u64>,
}

/// How long a provider sign-in lasts unless `[console.oidc]
/// session_minutes` says.
pub const DEFAULT_PROVIDER_SESSION_MINUTES: u64 = 60;

fn default_identity_claim() -> String {
    "sub".into()
}
fn default_groups_claim() -> String {
    "groups".into()
}

/// The identity prefix when `[console.oidc]` names none (as `[oauth]`).
pub const DEFAULT_IDENTITY_PREFIX: &str = "sso";

/// The longest sign-in the console keeps.
pub const MAX_SESSION_MINUTES: u64 = 24 * 60;

/// How long a sign-in lasts unless `session_minutes` says.
pub const DEFAULT_SESSION_MINUTES: u64 = 8 * 60;

/// The most groups a sign-in keeps, so its record stays small.
pub const MAX_KEPT_GROUPS: usize = 4;
/// The longest group name a sign-in keeps.
pub const MAX_GROUP_CHARS: usize = 64;

/// What a signed-in person may do in the console.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads pending requests and what they would change.
    Auditor,
    /// Also decides them.
    Approver,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Auditor => "auditor",
            Role::Approver => "approver",
        }
    }
}

impl ConsoleConfig {
    /// Settings that would make the console useless or a session endless.
    pub fn check(&self) -> Result<(), String> {
        let groups = self
            .oidc
            .as_ref()
            .is_some_and(|o| !o.approver_groups.is_empty() || !o.auditor_groups.is_empty());
        if self.approvers.is_empty() && self.auditors.is_empty() && !groups {
            return Err("[console] names nobody: list identities in approvers (may decide) or auditors (may read), or groups in [console.oidc] approver_groups or auditor_groups, or remove [console]".into());
        }
        if self.webhook_url_file.is_some() && self.public_url().is_none() {
            return Err("[console] webhook_url_file needs public_url (where people reach the console, for the message's link), or [console.oidc] redirect_uri to take it from".into());
        }
        if let Some(o) = &self.oidc {
            if o.session_minutes == Some(0) {
                return Err("[console.oidc] session_minutes = 0 would end every provider sign-in at once; give 1 or more (default 60)".into());
            }
            let prefix = o
                .identity_prefix
                .as_deref()
                .unwrap_or(DEFAULT_IDENTITY_PREFIX);
            if prefix.is_empty()
                || !prefix
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return Err(format!("[console.oidc] identity_prefix = {prefix:?}: use letters, digits, - and _ (identities are PREFIX:VALUE, never a key's plain name)"));
            }
        }
        match self.session_minutes {
            Some(0) => Err("[console] session_minutes = 0 would sign everyone out at once; give 1 to 1440".into()),
            Some(m) if m > MAX_SESSION_MINUTES => Err(format!(
                "[console] session_minutes = {m} is longer than a day ({MAX_SESSION_MINUTES}); sign in again each day instead"
            )),
            _ => Ok(()),
        }
    }

    /// Checks `[console.oidc]` against `[oauth]`: a person must be one
    /// identity in the console and in their agent's calls, or the
    /// four-eyes rule (an exact comparison of identities) would let them
    /// approve their own requests. So an issuer both name must name its
    /// people with the same claim and prefix, and the console's prefix
    /// must not be another issuer's.
    pub fn check_with_oauth(&self, oauth: &airlock_oauth::OAuthConfig) -> Result<(), String> {
        let Some(o) = &self.oidc else {
            return Ok(());
        };
        let Ok((_, issuers)) = oauth.check() else {
            return Ok(()); // [oauth]'s own check says what is wrong
        };
        let prefix = format!(
            "{}:",
            o.identity_prefix
                .as_deref()
                .unwrap_or(DEFAULT_IDENTITY_PREFIX)
        );
        for i in &issuers {
            if i.issuer == o.issuer {
                if i.identity_claim != o.identity_claim || i.identity_prefix != prefix {
                    return Err(format!(
                        "[console.oidc] names {}'s people {prefix}<{}> and [oauth] names them {}<{}>: give [console.oidc] identity_claim = {:?} and identity_prefix = {:?}, so a person is one identity in the console and in their agent's calls (else they could approve their own requests)",
                        o.issuer,
                        o.identity_claim,
                        i.identity_prefix,
                        i.identity_claim,
                        i.identity_claim,
                        i.identity_prefix.trim_end_matches(':'),
                    ));
                }
            } else if i.identity_prefix == prefix {
                return Err(format!(
                    "[console.oidc] identity_prefix {:?} is [oauth] issuer {}'s: the console's people would be named as that issuer's; choose another prefix",
                    prefix.trim_end_matches(':'),
                    i.issuer
                ));
            }
        }
        Ok(())
    }

    /// Where people reach the console: `public_url`, else the origin of
    /// the provider's redirect URI.
    pub fn public_url(&self) -> Option<String> {
        if let Some(u) = &self.public_url {
            return Some(u.clone());
        }
        let redirect = &self.oidc.as_ref()?.redirect_uri;
        let u = url::Url::parse(redirect).ok()?;
        Some(u.origin().ascii_serialization())
    }

    /// The role `identity` has, if any: an approver also reads.
    pub fn role_of(&self, identity: &str) -> Option<Role> {
        self.role_with_groups(identity, &[])
    }

    /// The role `identity`, in `groups` at the OpenID provider, has: the
    /// wider of what the lists and `[console.oidc]`'s groups give.
    pub fn role_with_groups(&self, identity: &str, groups: &[String]) -> Option<Role> {
        let (approver_groups, auditor_groups) = match &self.oidc {
            Some(o) => (&o.approver_groups, &o.auditor_groups),
            None => return self.listed_role(identity),
        };
        let in_any = |set: &BTreeSet<String>| groups.iter().any(|g| set.contains(g));
        let by_groups = if in_any(approver_groups) {
            Some(Role::Approver)
        } else if in_any(auditor_groups) {
            Some(Role::Auditor)
        } else {
            None
        };
        self.listed_role(identity).max(by_groups)
    }

    /// The groups among `groups` that give a role: all a sign-in keeps.
    pub fn groups_that_matter(&self, groups: &[String]) -> Vec<String> {
        let Some(o) = &self.oidc else {
            return Vec::new();
        };
        let mut kept: Vec<String> = groups
            .iter()
            .filter(|g| g.len() <= MAX_GROUP_CHARS)
            .filter(|g| o.approver_groups.contains(*g) || o.auditor_groups.contains(*g))
            .cloned()
            .collect();
        kept.sort();
        kept.dedup();
        // Approver groups first, so the role worked out from what is kept
        // is the one worked out from all.
        kept.sort_by_key(|g| !o.approver_groups.contains(g));
        kept.truncate(MAX_KEPT_GROUPS);
        kept
    }

    fn listed_role(&self, identity: &str) -> Option<Role> {
        if self.approvers.contains(identity) {
            Some(Role::Approver)
        } else if self.auditors.contains(identity) {
            Some(Role::Auditor)
        } else {
            None
        }
    }

    /// How long a sign-in through the provider lasts.
    pub fn provider_session_ms(&self) -> i64 {
        let minutes = self
            .oidc
            .as_ref()
            .and_then(|o| o.session_minutes)
            .unwrap_or(DEFAULT_PROVIDER_SESSION_MINUTES)
            .clamp(1, MAX_SESSION_MINUTES);
        ((minutes * 60_000) as i64).min(self.session_ms())
    }

    pub fn session_ms(&self) -> i64 {
        let minutes = self.session_minutes.unwrap_or(DEFAULT_SESSION_MINUTES);
        (minutes.min(MAX_SESSION_MINUTES) * 60_000) as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_and_their_checks() {
        let c = ConsoleConfig {
            approvers: ["rita".to_string()].into(),
            auditors: ["rita".to_string(), "local".to_string()].into(),
            session_minutes: None,
            oidc: None,
            ..ConsoleConfig::default()
        };
        c.check().unwrap();
        assert_eq!(c.role_of("rita"), Some(Role::Approver), "the wider role");
        assert_eq!(c.role_of("local"), Some(Role::Auditor));
        assert_eq!(c.role_of("alice"), None);
        let groups = ConsoleConfig {
            approvers: Default::default(),
            auditors: ["sso:bob".to_string()].into(),
            session_minutes: None,
            webhook_url_file: None,
            webhook_ca_file: None,
            public_url: None,
            oidc: Some(OidcConfig {
                issuer: "https://idp.example.test".into(),
                client_id: "airlock".into(),
                client_secret_file: "/dev/null".into(),
                redirect_uri: "https://a.example.test/console/oidc/callback".into(),
                identity_claim: "sub".into(),
                identity_prefix: None,
                groups_claim: "groups".into(),
                approver_groups: ["ops-leads".to_string()].into(),
                auditor_groups: ["ops".to_string()].into(),
                scopes: None,
                algorithms: None,
                ca_file: None,
                session_minutes: None,
            }),
        };
        groups.check().unwrap();
        assert_eq!(
            groups.provider_session_ms(),
            3_600_000,
            "an hour unless set"
        );
        let g = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            groups.role_with_groups("sso:x", &g(&["ops", "ops-leads"])),
            Some(Role::Approver)
        );
        assert_eq!(
            groups.role_with_groups("sso:x", &g(&["ops"])),
            Some(Role::Auditor)
        );
        assert_eq!(
            groups.role_with_groups("sso:bob", &g(&["ops-leads"])),
            Some(Role::Approver),
            "the wider role"
        );
        assert_eq!(groups.role_with_groups("sso:bob", &[]), Some(Role::Auditor));
        assert_eq!(groups.role_with_groups("sso:x", &g(&["dev"])), None);
        assert_eq!(
            groups.groups_that_matter(&g(&["dev", "ops", "ops"])),
            g(&["ops"])
        );
        assert_eq!(c.session_ms(), 8 * 3_600_000);
        let e = ConsoleConfig::default().check().unwrap_err();
        assert!(e.contains("approvers"), "{e}");
        for (m, needle) in [(0, "sign everyone out"), (1441, "longer than a day")] {
            let e = ConsoleConfig {
                session_minutes: Some(m),
                ..c.clone()
            }
            .check()
            .unwrap_err();
            assert!(e.contains(needle), "{e}");
        }
    }
}
