//! SSH public keys in an argument, as a person deciding must see them:
//! type, fingerprint and comment. A request that installs an intruder's
//! key must not read like one that installs the operator's, and a
//! 400-character base64 blob cannot be compared by eye; its SHA256
//! fingerprint (as `ssh-keygen -l` prints it) can.
//!
//! Text holds keys when every line that is not blank is an
//! `authorized_keys` line (optional options, a key type, the base64 key
//! whose first field names that same type, an optional comment) or a `#`
//! comment, and at least one is a key. Comment lines are kept, to be
//! shown where they stand: text that is not a key is never hidden behind
//! one. Proxmox takes a VM's `sshkeys` URL-encoded; such text is decoded
//! first.

use base64::Engine;
use sha2::{Digest, Sha256};

/// Key types OpenSSH writes in `authorized_keys`.
const TYPES: &[&str] = &[
    "ssh-ed25519",
    "ssh-rsa",
    "ssh-dss",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
];

/// The most lines of keys looked at; more is not a key list a person
/// reads.
const MAX_LINES: usize = 256;

/// One line of a key list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Line {
    Key(PublicKey),
    /// A `#` line, as written (trimmed).
    Comment(String),
}

/// One key line, as shown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublicKey {
    /// `authorized_keys` options before the key (`from="…",no-pty`), as
    /// written.
    pub options: String,
    pub kind: String,
    /// `SHA256:` and the unpadded base64 of the key blob's SHA-256.
    pub fingerprint: String,
    pub comment: String,
}

/// The keys (and `#` lines) `text` holds, if it is nothing but those and
/// blank lines, with at least one key; `None` for any other text.
/// URL-encoded text (Proxmox's `sshkeys`) is decoded first.
pub fn parse(text: &str) -> Option<Vec<Line>> {
    if let Some(keys) = parse_plain(text) {
        return Some(keys);
    }
    if text.contains('%') {
        let decoded = percent_decode(text)?;
        return parse_plain(&decoded);
    }
    None
}

fn parse_plain(text: &str) -> Option<Vec<Line>> {
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if i >= MAX_LINES {
            return None;
        }
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        lines.push(match line.starts_with('#') {
            true => Line::Comment(line.to_string()),
            false => Line::Key(parse_line(line)?),
        });
    }
    lines
        .iter()
        .any(|l| matches!(l, Line::Key(_)))
        .then_some(lines)
}

/// `[options] type base64 [comment]`; the options end at the first space
/// outside double quotes.
fn parse_line(line: &str) -> Option<PublicKey> {
    let (options, rest) = match starts_with_type(line) {
        true => ("", line),
        false => split_options(line)?,
    };
    let mut fields = rest.splitn(3, [' ', '\t']);
    let kind = fields.next()?;
    if !TYPES.contains(&kind) {
        return None;
    }
    let blob = base64::engine::general_purpose::STANDARD
        .decode(fields.next()?.trim())
        .ok()?;
    // The blob names its own type first: a string of the key's type.
    let named = blob
        .get(0..4)
        .map(|n| u32::from_be_bytes([n[0], n[1], n[2], n[3]]) as usize)
        .and_then(|n| blob.get(4..4 + n))?;
    if named != kind.as_bytes() {
        return None;
    }
    let digest = Sha256::digest(&blob);
    Some(PublicKey {
        options: options.to_string(),
        kind: kind.to_string(),
        fingerprint: format!(
            "SHA256:{}",
            base64::engine::general_purpose::STANDARD_NO_PAD.encode(digest)
        ),
        comment: fields.next().unwrap_or_default().trim().to_string(),
    })
}

fn starts_with_type(line: &str) -> bool {
    TYPES.iter().any(|t| {
        line.strip_prefix(t)
            .is_some_and(|r| r.starts_with([' ', '\t']))
    })
}

fn split_options(line: &str) -> Option<(&str, &str)> {
    let mut quoted = false;
    for (i, c) in line.char_indices() {
        match c {
            '"' => quoted = !quoted,
            ' ' | '\t' if !quoted => return Some((&line[..i], line[i..].trim_start())),
            _ => {}
        }
    }
    None
}

/// `%XX` decoded; `None` when that is not valid UTF-8 or a `%` is not
/// followed by two hex digits.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ed25519 key blob: the type, then 32 bytes.
    fn ed25519(seed: u8) -> String {
        let mut blob = Vec::new();
        blob.extend_from_slice(&(11u32).to_be_bytes());
        blob.extend_from_slice(b"ssh-ed25519");
        blob.extend_from_slice(&(32u32).to_be_bytes());
        blob.extend_from_slice(&[seed; 32]);
        base64::engine::general_purpose::STANDARD.encode(blob)
    }

    #[test]
    fn keys_are_read_with_their_fingerprints() {
        let text = format!(
            "# ops\nssh-ed25519 {} alice@laptop\n\nfrom=\"10.0.0.0/8\",no-pty ssh-ed25519 {} backup key\n",
            ed25519(1),
            ed25519(2)
        );
        let lines = parse(&text).unwrap();
        assert_eq!(lines[0], Line::Comment("# ops".into()));
        let keys: Vec<&PublicKey> = lines
            .iter()
            .filter_map(|l| match l {
                Line::Key(k) => Some(k),
                Line::Comment(_) => None,
            })
            .collect();
        assert_eq!(keys.len(), 2);
        assert_eq!(keys[0].kind, "ssh-ed25519");
        assert_eq!(keys[0].comment, "alice@laptop");
        assert_eq!(keys[1].options, "from=\"10.0.0.0/8\",no-pty");
        assert_eq!(keys[1].comment, "backup key");
        assert!(keys[0].fingerprint.starts_with("SHA256:"));
        assert_eq!(keys[0].fingerprint.len(), 7 + 43);
        assert_ne!(keys[0].fingerprint, keys[1].fingerprint);
        // The fingerprint ssh-keygen prints for this blob.
        let blob = base64::engine::general_purpose::STANDARD
            .decode(ed25519(1))
            .unwrap();
        let expected =
            base64::engine::general_purpose::STANDARD_NO_PAD.encode(Sha256::digest(&blob));
        assert_eq!(keys[0].fingerprint, format!("SHA256:{expected}"));
    }

    #[test]
    fn url_encoded_keys_are_decoded() {
        let plain = format!("ssh-ed25519 {} a b", ed25519(3));
        let encoded: String = plain
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' => (b as char).to_string(),
                other => format!("%{other:02X}"),
            })
            .collect();
        assert_eq!(parse(&encoded), parse(&plain));
        assert!(matches!(&parse(&encoded).unwrap()[0], Line::Key(k) if k.comment == "a b"));
    }

    #[test]
    fn anything_else_is_not_keys() {
        for text in [
            String::new(),
            "hunter2".into(),
            "ssh-ed25519".into(),
            "ssh-ed25519 not-base64!".into(),
            // A valid blob of another type than the line says.
            format!("ssh-rsa {}", ed25519(1)),
            // Keys and something else.
            format!("ssh-ed25519 {}\nrm -rf /", ed25519(1)),
            "%zz".into(),
            "# only a comment".into(),
        ] {
            assert_eq!(parse(&text), None, "{text}");
        }
    }
}
