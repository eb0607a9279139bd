//! Which tier an API operation falls in, decided by ordered rules on method
//! and path. The operator's rules come first, then these defaults; the
//! first rule that matches decides.

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::apidata::Method;
use airlock_catalog::spec::Tier;

/// One rule as configured: `method` (`GET`, `POST`, `PUT`, `DELETE` or `*`)
/// and a regular expression matched against the whole path template.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierRule {
    #[serde(default = "any")]
    pub method: String,
    pub path: String,
    pub tier: Tier,
}

fn any() -> String {
    "*".into()
}

const DEFAULTS: &[(&str, &str, Tier)] = &[
    // Users, tokens, ACLs, realms, TFA: never through an agent.
    ("*", r"/access(/.*)?", Tier::Forbidden),
    // Consoles and tunnels.
    (
        "*",
        r".*/(vncproxy|termproxy|spiceproxy|vncwebsocket|mtunnel|mtunnelwebsocket|vncshell|spiceshell)",
        Tier::Forbidden,
    ),
    // Running commands or touching files inside a guest.
    (
        "*",
        r"/nodes/[^/]+/qemu/[^/]+/agent/(exec|exec-status|file-read|file-write|set-user-password)",
        Tier::Forbidden,
    ),
    // Host power, host commands, host network and certificates.
    (
        "POST",
        r"/nodes/[^/]+/(status|wakeonlan|execute)",
        Tier::Forbidden,
    ),
    (
        "POST|PUT|DELETE",
        r"/nodes/[^/]+/(network|certificates|subscription|apt|dns|hosts|time)(/.*)?",
        Tier::Forbidden,
    ),
    (
        "POST|PUT|DELETE",
        r"/cluster/(sdn|config|acme)(/.*)?",
        Tier::Forbidden,
    ),
    // Power actions on guests.
    (
        "POST",
        r"/nodes/[^/]+/(qemu|lxc)/[^/]+/status/(start|stop|shutdown|reboot|reset|suspend|resume)",
        Tier::Operate,
    ),
    // Reads that hand out what an agent must not hold: files from inside
    // a backup (as agent/file-read is, above), and the generated
    // cloud-init user data, a free-form text with the password hash
    // (secrets.rs masks its `password:` lines as well).
    (
        "GET",
        r"/nodes/[^/]+/storage/[^/]+/file-restore/download",
        Tier::Forbidden,
    ),
    (
        "GET",
        r"/nodes/[^/]+/qemu/[^/]+/cloudinit/dump",
        Tier::Admin,
    ),
    // Everything that only reads.
    ("GET", r".*", Tier::Read),
    // Everything else changes configuration or state.
    ("*", r".*", Tier::Admin),
];

pub struct TierRules {
    rules: Vec<(Vec<Method>, Regex, Tier)>,
    /// How many of `rules` (at the front) came from the operator.
    overrides: usize,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TierRuleError {
    #[error("tier rule for `{path}`: unknown method `{method}` (use GET, POST, PUT, DELETE, a `|` list, or *)")]
    Method { path: String, method: String },
    #[error("tier rule path `{path}` is not a valid regular expression: {message}")]
    Path { path: String, message: String },
}

fn methods(spec: &str, path: &str) -> Result<Vec<Method>, TierRuleError> {
    if spec == "*" {
        return Ok(vec![Method::Get, Method::Post, Method::Put, Method::Delete]);
    }
    spec.split('|')
        .map(|m| match m.trim().to_ascii_uppercase().as_str() {
            "GET" => Ok(Method::Get),
            "POST" => Ok(Method::Post),
            "PUT" => Ok(Method::Put),
            "DELETE" => Ok(Method::Delete),
            _ => Err(TierRuleError::Method {
                path: path.into(),
                method: spec.into(),
            }),
        })
        .collect()
}

impl TierRules {
    /// The operator's `overrides` followed by the defaults.
    pub fn new(overrides: &[TierRule]) -> Result<Self, TierRuleError> {
        let defaults = DEFAULTS.iter().map(|(m, p, t)| TierRule {
            method: m.to_string(),
            path: p.to_string(),
            tier: *t,
        });
        let mut rules = Vec::new();
        for r in overrides.iter().cloned().chain(defaults) {
            let re = Regex::new(&format!("^(?:{})$", r.path)).map_err(|e| TierRuleError::Path {
                path: r.path.clone(),
                message: e.to_string(),
            })?;
            rules.push((methods(&r.method, &r.path)?, re, r.tier));
        }
        Ok(Self {
            rules,
            overrides: overrides.len(),
        })
    }

    /// The tier the operator's own rules give, if any matches.
    pub fn override_for(&self, method: Method, path: &str) -> Option<Tier> {
        self.rules[..self.overrides]
            .iter()
            .find(|(ms, re, _)| ms.contains(&method) && re.is_match(path))
            .map(|(_, _, t)| *t)
    }

    pub fn defaults() -> Self {
        Self::new(&[]).expect("the default rules are valid")
    }

    pub fn tier(&self, method: Method, path: &str) -> Tier {
        self.rules
            .iter()
            .find(|(ms, re, _)| ms.contains(&method) && re.is_match(path))
            .map(|(_, _, t)| *t)
            .unwrap_or(Tier::Admin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let r = TierRules::defaults();
        assert_eq!(r.tier(Method::Get, "/nodes/{node}/qemu"), Tier::Read);
        assert_eq!(
            r.tier(Method::Post, "/nodes/{node}/qemu/{vmid}/status/start"),
            Tier::Operate
        );
        assert_eq!(
            r.tier(Method::Post, "/nodes/{node}/lxc/{vmid}/status/shutdown"),
            Tier::Operate
        );
        assert_eq!(
            r.tier(Method::Post, "/nodes/{node}/qemu/{vmid}/clone"),
            Tier::Admin
        );
        assert_eq!(
            r.tier(Method::Delete, "/nodes/{node}/qemu/{vmid}"),
            Tier::Admin
        );
        assert_eq!(r.tier(Method::Get, "/access/users"), Tier::Forbidden);
        assert_eq!(
            r.tier(Method::Post, "/access/users/{userid}/token/{tokenid}"),
            Tier::Forbidden
        );
        assert_eq!(
            r.tier(Method::Post, "/nodes/{node}/qemu/{vmid}/vncproxy"),
            Tier::Forbidden
        );
        assert_eq!(
            r.tier(Method::Get, "/nodes/{node}/qemu/{vmid}/vncwebsocket"),
            Tier::Forbidden
        );
        assert_eq!(
            r.tier(Method::Post, "/nodes/{node}/qemu/{vmid}/agent/exec"),
            Tier::Forbidden
        );
        assert_eq!(
            r.tier(Method::Post, "/nodes/{node}/status"),
            Tier::Forbidden
        );
        assert_eq!(
            r.tier(Method::Put, "/nodes/{node}/network/{iface}"),
            Tier::Forbidden
        );
        assert_eq!(r.tier(Method::Get, "/nodes/{node}/network"), Tier::Read);
        assert_eq!(
            r.tier(
                Method::Get,
                "/nodes/{node}/storage/{storage}/file-restore/download"
            ),
            Tier::Forbidden
        );
        assert_eq!(
            r.tier(Method::Get, "/nodes/{node}/qemu/{vmid}/cloudinit/dump"),
            Tier::Admin
        );
        assert_eq!(
            r.tier(Method::Get, "/nodes/{node}/qemu/{vmid}/cloudinit"),
            Tier::Read
        );
    }

    #[test]
    fn overrides_come_first() {
        let r = TierRules::new(&[TierRule {
            method: "POST".into(),
            path: r"/nodes/[^/]+/qemu/[^/]+/snapshot".into(),
            tier: Tier::Operate,
        }])
        .unwrap();
        assert_eq!(
            r.tier(Method::Post, "/nodes/{node}/qemu/{vmid}/snapshot"),
            Tier::Operate
        );
        assert_eq!(
            r.tier(Method::Post, "/nodes/{node}/lxc/{vmid}/snapshot"),
            Tier::Admin
        );
        assert!(TierRules::new(&[TierRule {
            method: "PATCH".into(),
            path: ".*".into(),
            tier: Tier::Read
        }])
        .is_err());
        assert!(TierRules::new(&[TierRule {
            method: "*".into(),
            path: "(".into(),
            tier: Tier::Read
        }])
        .is_err());
    }
}
