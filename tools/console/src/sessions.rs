//! Who is signed in: a random id in an HttpOnly, Secure, SameSite=Strict
//! cookie, looked up here by its SHA-256 (so a copy of the table is no
//! key to it), with the person's identity, role, expiry and the token
//! every form they post must carry (CSRF).
//!
//! One process keeps its sign-ins in memory, at most [`MAX_SESSIONS`]:
//! past that, the one nearest its end goes first.

use std::{collections::HashMap, sync::Mutex};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::Role;

/// The cookie a sign-in lives in, sent back only to `/console`.
pub const COOKIE: &str = "airlock_console";

/// The most sign-ins one process keeps.
pub const MAX_SESSIONS: usize = 10_000;

/// One sign-in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    pub identity: String,
    pub role: Role,
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

#[derive(Default)]
pub struct Sessions {
    by_hash: Mutex<HashMap<[u8; 32], Session>>,
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
    /// Signs `identity` in as `role` until `expires_ms`; returns the id
    /// for the cookie.
    pub fn open(&self, identity: &str, role: Role, now_ms: i64, expires_ms: i64) -> String {
        let id = random_token();
        let mut all = self.by_hash.lock().unwrap_or_else(|p| p.into_inner());
        if all.len() >= MAX_SESSIONS {
            all.retain(|_, s| s.expires_ms > now_ms);
        }
        while all.len() >= MAX_SESSIONS {
            let nearest = all
                .iter()
                .min_by_key(|(_, s)| s.expires_ms)
                .map(|(k, _)| *k)
                .expect("a full map has a first entry");
            all.remove(&nearest);
        }
        all.insert(
            hash(&id),
            Session {
                identity: identity.to_string(),
                role,
                csrf: random_token(),
                expires_ms,
            },
        );
        id
    }

    /// The live session `id` names, if any (an expired one is forgotten).
    pub fn get(&self, id: &str, now_ms: i64) -> Option<Session> {
        let key = hash(id);
        let mut all = self.by_hash.lock().unwrap_or_else(|p| p.into_inner());
        match all.get(&key) {
            Some(s) if s.expires_ms > now_ms => Some(s.clone()),
            Some(_) => {
                all.remove(&key);
                None
            }
            None => None,
        }
    }

    pub fn close(&self, id: &str) {
        let mut all = self.by_hash.lock().unwrap_or_else(|p| p.into_inner());
        all.remove(&hash(id));
    }

    pub fn len(&self) -> usize {
        self.by_hash.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The session id in a `Cookie` header, if it carries ours.
pub fn cookie_value(header: &str) -> Option<&str> {
    header
        .split(';')
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
        .filter(|v| v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The `Set-Cookie` value that keeps `id` for `max_age_secs`; the cookie
/// never reaches a script, another site, or plain HTTP off this machine.
pub fn set_cookie(id: &str, max_age_secs: i64) -> String {
    format!(
        "{COOKIE}={id}; Path=/console; HttpOnly; Secure; SameSite=Strict; Max-Age={max_age_secs}"
    )
}

/// The `Set-Cookie` value that removes it.
pub fn clear_cookie() -> String {
    format!("{COOKIE}=; Path=/console; HttpOnly; Secure; SameSite=Strict; Max-Age=0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_open_expire_close_and_stay_bounded() {
        let s = Sessions::default();
        let id = s.open("rita", Role::Approver, 0, 1_000);
        let got = s.get(&id, 999).unwrap();
        assert_eq!((got.identity.as_str(), got.role), ("rita", Role::Approver));
        assert!(got.csrf_matches(&got.csrf.clone()));
        assert!(!got.csrf_matches(&random_token()));
        assert!(!got.csrf_matches(""));
        assert_eq!(s.get(&id, 1_000), None, "expired");
        assert!(s.is_empty(), "and forgotten");
        let id = s.open("rita", Role::Approver, 0, 1_000);
        s.close(&id);
        assert_eq!(s.get(&id, 1), None);
        for i in 0..MAX_SESSIONS + 10 {
            s.open("x", Role::Auditor, 0, 10_000 + i as i64);
        }
        assert_eq!(s.len(), MAX_SESSIONS);
    }

    #[test]
    fn only_our_cookie_of_the_right_shape_is_read() {
        let id = random_token();
        let header = format!("other=1; {COOKIE}={id}; x=y");
        assert_eq!(cookie_value(&header), Some(id.as_str()));
        assert_eq!(cookie_value(&format!("{COOKIE}=../../etc")), None);
        assert_eq!(cookie_value("other=1"), None);
        let c = set_cookie(&id, 60);
        for part in ["HttpOnly", "Secure", "SameSite=Strict", "Path=/console"] {
            assert!(c.contains(part), "{c}");
        }
    }
}
