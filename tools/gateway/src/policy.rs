//! Who may call what. Each identity has a mode that grants tiers; allow and
//! deny lists can only take away from what the mode grants; `forbidden`
//! tools are never callable; a global read-only switch leaves only reads.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::{catalog::Catalog, spec::Tier};

/// What an identity is trusted with; ordered by how much (ro < operator
/// < rw), so "the highest of these modes" is `max`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Read tools only (the default).
    #[default]
    Ro,
    /// Read and operate: power actions, not configuration.
    Operator,
    /// Read, operate and admin.
    Rw,
}

impl Mode {
    pub fn grants(self, tier: Tier) -> bool {
        match (self, tier) {
            (_, Tier::Forbidden) => false,
            (_, Tier::Read) => true,
            (Mode::Operator | Mode::Rw, Tier::Operate) => true,
            (Mode::Rw, Tier::Admin) => true,
            _ => false,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Ro => "ro",
            Mode::Operator => "operator",
            Mode::Rw => "rw",
        }
    }

    /// The least mode that grants `tier`.
    pub fn needed_for(tier: Tier) -> Option<Mode> {
        [Mode::Ro, Mode::Operator, Mode::Rw]
            .into_iter()
            .find(|m| m.grants(tier))
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "ro" => Ok(Mode::Ro),
            "operator" => Ok(Mode::Operator),
            "rw" => Ok(Mode::Rw),
            other => Err(format!(
                "unknown mode `{other}`; expected ro, operator or rw"
            )),
        }
    }
}

/// One identity's grant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Grant {
    pub mode: Mode,
    /// When set, only these tools (still within the mode).
    pub allow: Option<BTreeSet<String>>,
    pub deny: BTreeSet<String>,
    /// Whether this identity's calls may be approved by the person in its
    /// MCP client. `false`: every approval comes from an operator out of
    /// band (`airlock approvals approve`), so the client (or an agent
    /// driving it) cannot approve its own calls.
    pub approve_in_client: bool,
}

impl Default for Grant {
    fn default() -> Self {
        Self {
            mode: Mode::default(),
            allow: None,
            deny: BTreeSet::new(),
            approve_in_client: true,
        }
    }
}

/// The whole policy, as configured.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyConfig {
    /// Refuse every call that is not a read, for everyone.
    pub read_only: bool,
    /// Tools nobody may call.
    pub deny: BTreeSet<String>,
    /// Identities by name. One not listed gets `ro` and no lists.
    pub identities: BTreeMap<String, Grant>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PolicyError {
    #[error("{list} names `{tool}`, which is not in the catalog{hint}")]
    UnknownTool {
        list: String,
        tool: String,
        hint: String,
    },
}

/// Why a call may not run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial(pub String);

pub struct Policy {
    config: PolicyConfig,
}

impl Policy {
    /// Checks every list against the catalog: a misspelt name in a deny
    /// list would silently allow the tool it meant, so it fails startup.
    /// Names under a `dynamic` prefix belong to backends that discover
    /// their tools later; they cannot be checked yet.
    pub fn new(
        config: PolicyConfig,
        catalog: &Catalog,
        dynamic: &[String],
    ) -> Result<Self, PolicyError> {
        let check = |list: String, names: &BTreeSet<String>| -> Result<(), PolicyError> {
            for tool in names {
                let later = dynamic.iter().any(|p| tool.starts_with(p.as_str()));
                if !catalog.contains(tool) && !later {
                    let hint = match catalog.suggest(tool).first() {
                        Some(s) => format!(" (did you mean `{s}`?)"),
                        None => String::new(),
                    };
                    return Err(PolicyError::UnknownTool {
                        list,
                        tool: tool.clone(),
                        hint,
                    });
                }
            }
            Ok(())
        };
        check("policy.deny".into(), &config.deny)?;
        for (who, grant) in &config.identities {
            check(format!("identities.{who}.deny"), &grant.deny)?;
            if let Some(allow) = &grant.allow {
                check(format!("identities.{who}.allow"), allow)?;
            }
        }
        Ok(Self { config })
    }

    /// The mode `identity` acts in: its `[identities]` grant when it has
    /// one (an operator's explicit word wins), else the mode its identity
    /// provider's groups map to (`from_groups`), else `ro`.
    pub fn mode_of(&self, identity: &str, from_groups: Option<Mode>) -> Mode {
        match self.config.identities.get(identity) {
            Some(g) => g.mode,
            None => from_groups.unwrap_or_default(),
        }
    }

    /// Whether `[identities]` has an entry for `identity`.
    pub fn lists(&self, identity: &str) -> bool {
        self.config.identities.contains_key(identity)
    }

    /// Whether `identity`'s approvals may be asked in its MCP client
    /// (identities not listed: yes, as the tiers allow).
    pub fn approve_in_client(&self, identity: &str) -> bool {
        self.config
            .identities
            .get(identity)
            .is_none_or(|g| g.approve_in_client)
    }

    pub fn read_only(&self) -> bool {
        self.config.read_only
    }

    /// Whether `identity` (with the mode its groups grant, if any) may call
    /// `tool` of `tier`; a denial says why and what would change it.
    pub fn decide(
        &self,
        identity: &str,
        from_groups: Option<Mode>,
        tool: &str,
        tier: Tier,
    ) -> Result<(), Denial> {
        if tier == Tier::Forbidden {
            return Err(Denial(format!(
                "{tool} is in the forbidden tier and can never be called through Airlock"
            )));
        }
        if self.config.read_only && tier != Tier::Read {
            return Err(Denial(format!(
                "Airlock is in read-only mode (policy.read_only = true), so {tier} tools such as {tool} are refused for everyone"
            )));
        }
        let grant = self.config.identities.get(identity);
        let mode = self.mode_of(identity, from_groups);
        if !mode.grants(tier) {
            let needed = Mode::needed_for(tier).map(|m| m.as_str()).unwrap_or("none");
            return Err(Denial(format!(
                "identity {identity} has mode {mode}, which does not include {tier} tools such as {tool}; it needs mode {needed}"
            )));
        }
        if self.config.deny.contains(tool) {
            return Err(Denial(format!(
                "{tool} is on the global deny list (policy.deny)"
            )));
        }
        if let Some(g) = grant {
            if g.deny.contains(tool) {
                return Err(Denial(format!(
                    "{tool} is on the deny list of identity {identity}"
                )));
            }
            if let Some(allow) = &g.allow {
                if !allow.contains(tool) {
                    return Err(Denial(format!(
                        "{tool} is not on the allow list of identity {identity}"
                    )));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Hints, ToolSpec};
    use serde_json::json;

    fn catalog() -> Catalog {
        let t = |name: &str, tier| ToolSpec {
            name: name.into(),
            summary: name.into(),
            description: String::new(),
            input_schema: json!({"type": "object"}),
            output_schema: None,
            tier,
            hints: Hints::for_tier(tier),
            backend: String::new(),
            path_params: vec![],
            endpoint: None,
            keywords: String::new(),
        };
        Catalog::build(vec![(
            "b".into(),
            vec![
                t("read_a", Tier::Read),
                t("read_b", Tier::Read),
                t("op", Tier::Operate),
                t("adm", Tier::Admin),
                t("bad", Tier::Forbidden),
            ],
        )])
        .unwrap()
        .0
    }

    #[test]
    fn modes_grant_tiers() {
        for (mode, read, operate, admin) in [
            (Mode::Ro, true, false, false),
            (Mode::Operator, true, true, false),
            (Mode::Rw, true, true, true),
        ] {
            assert_eq!(mode.grants(Tier::Read), read);
            assert_eq!(mode.grants(Tier::Operate), operate);
            assert_eq!(mode.grants(Tier::Admin), admin);
            assert!(!mode.grants(Tier::Forbidden));
        }
    }

    #[test]
    fn lists_only_narrow() {
        let mut config = PolicyConfig::default();
        config.identities.insert(
            "alice".into(),
            Grant {
                mode: Mode::Rw,
                allow: Some(["read_a".to_string(), "adm".to_string()].into()),
                deny: ["adm".to_string()].into(),
                ..Grant::default()
            },
        );
        config.identities.insert(
            "bob".into(),
            Grant {
                mode: Mode::Ro,
                allow: Some(["op".to_string()].into()),
                ..Grant::default()
            },
        );
        let p = Policy::new(config, &catalog(), &[]).unwrap();
        assert!(p.decide("alice", None, "read_a", Tier::Read).is_ok());
        assert!(p
            .decide("alice", None, "read_b", Tier::Read)
            .unwrap_err()
            .0
            .contains("allow list"));
        assert!(p
            .decide("alice", None, "adm", Tier::Admin)
            .unwrap_err()
            .0
            .contains("deny list"));
        // An allow list cannot lift bob above his mode.
        assert!(p
            .decide("bob", None, "op", Tier::Operate)
            .unwrap_err()
            .0
            .contains("needs mode operator"));
        // Strangers get ro.
        assert!(p.decide("mallory", None, "read_a", Tier::Read).is_ok());
        assert!(p.decide("mallory", None, "op", Tier::Operate).is_err());
        assert!(p
            .decide("alice", None, "bad", Tier::Forbidden)
            .unwrap_err()
            .0
            .contains("forbidden"));
    }

    #[test]
    fn modes_are_ordered_by_what_they_grant() {
        assert!(Mode::Ro < Mode::Operator && Mode::Operator < Mode::Rw);
        for (lower, higher) in [(Mode::Ro, Mode::Operator), (Mode::Operator, Mode::Rw)] {
            for tier in Tier::ALL {
                assert!(
                    !lower.grants(tier) || higher.grants(tier),
                    "{higher} grants all {lower} does"
                );
            }
        }
    }

    #[test]
    fn groups_grant_a_mode_only_to_identities_not_listed() {
        let mut config = PolicyConfig::default();
        config.identities.insert(
            "carol@example.test".into(),
            Grant {
                mode: Mode::Ro,
                ..Grant::default()
            },
        );
        let p = Policy::new(config, &catalog(), &[]).unwrap();
        // A stranger whose groups map to operator may operate, not admin.
        assert!(p
            .decide(
                "dave@example.test",
                Some(Mode::Operator),
                "op",
                Tier::Operate
            )
            .is_ok());
        assert!(p
            .decide(
                "dave@example.test",
                Some(Mode::Operator),
                "adm",
                Tier::Admin
            )
            .unwrap_err()
            .0
            .contains("has mode operator"));
        // An operator's explicit grant wins over the groups, both ways.
        assert_eq!(p.mode_of("carol@example.test", Some(Mode::Rw)), Mode::Ro);
        assert!(p
            .decide("carol@example.test", Some(Mode::Rw), "op", Tier::Operate)
            .is_err());
        assert_eq!(p.mode_of("dave@example.test", None), Mode::Ro);
    }

    #[test]
    fn read_only_switch_leaves_only_reads() {
        let mut config = PolicyConfig {
            read_only: true,
            ..PolicyConfig::default()
        };
        config.identities.insert(
            "root".into(),
            Grant {
                mode: Mode::Rw,
                ..Grant::default()
            },
        );
        let p = Policy::new(config, &catalog(), &[]).unwrap();
        assert!(p.decide("root", None, "read_a", Tier::Read).is_ok());
        assert!(p
            .decide("root", None, "op", Tier::Operate)
            .unwrap_err()
            .0
            .contains("read-only"));
    }

    #[test]
    fn unknown_names_in_lists_fail_startup() {
        let mut config = PolicyConfig::default();
        config.deny.insert("reed_a".into());
        let err = Policy::new(config, &catalog(), &[]).err().unwrap();
        assert!(
            err.to_string().contains("policy.deny names `reed_a`"),
            "{err}"
        );
        assert!(err.to_string().contains("did you mean `read_a`"), "{err}");
        // A name a discovering backend may add later is accepted.
        let mut config = PolicyConfig::default();
        config.deny.insert("quox_ssh_exec".into());
        assert!(Policy::new(config, &catalog(), &["quox_".into()]).is_ok());
        let mut config = PolicyConfig::default();
        config.identities.insert(
            "x".into(),
            Grant {
                allow: Some(["nope".to_string()].into()),
                ..Grant::default()
            },
        );
        assert!(Policy::new(config, &catalog(), &[])
            .err()
            .unwrap()
            .to_string()
            .contains("identities.x.allow"));
    }
}
