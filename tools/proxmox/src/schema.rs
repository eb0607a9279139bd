//! PVE's parameter schema dialect into JSON Schema.
//!
//! The dialect is JSON-Schema-like with its own habits: `optional: 1`
//! instead of `required`, 0/1 for booleans, Perl patterns matched whole,
//! `format` either a named format (`pve-node`) or a nested schema for a
//! "property string" (`bridge=vmbr0,firewall=1`), and indexed families
//! written `net[n]` that stand for `net0`, `net1`, ….

use serde_json::{json, Map, Value};

/// Named formats with a pattern worth enforcing (they end up in URL paths
/// or identify objects).
const FORMAT_PATTERNS: &[(&str, &str)] = &[
    ("pve-node", "^[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$"),
    ("pve-storage-id", "^[a-zA-Z][a-zA-Z0-9_.-]*[a-zA-Z0-9]$"),
    ("pve-poolid", "^[A-Za-z0-9_.-]+$"),
    ("pve-configid", "^[a-z][a-z0-9_-]*$"),
];

/// Converts an operation's `parameters` into a JSON Schema for the tool's
/// argument object.
pub fn parameters(params: &Value) -> Value {
    let mut properties = Map::new();
    let mut pattern_properties = Map::new();
    let mut required = Vec::new();
    if let Some(props) = params.get("properties").and_then(Value::as_object) {
        for (name, p) in props {
            let converted = property(p);
            if let Some(family) = name.strip_suffix("[n]") {
                pattern_properties
                    .insert(format!("^{}[0-9]{{1,3}}$", regex_escape(family)), converted);
                continue;
            }
            if !is_true(p.get("optional")) {
                required.push(Value::String(name.clone()));
            }
            properties.insert(name.clone(), converted);
        }
    }
    let mut out = Map::new();
    out.insert("type".into(), json!("object"));
    out.insert("properties".into(), Value::Object(properties));
    if !pattern_properties.is_empty() {
        out.insert(
            "patternProperties".into(),
            Value::Object(pattern_properties),
        );
    }
    if !required.is_empty() {
        out.insert("required".into(), Value::Array(required));
    }
    let closed = params
        .get("additionalProperties")
        .is_some_and(|v| !is_true(Some(v)));
    out.insert("additionalProperties".into(), Value::Bool(!closed));
    Value::Object(out)
}

/// PVE writes booleans as 0/1 (sometimes strings).
fn is_true(v: Option<&Value>) -> bool {
    match v {
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_i64() == Some(1),
        Some(Value::String(s)) => s == "1" || s == "true",
        _ => false,
    }
}

fn regex_escape(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            if "\\.+*?()|[]{}^$-".contains(c) {
                vec!['\\', c]
            } else {
                vec![c]
            }
        })
        .collect()
}

/// One property.
pub fn property(p: &Value) -> Value {
    let Some(obj) = p.as_object() else {
        return json!({});
    };
    if let Some(variants) = obj.get("oneOf").and_then(Value::as_array) {
        let mut out = Map::new();
        out.insert(
            "oneOf".into(),
            Value::Array(variants.iter().map(property).collect()),
        );
        copy_description(obj, &mut out);
        return Value::Object(out);
    }
    let ty = obj.get("type").and_then(Value::as_str).unwrap_or("string");
    let mut out = Map::new();
    let mut dropped_pattern = None;
    match ty {
        "boolean" => {
            out.insert("type".into(), json!("boolean"));
            if let Some(d) = obj.get("default") {
                out.insert("default".into(), Value::Bool(is_true(Some(d))));
            }
        }
        "integer" | "number" => {
            out.insert("type".into(), json!(ty));
            for k in ["minimum", "maximum"] {
                if let Some(v) = obj.get(k).filter(|v| v.is_number()) {
                    out.insert(k.into(), v.clone());
                }
            }
            if let Some(d) = obj.get("default").filter(|v| v.is_number()) {
                out.insert("default".into(), d.clone());
            }
        }
        "array" => {
            out.insert("type".into(), json!("array"));
            if let Some(items) = obj.get("items") {
                out.insert("items".into(), property(items));
            }
        }
        "object" => {
            out.insert("type".into(), json!("object"));
        }
        _ => {
            out.insert("type".into(), json!("string"));
            if let Some(values) = obj.get("enum").and_then(Value::as_array) {
                out.insert("enum".into(), Value::Array(values.clone()));
            }
            for k in ["minLength", "maxLength"] {
                if let Some(v) = obj.get(k).filter(|v| v.is_number()) {
                    out.insert(k.into(), v.clone());
                }
            }
            if let Some(pattern) = obj.get("pattern").and_then(Value::as_str) {
                match translate_pattern(pattern) {
                    Some(p) => {
                        out.insert("pattern".into(), Value::String(p));
                    }
                    None => dropped_pattern = Some(pattern.to_string()),
                }
            }
            match obj.get("format") {
                Some(Value::String(f)) => {
                    out.insert("format".into(), Value::String(f.clone()));
                    if let Some((_, pat)) = FORMAT_PATTERNS.iter().find(|(n, _)| n == f) {
                        out.entry("pattern")
                            .or_insert_with(|| Value::String(pat.to_string()));
                    }
                }
                Some(Value::Object(_)) => {
                    // A property string: keep it a string, say its shape.
                    out.insert("format".into(), json!("pve-property-string"));
                }
                _ => {}
            }
            if let Some(d) = obj.get("default") {
                out.insert(
                    "default".into(),
                    Value::String(
                        d.as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| d.to_string()),
                    ),
                );
            }
        }
    }
    copy_description(obj, &mut out);
    if let Some(p) = dropped_pattern {
        // Still tell the agent; PVE itself enforces it.
        let d = out
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let d = format!("{d} Must match the Perl pattern {p}.")
            .trim()
            .to_string();
        out.insert("description".into(), Value::String(d));
    }
    Value::Object(out)
}

/// PVE's patterns are Perl regular expressions matched against the whole
/// value. Perl's stringified flag groups (`(?^i:...)`) are rewritten; a
/// pattern the validator's engine still cannot compile is left to PVE.
pub fn translate_pattern(perl: &str) -> Option<String> {
    let rewritten = perl
        .replace("(?^i:", "(?i:")
        .replace("(?^u:", "(?:")
        .replace("(?^:", "(?:");
    let anchored = format!("^(?:{rewritten})$");
    jsonschema::validator_for(&json!({"type": "string", "pattern": anchored}))
        .ok()
        .map(|_| anchored)
}

fn copy_description(obj: &Map<String, Value>, out: &mut Map<String, Value>) {
    let mut text = obj
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .trim()
        .to_string();
    if let (Some(Value::Object(_)), Some(tt)) = (
        obj.get("format"),
        obj.get("typetext").and_then(Value::as_str),
    ) {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(&format!("Format: {tt}"));
    }
    if !text.is_empty() {
        out.insert("description".into(), Value::String(text));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_the_dialect() {
        let pve = json!({
            "additionalProperties": 0,
            "properties": {
                "node": {"type": "string", "format": "pve-node", "description": "The cluster node name."},
                "vmid": {"type": "integer", "minimum": 100, "maximum": 999999999},
                "skiplock": {"type": "boolean", "optional": 1, "default": 0},
                "timeout": {"type": "integer", "optional": 1, "minimum": 0},
                "machine": {"type": "string", "optional": 1, "format": {"type": {"type": "string"}}, "typetext": "[[type=]<machine type>]"},
                "name": {"type": "string", "optional": 1, "pattern": "[a-z]+", "maxLength": 20},
                "net[n]": {"type": "string", "optional": 1, "format": {"bridge": {"type": "string"}}, "typetext": "[model=]<enum>"},
                "tags": {"type": "array", "optional": 1, "items": {"type": "string", "format": "pve-tag"}}
            }
        });
        let s = parameters(&pve);
        assert_eq!(s["required"], json!(["node", "vmid"]));
        assert_eq!(s["additionalProperties"], json!(false));
        assert_eq!(
            s["properties"]["skiplock"],
            json!({"type": "boolean", "default": false})
        );
        assert_eq!(
            s["properties"]["node"]["pattern"],
            json!(FORMAT_PATTERNS[0].1)
        );
        assert_eq!(s["properties"]["name"]["pattern"], json!("^(?:[a-z]+)$"));
        assert_eq!(
            translate_pattern("(?^i:[a-z]{0,3})").as_deref(),
            Some("^(?:(?i:[a-z]{0,3}))$")
        );
        assert_eq!(translate_pattern("(unclosed"), None);
        assert!(s["properties"]["machine"]["description"]
            .as_str()
            .unwrap()
            .contains("Format: [[type=]<machine type>]"));
        assert!(s["patternProperties"]["^net[0-9]{1,3}$"].is_object());
        assert_eq!(s["properties"]["tags"]["items"]["type"], json!("string"));
        let v = jsonschema::validator_for(&s).unwrap();
        assert!(v.is_valid(&json!({"node": "pve1", "vmid": 100, "net0": "virtio,bridge=vmbr0"})));
        assert!(!v.is_valid(&json!({"node": "pve1", "vmid": 100, "netx": "a"})));
        assert!(!v.is_valid(&json!({"node": "pve/1", "vmid": 100})));
        assert!(!v.is_valid(&json!({"node": "pve1", "vmid": 100, "name": "ABC"})));
    }
}
