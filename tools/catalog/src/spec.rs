//! What a tool is: a stable name, words for people and agents, an exact
//! input schema, a tier, hints, and the backend that serves it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A parameter with more named values than this is a list to pick from
/// (`ostype`), not words that say what the tool does.
const MAX_ENUM_WORDS: usize = 8;

/// How much a tool can change. Identities are granted tiers through their
/// mode; `forbidden` is never callable, whatever the mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// Reads state; changes nothing.
    Read,
    /// Changes running state in a recoverable way (start, stop, reboot).
    Operate,
    /// Creates, reconfigures or destroys things.
    Admin,
    /// Too dangerous to offer to an agent at all (consoles, credentials,
    /// host power).
    Forbidden,
}

impl Tier {
    pub const ALL: [Tier; 4] = [Tier::Read, Tier::Operate, Tier::Admin, Tier::Forbidden];

    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Read => "read",
            Tier::Operate => "operate",
            Tier::Admin => "admin",
            Tier::Forbidden => "forbidden",
        }
    }
}

impl std::fmt::Display for Tier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Tier {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Tier::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| {
                format!("unknown tier `{s}`; expected read, operate, admin or forbidden")
            })
    }
}

/// MCP-style hints, so a client can warn before a destructive call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hints {
    pub read_only: bool,
    pub destructive: bool,
    pub idempotent: bool,
}

impl Hints {
    /// The usual hints of a tier: reads are read-only and idempotent,
    /// admin changes are destructive.
    pub fn for_tier(tier: Tier) -> Self {
        match tier {
            Tier::Read => Self {
                read_only: true,
                destructive: false,
                idempotent: true,
            },
            Tier::Operate => Self {
                read_only: false,
                destructive: false,
                idempotent: true,
            },
            Tier::Admin | Tier::Forbidden => Self {
                read_only: false,
                destructive: true,
                idempotent: false,
            },
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// A valid JavaScript identifier, stable across releases: scripts call
    /// `tools.<name>`.
    pub name: String,
    /// One line an agent reads in search results.
    pub summary: String,
    pub description: String,
    /// JSON Schema of the single argument object.
    pub input_schema: Value,
    /// JSON Schema of the result, when known (for the TypeScript
    /// declaration); `None` declares `unknown`.
    #[serde(default)]
    pub output_schema: Option<Value>,
    pub tier: Tier,
    pub hints: Hints,
    /// Id of the backend that serves it.
    pub backend: String,
    /// Arguments whose values become URL path segments; they are held to a
    /// strict pattern on top of the schema.
    #[serde(default)]
    pub path_params: Vec<String>,
    /// What the backend calls, for an agent that knows its API to confirm
    /// the match (`POST /nodes/{node}/qemu/{vmid}/status/start`); shown in
    /// search hits and schemas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Words operators use for what the tool does that its own text does
    /// not (`wakeonlan`: "wake on lan", "power on"); search reads them,
    /// agents never see them.
    #[serde(default, skip_serializing)]
    pub keywords: String,
    /// What the tool does, in words no backend can move to another
    /// operation: the backend's id and its own name for the operation
    /// (`pve:POST /nodes/{node}/qemu/{vmid}/status/stop`,
    /// `quox:docker.restart`). Catalog names can change (a collector adds
    /// `docker_restart` and `docker.restart` becomes
    /// `quox_docker_dot_restart`); policy lists and approvals bind to the
    /// key, with the name as an alias. Two tools may share a key when
    /// they make the same backend operation (`vm_create` and
    /// `backup_restore_vm`): the same request, approved or denied alike.
    /// Empty from a backend: the catalog makes it `<backend>:<name>`.
    #[serde(default, skip_serializing)]
    pub key: String,
    /// Other names a policy list may give this tool, fixed by what the
    /// tool is (a collector tool's `quox_docker_restart` and
    /// `quox_docker_dot_restart` for `docker.restart`), whichever its
    /// catalog name is today. A deny list entry matching any of them
    /// denies the tool; an allow list entry allows it only when the entry
    /// names no other tool (an ambiguous name widens nothing).
    #[serde(default, skip_serializing)]
    pub aliases: Vec<String>,
}

impl ToolSpec {
    /// Whether a policy list `entry` names this tool: its key, its
    /// catalog name, or one of its aliases.
    pub fn answers_to(&self, entry: &str) -> bool {
        entry == self.key || entry == self.name || self.aliases.iter().any(|a| a == entry)
    }
}

impl ToolSpec {
    /// Names of the argument object's properties, in schema order.
    /// Each parameter's description and, where it takes a few named
    /// values, those values: what search reads of the parameters beyond
    /// their names ("can it be snapshotted" is `feature`'s `snapshot`).
    pub fn param_text(&self) -> String {
        let Some(props) = self
            .input_schema
            .get("properties")
            .and_then(Value::as_object)
        else {
            return String::new();
        };
        let mut out = String::new();
        for p in props.values() {
            if let Some(d) = p.get("description").and_then(Value::as_str) {
                out.push_str(d);
                out.push('\n');
            }
            if let Some(values) = p.get("enum").and_then(Value::as_array) {
                if values.len() <= MAX_ENUM_WORDS {
                    for v in values.iter().filter_map(Value::as_str) {
                        out.push_str(v);
                        out.push(' ');
                    }
                    out.push('\n');
                }
            }
        }
        out
    }

    pub fn param_names(&self) -> Vec<&str> {
        self.input_schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().map(String::as_str).collect())
            .unwrap_or_default()
    }
}

/// Whether `name` can be written as `tools.<name>`.
pub fn is_js_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers() {
        assert!(is_js_identifier("vm_start"));
        assert!(is_js_identifier("$x1"));
        assert!(!is_js_identifier("1vm"));
        assert!(!is_js_identifier("vm-start"));
        assert!(!is_js_identifier("vm.start"));
        assert!(!is_js_identifier(""));
    }

    #[test]
    fn tiers_parse_and_order() {
        assert_eq!("operate".parse::<Tier>(), Ok(Tier::Operate));
        assert!("root".parse::<Tier>().is_err());
        assert!(Tier::Read < Tier::Admin);
    }
}
