//! Keeping secrets out of a script's reach and out of summaries: fields
//! whose names look like credentials are replaced before the script sees a
//! result, and argument summaries shown to approvers (`summary.rs`) mask
//! them too.

use serde_json::Value;

pub const REDACTED: &str = "[redacted]";

/// Name parts that mark a field as secret.
const SECRET_PARTS: &[&str] = &[
    "password",
    "passwd",
    "pwd",
    "passphrase",
    "secret",
    "token",
    "ticket",
    "key",
    "keys",
    "cookie",
    "csrf",
    "private",
    "privkey",
    "credential",
    "credentials",
    "auth",
    "authorization",
    "sessionid",
    "otp",
    "totp",
];

/// Whole names (lower-cased, separators removed) that are secret although
/// no single part says so, e.g. `CSRFPreventionToken`, `apikey`.
const SECRET_NAMES: &[&str] = &[
    "csrfpreventiontoken",
    "sessionid",
    "apikey",
    "apitoken",
    "privatekey",
    "sshkey",
    "sshkeys",
    "secretkey",
];

/// Whether a field named `name` should never reach a script.
pub fn is_secret(name: &str) -> bool {
    let squashed: String = name
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect::<String>()
        .to_lowercase();
    if SECRET_NAMES.contains(&squashed.as_str())
        || squashed.contains("password")
        || squashed.contains("secret")
    {
        return true;
    }
    parts(name)
        .iter()
        .any(|p| SECRET_PARTS.contains(&p.as_str()))
}

/// `CSRFPreventionToken` → csrf, prevention, token; `ssh_keys` → ssh, keys.
fn parts(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let chars: Vec<char> = name.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_ascii_alphanumeric() {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            continue;
        }
        let boundary = c.is_ascii_uppercase()
            && !cur.is_empty()
            && (chars[i - 1].is_ascii_lowercase()
                || chars.get(i + 1).is_some_and(|n| n.is_ascii_lowercase()));
        if boundary {
            out.push(std::mem::take(&mut cur));
        }
        cur.push(c.to_ascii_lowercase());
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Replaces the values of secret-looking fields, at any depth; returns how
/// many were replaced.
pub fn redact(v: &mut Value) -> usize {
    match v {
        Value::Object(map) => {
            let mut n = 0;
            for (k, val) in map.iter_mut() {
                if is_secret(k) && !val.is_null() {
                    *val = Value::String(REDACTED.into());
                    n += 1;
                } else {
                    n += redact(val);
                }
            }
            n
        }
        Value::Array(items) => items.iter_mut().map(redact).sum(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secret_names() {
        for s in [
            "password",
            "root_password",
            "CSRFPreventionToken",
            "ticket",
            "api_key",
            "apiKey",
            "private_key",
            "cookie",
            "Authorization",
            "ssh-keys",
            "client_secret",
            "sessionId",
        ] {
            assert!(is_secret(s), "{s}");
        }
        for s in [
            "node",
            "vmid",
            "keyboard",
            "name",
            "status",
            "monkey",
            "tokenizer",
        ] {
            assert!(!is_secret(s), "{s}");
        }
    }

    #[test]
    fn redacts_at_any_depth() {
        let mut v = json!({"vms": [{"name": "a", "cloudinit": {"password": "hunter2", "user": "root"}}], "ticket": "PVE:x", "nothing": null});
        assert_eq!(redact(&mut v), 2);
        assert_eq!(v["vms"][0]["cloudinit"]["password"], REDACTED);
        assert_eq!(v["vms"][0]["cloudinit"]["user"], "root");
        assert_eq!(v["ticket"], REDACTED);
        assert!(!v.to_string().contains("hunter2"));
    }
}
