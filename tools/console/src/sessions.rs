//! Who is signed in: a random id in an HttpOnly, Secure, SameSite=Strict
//! cookie, looked up here by its SHA-256 (so a copy of the table is no
//! key to it), with the person's identity, role, expiry and the token
//! every form they post must carry (CSRF).
//!
//! One process keeps its sign-ins in memory, at most [`MAX_SESSIONS`]:
//! past that, the one nearest its end goes first. A deployment whose
//! state is in PostgreSQL keeps them there instead
//! (`ConsoleSessions`), so any replica knows a person signed in on
//! another.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use airlock_gateway::state::{ConsoleSessions, SessionError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::{Role, MAX_GROUP_CHARS, MAX_KEPT_GROUPS};

/// The cookie a sign-in lives in. `__Host-`: the browser keeps it only
/// when set Secure, for `/`, by this host itself, so no sibling subdomain
/// can plant or shadow one.
pub const COOKIE: &str = "__Host-airlock_console";

/// The most sign-ins one process keeps.
pub const MAX_SESSIONS: usize = 10_000;

/// The most one identity keeps: a new one ends its oldest.
pub const MAX_SESSIONS_PER_IDENTITY: usize =
    airlock_gateway::state::MAX_CONSOLE_SESSIONS_PER_IDENTITY as usize;

/// One sign-in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    pub identity: String,
    pub role: Role,
    /// The SHA-256 of the key it signed in with (hex): once that key is
    /// revoked, the sign-in opens nothing. Empty for a sign-in through the
    /// OpenID provider.
    pub key_sha256: String,
    /// Signed in through the OpenID provider (`[console.oidc]`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub provider: bool,
    /// The provider's groups of the person that give a console role
    /// (the rest are not kept): the role is worked out again from them
    /// and the current `[console]` on every request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// What every form posted in this session must carry.
    pub csrf: String,
    pub expires_ms: i64,
}

impl Session {
    /// Whether `token` is this session's CSRF token, compared in
    /// constant time.
    pub fn csrf_matches(&self, token: &str) -> bool {
        self.csrf.len() == token.len() && bool::from(self.csrf.as_bytes().ct_eq(token.as_bytes()))
    }
}

/// How someone proved who they are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Proof {
    /// A console key, by its SHA-256.
    Key([u8; 32]),
    /// The OpenID provider, which put them in these groups (those that
    /// matter to `[console]`).
    Provider { groups: Vec<String> },
}

#[derive(Default)]
pub struct Sessions {
    by_hash: Mutex<HashMap<[u8; 32], Session>>,
    /// Where a deployment's replicas share them, when they do.
    shared: Option<Arc<dyn ConsoleSessions>>,
}

fn hash(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

/// 32 random bytes as hex.
pub fn random_token() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the system has randomness");
    hex::encode(bytes)
}

impl Sessions {
    /// Sign-ins kept in `shared` when given, else in this process.
    pub fn new(shared: Option<Arc<dyn ConsoleSessions>>) -> Self {
        Self {
            by_hash: Mutex::default(),
            shared,
        }
    }

    /// Signs `identity` in as `role` until `expires_ms`; returns the id
    /// for the cookie.
    pub fn open(
        &self,
        identity: &str,
        role: Role,
        proof: &Proof,
        now_ms: i64,
        expires_ms: i64,
    ) -> Result<String, SessionError> {
        let id = random_token();
        let (key_sha256, provider, groups) = match proof {
            Proof::Key(k) => (hex::encode(k), false, Vec::new()),
            Proof::Provider { groups } => (
                String::new(),
                true,
                groups
                    .iter()
                    .filter(|g| g.len() <= MAX_GROUP_CHARS)
                    .take(MAX_KEPT_GROUPS)
                    .cloned()
                    .collect(),
            ),
        };
        let session = Session {
            identity: identity.to_string(),
            role,
            key_sha256,
            provider,
            groups,
            csrf: random_token(),
            expires_ms,
        };
        if let Some(shared) = &self.shared {
            let record = serde_json::to_string(&session).expect("a session serializes");
            shared.put(&hash(&id), identity, &record, expires_ms)?;
            return Ok(id);
        }
        let mut all = self.by_hash.lock().unwrap_or_else(|p| p.into_inner());
        if all.len() >= MAX_SESSIONS {
            all.retain(|_, s| s.expires_ms > now_ms);
        }
        let mut theirs: Vec<([u8; 32], i64)> = all
            .iter()
            .filter(|(_, s)| s.identity == identity)
            .map(|(k, s)| (*k, s.expires_ms))
            .collect();
        if theirs.len() >= MAX_SESSIONS_PER_IDENTITY {
            theirs.sort_by_key(|(_, expires)| *expires);
            for (k, _) in &theirs[..=theirs.len() - MAX_SESSIONS_PER_IDENTITY] {
                all.remove(k);
            }
        }
        while all.len() >= MAX_SESSIONS {
            let nearest = all
                .iter()
                .min_by_key(|(_, s)| s.expires_ms)
                .map(|(k, _)| *k)
                .expect("a full map has a first entry");
            all.remove(&nearest);
        }
        all.insert(hash(&id), session);
        Ok(id)
    }

    /// The live session `id` names, if any (an expired one is forgotten).
    pub fn get(&self, id: &str, now_ms: i64) -> Result<Option<Session>, SessionError> {
        let key = hash(id);
        if let Some(shared) = &self.shared {
            let Some(record) = shared.get(&key, now_ms)? else {
                return Ok(None);
            };
            // A record this build cannot read opens nothing.
            return Ok(serde_json::from_str::<Session>(&record)
                .ok()
                .filter(|s| s.expires_ms > now_ms));
        }
        let mut all = self.by_hash.lock().unwrap_or_else(|p| p.into_inner());
        match all.get(&key) {
            Some(s) if s.expires_ms > now_ms => Ok(Some(s.clone())),
            Some(_) => {
                all.remove(&key);
                Ok(None)
            }
            None => Ok(None),
        }
    }

    pub fn close(&self, id: &str) -> Result<(), SessionError> {
        if let Some(shared) = &self.shared {
            return shared.delete(&hash(id));
        }
        let mut all = self.by_hash.lock().unwrap_or_else(|p| p.into_inner());
        all.remove(&hash(id));
        Ok(())
    }

    /// Sign-ins this process keeps (none when they are shared).
    pub fn len(&self) -> usize {
        self.by_hash.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The session id in the `Cookie` headers, if they carry ours once (two
/// of the same name mean someone planted one: neither is used).
pub fn cookie_value<'a>(headers: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    the_one_cookie(headers, COOKIE)
        .filter(|v| v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The value of the only cookie called `name` in `headers`; `None` when
/// there is none or more than one.
pub fn the_one_cookie<'a>(
    headers: impl IntoIterator<Item = &'a str>,
    name: &str,
) -> Option<&'a str> {
    let mut found = headers
        .into_iter()
        .flat_map(|h| h.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(|(n, _)| *n == name)
        .map(|(_, value)| value);
    let first = found.next()?;
    found.next().is_none().then_some(first)
}

/// The `Set-Cookie` value that keeps `id` for `max_age_secs`; the cookie
/// never reaches a script, another site, or plain HTTP off this machine
/// (its path is `/`, as `__Host-` requires: `/mcp` ignores it).
pub fn set_cookie(id: &str, max_age_secs: i64) -> String {
    format!("{COOKIE}={id}; Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age={max_age_secs}")
}

/// The `Set-Cookie` value that removes it.
pub fn clear_cookie() -> String {
    format!("{COOKIE}=; Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age=0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_open_expire_close_and_stay_bounded() {
        let s = Sessions::default();
        let key = Proof::Key([7u8; 32]);
        let id = s.open("rita", Role::Approver, &key, 0, 1_000).unwrap();
        let got = s.get(&id, 999).unwrap().unwrap();
        assert_eq!(got.key_sha256, hex::encode([7u8; 32]));
        assert!(!got.provider && got.groups.is_empty());
        let many: Vec<String> = (0..20).map(|i| format!("g{i}")).collect();
        let sso = s
            .open(
                "sso:rita",
                Role::Approver,
                &Proof::Provider { groups: many },
                0,
                1_000,
            )
            .unwrap();
        let by_provider = s.get(&sso, 1).unwrap().unwrap();
        assert!(by_provider.provider && by_provider.key_sha256.is_empty());
        assert_eq!(by_provider.groups.len(), MAX_KEPT_GROUPS, "bounded");
        s.close(&sso).unwrap();
        assert_eq!((got.identity.as_str(), got.role), ("rita", Role::Approver));
        assert!(got.csrf_matches(&got.csrf.clone()));
        assert!(!got.csrf_matches(&random_token()));
        assert!(!got.csrf_matches(""));
        assert_eq!(s.get(&id, 1_000).unwrap(), None, "expired");
        assert!(s.is_empty(), "and forgotten");
        let id = s.open("rita", Role::Approver, &key, 0, 1_000).unwrap();
        s.close(&id).unwrap();
        assert_eq!(s.get(&id, 1).unwrap(), None);
        // One identity signing in again and again ends only its own.
        let rita = s.open("rita", Role::Approver, &key, 0, 1_000_000).unwrap();
        let first = s.open("x", Role::Auditor, &key, 0, 5_000).unwrap();
        for i in 0..MAX_SESSIONS_PER_IDENTITY * 3 {
            s.open("x", Role::Auditor, &key, 0, 10_000 + i as i64)
                .unwrap();
        }
        assert_eq!(s.len(), 1 + MAX_SESSIONS_PER_IDENTITY);
        assert!(s.get(&rita, 1).unwrap().is_some(), "rita's sign-in stays");
        assert_eq!(s.get(&first, 1).unwrap(), None, "x's oldest went");
        for i in 0..MAX_SESSIONS + 10 {
            s.open(&format!("u{i}"), Role::Auditor, &key, 0, 10_000 + i as i64)
                .unwrap();
        }
        assert_eq!(s.len(), MAX_SESSIONS);
    }

    #[test]
    fn only_our_cookie_of_the_right_shape_is_read() {
        let id = random_token();
        let header = format!("other=1; {COOKIE}={id}; x=y");
        assert_eq!(cookie_value([header.as_str()]), Some(id.as_str()));
        assert_eq!(cookie_value([format!("{COOKIE}=../../etc").as_str()]), None);
        assert_eq!(cookie_value(["other=1"]), None);
        let planted = format!("{COOKIE}={}", random_token());
        assert_eq!(
            cookie_value([header.as_str(), planted.as_str()]),
            None,
            "two: neither"
        );
        let c = set_cookie(&id, 60);
        for part in [
            "__Host-",
            "HttpOnly",
            "Secure",
            "SameSite=Strict",
            "Path=/;",
        ] {
            assert!(c.contains(part), "{c}");
        }
    }
}
