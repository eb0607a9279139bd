//! The fields of a call's audit lines that a script, a client or a backend
//! chooses — argument keys, the tool name, a backend's request id, an
//! error code — cut to fixed sizes, so that every line stays under
//! `audit::MAX_LINE_BYTES` whatever was sent: a call with a hundred
//! thousand argument keys or a megabyte-long one writes a line of the
//! same order as any other, and a loop of them cannot fill the disk.

use serde_json::{Map, Value};

use crate::visible::cut_bytes;

/// Argument keys listed in a call's line, at most.
pub const MAX_ARG_KEYS: usize = 32;
/// Characters of one argument key kept.
pub const ARG_KEY_CHARS: usize = 64;
/// Bytes the listed keys may take as JSON, escapes included (64 control
/// characters escape to 384 bytes, so the count alone does not bound it).
pub const ARG_KEYS_JSON_BYTES: usize = 1536;
/// Characters of a tool name kept.
pub const TOOL_CHARS: usize = 128;
/// Bytes of a backend's request id (a UPID, a collector's approval id)
/// kept.
pub const REQUEST_ID_BYTES: usize = 512;
/// Characters of an error code or outcome kept.
pub const CODE_CHARS: usize = 64;

fn chars(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// Adds `arg_keys` (the first keys of `args`, each cut, within the
/// budgets) and, when some were left out, `arg_keys_total`, the real count.
pub fn add_arg_keys(args: &Value, line: &mut Map<String, Value>) {
    let Some(map) = args.as_object() else {
        line.insert("arg_keys".into(), Value::Array(Vec::new()));
        return;
    };
    let mut keys = Vec::new();
    let mut bytes = 2; // []
    for k in map.keys().take(MAX_ARG_KEYS) {
        let key = Value::String(chars(k, ARG_KEY_CHARS));
        let size = key.to_string().len() + 1; // and a comma
        if bytes + size > ARG_KEYS_JSON_BYTES {
            break;
        }
        bytes += size;
        keys.push(key);
    }
    let listed = keys.len();
    line.insert("arg_keys".into(), Value::Array(keys));
    if listed < map.len() {
        line.insert("arg_keys_total".into(), Value::from(map.len()));
    }
}

/// A tool name as its line records it.
pub fn tool(name: &str) -> Value {
    Value::String(chars(name, TOOL_CHARS))
}

/// A backend's request id as its line records it.
pub fn request_id(id: &str) -> Value {
    Value::String(cut_bytes(id, REQUEST_ID_BYTES).to_string())
}

/// An error code or an outcome as a line records it.
pub fn code(code: &str) -> Value {
    Value::String(chars(code, CODE_CHARS))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_are_listed_within_their_budget_with_the_real_count() {
        let mut line = Map::new();
        add_arg_keys(&json!({"node": 1, "vmid": 2}), &mut line);
        assert_eq!(Value::Object(line), json!({"arg_keys": ["node", "vmid"]}));

        let mut many = Map::new();
        for i in 0..1000 {
            many.insert(format!("{i}{}", "\u{1}".repeat(100)), json!(1));
        }
        let mut line = Map::new();
        add_arg_keys(&Value::Object(many), &mut line);
        assert_eq!(line["arg_keys_total"], 1000);
        let keys = line["arg_keys"].as_array().unwrap();
        assert!(!keys.is_empty() && keys.len() <= MAX_ARG_KEYS);
        assert!(line["arg_keys"].to_string().len() <= ARG_KEYS_JSON_BYTES);
    }
}
