//! Names for the full catalog's tools that say what they do and to what,
//! derived from the path and the method alone, so they are stable across
//! PVE versions and runs:
//!
//! - the subject is the path's words: a collection (a word followed by an
//!   id, `groups/{group}`) in the singular, `qemu` as `vm`, `lxc` as `ct`;
//!   a leading `nodes/{node}` is `node` only when the node itself is the
//!   subject (`node_dns`, but `vm_config`), and a leading `cluster` or
//!   `access` is dropped when more words follow (`ha_group_list`);
//! - the verb is the method's: a GET of a collection is `list`, of one item
//!   `get`, of a directory index `index`; POST to a collection `create`, to
//!   one item `add`, to an action the action itself (`vm_start`,
//!   `vm_clone`); PUT `update`; DELETE `delete`; a GET of anything else is
//!   just its noun (`node_dns`, `cluster_resources`).
//!
//! Where two operations would meet, the dropped owner comes back
//! (`node_storage_list` beside `storage_list`), then the method; a number
//! only if that still clashes. The curated catalog's names win for the
//! operations it covers (`full.rs`), so a script runs in both modes.

use std::collections::{HashMap, HashSet};

use crate::apidata::{Method, Operation};

/// Words in `s` ending in `s` that are no plural.
const NOT_PLURAL: &[&str] = &[
    "dns", "zfs", "nfs", "cifs", "pbs", "iscsi", "status", "ceph", "sdn", "metrics", "aliases",
    "ipams", "vnets", "mds", "fs",
];

/// What an operation is named for, before clashes are settled: the short
/// form, and the form with the dropped owner words kept.
struct Parts {
    short: Vec<String>,
    long: Vec<String>,
    /// The verb the name ends with, if any.
    verb: Option<&'static str>,
    /// The id an item operation is for (`iface` in `network/{iface}`).
    item: Option<String>,
}

pub fn names(ops: &[Operation]) -> Vec<String> {
    let collections = collections(ops);
    let parts: Vec<Parts> = ops.iter().map(|op| parts(op, &collections)).collect();
    let short: Vec<String> = parts.iter().map(|p| p.short.join("_")).collect();
    let long: Vec<String> = parts.iter().map(|p| p.long.join("_")).collect();
    let mut out = short.clone();
    let clashing = |names: &[String]| -> HashSet<String> {
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for n in names {
            *counts.entry(n).or_default() += 1;
        }
        counts
            .into_iter()
            .filter(|(_, c)| *c > 1)
            .map(|(n, _)| n.to_string())
            .collect()
    };
    // Clashing short names take their long form where that settles it.
    let clash = clashing(&out);
    let long_clash = clashing(&long);
    for (i, n) in out.iter_mut().enumerate() {
        if clash.contains(n.as_str()) && !long_clash.contains(&long[i]) {
            *n = long[i].clone();
        }
    }
    // An item beside its collection (`network/{iface}` beside `network`)
    // names its id.
    let clash = clashing(&out);
    for (i, p) in parts.iter().enumerate() {
        if clash.contains(out[i].as_str()) {
            if let Some(item) = &p.item {
                out[i] = with_before_verb(&out[i], p.verb, item);
            }
        }
    }
    // A write beside a read of the same thing says what it does; the read
    // keeps the plain name.
    let clash = clashing(&out);
    for (i, op) in ops.iter().enumerate() {
        if clash.contains(out[i].as_str()) && op.method != Method::Get {
            let verb = match op.method {
                Method::Post => "create",
                Method::Put => "update",
                _ => "delete",
            };
            if parts[i].verb != Some(verb) {
                out[i] = format!("{}_{verb}", out[i]);
            }
        }
    }
    // A number as the last resort, in schema order.
    let mut taken: HashSet<String> = HashSet::new();
    for n in out.iter_mut() {
        if !taken.insert(n.clone()) {
            let mut k = 2;
            while taken.contains(&format!("{n}_{k}")) {
                k += 1;
            }
            *n = format!("{n}_{k}");
            taken.insert(n.clone());
        }
    }
    out
}

/// Words followed by an id somewhere in the API (`qemu` in
/// `/nodes/{node}/qemu/{vmid}`): their GET lists, their POST creates.
fn collections(ops: &[Operation]) -> HashSet<String> {
    let mut out = HashSet::new();
    for op in ops {
        let segs: Vec<&str> = op.path.split('/').filter(|s| !s.is_empty()).collect();
        for w in segs.windows(2) {
            if !w[0].starts_with('{') && w[1].starts_with('{') {
                out.insert(prefix_of(&segs, w[0]));
            }
        }
    }
    out
}

/// A collection is known by its path up to the word, so `rules` under a
/// firewall and `rules` under HA are told apart.
fn prefix_of(segs: &[&str], word: &str) -> String {
    let end = segs.iter().position(|s| *s == word).unwrap_or(0);
    segs[..=end]
        .iter()
        .map(|s| if s.starts_with('{') { "{}" } else { s })
        .collect::<Vec<_>>()
        .join("/")
}

fn parts(op: &Operation, collections: &HashSet<String>) -> Parts {
    let segs: Vec<&str> = op.path.split('/').filter(|s| !s.is_empty()).collect();
    // (word, whether it is a collection)
    let mut words: Vec<(String, bool)> = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for seg in &segs {
        seen.push(seg);
        if seg.starts_with('{') {
            continue;
        }
        let key = seen
            .iter()
            .map(|s| if s.starts_with('{') { "{}" } else { s })
            .collect::<Vec<_>>()
            .join("/");
        let collection = collections.contains(&key);
        let word = match *seg {
            "nodes" => "node".to_string(),
            // `startall`: what it does to all guests, as two words.
            w @ ("startall" | "stopall" | "suspendall" | "migrateall") => {
                format!("{}_all", w.trim_end_matches("all"))
            }
            "qemu" => "vm".to_string(),
            "lxc" => "ct".to_string(),
            w if collection => singular(&ident(w)),
            w => ident(w),
        };
        words.push((word, collection));
    }
    // `ipset/{name}/{cidr}`: the member is named by its id.
    if segs.len() >= 2 && segs[segs.len() - 2].starts_with('{') {
        if let Some(member) = segs.last().and_then(|s| s.strip_prefix('{')) {
            words.push((ident(member.trim_end_matches('}')), false));
        }
    }
    let last = segs.last().copied().unwrap_or("");
    let item = last.starts_with('{');
    let member = item && segs.len() >= 2 && segs[segs.len() - 2].starts_with('{');
    let last_is_collection = !item && words.last().is_some_and(|(_, c)| *c);
    let index = op.method == Method::Get && !last_is_collection && is_index(op);
    let verb: Option<&str> = match (op.method, item, last_is_collection) {
        _ if index => Some("index"),
        (Method::Get, true, _) => Some("get"),
        (Method::Get, false, true) => Some("list"),
        (Method::Get, false, false) => None,
        (Method::Post, _, true) => Some("create"),
        // POST to one item adds to it (a rule to a group, a CIDR to an
        // IP set), or creates it under the id given.
        (Method::Post, true, false) if !member => Some("add"),
        (Method::Post, true, false) => Some("create"),
        // POST to a word that is no collection: the word is the action.
        (Method::Post, false, false) => None,
        (Method::Put, _, _) => Some("update"),
        (Method::Delete, _, _) => Some("delete"),
    };
    let mut long: Vec<String> = words.iter().map(|(w, _)| w.clone()).collect();
    // `status/start` is the action `start`.
    if op.method == Method::Post && long.len() >= 2 && long[long.len() - 2] == "status" {
        let n = long.len();
        long.remove(n - 2);
    }
    if long.is_empty() {
        long.push("root".into());
    }
    let mut short = long.clone();
    // The node is the subject only when nothing under it is.
    if short.first().map(String::as_str) == Some("node")
        && short.len() > 1
        && words.get(1).is_some_and(|(_, c)| *c)
    {
        short.remove(0);
    }
    if matches!(short.first().map(String::as_str), Some("cluster")) && short.len() > 2 {
        short.remove(0);
    }
    if matches!(short.first().map(String::as_str), Some("access")) && short.len() > 1 {
        short.remove(0);
    }
    if let Some(v) = verb {
        short.push(v.into());
        long.push(v.into());
    }
    let item = item.then(|| ident(last.trim_matches(|c| c == '{' || c == '}')));
    Parts {
        short,
        long,
        verb,
        item,
    }
}

/// A directory index: it lists what lies below (links by sub-path name,
/// items declaring nothing but that name), not the thing itself.
fn is_index(op: &Operation) -> bool {
    let by_name = matches!(
        op.returns["links"][0]["href"].as_str(),
        Some("{subdir}" | "{name}" | "{cmd}")
    );
    let fields = op.returns["items"]["properties"].as_object();
    by_name && fields.is_none_or(|f| f.keys().all(|k| k == "subdir"))
}

/// `name` with `word` put before its verb: `network_delete` →
/// `network_iface_delete`.
fn with_before_verb(name: &str, verb: Option<&str>, word: &str) -> String {
    match verb.and_then(|v| name.strip_suffix(&format!("_{v}"))) {
        Some(base) => format!("{base}_{word}_{}", verb.unwrap_or_default()),
        None => format!("{name}_{word}"),
    }
}

/// `groups` → `group`, `policies` → `policy`; acronyms stay.
fn singular(w: &str) -> String {
    if NOT_PLURAL.contains(&w) {
        return match w {
            "aliases" => "alias".into(),
            "ipams" => "ipam".into(),
            "vnets" => "vnet".into(),
            other => other.into(),
        };
    }
    if let Some(stem) = w.strip_suffix("ies") {
        return format!("{stem}y");
    }
    for suffix in ["sses", "shes", "xes"] {
        if w.ends_with(suffix) {
            return w[..w.len() - 2].to_string();
        }
    }
    match w.strip_suffix('s') {
        Some(stem) if !stem.ends_with('s') && !stem.is_empty() => stem.to_string(),
        _ => w.to_string(),
    }
}

/// Lower-case, with anything not alphanumeric as `_`.
fn ident(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_catalog::spec::is_js_identifier;
    use serde_json::Value;

    fn op(method: Method, path: &str) -> Operation {
        Operation {
            path: path.into(),
            method,
            name: "index".into(),
            description: String::new(),
            parameters: Value::Null,
            returns: Value::Null,
        }
    }

    #[test]
    fn names_say_what_and_where() {
        use Method::*;
        let ops = [
            op(Get, "/nodes/{node}/qemu"),
            op(Post, "/nodes/{node}/qemu"),
            op(Get, "/nodes/{node}/qemu/{vmid}"),
            op(Post, "/nodes/{node}/qemu/{vmid}/status/start"),
            op(Get, "/nodes/{node}/qemu/{vmid}/firewall/rules"),
            op(Get, "/nodes/{node}/qemu/{vmid}/firewall/rules/{pos}"),
            op(Get, "/nodes/{node}/dns"),
            op(Put, "/nodes/{node}/dns"),
            op(Get, "/cluster/ha/groups"),
            op(Get, "/cluster/ha/groups/{group}"),
            op(Delete, "/cluster/ha/groups/{group}"),
            op(Get, "/cluster/ha/policies"),
            op(Get, "/storage"),
            op(Get, "/storage/{storage}"),
            op(Get, "/nodes/{node}/storage"),
            op(Get, "/nodes/{node}/storage/{storage}"),
            op(Get, "/nodes/{node}/disks/zfs"),
            op(Get, "/nodes/{node}/disks/zfs/{name}"),
            op(Get, "/access/users"),
            op(Get, "/access/users/{userid}"),
            op(Get, "/cluster/resources"),
        ];
        assert_eq!(
            names(&ops),
            [
                "vm_list",
                "vm_create",
                "vm_get",
                "vm_start",
                "vm_firewall_rule_list",
                "vm_firewall_rule_get",
                "node_dns",
                "node_dns_update",
                "ha_group_list",
                "ha_group_get",
                "ha_group_delete",
                "ha_policies",
                "storage_list",
                "storage_get",
                "node_storage_list",
                "node_storage_get",
                "node_disks_zfs_list",
                "node_disks_zfs_get",
                "user_list",
                "user_get",
                "cluster_resources",
            ]
        );
    }

    #[test]
    fn clashes_get_the_owner_then_the_id_then_the_verb_then_a_number() {
        let ops = [
            op(Method::Get, "/a/{x}/b"),
            op(Method::Get, "/a/b"),
            op(Method::Get, "/a-b"),
            op(Method::Post, "/a/b"),
        ];
        let n = names(&ops);
        assert_eq!(n, ["a_b", "a_b_2", "a_b_3", "a_b_create"]);
        assert!(n.iter().all(|x| is_js_identifier(x)), "{n:?}");
    }
}
