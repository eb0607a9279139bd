//! Turning the collector's three lists into catalog entries, resources and
//! prompts. Whatever does not fit (a bad name, a schema the validator
//! cannot compile) is left out with a warning, never trusted half-way.

use std::collections::{HashMap, HashSet};

use serde::Deserialize;
use serde_json::{json, Value};

use crate::{template::Template, TierRule, BACKEND_ID, NAMESPACE};
use airlock_catalog::spec::{Hints, Tier, ToolSpec};

/// One discovered tool: the catalog's spec and the collector's own name.
#[derive(Clone, Debug, PartialEq)]
pub struct Tool {
    pub spec: ToolSpec,
    pub original: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Resource {
    pub name: String,
    pub uri: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub mime_type: String,
    pub content: String,
    pub live: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct PromptArgument {
    pub name: String,
    pub description: Option<String>,
    pub required: bool,
}

pub struct Prompt {
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub arguments: Vec<PromptArgument>,
    /// (role, template)
    pub messages: Vec<(String, Template)>,
}

fn valid_original(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// `quox_` + the name with `.` and `-` as `_`, so scripts can write
/// `tools.quox_docker_status`.
pub fn catalog_name(original: &str) -> String {
    format!("{NAMESPACE}{}", original.replace(['.', '-'], "_"))
}

/// The stable key of the collector tool `original` (`quox:docker.restart`):
/// policy lists and approvals bind to it, whatever catalog name the tool
/// has after another tool joins the list.
pub fn key_of(original: &str) -> String {
    format!("{BACKEND_ID}:{original}")
}

/// The name for a tool whose [`catalog_name`] another tool has too
/// (`fleet.status` and `fleet_status`): `.` as `_dot_` and `-` as `_dash_`,
/// so both stay callable and neither takes the other's place. A name
/// without either keeps the plain form.
pub fn spelled_out_name(original: &str) -> String {
    format!(
        "{NAMESPACE}{}",
        original.replace('.', "_dot_").replace('-', "_dash_")
    )
}

fn tier_for(original: &str, rules: &[TierRule], default: Tier) -> Tier {
    rules
        .iter()
        .find(|r| glob(&r.pattern, original))
        .map(|r| r.tier)
        .unwrap_or(default)
}

/// `*` matches any run of characters; everything else itself.
pub fn glob(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first) || name.len() < first.len() + last.len() || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

#[derive(Deserialize)]
struct RawTool {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    input_schema: Option<Value>,
}

pub fn tools(list: &Value, rules: &[TierRule], default: Tier) -> Vec<Tool> {
    let raw = list.get("tools").cloned().unwrap_or(Value::Null);
    let raw: Vec<Value> = serde_json::from_value(raw).unwrap_or_default();
    // How many tools map to each plain name: a name two of them would
    // share is spelled out for those that need it.
    let mut sharing: HashMap<String, usize> = HashMap::new();
    for item in &raw {
        if let Some(name) = item.get("name").and_then(Value::as_str) {
            if valid_original(name) {
                *sharing.entry(catalog_name(name)).or_default() += 1;
            }
        }
    }
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for item in raw {
        let Ok(t) = serde_json::from_value::<RawTool>(item) else {
            tracing::warn!("collector tool without a name left out");
            continue;
        };
        if !valid_original(&t.name) {
            tracing::warn!(
                "collector tool name {:?} does not match ^[A-Za-z0-9_.-]{{1,128}}$; left out",
                t.name.chars().take(140).collect::<String>()
            );
            continue;
        }
        let plain = catalog_name(&t.name);
        let name = if sharing.get(&plain).is_some_and(|n| *n > 1) && t.name.contains(['.', '-']) {
            spelled_out_name(&t.name)
        } else {
            plain
        };
        if !seen.insert(name.clone()) {
            tracing::warn!(
                "collector tool {} maps to {name}, which another collector tool already has; left out",
                t.name
            );
            continue;
        }
        let mut schema = t
            .input_schema
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
        if schema.get("type").is_none() {
            schema["type"] = json!("object");
        }
        if let Err(e) = jsonschema::validator_for(&schema) {
            tracing::warn!(
                "collector tool {}: its input schema does not compile ({e}); left out",
                t.name
            );
            continue;
        }
        let tier = tier_for(&t.name, rules, default);
        let description = t.description.trim().to_string();
        let summary = description
            .split_terminator(['\n', '.'])
            .next()
            .unwrap_or("")
            .trim()
            .chars()
            .take(200)
            .collect::<String>();
        out.push(Tool {
            spec: ToolSpec {
                name,
                summary: if summary.is_empty() {
                    format!("QuoxCORE collector tool {}", t.name)
                } else {
                    summary
                },
                description: format!("{description}\n(QuoxCORE collector tool `{}`)", t.name),
                input_schema: schema,
                output_schema: None,
                tier,
                hints: Hints::for_tier(tier),
                backend: BACKEND_ID.to_string(),
                path_params: Vec::new(),
                endpoint: None,
                keywords: String::new(),
                // The collector's own name is what the tool is; the two
                // spellings of it are names a policy may use, whichever
                // one the catalog gives it today.
                key: key_of(&t.name),
                aliases: {
                    let mut a = vec![catalog_name(&t.name), spelled_out_name(&t.name)];
                    a.dedup();
                    a
                },
            },
            original: t.name,
        });
    }
    out
}

fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_string)
}

pub fn resources(list: &Value) -> Vec<Resource> {
    let items = list
        .get("resources")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    items
        .iter()
        .filter_map(|r| {
            let uri = text(r, "uri").filter(|u| u.contains("://") && u.len() <= 512)?;
            Some(Resource {
                name: text(r, "name").unwrap_or_else(|| uri.clone()),
                title: text(r, "title"),
                description: text(r, "description"),
                mime_type: text(r, "mimeType").unwrap_or_else(|| "text/plain".into()),
                content: match r.get("content") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Null) | None => String::new(),
                    Some(other) => other.to_string(),
                },
                live: r.get("live").and_then(Value::as_bool).unwrap_or(false),
                uri,
            })
        })
        .collect()
}

pub fn prompts(list: &Value) -> Vec<Prompt> {
    let items = list
        .get("prompts")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    items
        .iter()
        .filter_map(|p| {
            let name = text(p, "name").filter(|n| valid_original(n))?;
            let arguments = p
                .get("arguments")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|arg| {
                            Some(PromptArgument {
                                name: text(arg, "name")?,
                                description: text(arg, "description"),
                                required: arg
                                    .get("required")
                                    .and_then(Value::as_bool)
                                    .unwrap_or(false),
                            })
                        })
                        .collect()
                })
                .unwrap_or_default();
            let messages = p
                .get("messages")
                .and_then(Value::as_array)
                .map(|m| {
                    m.iter()
                        .filter_map(|msg| {
                            let role = match text(msg, "role").as_deref() {
                                Some("assistant") => "assistant",
                                _ => "user",
                            };
                            Some((role.to_string(), Template::parse(&text(msg, "text")?)))
                        })
                        .collect()
                })
                .unwrap_or_default();
            Some(Prompt {
                name,
                title: text(p, "title"),
                description: text(p, "description"),
                arguments,
                messages,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob("docker_*", "docker_status"));
        assert!(glob("*", "x"));
        assert!(glob("fleet*status", "fleet.status"));
        assert!(!glob("docker_*", "ssh_exec"));
        assert!(glob("ssh_exec", "ssh_exec"));
        assert!(!glob("a*a", "a"));
    }

    #[test]
    fn tools_are_namespaced_tiered_and_checked() {
        let list = json!({"tools": [
            {"name": "fleet.status", "description": "Fleet health. More.", "input_schema": {"type": "object", "properties": {}}},
            {"name": "fleet-status", "description": "a clash after mapping"},
            {"name": "fleet_status", "description": "the plain one"},
            {"name": "fleet_status", "description": "the same name twice: left out"},
            {"name": "bad name!", "description": ""},
            {"name": "bad_schema", "input_schema": {"type": "object", "properties": {"x": {"type": "no-such-type"}}}},
            {"name": "ssh_exec"}
        ]});
        let rules = [TierRule {
            pattern: "fleet*".into(),
            tier: Tier::Read,
        }];
        let tools = tools(&list, &rules, Tier::Admin);
        let names: Vec<(&str, Tier)> = tools
            .iter()
            .map(|t| (t.spec.name.as_str(), t.spec.tier))
            .collect();
        assert_eq!(
            names,
            [
                ("quox_fleet_dot_status", Tier::Read),
                ("quox_fleet_dash_status", Tier::Read),
                ("quox_fleet_status", Tier::Read),
                ("quox_ssh_exec", Tier::Admin)
            ],
            "tools whose names map alike are all kept, spelled out"
        );
        assert_eq!(tools[2].spec.summary, "the plain one");
        assert_eq!(tools[0].original, "fleet.status");
        assert_eq!(tools[0].spec.summary, "Fleet health");
    }
}
