//! Argument validation: the tool's JSON Schema, checked with the
//! `jsonschema` crate, and a strict pattern for values that end up in a URL
//! path. Every problem names the argument's path (`args.disks[0].size`)
//! and the rule it broke.

use std::fmt::Write;

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
        // Only the problems listed are described (describing one may copy
        // the value); the rest are counted.
        let mut errors = self.schema.iter_errors(args);
        let mut out: Vec<String> = errors
            .by_ref()
            .take(MAX_PROBLEMS)
            .map(|e| describe(&e))
            .collect();
        let mut more = errors.count();
        for param in &self.path_params {
            if let Some(v) = args.get(param) {
                if let Err(why) = check_segment(v) {
                    out.push(format!("args.{param}: {why} (rule: path segment)"));
                }
            }
        }
        if out.len() > MAX_PROBLEMS {
            more += out.len() - MAX_PROBLEMS;
            out.truncate(MAX_PROBLEMS);
        }
        if more > 0 {
            out.push(format!("args: {more} more problems not listed"));
        }
        out
    }
}

/// One problem: where, what, which rule. The validator's own text would
/// quote the offending value whole (a megabyte string, or the whole
/// arguments object, in every problem), so the value is replaced by a
/// label made without copying or serialising it: a scalar is quoted, cut
/// at [`QUOTED_CHARS`]; an object or array is named by its size, never
/// quoted (nothing in it is echoed, secrets included); a value under a
/// secret-named field is "the value". The message is written into a
/// buffer that stops at [`MESSAGE_CHARS`], so lists the validator prints
/// (every unexpected property name) are cut as they are written.
fn describe(e: &jsonschema::ValidationError<'_>) -> String {
    let rule = e
        .schema_path()
        .as_str()
        .rsplit('/')
        .next()
        .unwrap_or("schema");
    let rule = crate::visible::cut_bytes(rule, 64);
    let path = e.instance_path().as_str();
    let label = if secret_path(path) {
        "the value".to_string()
    } else {
        label(e.instance())
    };
    let mut message = Bounded::new(MESSAGE_CHARS);
    let _ = write!(message, "{}", e.masked_with(label));
    format!("{}: {} (rule: {rule})", js_path(path), message.finish())
}

/// The most problems listed; an object with ten thousand unexpected keys
/// is as wrong with twenty of them named.
pub const MAX_PROBLEMS: usize = 20;

/// The most characters of an argument's value a problem quotes.
pub const QUOTED_CHARS: usize = 60;

/// What a problem says instead of the value: a scalar as JSON, a string
/// cut at `QUOTED_CHARS` characters with its length; an object or array
/// by its size. Reads at most `QUOTED_CHARS` characters of a string
/// (and counts the rest), allocates only the label.
fn label(instance: &Value) -> String {
    match instance {
        Value::String(s) => {
            let mut quoted = String::from("\"");
            let mut chars = s.chars();
            for c in chars.by_ref().take(QUOTED_CHARS) {
                push_escaped(&mut quoted, c);
            }
            let rest = chars.count();
            if rest == 0 {
                quoted.push('"');
            } else {
                let n = QUOTED_CHARS + rest;
                quoted.push_str(&format!("…\" ({n} characters)"));
            }
            quoted
        }
        Value::Array(items) => match items.len() {
            1 => "an array (1 item)".into(),
            n => format!("an array ({n} items)"),
        },
        Value::Object(map) => match map.len() {
            1 => "an object (1 key)".into(),
            n => format!("an object ({n} keys)"),
        },
        // Numbers, booleans and null are short.
        scalar => scalar.to_string(),
    }
}

/// `c` as it appears inside a JSON string.
fn push_escaped(out: &mut String, c: char) {
    match c {
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
        c => out.push(c),
    }
}

/// The most characters of one problem's message: some messages list what
/// they found (every unexpected property name), which has no bound either.
pub const MESSAGE_CHARS: usize = 400;

/// A `fmt::Write` that keeps at most `max` characters and then refuses
/// more, which stops the formatting that feeds it.
struct Bounded {
    out: String,
    left: usize,
    cut: bool,
}

impl Bounded {
    fn new(max: usize) -> Self {
        Self {
            out: String::new(),
            left: max,
            cut: false,
        }
    }

    fn finish(mut self) -> String {
        if self.cut {
            self.out
                .push_str(&format!("… (cut at {MESSAGE_CHARS} characters)"));
        }
        self.out
    }
}

impl Write for Bounded {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        for c in s.chars() {
            if self.left == 0 {
                self.cut = true;
                return Err(std::fmt::Error);
            }
            self.out.push(c);
            self.left -= 1;
        }
        Ok(())
    }
}

/// Whether a field on the path to a value has a secret-looking name.
fn secret_path(pointer: &str) -> bool {
    pointer
        .split('/')
        .skip(1)
        .any(|seg| crate::redact::is_secret(&seg.replace("~1", "/").replace("~0", "~")))
}

/// A JSON value's type, as an error names it ("a string", "an array").
pub fn kind_of(v: &Value) -> &'static str {
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

/// The most characters of one path segment (a key) a problem names.
pub const PATH_SEGMENT_CHARS: usize = 64;
/// The most characters of a path a problem names, roughly: segments past
/// it are left out.
pub const PATH_CHARS: usize = 200;

/// `/disks/0/size` → `args.disks[0].size`. A key longer than
/// `PATH_SEGMENT_CHARS` is cut (`…`), and a path past `PATH_CHARS` ends
/// in `…`: keys are the script's, of any length.
pub fn js_path(pointer: &str) -> String {
    let mut out = String::from("args");
    for seg in pointer.split('/').skip(1) {
        if out.chars().count() > PATH_CHARS {
            out.push('…');
            break;
        }
        let seg = seg.replace("~1", "/").replace("~0", "~");
        let cut = seg.char_indices().nth(PATH_SEGMENT_CHARS).map(|(at, _)| at);
        if !seg.is_empty() && seg.bytes().all(|b| b.is_ascii_digit()) && cut.is_none() {
            out.push_str(&format!("[{seg}]"));
        } else if crate::spec::is_js_identifier(&seg) && cut.is_none() {
            out.push('.');
            out.push_str(&seg);
        } else {
            let shown = match cut {
                Some(at) => format!("{}…", &seg[..at]),
                None => seg,
            };
            out.push_str(&format!("[{}]", Value::String(shown)));
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
            endpoint: None,
            keywords: String::new(),
            key: String::new(),
            aliases: Vec::new(),
        }
    }

    #[test]
    fn a_long_value_is_quoted_by_its_start_and_length() {
        // Found by the `arguments` fuzz target (fuzz/regressions/arguments):
        // the problem quoted the whole value back.
        let v = ArgsValidator::new(&spec(
            json!({"type": "object", "properties": {"node": {"type": "string", "pattern": "^[a-z0-9-]+$"}, "vmid": {"type": "integer"}}}),
            &[],
        ))
        .unwrap();
        let long = "x".repeat(1 << 20) + "!";
        let p = v.problems(&json!({"node": long, "vmid": {"deep": [long]}}));
        assert_eq!(p.len(), 2, "{p:?}");
        for m in &p {
            assert!(m.chars().count() < 300, "{}", &m[..300]);
        }
        assert!(
            p[0].starts_with("args.node: \"xxx") && p[0].contains("…\" (1048577 characters)"),
            "{}",
            p[0]
        );
        assert_eq!(
            p[1],
            "args.vmid: an object (1 key) is not of type \"integer\" (rule: type)"
        );
        let many: serde_json::Map<String, Value> = (0..10_000)
            .map(|i| (format!("unexpected_{i}"), json!(1)))
            .collect();
        let strict = ArgsValidator::new(&spec(
            json!({"type": "object", "properties": {"a": {}}, "additionalProperties": false}),
            &[],
        ))
        .unwrap();
        let p = strict.problems(&Value::Object(many.clone()));
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].chars().count() < 500
                && p[0].ends_with("… (cut at 400 characters) (rule: additionalProperties)"),
            "{}",
            p[0]
        );
        let each = ArgsValidator::new(&spec(
            json!({"type": "object", "patternProperties": {"^unexpected": {"type": "string"}}}),
            &[],
        ))
        .unwrap();
        let p = each.problems(&Value::Object(many));
        assert_eq!(p.len(), MAX_PROBLEMS + 1);
        assert_eq!(p[MAX_PROBLEMS], "args: 9980 more problems not listed");
        let short = v.problems(&json!({"vmid": "7"}));
        assert_eq!(
            short,
            ["args.vmid: \"7\" is not of type \"integer\" (rule: type)"]
        );
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
            // A secret-named field is "the value"; an object is never
            // quoted, whatever it holds.
            assert!(
                p[0].contains("the value") || p[0].contains("an object (2 keys)"),
                "{p:?}"
            );
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
        // Keys are the script's: a long one is cut, a deep path ends.
        let long = format!("/{}", "k".repeat(1 << 20));
        assert_eq!(js_path(&long), format!("args[\"{}…\"]", "k".repeat(64)));
        let deep = "/abc".repeat(10_000);
        let p = js_path(&deep);
        assert!(
            p.ends_with('…') && p.chars().count() < PATH_CHARS + 10,
            "{p}"
        );
    }
}
