//! Who may call what. Each identity has a mode that grants tiers; allow and
//! deny lists can only take away from what the mode grants; `forbidden`
//! tools are never callable; a global read-only switch leaves only reads.
//!
//! Lists name tools by their stable key (`pve:POST /nodes/{node}/qemu/{vmid}/status/stop`,
//! `quox:docker.restart`), their catalog name, or an alias
//! ([`ToolSpec::answers_to`]): names a backend can move from one tool to
//! another never widen access. A deny entry denies every tool it names;
//! an allow entry allows a tool by name or alias only while that name
//! names no other tool (by key always).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use airlock_catalog::{
    catalog::Catalog,
    spec::{Tier, ToolSpec},
};

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
    /// Whether this identity may approve its own requests (in its client,
    /// or as `--by` itself on the command line). Off by default: four
    /// eyes. Unset, an identity from an OpenID provider gets what its
    /// issuer or groups say (`[oauth.issuers] approve_own`,
    /// `approve_own_groups`).
    pub approve_own: Option<bool>,
}

impl Default for Grant {
    fn default() -> Self {
        Self {
            mode: Mode::default(),
            allow: None,
            deny: BTreeSet::new(),
            approve_in_client: true,
            approve_own: None,
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
    /// Names and keys under a `dynamic` prefix (`quox_`, `quox:`) belong
    /// to backends that discover their tools later; they cannot be
    /// checked yet.
    pub fn new(
        config: PolicyConfig,
        catalog: &Catalog,
        dynamic: &[String],
    ) -> Result<Self, PolicyError> {
        let check = |list: String, names: &BTreeSet<String>| -> Result<(), PolicyError> {
            for tool in names {
                let later = dynamic.iter().any(|p| tool.starts_with(p.as_str()));
                if catalog.named_by(tool) == 0 && !later {
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

    /// Whether `identity` may approve its own requests: its
    /// `[identities]` grant's `approve_own` when set, else what its
    /// identity provider allows (`from_provider`), else no.
    pub fn approve_own(&self, identity: &str, from_provider: bool) -> bool {
        self.config
            .identities
            .get(identity)
            .and_then(|g| g.approve_own)
            .unwrap_or(from_provider)
    }

    pub fn read_only(&self) -> bool {
        self.config.read_only
    }

    /// Whether `identity` (with the mode its groups grant, if any) may call
    /// the tool `spec` of `catalog`; a denial says why and what would
    /// change it.
    pub fn decide(
        &self,
        identity: &str,
        from_groups: Option<Mode>,
        spec: &ToolSpec,
        catalog: &Catalog,
    ) -> Result<(), Denial> {
        let (tool, tier) = (spec.name.as_str(), spec.tier);
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
        if let Some(entry) = self.config.deny.iter().find(|e| spec.answers_to(e)) {
            return Err(Denial(format!(
                "{tool} is on the global deny list (policy.deny: `{entry}`)"
            )));
        }
        if let Some(g) = grant {
            if let Some(entry) = g.deny.iter().find(|e| spec.answers_to(e)) {
                return Err(Denial(format!(
                    "{tool} is on the deny list of identity {identity} (`{entry}`)"
                )));
            }
            if let Some(allow) = &g.allow {
                let allowed = allow
                    .iter()
                    .any(|e| *e == spec.key || (spec.answers_to(e) && catalog.named_by(e) == 1));
                if !allowed {
                    return Err(Denial(format!(
                        "{tool} is not on the allow list of identity {identity} (by its key `{}`, or by a name that names no other tool)",
                        spec.key
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
    use airlock_catalog::spec::{Hints, ToolSpec};
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
            key: String::new(),
            aliases: Vec::new(),
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

    /// `decide` for the tool named `tool` in [`catalog`].
    fn d(p: &Policy, who: &str, groups: Option<Mode>, tool: &str) -> Result<(), Denial> {
        let c = catalog();
        p.decide(who, groups, &c.get(tool).unwrap().spec, &c)
    }

    #[test]
    fn lists_bind_keys_and_names_never_widen() {
        // `x.restart` is spelled `q_x_restart` until `x_restart` appears
        // and takes that name; both answer to it.
        let t = |name: &str, original: &str| ToolSpec {
            name: name.into(),
            key: format!("q:{original}"),
            aliases: vec![format!("q_{}", original.replace('.', "_"))],
            ..catalog().get("op").unwrap().spec.clone()
        };
        let before = Catalog::build(vec![("q".into(), vec![t("q_x_restart", "x.restart")])])
            .unwrap()
            .0;
        let after = Catalog::build(vec![(
            "q".into(),
            vec![
                t("q_x_dot_restart", "x.restart"),
                t("q_x_restart", "x_restart"),
            ],
        )])
        .unwrap()
        .0;
        let grant = |deny: &[&str], allow: Option<&[&str]>| {
            let mut config = PolicyConfig::default();
            config.identities.insert(
                "o".into(),
                Grant {
                    mode: Mode::Operator,
                    deny: deny.iter().map(|s| s.to_string()).collect(),
                    allow: allow.map(|a| a.iter().map(|s| s.to_string()).collect()),
                    ..Grant::default()
                },
            );
            Policy::new(config, &before, &[]).unwrap()
        };
        let on = |p: &Policy, c: &Catalog, name: &str| {
            p.decide("o", None, &c.get(name).unwrap().spec, c).is_ok()
        };
        // Denied by its old name: still denied under the new one, and the
        // newcomer answering to that name is denied too (narrower only).
        let p = grant(&["q_x_restart"], None);
        assert!(!on(&p, &before, "q_x_restart"));
        assert!(!on(&p, &after, "q_x_dot_restart"));
        assert!(!on(&p, &after, "q_x_restart"));
        // Allowed by a name two tools now answer to: neither is allowed.
        let p = grant(&[], Some(&["q_x_restart"]));
        assert!(on(&p, &before, "q_x_restart"));
        assert!(!on(&p, &after, "q_x_restart"), "the newcomer is not let in");
        assert!(!on(&p, &after, "q_x_dot_restart"));
        // Allowed by key: exactly that tool, whatever its name.
        let p = grant(&[], Some(&["q:x.restart"]));
        assert!(on(&p, &after, "q_x_dot_restart"));
        assert!(!on(&p, &after, "q_x_restart"));
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
        assert!(d(&p, "alice", None, "read_a").is_ok());
        assert!(d(&p, "alice", None, "read_b")
            .unwrap_err()
            .0
            .contains("allow list"));
        assert!(d(&p, "alice", None, "adm")
            .unwrap_err()
            .0
            .contains("deny list"));
        // An allow list cannot lift bob above his mode.
        assert!(d(&p, "bob", None, "op")
            .unwrap_err()
            .0
            .contains("needs mode operator"));
        // Strangers get ro.
        assert!(d(&p, "mallory", None, "read_a").is_ok());
        assert!(d(&p, "mallory", None, "op").is_err());
        assert!(d(&p, "alice", None, "bad")
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
        assert!(d(&p, "dave@example.test", Some(Mode::Operator), "op").is_ok());
        assert!(d(&p, "dave@example.test", Some(Mode::Operator), "adm")
            .unwrap_err()
            .0
            .contains("has mode operator"));
        // An operator's explicit grant wins over the groups, both ways.
        assert_eq!(p.mode_of("carol@example.test", Some(Mode::Rw)), Mode::Ro);
        assert!(d(&p, "carol@example.test", Some(Mode::Rw), "op").is_err());
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
        assert!(d(&p, "root", None, "read_a").is_ok());
        assert!(d(&p, "root", None, "op")
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
