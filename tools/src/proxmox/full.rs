//! The full catalog: one tool per API operation, generated from the API
//! schema (`proxmox.catalog = "full"`).

use serde_json::{json, Value};

use super::{
    apidata::{Method, Operation},
    naming, schema,
    tiers::TierRules,
};
use crate::spec::{Hints, ToolSpec};

/// What a generated tool calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpRef {
    pub method: Method,
    pub path: String,
}

/// Adds the optional `target` every Proxmox tool takes (which configured
/// cluster to talk to).
pub fn with_target(mut input: Value) -> Value {
    if let Some(props) = input.get_mut("properties").and_then(Value::as_object_mut) {
        props.entry("target").or_insert_with(|| {
            json!({"type": "string", "description": "Which configured cluster to use; the default target when omitted.", "pattern": "^[A-Za-z0-9_-]{1,64}$"})
        });
    }
    input
}

pub fn generate(ops: &[Operation], rules: &TierRules, backend: &str) -> Vec<(ToolSpec, OpRef)> {
    let names = naming::names(ops);
    ops.iter()
        .zip(names)
        .map(|(op, name)| {
            let tier = rules.tier(op.method, &op.path);
            let summary = first_sentence(&op.description);
            let description = format!("{}\n\n{} {}", op.description.trim(), op.method, op.path);
            let spec = ToolSpec {
                name,
                summary,
                description,
                input_schema: with_target(schema::parameters(&op.parameters)),
                output_schema: None,
                tier,
                hints: Hints::for_tier(tier),
                backend: backend.into(),
                path_params: op.path_params(),
            };
            (
                spec,
                OpRef {
                    method: op.method,
                    path: op.path.clone(),
                },
            )
        })
        .collect()
}

fn first_sentence(text: &str) -> String {
    let t = text.trim();
    let end = t
        .find(". ")
        .map(|i| i + 1)
        .or_else(|| t.find('\n'))
        .unwrap_or(t.len());
    let s = t[..end].trim();
    if s.is_empty() {
        "(no description)".into()
    } else {
        s.to_string()
    }
}
