//! Airlock's own MCP resources: what a client (or the person behind it)
//! wants to know before writing a script — what the catalog holds, which
//! limits are in force, who this session is and what it may do — and one
//! template, `airlock://tools/{name}`, with a tool's declaration, whose
//! `name` the client can complete.
//!
//! Resources are read-only views; nothing here calls a backend. A
//! configured QuoxCORE collector's resources are listed after these and
//! read through it (live ones at most every 30 s).

use std::collections::BTreeMap;

use airlock_catalog::{
    catalog::{name_too_long, quote_name},
    visible, Catalog, SchemaAnswer, Tier,
};
use airlock_gateway::{Caller, Mode};
use rmcp::model::{
    CompletionInfo, ReadResourceResult, Resource, ResourceContents, ResourceTemplate,
};
use serde_json::{json, Value};

use super::Shared;

pub const CATALOG: &str = "airlock://catalog";
pub const LIMITS: &str = "airlock://limits";
pub const IDENTITY: &str = "airlock://identity";
const TOOL_PREFIX: &str = "airlock://tools/";
pub const TOOL_TEMPLATE: &str = "airlock://tools/{name}";
pub const EXECUTIONS: &str = "airlock://executions";
pub const EXECUTION_PREFIX: &str = "airlock://executions/";
pub const EXECUTION_TEMPLATE: &str = "airlock://executions/{id}";

const JSON: &str = "application/json";
const TYPESCRIPT: &str = "text/x-typescript";

/// How much of a client's URI an error quotes, in characters.
const QUOTED_URI_CHARS: usize = 128;

/// Why a resource could not be read; the message says what exists. What
/// the client sent is quoted cut and made visible, never whole.
#[derive(Debug, thiserror::Error)]
pub enum ResourceError {
    #[error(
        "no resource {0}; this server has {CATALOG}, {LIMITS}, {IDENTITY}, {EXECUTIONS}, {TOOL_TEMPLATE} and {EXECUTION_TEMPLATE}"
    )]
    Unknown(String),
    #[error(
        "the store of durable executions cannot be reached now; read {EXECUTIONS} again shortly"
    )]
    Unavailable,
    #[error(transparent)]
    Trace(#[from] super::traces::TraceError),
    #[error("{0}")]
    Collector(String),
    #[error("no tool `{name}` in the catalog{}", did_you_mean(.suggestions))]
    UnknownTool {
        name: String,
        suggestions: Vec<String>,
    },
    #[error("no tool `{name}` in the catalog: {rule}")]
    NameTooLong { name: String, rule: String },
}

fn did_you_mean(s: &[String]) -> String {
    if s.is_empty() {
        "; search finds tools by what they do".into()
    } else {
        format!("; did you mean {}?", s.join(", "))
    }
}

pub fn list(shared: &Shared) -> Vec<Resource> {
    let mut all = own();
    if let Some(c) = &shared.collector {
        all.extend(c.resources().into_iter().map(|r| {
            let mut res = Resource::new(r.uri, r.name).with_mime_type(r.mime_type);
            if let Some(t) = r.title {
                res = res.with_title(t);
            }
            if let Some(d) = r.description {
                res = res.with_description(format!("{d} (from the QuoxCORE collector)"));
            }
            res
        }));
    }
    all
}

fn own() -> Vec<Resource> {
    vec![
        Resource::new(CATALOG, "catalog")
            .with_title("Tool catalog summary")
            .with_description(
                "How many tools each backend offers, by tier (forbidden ones, which no mode may call, included) and by area (vm, ct, storage, ...).",
            )
            .with_mime_type(JSON),
        Resource::new(LIMITS, "limits")
            .with_title("Sandbox limits in force")
            .with_description("Time, memory, tool-call and result limits every execute runs under.")
            .with_mime_type(JSON),
        Resource::new(IDENTITY, "identity")
            .with_title("This session's identity and mode")
            .with_description(
                "Who tool calls run as, which tiers that mode may call, and which need approval.",
            )
            .with_mime_type(JSON),
        Resource::new(EXECUTIONS, "executions")
            .with_title("Your durable executions")
            .with_description(
                "This identity's executions the deployment holds: waiting (for decisions, or to be followed), running, or cut off when their server stopped, each with the arguments that follow it. An execute whose answer never came is here.",
            )
            .with_mime_type(JSON),
    ]
}

pub fn templates() -> Vec<ResourceTemplate> {
    vec![
        ResourceTemplate::new(TOOL_TEMPLATE, "tool")
            .with_title("One tool's declaration")
            .with_description(
                "A tool's TypeScript declaration, tier and description, as get_schema gives it.",
            )
            .with_mime_type(TYPESCRIPT),
        ResourceTemplate::new(EXECUTION_TEMPLATE, "execution")
            .with_title("One execution's call trace")
            .with_description(
                "Every tool call an execute made (tool, start, duration, status) and its stats; the id is in the result. Kept 10 minutes, for the identity that ran it.",
            )
            .with_mime_type(JSON),
    ]
}

/// Reads `uri` as `caller`.
pub async fn read(
    shared: &Shared,
    caller: &Caller,
    uri: &str,
) -> Result<ReadResourceResult, ResourceError> {
    if let (false, Some(c)) = (uri.starts_with("airlock://"), &shared.collector) {
        let r = c
            .read_resource(uri)
            .await
            .map_err(|e| ResourceError::Collector(e.to_string()))?;
        return Ok(ReadResourceResult::new(vec![ResourceContents::text(
            r.content, uri,
        )
        .with_mime_type(r.mime_type)]));
    }
    let (text, mime) = match uri {
        CATALOG => (pretty(catalog(shared)), JSON),
        LIMITS => (
            pretty(serde_json::to_value(&shared.limits).unwrap_or(Value::Null)),
            JSON,
        ),
        IDENTITY => (pretty(whoami(shared, caller)), JSON),
        EXECUTIONS => (pretty(executions(shared, caller)?), JSON),
        _ => {
            if let Some(name) = uri.strip_prefix(TOOL_PREFIX) {
                (tool(shared, name)?, TYPESCRIPT)
            } else if let Some(id) = uri.strip_prefix(EXECUTION_PREFIX) {
                (shared.traces.read(id, &caller.identity)?, JSON)
            } else {
                return Err(ResourceError::Unknown(visible::quote(
                    uri,
                    QUOTED_URI_CHARS,
                )));
            }
        }
    };
    Ok(ReadResourceResult::new(vec![ResourceContents::text(
        text, uri,
    )
    .with_mime_type(mime)]))
}

/// Tool names starting with `prefix`, for the template's `name`.
pub fn complete_tool_name(shared: &Shared, prefix: &str) -> CompletionInfo {
    complete_in(&shared.gateway.catalog(), prefix)
}

/// [`complete_tool_name`] over a catalog. A prefix longer than any tool
/// name may be completes to nothing, without a look at the catalog.
fn complete_in(catalog: &Catalog, prefix: &str) -> CompletionInfo {
    if name_too_long(prefix).is_some() {
        return CompletionInfo::default();
    }
    let mut names: Vec<String> = catalog
        .iter()
        .filter(|e| e.spec.tier != Tier::Forbidden && e.spec.name.starts_with(prefix))
        .map(|e| e.spec.name.clone())
        .collect();
    names.sort();
    let total = names.len();
    names.truncate(CompletionInfo::MAX_VALUES);
    CompletionInfo::with_pagination(
        names,
        Some(total as u32),
        total > CompletionInfo::MAX_VALUES,
    )
    .unwrap_or_default()
}

/// The caller's rows in the store of durable executions, oldest first.
fn executions(shared: &Shared, caller: &Caller) -> Result<Value, ResourceError> {
    let rows = shared
        .durable
        .list(&caller.identity)
        .map_err(|_| ResourceError::Unavailable)?;
    let now = crate::durable::born_now();
    let rows: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({
                "execution": r.execution,
                "state": r.standing(),
                "started_s_ago": now.saturating_sub(r.born_ms).max(0) / 1000,
                "waiting_for": r.waiting,
                "tool_calls": r.calls,
                "follow": {"execution": r.execution},
            })
        })
        .collect();
    Ok(json!({
        "executions": rows,
        "how": "follow one with execute({\"execution\": ID}): it goes on where it stopped and sends no change twice. One shown running whose server stopped can be followed once its lease has run out (a few minutes).",
    }))
}

fn pretty(v: Value) -> String {
    serde_json::to_string_pretty(&v).unwrap_or_default()
}

fn catalog(shared: &Shared) -> Value {
    let mut backends: BTreeMap<&str, BTreeMap<&str, usize>> = BTreeMap::new();
    let mut areas: BTreeMap<&str, usize> = BTreeMap::new();
    let (mut total, mut forbidden) = (0, 0);
    let catalog = shared.gateway.catalog();
    for e in catalog.iter() {
        // Counted like the rest, as search counts them, and shown as a
        // tier of their own: an agent that finds a tool by name in the
        // backend's docs learns here that it exists and cannot be called.
        total += 1;
        if e.spec.tier == Tier::Forbidden {
            forbidden += 1;
        }
        *backends
            .entry(e.spec.backend.as_str())
            .or_default()
            .entry(e.spec.tier.as_str())
            .or_default() += 1;
        let area = e.spec.name.split('_').next().unwrap_or(&e.spec.name);
        *areas.entry(area).or_default() += 1;
    }
    json!({
        "tools": total,
        "callable": total - forbidden,
        "backends": backends,
        "areas": areas,
        "how": "search finds tools by what you want to do; get_schema gives their declarations; execute runs a script that calls them as tools.NAME(args)",
    })
}

fn whoami(shared: &Shared, caller: &Caller) -> Value {
    let identity = caller.identity.as_str();
    let mode = shared.gateway.mode_of(caller);
    let may_call: Vec<&str> = Tier::ALL
        .into_iter()
        .filter(|t| mode.grants(*t))
        .map(Tier::as_str)
        .collect();
    let asks: Vec<&str> = shared
        .gateway
        .approval_tiers()
        .iter()
        .filter(|t| mode.grants(**t))
        .map(|t| t.as_str())
        .collect();
    json!({
        "identity": identity,
        "mode": mode.as_str(),
        "may_call_tiers": may_call,
        "approval_needed_for": asks,
        "modes": {
            Mode::Ro.as_str(): "read tools only",
            Mode::Operator.as_str(): "read and operate (power actions)",
            Mode::Rw.as_str(): "read, operate and admin",
        },
    })
}

fn tool(shared: &Shared, name: &str) -> Result<String, ResourceError> {
    tool_in(&shared.gateway.catalog(), name)
}

/// A tool's declaration. A name longer than a tool name may be is refused
/// by that rule before any lookup, and never matched against the catalog
/// for suggestions.
fn tool_in(catalog: &Catalog, name: &str) -> Result<String, ResourceError> {
    if let Some(rule) = name_too_long(name) {
        return Err(ResourceError::NameTooLong {
            name: quote_name(name),
            rule,
        });
    }
    let hidden = catalog
        .get(name)
        .is_none_or(|e| e.spec.tier == Tier::Forbidden);
    match catalog.schemas(&[name.to_string()]).pop() {
        Some(SchemaAnswer::Found {
            tier,
            backend,
            typescript,
            ..
        }) if !hidden => Ok(format!(
            "// tier: {tier}, backend: {backend}\n{}\n",
            typescript.trim_end()
        )),
        _ => Err(ResourceError::UnknownTool {
            name: quote_name(name),
            suggestions: catalog.suggest(name),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_catalog::{Hints, ToolSpec};
    use serde_json::json;

    fn catalog() -> Catalog {
        let spec = ToolSpec {
            name: "vm_list".into(),
            summary: "List VMs".into(),
            description: String::new(),
            input_schema: json!({"type": "object"}),
            output_schema: None,
            tier: Tier::Read,
            hints: Hints::for_tier(Tier::Read),
            backend: String::new(),
            path_params: vec![],
            endpoint: None,
            keywords: String::new(),
            key: String::new(),
            aliases: Vec::new(),
        };
        Catalog::build(vec![("pve".into(), vec![spec])]).unwrap().0
    }

    #[test]
    fn a_huge_name_is_refused_by_its_length_and_not_echoed() {
        let catalog = catalog();
        assert!(tool_in(&catalog, "vm_list").unwrap().contains("vm_list"));
        // Close to a tool: matching it would suggest vm_list.
        let near = format!("vm_list{}", " vm list".repeat(250_000));
        assert!(!catalog.suggest(&near[..100]).is_empty());
        let e = tool_in(&catalog, &near).unwrap_err();
        assert!(matches!(&e, ResourceError::NameTooLong { .. }), "{e}");
        let text = e.to_string();
        assert!(text.len() < 1024, "{} bytes", text.len());
        assert!(
            text.contains("at most 256 bytes") && text.contains(&near.len().to_string()),
            "{text}"
        );

        let e = tool_in(&catalog, "vm_lst\u{1b}[2J")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("did you mean vm_list") && !e.contains('\u{1b}'),
            "{e}"
        );

        assert!(complete_in(&catalog, &near).values.is_empty());
        assert_eq!(complete_in(&catalog, "vm_").values, ["vm_list"]);
    }
}
