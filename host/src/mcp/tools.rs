//! The three tools an agent sees, with descriptions written to make the
//! first try succeed, and their input and output schemas. `tools/list`
//! must stay small (under 2 KB): every byte is paid in the agent's context.

use std::sync::Arc;

use airlock_sandbox::Limits;
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{json, Value};

pub const SEARCH: &str = "search";
pub const GET_SCHEMA: &str = "get_schema";
pub const EXECUTE: &str = "execute";

fn object(v: Value) -> Arc<JsonObject> {
    match v {
        Value::Object(m) => Arc::new(m),
        _ => unreachable!("schemas here are objects"),
    }
}

/// The tool list, names prefixed with `prefix`.
///
/// None of the three declares an output schema. Their structured content
/// is for programs and the text is for the model; a schema says little
/// of either (`result` is any JSON value), and the Python SDK checks every
/// result against it, building a validator each time. Measured side by
/// side (docs/PERFORMANCE.md): `1+1` 2.4 ms at p50 with one, 1.05 ms
/// without; `search` 1.19–1.27 against 0.49–0.60 ms; `get_schema`
/// 1.28–1.35 against 0.56–0.66 ms (ping 0.32–0.41 ms).
pub fn list(prefix: &str, limits: &Limits) -> Vec<Tool> {
    let search = Tool::new(
        format!("{prefix}{SEARCH}"),
        "Find tools for a task by what you want to do (\"stop vm\", \"stopped containers\"). \
         Returns names, tiers, TypeScript signatures. Start here.",
        object(json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to do."},
                "tier": {"type": "array", "items": {"enum": ["read", "operate", "admin"]}},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50}
            },
            "required": ["query"]
        })),
    )
    .annotate(ToolAnnotations::new().read_only(true).open_world(false));
    let get_schema = Tool::new(
        format!("{prefix}{GET_SCHEMA}"),
        "Exact input schemas of tools as TypeScript. Ask for every tool your script calls.",
        object(json!({
            "type": "object",
            "properties": {"names": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 20}},
            "required": ["names"]
        })),
    )
    .annotate(ToolAnnotations::new().read_only(true).open_world(false));
    let execute = Tool::new(
        format!("{prefix}{EXECUTE}"),
        format!(
            "Run a JavaScript or TypeScript program that calls tools and returns only what you need. Top-level await works; the last \
             expression statement's value is the result (or `return x`). Call `await tools.NAME(args)`; Promise.all \
             for parallel calls; filter in the script. await catalog.search(\"query\") finds more tools; console.log is captured. A failed call throws an Error with \
             .code and .message. Limits: {} s, {} tool calls, {} MiB memory, {} KiB result. \
             Example: const vms = await tools.vm_list({{node: \"pve1\"}}); vms.filter(v => v.status === \"running\").map(v => v.vmid)",
            limits.wall_time_ms / 1000,
            limits.tool_calls,
            limits.memory_bytes >> 20,
            limits.result_bytes >> 10,
        ),
        object(json!({
            "type": "object",
            "properties": {
                "script": {"type": "string", "description": "JavaScript or TypeScript."},
                "trace": {"type": "boolean", "description": "Every call and stats."},
                "mode": {"enum": ["run", "plan"], "description": "plan: record changes, not make them, for one approval."},
                "plan": {"type": "string", "description": "Apply this approved plan."},
                "execution": {"type": "string", "description": "Follow a waiting answer's execution."}
            },
            // One of `script` or `execution` is required. Not as a root
            // `anyOf`: the Anthropic API refuses a tool whose input schema
            // has `anyOf`, `oneOf` or `allOf` at its root, and with it every
            // request of a client that lists the tool (Claude Code).
            "if": {"not": {"required": ["execution"]}},
            "then": {"required": ["script"]}
        })),
    )
    .annotate(ToolAnnotations::new().read_only(false).destructive(true).open_world(true));
    vec![search, get_schema, execute]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_is_small() {
        let tools = list("proxmox_code_", &Limits::default());
        let bytes = serde_json::to_string(&json!({"tools": tools}))
            .unwrap()
            .len();
        assert!(bytes <= 2048, "tools/list is {bytes} bytes");
        assert_eq!(tools[0].name, "proxmox_code_search");
    }

    /// `execute` says that one of `script` or `execution` is required, in
    /// a form a real validator reads that way, and without the root
    /// combinators the Anthropic API refuses.
    #[test]
    fn execute_requires_a_script_or_an_execution() {
        let tools = list("", &Limits::default());
        let schema = Value::Object((*tools[2].input_schema).clone());
        for root in ["anyOf", "oneOf", "allOf"] {
            assert!(schema.get(root).is_none(), "{root} at the root");
        }
        let validator = jsonschema::validator_for(&schema).unwrap();
        for (args, valid) in [
            (json!({"script": "1+1"}), true),
            (json!({"execution": "ex-1"}), true),
            (json!({"script": "1", "trace": true}), true),
            (json!({}), false),
            (json!({"trace": true, "mode": "plan"}), false),
        ] {
            assert_eq!(validator.is_valid(&args), valid, "{args}");
        }
    }

    /// The Claude Desktop bundle's manifest lists the tools and the
    /// version for display; they must not drift from the server's.
    #[test]
    fn the_mcpb_manifest_matches_the_server() {
        let manifest: Value =
            serde_json::from_str(include_str!("../../../packaging/mcpb/manifest.json")).unwrap();
        assert_eq!(manifest["version"], env!("CARGO_PKG_VERSION"));
        let listed: Vec<&str> = manifest["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(listed, [SEARCH, GET_SCHEMA, EXECUTE]);
        assert_eq!(manifest["server"]["mcp_config"]["args"], json!(["serve"]));
    }
}
