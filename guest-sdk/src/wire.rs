//! The host's reading of what the guest hands over: a tool call's name and
//! arguments, and the outcome passed to [`IMPORT_FINISH`](crate::abi::IMPORT_FINISH).
//!
//! These bytes come out of a sandbox that runs code a language model wrote,
//! so nothing here trusts them: every decoder returns a [`Violation`]
//! instead of panicking, and every text the guest wrote is cut to
//! [`MESSAGE_CHARS`] before the host keeps it. The sizes were checked
//! before these bytes were read (see `abi`). The module is plain data in,
//! plain data out (no wasmtime), which is what lets the fuzzer reach it.
//!
//! Only the host needs this; it is behind the `host` feature so the guest
//! does not carry it.

use serde_json::Value;

use crate::abi::{
    FINISH_ERROR, FINISH_OK, FINISH_TRUNCATED, KIND_DEADLOCK, KIND_RUNTIME, KIND_RUNTIME_LIMIT,
    KIND_SYNTAX, KIND_TOOL,
};
pub use crate::fit::{capped, MESSAGE_CHARS};

/// A guest that broke the encoding. The host traps such an instance (or,
/// for the outcome, reports an internal error) and never reuses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// The tool name in `call_start` is not UTF-8.
    NameNotUtf8,
    /// The arguments in `call_start` are not one JSON value.
    ArgsNotJson,
    /// `finish` was called with a status the ABI does not define.
    UnknownFinishStatus(u32),
    /// A `FINISH_TRUNCATED` outcome without its `value` and `original_bytes`.
    TruncationMalformed,
    /// The bytes passed to `finish` are not JSON; the parser's complaint.
    OutcomeNotJson(String),
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NameNotUtf8 => f.write_str("tool name is not UTF-8"),
            Self::ArgsNotJson => f.write_str("tool arguments are not JSON"),
            Self::UnknownFinishStatus(s) => write!(f, "unknown finish status {s}"),
            Self::TruncationMalformed => {
                f.write_str("a truncated outcome lacks `value` or `original_bytes`")
            }
            Self::OutcomeNotJson(e) => {
                write!(f, "the guest reported an outcome that is not JSON: {e}")
            }
        }
    }
}

impl std::error::Error for Violation {}

/// The JSON structure in `bytes` a parser would build nodes for: every
/// `{`, `[`, `:` and `,` outside strings, plus one. One pass, no
/// allocation, whatever the bytes are (invalid JSON is counted too; the
/// parser refuses it afterwards).
pub fn json_tokens(bytes: &[u8]) -> u64 {
    let mut n = 1u64;
    let mut in_string = false;
    let mut escaped = false;
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_string = true,
                b'{' | b'[' | b':' | b',' => n += 1,
                _ => {}
            }
        }
    }
    n
}

/// Decodes `call_start`'s name and arguments.
pub fn call(name: Vec<u8>, args: &[u8]) -> Result<(String, Value), Violation> {
    let name = String::from_utf8(name).map_err(|_| Violation::NameNotUtf8)?;
    let args = serde_json::from_slice(args).map_err(|_| Violation::ArgsNotJson)?;
    Ok((name, args))
}

/// What the script ended with, as the guest reported it.
#[derive(Clone, Debug, PartialEq)]
pub enum Finished {
    /// The script's value.
    Value(Value),
    /// The script's value, cut by the guest to `result_bytes` from
    /// `original_bytes` (the guest's word; only ever shown, never trusted).
    Truncated { value: Value, original_bytes: u64 },
    /// The script failed.
    Error(GuestError),
}

/// A guest error object (see the "guest errors" section of [`crate::abi`]),
/// with every guest-written text already cut to [`MESSAGE_CHARS`].
#[derive(Clone, Debug, PartialEq)]
pub enum GuestError {
    Syntax {
        line: u32,
        column: u32,
        message: String,
    },
    /// A thrown value or a deadlock (a promise nothing can settle).
    Runtime {
        message: String,
        stack: Option<String>,
    },
    /// One of the JS engine's own fixed limits; `limit` is its snake_case
    /// name (`recursion_depth`, `js_stack_size`).
    EngineLimit { limit: String, value: u64 },
    /// An uncaught tool failure: the id of the call whose failure it is.
    /// The host looks the failure up in its own record of that execution;
    /// `tool`, `code` and `message` are the guest's (capped) word, used
    /// only to describe a value that matches no recorded failure.
    Tool {
        call: Option<u32>,
        tool: String,
        code: String,
        message: String,
    },
    /// An object of no kind the host knows, as (capped) JSON text.
    Unknown(String),
}

/// Decodes `finish(status, bytes)`.
pub fn finish(status: u32, bytes: &[u8]) -> Result<Finished, Violation> {
    if !matches!(status, FINISH_OK | FINISH_ERROR | FINISH_TRUNCATED) {
        return Err(Violation::UnknownFinishStatus(status));
    }
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| Violation::OutcomeNotJson(e.to_string()))?;
    match status {
        FINISH_OK => Ok(Finished::Value(value)),
        FINISH_TRUNCATED => {
            let Value::Object(mut wrapper) = value else {
                return Err(Violation::TruncationMalformed);
            };
            let original_bytes = wrapper
                .get("original_bytes")
                .and_then(Value::as_u64)
                .ok_or(Violation::TruncationMalformed)?;
            let value = wrapper
                .remove("value")
                .ok_or(Violation::TruncationMalformed)?;
            Ok(Finished::Truncated {
                value,
                original_bytes,
            })
        }
        _ => Ok(Finished::Error(guest_error(&value))),
    }
}

fn guest_error(v: &Value) -> GuestError {
    let text = |k: &str| capped(v.get(k).and_then(Value::as_str).unwrap_or_default());
    let number = |k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
    let small = |k: &str| u32::try_from(number(k)).unwrap_or(u32::MAX);
    match v.get("kind").and_then(Value::as_str) {
        Some(KIND_SYNTAX) => GuestError::Syntax {
            line: small("line"),
            column: small("column"),
            message: text("message"),
        },
        Some(KIND_RUNTIME) | Some(KIND_DEADLOCK) => GuestError::Runtime {
            message: text("message"),
            stack: v.get("stack").and_then(Value::as_str).map(capped),
        },
        Some(KIND_RUNTIME_LIMIT) => GuestError::EngineLimit {
            limit: text("limit"),
            value: number("value"),
        },
        Some(KIND_TOOL) => GuestError::Tool {
            call: v
                .get("call")
                .and_then(Value::as_u64)
                .and_then(|c| u32::try_from(c).ok()),
            tool: text("tool"),
            code: text("code"),
            message: text("message"),
        },
        _ => GuestError::Unknown(capped(&v.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn calls_need_a_utf8_name_and_one_json_value() {
        assert_eq!(
            call(b"node_list".to_vec(), br#"{"a":1}"#),
            Ok(("node_list".into(), json!({"a": 1})))
        );
        assert_eq!(call(vec![0xff], b"{}"), Err(Violation::NameNotUtf8));
        assert_eq!(call(b"x".to_vec(), b"{} {}"), Err(Violation::ArgsNotJson));
        assert_eq!(call(b"x".to_vec(), b""), Err(Violation::ArgsNotJson));
    }

    #[test]
    fn outcomes_decode_by_status_and_kind() {
        assert_eq!(finish(FINISH_OK, b"[1]"), Ok(Finished::Value(json!([1]))));
        assert_eq!(finish(7, b"1"), Err(Violation::UnknownFinishStatus(7)));
        assert!(matches!(
            finish(FINISH_OK, b"{"),
            Err(Violation::OutcomeNotJson(_))
        ));
        let err = |v: Value| match finish(FINISH_ERROR, v.to_string().as_bytes()) {
            Ok(Finished::Error(e)) => e,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            err(json!({"kind": KIND_SYNTAX, "message": "m", "line": 3, "column": 1u64 << 40})),
            GuestError::Syntax {
                line: 3,
                column: u32::MAX,
                message: "m".into()
            }
        );
        assert_eq!(
            err(json!({"kind": KIND_RUNTIME_LIMIT, "limit": "js_stack_size", "value": 10})),
            GuestError::EngineLimit {
                limit: "js_stack_size".into(),
                value: 10
            }
        );
        assert!(matches!(err(json!(5)), GuestError::Unknown(t) if t == "5"));
        assert_eq!(
            err(json!({"kind": KIND_TOOL, "call": 7, "tool": "t", "code": "c", "message": "m"})),
            GuestError::Tool {
                call: Some(7),
                tool: "t".into(),
                code: "c".into(),
                message: "m".into()
            }
        );
        assert!(matches!(
            err(json!({"kind": KIND_TOOL, "call": 1u64 << 40})),
            GuestError::Tool { call: None, .. }
        ));
    }

    #[test]
    fn json_tokens_count_structure_not_string_contents() {
        assert_eq!(json_tokens(b"1"), 1);
        assert_eq!(json_tokens(br#"{"node":"pve1","vmid":100}"#), 5);
        assert_eq!(json_tokens(b"[0,0,0]"), 4);
        assert_eq!(json_tokens(br#"{"s":"a,b:[{\"x\":1}]"}"#), 3);
        assert_eq!(json_tokens(br#""\\",1"#), 2);
    }

    #[test]
    fn truncated_outcomes_carry_value_and_original_size() {
        assert_eq!(
            finish(FINISH_TRUNCATED, br#"{"value":[1],"original_bytes":900}"#),
            Ok(Finished::Truncated {
                value: json!([1]),
                original_bytes: 900
            })
        );
        for bad in [&b"[1]"[..], br#"{"value":1}"#, br#"{"original_bytes":3}"#] {
            assert_eq!(
                finish(FINISH_TRUNCATED, bad),
                Err(Violation::TruncationMalformed)
            );
        }
    }

    #[test]
    fn guest_texts_are_capped_on_a_character_boundary() {
        let long = "é".repeat(MESSAGE_CHARS + 10);
        let GuestError::Runtime { message, stack } = (match finish(
            FINISH_ERROR,
            json!({"kind": KIND_RUNTIME, "message": long, "stack": long})
                .to_string()
                .as_bytes(),
        ) {
            Ok(Finished::Error(e)) => e,
            other => panic!("{other:?}"),
        }) else {
            panic!("not a runtime error")
        };
        assert!(message.ends_with("… (10 more characters)"), "{message}");
        assert_eq!(
            message.chars().count(),
            MESSAGE_CHARS + "… (10 more characters)".chars().count()
        );
        assert_eq!(stack.as_deref(), Some(message.as_str()));
        let unknown = finish(
            FINISH_ERROR,
            json!({"kind": "x", "pad": long}).to_string().as_bytes(),
        );
        assert!(
            matches!(unknown, Ok(Finished::Error(GuestError::Unknown(t))) if t.chars().count() < MESSAGE_CHARS + 40)
        );
    }
}
