//! What a person asked to approve a call sees: the call's arguments,
//! complete, in sorted key order, with secret-named fields masked at any
//! depth and every control, bidi and invisible formatting character shown
//! as `\u{…}` text.
//!
//! Nothing is cut. A summary that would pass [`MAX_SUMMARY_CHARS`] is not
//! made at all: the call is refused rather than put to a person who could
//! only see part of it (a cut summary lets a script hide the part that
//! matters past the cut).
//!
//! The form: `node=pve1, vmid=101, config={password=[redacted], tags=["a", "b"]}`.
//! At the top level a string made only of letters, digits and `_.:/@+-`
//! that does not read as a number, boolean or null is shown bare; every
//! other string is quoted, so `vmid=101` is a number and `vmid="101"` a
//! string, and no value can pose as another `key=value` pair.

use serde_json::{Map, Value};

use crate::{
    redact::{is_secret, REDACTED},
    visible::must_escape,
};

/// The longest summary an approver is shown, in characters.
pub const MAX_SUMMARY_CHARS: usize = 2_000;

/// The arguments take more than [`MAX_SUMMARY_CHARS`] to show in full.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the arguments take more than {limit} characters to show in full to the person approving the call, and Airlock never asks for approval of a summary it had to cut; pass smaller arguments (fewer keys, shorter values) or split the call")]
pub struct TooLong {
    pub limit: usize,
}

/// The approver's rendering of `args`, or [`TooLong`].
pub fn summarize(args: &Value) -> Result<String, TooLong> {
    summarize_within(args, MAX_SUMMARY_CHARS)
}

/// [`summarize`] with another bound (tests).
pub fn summarize_within(args: &Value, limit: usize) -> Result<String, TooLong> {
    let mut r = Renderer {
        out: String::new(),
        chars: 0,
        limit,
    };
    match args {
        Value::Object(map) => r.entries(map, true)?,
        other => r.value(other, true)?,
    }
    Ok(r.out)
}

struct Renderer {
    out: String,
    chars: usize,
    limit: usize,
}

impl Renderer {
    fn push(&mut self, s: &str) -> Result<(), TooLong> {
        self.chars += s.chars().count();
        if self.chars > self.limit {
            return Err(TooLong { limit: self.limit });
        }
        self.out.push_str(s);
        Ok(())
    }

    /// `k=v, k=v` in sorted key order. Every entry takes at least five
    /// characters with its separator, so an object too large to show is
    /// known before its keys are sorted.
    fn entries(&mut self, map: &Map<String, Value>, top: bool) -> Result<(), TooLong> {
        if map.len().saturating_mul(5) > self.limit.saturating_sub(self.chars) + 2 {
            return Err(TooLong { limit: self.limit });
        }
        let mut sorted: Vec<(&String, &Value)> = map.iter().collect();
        sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (i, (k, v)) in sorted.into_iter().enumerate() {
            if i > 0 {
                self.push(", ")?;
            }
            self.key(k)?;
            self.push("=")?;
            if is_secret(k) && !v.is_null() {
                self.push(REDACTED)?;
            } else {
                self.value(v, top)?;
            }
        }
        Ok(())
    }

    fn key(&mut self, k: &str) -> Result<(), TooLong> {
        if !k.is_empty() && k.chars().all(plain_char) {
            self.push(k)
        } else {
            self.quoted(k)
        }
    }

    fn value(&mut self, v: &Value, top: bool) -> Result<(), TooLong> {
        match v {
            Value::Null | Value::Bool(_) | Value::Number(_) => self.push(&v.to_string()),
            Value::String(s) if top && bare(s) => self.push(s),
            Value::String(s) => self.quoted(s),
            Value::Array(items) => {
                if items.len().saturating_mul(3) > self.limit.saturating_sub(self.chars) + 2 {
                    return Err(TooLong { limit: self.limit });
                }
                self.push("[")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.push(", ")?;
                    }
                    self.value(item, false)?;
                }
                self.push("]")
            }
            Value::Object(map) => {
                self.push("{")?;
                self.entries(map, false)?;
                self.push("}")
            }
        }
    }

    /// `"…"` with `"` and `\` escaped and every character a terminal would
    /// act on written as `\u{…}`.
    fn quoted(&mut self, s: &str) -> Result<(), TooLong> {
        // A quoted string is at least as long as its characters: refuse
        // before building the escaped copy of a huge one.
        if s.len() > self.limit.saturating_mul(4) {
            return Err(TooLong { limit: self.limit });
        }
        let mut q = String::with_capacity(s.len() + 2);
        q.push('"');
        for c in s.chars() {
            match c {
                '"' => q.push_str("\\\""),
                '\\' => q.push_str("\\\\"),
                c if must_escape(c) => q.push_str(&format!("\\u{{{:x}}}", c as u32)),
                c => q.push(c),
            }
        }
        q.push('"');
        self.push(&q)
    }
}

fn plain_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_.:/@+-".contains(c)
}

/// A string shown without quotes: plain characters only, and not one that
/// would read as a number, a boolean or null.
fn bare(s: &str) -> bool {
    !s.is_empty() && s.chars().all(plain_char) && serde_json::from_str::<Value>(s).is_err()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn plain_arguments_read_as_before() {
        assert_eq!(
            summarize(&json!({"vmid": 101, "node": "pve1"})).unwrap(),
            "node=pve1, vmid=101"
        );
        assert_eq!(
            summarize(&json!({"vmid": "101", "force": "true", "note": "a, b=c"})).unwrap(),
            r#"force="true", note="a, b=c", vmid="101""#
        );
    }

    #[test]
    fn escapes_masks_at_any_depth_and_sorts() {
        let s = summarize(&json!({
            "description": "nice\u{1b}[2K\u{1b}[1A\rharmless",
            "name": "web\u{202e}gpj.exe",
            "config": {"password": "hunter2", "user": "root", "inner": [{"api_key": "k"}]},
            "password": "x",
        }))
        .unwrap();
        assert_eq!(
            s,
            r#"config={inner=[{api_key=[redacted]}], password=[redacted], user="root"}, description="nice\u{1b}[2K\u{1b}[1A\u{d}harmless", name="web\u{202e}gpj.exe", password=[redacted]"#
        );
        assert!(!s.contains("hunter2"));
        assert!(s.chars().all(|c| !must_escape(c)));
    }

    #[test]
    fn a_hundred_keys_are_all_shown_and_too_much_is_refused() {
        let mut map = Map::new();
        for i in (0..100).rev() {
            map.insert(format!("k{i:03}"), json!(i));
        }
        let s = summarize(&Value::Object(map)).unwrap();
        assert_eq!(s.matches('=').count(), 100);
        assert!(s.starts_with("k000=0, k001=1, "), "{s}");
        assert!(s.ends_with("k099=99"), "{s}");

        let long = json!({"note": "x".repeat(MAX_SUMMARY_CHARS)});
        assert_eq!(
            summarize(&long),
            Err(TooLong {
                limit: MAX_SUMMARY_CHARS
            })
        );
        let mut many = Map::new();
        for i in 0..100_000 {
            many.insert(format!("k{i}"), json!(1));
        }
        let e = summarize(&Value::Object(many)).unwrap_err();
        assert!(e.to_string().contains("2000 characters"), "{e}");
        assert!(summarize(&json!({"a": vec![0; 1000]})).is_err());
    }
}
