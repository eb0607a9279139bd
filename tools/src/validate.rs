//! Argument validation: the tool's JSON Schema, checked with the
//! `jsonschema` crate, and a strict pattern for values that end up in a URL
//! path. Every problem names the argument's path (`args.disks[0].size`)
//! and the rule it broke.

use jsonschema::Validator;
use serde_json::Value;

use crate::spec::ToolSpec;

/// Longest value accepted for a path segment.
pub const MAX_SEGMENT: usize = 255;

/// A tool's compiled validator.
pub struct ArgsValidator {
    schema: Validator,
    path_params: Vec<String>,
}

impl ArgsValidator {
    /// Compiles the tool's schema; a schema that does not compile is a
    /// catalog error reported at startup.
    pub fn new(spec: &ToolSpec) -> Result<Self, String> {
        let schema = jsonschema::options()
            .should_validate_formats(false)
            .build(&spec.input_schema)
            .map_err(|e| format!("the input schema of {} does not compile: {e}", spec.name))?;
        Ok(Self {
            schema,
            path_params: spec.path_params.clone(),
        })
    }

    /// All problems with `args`, empty when they are valid.
    pub fn problems(&self, args: &Value) -> Vec<String> {
        if !args.is_object() {
            return vec![format!(
                "args must be an object like {{\"node\": \"pve1\"}}, got {}",
                kind_of(args)
            )];
        }
        let mut out: Vec<String> = self
            .schema
            .iter_errors(args)
            .map(|e| {
                let rule = e
                    .schema_path()
                    .as_str()
                    .rsplit('/')
                    .next()
                    .unwrap_or("schema")
                    .to_string();
                let path = e.instance_path().as_str();
                // A value under a secret-named field, or one holding such a
                // field, is never echoed: the rule and the path suffice.
                let message = if holds_secret(path, e.instance()) {
                    e.masked_with("the value").to_string()
                } else {
                    e.to_string()
                };
                format!("{}: {message} (rule: {rule})", js_path(path))
            })
            .collect();
        for param in &self.path_params {
            if let Some(v) = args.get(param) {
                if let Err(why) = check_segment(v) {
                    out.push(format!("args.{param}: {why} (rule: path segment)"));
                }
            }
        }
        out
    }
}

/// Whether the value at `pointer` is a secret: a field on its path has a
/// secret-looking name, or the value itself holds such a field.
fn holds_secret(pointer: &str, value: &Value) -> bool {
    pointer
        .split('/')
        .skip(1)
        .any(|seg| crate::redact::is_secret(&seg.replace("~1", "/").replace("~0", "~")))
        || crate::redact::redact(&mut value.clone()) > 0
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A value that becomes one URL path segment: no separators, no traversal,
/// no escapes, nothing invisible.
pub fn check_segment(v: &Value) -> Result<(), String> {
    let s = match v {
        Value::String(s) => s.as_str(),
        Value::Number(_) => return Ok(()),
        other => {
            return Err(format!(
                "must be a string or number, got {}",
                kind_of(other)
            ))
        }
    };
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    if s.len() > MAX_SEGMENT {
        return Err(format!("is {} bytes, more than {MAX_SEGMENT}", s.len()));
    }
    if s == "." || s.contains("..") {
        return Err("must not contain `..`".into());
    }
    if let Some(c) = s
        .chars()
        .find(|c| matches!(c, '/' | '\\' | '%' | '?' | '#') || c.is_control() || c.is_whitespace())
    {
        return Err(format!(
            "must not contain {c:?} (no /, \\, %, ?, #, spaces or control characters)"
        ));
    }
    Ok(())
}

/// `/disks/0/size` → `args.disks[0].size`.
pub fn js_path(pointer: &str) -> String {
    let mut out = String::from("args");
    for seg in pointer.split('/').skip(1) {
        let seg = seg.replace("~1", "/").replace("~0", "~");
        if !seg.is_empty() && seg.bytes().all(|b| b.is_ascii_digit()) {
            out.push_str(&format!("[{seg}]"));
        } else if crate::spec::is_js_identifier(&seg) {
            out.push('.');
            out.push_str(&seg);
        } else {
            out.push_str(&format!("[{}]", Value::String(seg)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Hints, Tier};
    use serde_json::json;

    fn spec(schema: Value, path_params: &[&str]) -> ToolSpec {
        ToolSpec {
            name: "t".into(),
            summary: String::new(),
            description: String::new(),
            input_schema: schema,
            output_schema: None,
            tier: Tier::Read,
            hints: Hints::default(),
            backend: "test".into(),
            path_params: path_params.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn names_path_and_rule() {
        let v = ArgsValidator::new(&spec(
            json!({
                "type": "object",
                "properties": {
                    "vmid": {"type": "integer", "minimum": 100},
                    "disks": {"type": "array", "items": {"type": "object", "properties": {"size": {"type": "integer"}}}}
                },
                "required": ["vmid"],
                "additionalProperties": false
            }),
            &[],
        ))
        .unwrap();
        assert!(v.problems(&json!({"vmid": 100})).is_empty());
        let p = v.problems(&json!({"vmid": 5, "disks": [{"size": "big"}], "extra": 1}));
        assert!(
            p.iter()
                .any(|m| m.starts_with("args.vmid:") && m.contains("minimum")),
            "{p:?}"
        );
        assert!(
            p.iter()
                .any(|m| m.starts_with("args.disks[0].size:") && m.contains("(rule: type)")),
            "{p:?}"
        );
        assert!(
            p.iter()
                .any(|m| m.contains("extra") && m.contains("additionalProperties")),
            "{p:?}"
        );
        assert!(v.problems(&json!({}))[0].contains("vmid"));
        assert!(v.problems(&json!([1]))[0].starts_with("args must be an object"));
    }

    #[test]
    fn path_segments_are_strict() {
        let v = ArgsValidator::new(&spec(json!({"type": "object"}), &["node"])).unwrap();
        assert!(v.problems(&json!({"node": "pve1"})).is_empty());
        assert!(v.problems(&json!({"node": 100})).is_empty());
        for bad in [
            "../etc",
            "a/b",
            "pve1%2f..",
            "pve1\r\nX-Evil: 1",
            "a b",
            "",
            "x?y",
            "..",
            "a\\b",
        ] {
            let p = v.problems(&json!({"node": bad}));
            assert_eq!(p.len(), 1, "{bad:?}: {p:?}");
            assert!(p[0].starts_with("args.node:"), "{p:?}");
        }
        assert_eq!(v.problems(&json!({"node": "x".repeat(300)})).len(), 1);
    }

    #[test]
    fn secret_values_are_never_echoed() {
        let v = ArgsValidator::new(&spec(
            json!({
                "type": "object",
                "properties": {
                    "password": {"type": "string", "minLength": 5, "maxLength": 8},
                    "cloudinit": {"type": "object", "properties": {"user": {"type": "string"}}, "maxProperties": 1},
                    "vmid": {"type": "integer", "minimum": 100}
                }
            }),
            &[],
        ))
        .unwrap();
        for (args, rule) in [
            (json!({"password": "hunter2-too-long"}), "maxLength"),
            (json!({"password": ["hunter2"]}), "type"),
            (
                json!({"cloudinit": {"user": "root", "password": "hunter2"}}),
                "maxProperties",
            ),
        ] {
            let p = v.problems(&args);
            assert_eq!(p.len(), 1, "{p:?}");
            assert!(!p[0].contains("hunter2"), "{p:?}");
            assert!(p[0].contains(&format!("(rule: {rule})")), "{p:?}");
            assert!(p[0].contains("the value"), "{p:?}");
        }
        let p = v.problems(&json!({"password": "hunter2-too-long"}));
        assert_eq!(
            p[0],
            "args.password: the value is longer than 8 characters (rule: maxLength)"
        );
        // Other values are still shown: they help the script's author.
        let p = v.problems(&json!({"vmid": 5}));
        assert!(p[0].contains("5 is less than the minimum of 100"), "{p:?}");
    }

    #[test]
    fn pointers_to_js_paths() {
        assert_eq!(js_path(""), "args");
        assert_eq!(js_path("/a/0/b"), "args.a[0].b");
        assert_eq!(js_path("/net0"), "args.net0");
        assert_eq!(js_path("/a~1b"), "args[\"a/b\"]");
    }
}
