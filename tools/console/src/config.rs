//! `[console]`: who may use the operator console, and as what.

use std::collections::BTreeSet;

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
}

/// The longest sign-in the console keeps.
pub const MAX_SESSION_MINUTES: u64 = 24 * 60;

/// How long a sign-in lasts unless `session_minutes` says.
pub const DEFAULT_SESSION_MINUTES: u64 = 8 * 60;

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
        if self.approvers.is_empty() && self.auditors.is_empty() {
            return Err("[console] names nobody: list identities in approvers (may decide) or auditors (may read), or remove [console]".into());
        }
        match self.session_minutes {
            Some(0) => Err("[console] session_minutes = 0 would sign everyone out at once; give 1 to 1440".into()),
            Some(m) if m > MAX_SESSION_MINUTES => Err(format!(
                "[console] session_minutes = {m} is longer than a day ({MAX_SESSION_MINUTES}); sign in again each day instead"
            )),
            _ => Ok(()),
        }
    }

    /// The role `identity` has, if any: an approver also reads.
    pub fn role_of(&self, identity: &str) -> Option<Role> {
        if self.approvers.contains(identity) {
            Some(Role::Approver)
        } else if self.auditors.contains(identity) {
            Some(Role::Auditor)
        } else {
            None
        }
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
        };
        c.check().unwrap();
        assert_eq!(c.role_of("rita"), Some(Role::Approver), "the wider role");
        assert_eq!(c.role_of("local"), Some(Role::Auditor));
        assert_eq!(c.role_of("alice"), None);
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
