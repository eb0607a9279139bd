//! Secrets PVE returns in fields not named like secrets. The gateway's
//! redaction masks fields by name (`password`, `token`, `key`, …); these
//! answers carry credentials under ordinary names, so the backend masks
//! them itself, before anything else sees the value, whatever the tool's
//! tier and whoever approved the call:
//!
//! - ACME DNS plugins (`/cluster/acme/plugins[/{id}]`): `data` holds the
//!   DNS provider's API credentials (`CF_Token=…` lines, or base64).
//! - Webhook notification endpoints
//!   (`/cluster/notifications/endpoints/webhook[/{name}]`): `url` often
//!   carries a token in its path or query (Slack, Discord, ntfy), `header`
//!   an `Authorization` value and `body` whatever the operator templated
//!   into it. The URL keeps its origin.
//! - Datacenter options (`/cluster/options`): `http_proxy` may be
//!   `http://user:password@proxy:3128`; the user part is masked.
//! - Guest settings listed as `{key, value, pending}` rows
//!   (`…/qemu/{vmid}/cloudinit`, `…/{qemu,lxc}/{vmid}/pending`): the value
//!   of a row whose `key` names a secret (`cipassword`).
//! - The generated cloud-init `user` data (`…/qemu/{vmid}/cloudinit/dump`,
//!   a YAML text): `password:` lines. That read is also `admin` tier
//!   (tiers.rs), because the text is free-form.
//!
//! Paths are matched segment by segment against the route's template,
//! with any `{placeholder}` matching any placeholder: a schema that renames
//! a placeholder does not escape the rule.

use serde_json::Value;

use airlock_catalog::redact::{is_secret, REDACTED};

/// How a field is masked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mask {
    /// The whole value.
    Whole,
    /// A URL's `user:password@`.
    UrlUser,
    /// Everything after a URL's `scheme://host:port`.
    UrlOrigin,
    /// In `{key, value, pending}` rows: `value` and `pending` when `key`
    /// names a secret.
    SecretRow,
    /// `password:` lines of a YAML text.
    YamlPassword,
}

/// (path template, fields and how each is masked). `*` as the field name
/// means the answer itself.
const RULES: &[(&str, &[(&str, Mask)])] = &[
    ("/cluster/acme/plugins", &[("data", Mask::Whole)]),
    ("/cluster/acme/plugins/{id}", &[("data", Mask::Whole)]),
    (
        "/cluster/notifications/endpoints/webhook",
        &[
            ("url", Mask::UrlOrigin),
            ("header", Mask::Whole),
            ("body", Mask::Whole),
        ],
    ),
    (
        "/cluster/notifications/endpoints/webhook/{name}",
        &[
            ("url", Mask::UrlOrigin),
            ("header", Mask::Whole),
            ("body", Mask::Whole),
        ],
    ),
    ("/cluster/options", &[("http_proxy", Mask::UrlUser)]),
    (
        "/nodes/{node}/qemu/{vmid}/cloudinit",
        &[("*", Mask::SecretRow)],
    ),
    (
        "/nodes/{node}/qemu/{vmid}/pending",
        &[("*", Mask::SecretRow)],
    ),
    (
        "/nodes/{node}/lxc/{vmid}/pending",
        &[("*", Mask::SecretRow)],
    ),
    (
        "/nodes/{node}/qemu/{vmid}/cloudinit/dump",
        &[("*", Mask::YamlPassword)],
    ),
];

/// The path templates that have masking rules (for tests that check them
/// against the real API schema).
pub fn masked_paths() -> impl Iterator<Item = &'static str> {
    RULES.iter().map(|(p, _)| *p)
}

fn is_placeholder(segment: &str) -> bool {
    segment.starts_with('{') && segment.ends_with('}')
}

fn same_template(rule: &str, path: &str) -> bool {
    let (mut a, mut b) = (rule.split('/'), path.split('/'));
    loop {
        match (a.next(), b.next()) {
            (None, None) => return true,
            (Some(x), Some(y)) if x == y || (is_placeholder(x) && is_placeholder(y)) => {}
            _ => return false,
        }
    }
}

/// Masks what the rules for `path_template` name in `value` (the answer's
/// `data`, an object or a list of them) and returns how many values it
/// masked.
pub fn mask(path_template: &str, value: &mut Value) -> usize {
    let Some((_, fields)) = RULES.iter().find(|(p, _)| same_template(p, path_template)) else {
        return 0;
    };
    let mut masked = 0;
    for (field, how) in *fields {
        match &mut *value {
            Value::Array(items) => {
                for item in items {
                    masked += mask_in(item, field, *how);
                }
            }
            other => masked += mask_in(other, field, *how),
        }
    }
    masked
}

/// Masks `field` of `item` (or `item` itself for `*`).
fn mask_in(item: &mut Value, field: &str, how: Mask) -> usize {
    if field == "*" {
        return mask_value(item, how);
    }
    match item.get_mut(field) {
        Some(v) if !v.is_null() => mask_value(v, how),
        _ => 0,
    }
}

fn mask_value(v: &mut Value, how: Mask) -> usize {
    let masked = match (how, &*v) {
        (Mask::Whole, _) => Some(Value::String(REDACTED.into())),
        (Mask::UrlUser, Value::String(s)) => url_without_user(s).map(Value::String),
        (Mask::UrlOrigin, Value::String(s)) => Some(Value::String(url_origin(s))),
        (Mask::YamlPassword, Value::String(s)) => yaml_without_passwords(s).map(Value::String),
        (Mask::SecretRow, _) => return secret_row(v),
        // A URL or text rule met something else: mask it whole.
        (_, _) => Some(Value::String(REDACTED.into())),
    };
    match masked {
        Some(m) => {
            *v = m;
            1
        }
        None => 0,
    }
}

/// `{key: "cipassword", value: "…", pending: "…"}` → both values masked.
fn secret_row(row: &mut Value) -> usize {
    let secret = row
        .get("key")
        .and_then(Value::as_str)
        .is_some_and(is_secret);
    if !secret {
        return 0;
    }
    let mut masked = 0;
    for field in ["value", "pending"] {
        if let Some(v) = row.get_mut(field).filter(|v| !v.is_null()) {
            *v = Value::String(REDACTED.into());
            masked += 1;
        }
    }
    masked
}

/// The authority of `s` (after `scheme://`, before the first `/?#`), and
/// the byte range it spans.
fn authority(s: &str) -> Option<(usize, usize)> {
    let start = s.find("://")? + 3;
    let end = s[start..]
        .find(['/', '?', '#'])
        .map(|i| start + i)
        .unwrap_or(s.len());
    Some((start, end))
}

/// `http://u:p@proxy:3128` → `http://[redacted]@proxy:3128`; `None` when
/// there is no user part. A value that is no URL but has an `@` is masked
/// whole.
fn url_without_user(s: &str) -> Option<String> {
    match authority(s) {
        Some((start, end)) => {
            let at = s[start..end].rfind('@')? + start;
            Some(format!("{}{REDACTED}{}", &s[..start], &s[at..]))
        }
        None if s.contains('@') => Some(REDACTED.into()),
        None => None,
    }
}

/// `https://hooks.example/services/T0/B0/XYZ?x=1` →
/// `https://hooks.example/[redacted]`; the user part goes too.
fn url_origin(s: &str) -> String {
    let Some((start, end)) = authority(s) else {
        return REDACTED.into();
    };
    let host = match s[start..end].rfind('@') {
        Some(at) => &s[start + at + 1..end],
        None => &s[start..end],
    };
    format!("{}{host}/{REDACTED}", &s[..start])
}

/// Replaces the value of every `password:` line (any indentation, `-`
/// list items too); `None` when there is none.
fn yaml_without_passwords(text: &str) -> Option<String> {
    let mut changed = false;
    let lines: Vec<String> = text
        .split('\n')
        .map(|line| {
            let body = line.trim_start_matches([' ', '\t', '-']);
            let indent = &line[..line.len() - body.len()];
            match body.split_once(':') {
                Some((name, _)) if is_secret(name.trim()) => {
                    changed = true;
                    format!("{indent}{}: {REDACTED}", name.trim())
                }
                _ => line.to_string(),
            }
        })
        .collect();
    changed.then(|| lines.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn acme_plugin_data_is_masked_in_lists_and_objects() {
        let mut list =
            json!([{"plugin": "cf", "api": "cf", "data": "CF_Token=abc\nCF_Account_ID=1"}]);
        assert_eq!(mask("/cluster/acme/plugins", &mut list), 1);
        assert_eq!(list[0]["data"], REDACTED);
        assert_eq!(list[0]["api"], "cf");
        let mut one = json!({"plugin": "cf", "data": "Q0ZfVG9rZW49YWJj"});
        assert_eq!(mask("/cluster/acme/plugins/{plugin}", &mut one), 1);
        assert_eq!(one["data"], REDACTED);
        let mut other = json!({"data": "x"});
        assert_eq!(mask("/cluster/acme/account", &mut other), 0);
        assert_eq!(mask("/cluster/acme/plugins/{id}/x", &mut other), 0);
    }

    #[test]
    fn urls_keep_what_is_not_secret() {
        assert_eq!(
            url_without_user("http://u:p@proxy:3128/"),
            Some(format!("http://{REDACTED}@proxy:3128/"))
        );
        assert_eq!(url_without_user("http://proxy:3128"), None);
        assert_eq!(url_without_user("u:p@proxy"), Some(REDACTED.into()));
        assert_eq!(
            url_origin("https://a:b@hooks.example/services/T0/XYZ?token=1"),
            format!("https://hooks.example/{REDACTED}")
        );
        assert_eq!(url_origin("not a url"), REDACTED);
        let mut hooks = json!([{"name": "chat", "url": "https://chat.example/hook/SECRET", "header": ["name=Authorization,value=QmVhcmVy"], "method": "post"}]);
        assert_eq!(
            mask("/cluster/notifications/endpoints/webhook", &mut hooks),
            2
        );
        assert!(!hooks.to_string().contains("SECRET") && !hooks.to_string().contains("QmVh"));
        let mut options =
            json!({"http_proxy": "http://proxyuser:hunter2@10.0.0.1:3128", "keyboard": "de"});
        assert_eq!(mask("/cluster/options", &mut options), 1);
        assert!(!options.to_string().contains("hunter2"), "{options}");
    }

    #[test]
    fn secret_rows_and_cloud_init_passwords() {
        let mut rows = json!([{"key": "cipassword", "value": "$5$salt$hash", "pending": "x"}, {"key": "ciuser", "value": "ops"}]);
        assert_eq!(mask("/nodes/{node}/qemu/{vmid}/cloudinit", &mut rows), 2);
        assert_eq!(rows[0]["value"], REDACTED);
        assert_eq!(rows[1]["value"], "ops");
        let mut dump =
            json!("#cloud-config\nuser: ops\npassword: $5$salt$hash\nchpasswd:\n  expire: False\n");
        assert_eq!(
            mask("/nodes/{node}/qemu/{vmid}/cloudinit/dump", &mut dump),
            1
        );
        let text = dump.as_str().unwrap();
        assert!(!text.contains("$5$"), "{text}");
        assert!(text.contains("user: ops") && text.contains("expire: False"));
    }
}
