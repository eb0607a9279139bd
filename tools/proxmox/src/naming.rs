//! Stable, readable tool names for API operations.
//!
//! PVE's own operation name is used when it is unique and says something
//! (`vmlist`); a telling name shared by several operations is prefixed with
//! the path's first word (`qemu_vm_start`, `lxc_vm_start`); a generic one
//! (`index`, `create`) gives way to a verb for the method and the path's
//! fixed words: `GET /cluster/ha/groups` → `get_cluster_ha_groups`. A
//! leading `nodes` is dropped (almost everything is under a node).
//! Remaining clashes get the method, then a number — all decided by the
//! schema alone, so names do not change between runs.

use std::collections::{HashMap, HashSet};

use crate::apidata::{Method, Operation};
use airlock_gateway::spec::is_js_identifier;

/// PVE names too generic to stand alone.
const GENERIC: &[&str] = &[
    "index", "read", "create", "delete", "update", "status", "get", "set", "list", "info",
    "options", "config", "remove", "add", "change", "upload", "download",
];

pub fn names(ops: &[Operation]) -> Vec<String> {
    let mut counts: HashMap<String, usize> = HashMap::new();
    for op in ops {
        *counts.entry(ident(&op.name)).or_default() += 1;
    }
    let scoped: Vec<Option<String>> = ops
        .iter()
        .map(|op| {
            let own = ident(&op.name);
            let telling = !GENERIC.contains(&own.as_str()) && is_js_identifier(&own);
            (telling && counts[&own] > 1).then(|| {
                let scope = words(op).into_iter().next().unwrap_or_default();
                if own.starts_with(&format!("{scope}_")) {
                    own
                } else {
                    format!("{scope}_{own}")
                }
            })
        })
        .collect();
    let mut scoped_counts: HashMap<&str, usize> = HashMap::new();
    for s in scoped.iter().flatten() {
        *scoped_counts.entry(s).or_default() += 1;
    }
    let mut out: Vec<String> = ops
        .iter()
        .zip(&scoped)
        .map(|(op, scoped)| {
            let own = ident(&op.name);
            match scoped {
                None if counts[&own] == 1
                    && !GENERIC.contains(&own.as_str())
                    && is_js_identifier(&own) =>
                {
                    own
                }
                Some(s) if scoped_counts[s.as_str()] == 1 => s.clone(),
                _ => path_name(op),
            }
        })
        .collect();
    // Settle remaining clashes deterministically.
    let mut seen: HashMap<String, usize> = HashMap::new();
    for n in &out {
        *seen.entry(n.clone()).or_default() += 1;
    }
    for (i, op) in ops.iter().enumerate() {
        if seen[&out[i]] > 1 {
            out[i] = format!("{}_{}", out[i], op.method.as_str().to_lowercase());
        }
    }
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

fn verb(m: Method) -> &'static str {
    match m {
        Method::Get => "get",
        Method::Post => "create",
        Method::Put => "set",
        Method::Delete => "delete",
    }
}

/// The path's fixed words, without a leading `nodes`.
fn words(op: &Operation) -> Vec<String> {
    let mut words: Vec<String> = op
        .path
        .split('/')
        .filter(|s| !s.is_empty() && !s.starts_with('{'))
        .map(ident)
        .collect();
    if words.first().map(String::as_str) == Some("nodes") && words.len() > 1 {
        words.remove(0);
    }
    words
}

fn path_name(op: &Operation) -> String {
    let mut w = words(op);
    if w.is_empty() {
        w.push("root".into());
    }
    format!("{}_{}", verb(op.method), w.join("_"))
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
    use serde_json::Value;

    fn op(method: Method, path: &str, name: &str) -> Operation {
        Operation {
            path: path.into(),
            method,
            name: name.into(),
            description: String::new(),
            parameters: Value::Null,
            returns: Value::Null,
        }
    }

    #[test]
    fn unique_names_stay_generic_ones_become_paths() {
        let ops = [
            op(
                Method::Post,
                "/nodes/{node}/qemu/{vmid}/status/start",
                "vm_start",
            ),
            op(
                Method::Get,
                "/nodes/{node}/qemu/{vmid}/snapshot",
                "snapshot_list",
            ),
            op(
                Method::Get,
                "/nodes/{node}/lxc/{vmid}/snapshot",
                "snapshot_list",
            ),
            op(Method::Get, "/cluster/ha", "index"),
            op(Method::Get, "/cluster/ha/groups", "index"),
            op(Method::Post, "/cluster/ha/groups", "create"),
        ];
        assert_eq!(
            names(&ops),
            [
                "vm_start",
                "qemu_snapshot_list",
                "lxc_snapshot_list",
                "get_cluster_ha",
                "get_cluster_ha_groups",
                "create_cluster_ha_groups"
            ]
        );
    }

    #[test]
    fn clashes_get_the_method_then_a_number() {
        let ops = [
            op(Method::Get, "/a/{x}/b", "index"),
            op(Method::Get, "/a/b", "index"),
            op(Method::Get, "/a-b", "index"),
        ];
        let n = names(&ops);
        assert_eq!(n.len(), 3);
        assert_eq!(n.iter().collect::<HashSet<_>>().len(), 3, "{n:?}");
        assert!(n.iter().all(|x| is_js_identifier(x)));
    }
}
