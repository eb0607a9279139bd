//! The simulator's own API schema in the API-viewer format, generated from
//! the curated catalog it implements, so the full-catalog generator can be
//! pointed at the simulator exactly as at a real cluster.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::{curated, route::Route, tiers::TierRules};

/// JSON Schema property → PVE dialect property.
fn pve_property(schema: &Value, required: bool) -> Value {
    let mut out = Map::new();
    let ty = match &schema["type"] {
        Value::String(t) => t.clone(),
        Value::Array(ts) if ts.iter().any(|t| t == "string") => "string".into(),
        Value::Array(ts) => ts
            .first()
            .and_then(Value::as_str)
            .unwrap_or("string")
            .into(),
        _ => "string".into(),
    };
    out.insert("type".into(), json!(ty));
    for k in [
        "description",
        "enum",
        "minimum",
        "maximum",
        "maxLength",
        "minLength",
        "items",
    ] {
        if let Some(v) = schema.get(k) {
            out.insert(k.into(), v.clone());
        }
    }
    if let Some(p) = schema.get("pattern").and_then(Value::as_str) {
        // PVE patterns match the whole value without anchors.
        out.insert(
            "pattern".into(),
            json!(p.trim_start_matches('^').trim_end_matches('$')),
        );
    }
    if let Some(d) = schema.get("default") {
        out.insert(
            "default".into(),
            if let Value::Bool(b) = d {
                json!(*b as u8)
            } else {
                d.clone()
            },
        );
    }
    if !required {
        out.insert("optional".into(), json!(1));
    }
    Value::Object(out)
}

fn parameters(input: &Value, route: &Route) -> Value {
    let required: Vec<&str> = input["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut props = Map::new();
    if let Some(p) = input["properties"].as_object() {
        for (local, schema) in p {
            if local == "target" || route.local.contains(local) {
                continue;
            }
            props.insert(
                route.wire_name(local).to_string(),
                pve_property(schema, required.contains(&local.as_str())),
            );
        }
    }
    if let Some(p) = input["patternProperties"].as_object() {
        for (pattern, schema) in p {
            let family = pattern
                .trim_start_matches('^')
                .split('[')
                .next()
                .unwrap_or_default();
            props.insert(format!("{family}[n]"), pve_property(schema, false));
        }
    }
    for (k, _) in &route.fixed {
        props
            .entry(k.clone())
            .or_insert_with(|| json!({"type": "string", "optional": 1}));
    }
    json!({"additionalProperties": 0, "properties": props})
}

/// The tree, as the body of `apidata.js` (`const apiSchema = [...];`).
pub fn apidata_js() -> String {
    let tools = curated::tools(&TierRules::defaults(), &Default::default(), "pve");
    let mut by_path: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    for (spec, route) in &tools {
        let info = by_path.entry(route.path.clone()).or_default();
        info.entry(route.method.as_str().to_string())
            .or_insert_with(|| {
                json!({
                    "method": route.method.as_str(),
                    "name": spec.name,
                    "description": spec.summary,
                    "allowtoken": 1,
                    "parameters": parameters(&spec.input_schema, route),
                    "returns": spec.output_schema.clone().unwrap_or(json!({"type": "object"})),
                })
            });
    }
    let nodes: Vec<Value> = by_path
        .into_iter()
        .map(|(path, info)| {
            let text = path.rsplit('/').next().unwrap_or_default().to_string();
            json!({"path": path, "text": text, "leaf": 1, "info": info})
        })
        .collect();
    format!(
        "const apiSchema = {};\n\nlet method2cmd = {{}};\n",
        Value::Array(nodes)
    )
}
