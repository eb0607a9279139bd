//! The fields of a call's audit lines that a script, a client or a backend
//! chooses — argument keys, the tool name, a backend's request id, an
//! error code — cut to fixed sizes, so that every line stays under
//! `audit::MAX_LINE_BYTES` whatever was sent: a call with a hundred
//! thousand argument keys or a megabyte-long one writes a line of the
//! same order as any other, and a loop of them cannot fill the disk.
//! Sizes are counted as the line holds them, escapes included: a control
//! character takes six bytes in JSON (`\u0001`), so a budget in
//! characters alone would let one field grow sixfold.

use serde_json::{Map, Value};

/// Argument keys listed in a call's line, at most.
pub const MAX_ARG_KEYS: usize = 32;
/// Characters of one argument key kept.
pub const ARG_KEY_CHARS: usize = 64;
/// Bytes the listed keys may take as JSON, escapes included (64 control
/// characters escape to 384 bytes, so the count alone does not bound it).
pub const ARG_KEYS_JSON_BYTES: usize = 1536;
/// Characters of a tool name kept …
pub const TOOL_CHARS: usize = 128;
/// … and the bytes they may take as JSON, escapes included (quotes not):
/// every name the catalog holds fits; 128 control characters would take
/// 768.
pub const TOOL_JSON_BYTES: usize = 256;
/// Bytes of a backend's request id (a UPID, a collector's approval id)
/// kept, as JSON, escapes included.
pub const REQUEST_ID_BYTES: usize = 512;
/// Characters of an error code or outcome kept …
pub const CODE_CHARS: usize = 64;
/// … and the bytes they may take as JSON, escapes included.
pub const CODE_JSON_BYTES: usize = 128;

/// The bytes `c` takes inside a JSON string as `serde_json` writes it.
pub fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\u{8}' | '\t' | '\n' | '\u{c}' | '\r' => 2,
        '\0'..='\u{1f}' => 6,
        c => c.len_utf8(),
    }
}

/// The longest start of `s` of at most `max_chars` characters whose JSON
/// form (escapes included, quotes not) takes at most `max_json_bytes`.
/// Reads at most `max_chars` characters of `s`.
pub fn cut_json(s: &str, max_chars: usize, max_json_bytes: usize) -> String {
    let mut bytes = 0;
    let mut end = 0;
    for (at, c) in s.char_indices().take(max_chars) {
        bytes += escaped_len(c);
        if bytes > max_json_bytes {
            break;
        }
        end = at + c.len_utf8();
    }
    s[..end].to_string()
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
        let key = cut_json(k, ARG_KEY_CHARS, ARG_KEYS_JSON_BYTES);
        let size = key.chars().map(escaped_len).sum::<usize>() + 3; // quotes, a comma
        if bytes + size > ARG_KEYS_JSON_BYTES {
            break;
        }
        bytes += size;
        keys.push(Value::String(key));
    }
    let listed = keys.len();
    line.insert("arg_keys".into(), Value::Array(keys));
    if listed < map.len() {
        line.insert("arg_keys_total".into(), Value::from(map.len()));
    }
}

/// A tool name as its line records it.
pub fn tool(name: &str) -> Value {
    Value::String(cut_json(name, TOOL_CHARS, TOOL_JSON_BYTES))
}

/// The longest tool key kept on a line, in characters (a collector key is
/// `quox:` and a name of up to 128; a Proxmox key a method and a path).
pub const TOOL_KEY_CHARS: usize = 512;

/// … and in bytes once escaped as JSON.
pub const TOOL_KEY_JSON_BYTES: usize = 1024;

/// A tool's stable key, as a line records it.
pub fn tool_key(key: &str) -> Value {
    Value::String(cut_json(key, TOOL_KEY_CHARS, TOOL_KEY_JSON_BYTES))
}

/// A backend's request id as its line records it.
pub fn request_id(id: &str) -> Value {
    Value::String(cut_json(id, REQUEST_ID_BYTES, REQUEST_ID_BYTES))
}

/// Who decided an approval: an identity (up to 256 characters from a
/// token, plus how: " (in the MCP client)") or an operator's name.
pub const DECIDER_CHARS: usize = 320;
pub const DECIDER_JSON_BYTES: usize = 1024;

/// Who approved a call, as a line records it.
pub fn decider(by: &str) -> Value {
    Value::String(cut_json(by, DECIDER_CHARS, DECIDER_JSON_BYTES))
}

/// A decision's reason, as a line records it: the approver's words (at
/// most 500 characters of text, line breaks and tabs: at most 2,000 bytes
/// as JSON), so a reason a decision kept is never cut here.
pub const REASON_JSON_BYTES: usize = 2048;

/// A decision's reason as its line records it.
pub fn reason(text: &str) -> Value {
    Value::String(cut_json(text, usize::MAX, REASON_JSON_BYTES))
}

/// An error code or an outcome as a line records it.
pub fn code(code: &str) -> Value {
    Value::String(cut_json(code, CODE_CHARS, CODE_JSON_BYTES))
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

    #[test]
    fn escaped_lengths_are_serde_json_s() {
        let mut chars: Vec<char> = ('\0'..='\u{ff}').collect();
        chars.extend([
            '\u{2028}',
            '\u{202e}',
            '\u{feff}',
            '\u{1f600}',
            '\u{10ffff}',
        ]);
        for c in chars {
            let json = Value::String(c.to_string()).to_string();
            assert_eq!(escaped_len(c), json.len() - 2, "{c:?}");
        }
    }

    #[test]
    fn fields_are_cut_by_their_escaped_size() {
        let control = "\u{1}".repeat(128);
        for (field, budget) in [
            (tool(&control), TOOL_JSON_BYTES),
            (code(&control), CODE_JSON_BYTES),
            (request_id(&"\u{7}".repeat(1 << 20)), REQUEST_ID_BYTES),
        ] {
            let json = field.to_string();
            assert!(json.len() - 2 <= budget, "{} > {budget}", json.len() - 2);
            assert!(json.len() - 2 > budget - 6, "{json}");
        }
        // Ordinary names and codes are kept whole.
        let name = "x".repeat(TOOL_CHARS);
        assert_eq!(tool(&name), Value::String(name.clone()));
        assert_eq!(tool(&format!("{name}y")), Value::String(name));
        assert_eq!(code("response_too_large"), "response_too_large");
        assert_eq!(cut_json("a\"b", 10, 3), "a\"");
        assert_eq!(cut_json("ééé", 10, 4), "éé");
    }
}
