//! Reading the Proxmox VE API schema in the API-viewer format: the tree
//! behind `/pve-docs/api-viewer/apidata.js` (as served by a cluster) or the
//! same tree as plain JSON.

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Method {
    Get,
    Post,
    Put,
    Delete,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
        }
    }

    fn parse(s: &str) -> Option<Method> {
        match s {
            "GET" => Some(Method::Get),
            "POST" => Some(Method::Post),
            "PUT" => Some(Method::Put),
            "DELETE" => Some(Method::Delete),
            _ => None,
        }
    }
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One API operation: a method on a path.
#[derive(Clone, Debug, PartialEq)]
pub struct Operation {
    /// With placeholders, e.g. `/nodes/{node}/qemu/{vmid}/status/start`.
    pub path: String,
    pub method: Method,
    /// PVE's own name for it (`vm_start`, often just `index`).
    pub name: String,
    pub description: String,
    /// The parameter schema in PVE's dialect.
    pub parameters: Value,
    pub returns: Value,
}

impl Operation {
    /// Names of the `{placeholders}` in the path, in order.
    pub fn path_params(&self) -> Vec<String> {
        self.path
            .split('/')
            .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .map(str::to_string)
            .collect()
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ApiDataError {
    #[error("the API schema is not valid JSON: {0}")]
    Json(String),
    #[error("the API schema has no `apiSchema = [...]` array")]
    NoSchema,
    #[error("the API schema's node {path} has a malformed operation {method}")]
    Malformed { path: String, method: String },
}

/// Whether `path` is a clean template: `/` followed by segments that are
/// each a literal name (letters, digits, `_`, `-`, `.`, but not `.` or
/// `..` alone) or a `{placeholder}` (letters, digits, `_`, `-`).
///
/// The schema comes from a network peer (`catalog = "full"` fetches it
/// from the default target). Tier rules match the template as written,
/// while a URL parser would resolve `..` and `.` and collapse `//`; a
/// template like `/nodes/{node}/../access/users` would be classed as a
/// node read and sent as `/access/users`. Only clean templates are kept,
/// so tiers, routes and secret masking all see the path that is sent.
pub fn valid_path(path: &str) -> bool {
    let Some(rest) = path.strip_prefix('/') else {
        return false;
    };
    let literal = |s: &str| {
        !s.is_empty()
            && s != "."
            && s != ".."
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    };
    let placeholder = |s: &str| {
        s.strip_prefix('{')
            .and_then(|s| s.strip_suffix('}'))
            .is_some_and(|name| {
                !name.is_empty()
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
            })
    };
    path.len() <= MAX_PATH && rest.split('/').all(|s| literal(s) || placeholder(s))
}

/// Longest path template kept (PVE 9.1's longest is under 100 bytes).
const MAX_PATH: usize = 512;

/// Parses the tree (a JSON array of nodes with `path`, `info` and
/// `children`) into a flat list of operations, in tree order.
///
/// A node whose path is not a clean template (`valid_path`) contributes
/// no operations; each is dropped with a warning rather than failing the
/// load, so one odd path in a newer PVE costs one tool, not the catalog —
/// and what is dropped can never be called, whatever tier it would get.
pub fn parse(tree: &Value) -> Result<Vec<Operation>, ApiDataError> {
    let nodes = tree
        .as_array()
        .ok_or_else(|| ApiDataError::Json("the top level is not an array".into()))?;
    let mut out = Vec::new();
    walk(nodes, &mut out)?;
    // One operation per method and path: the tree a server sends may
    // list a path twice, and two tools for one operation would share a
    // name (and a stable key). The first is kept.
    let mut seen = std::collections::HashSet::new();
    out.retain(|op| {
        let first = seen.insert((op.method, op.path.clone()));
        if !first {
            let shown: String = op.path.chars().take(120).collect();
            tracing::warn!(path = ?shown, method = %op.method, "API schema: dropped a second listing of the same operation");
        }
        first
    });
    Ok(out)
}

fn walk(nodes: &[Value], out: &mut Vec<Operation>) -> Result<(), ApiDataError> {
    for node in nodes {
        let path = node.get("path").and_then(Value::as_str).unwrap_or_default();
        let info = node.get("info").and_then(Value::as_object);
        if info.is_some_and(|i| !i.is_empty()) && !valid_path(path) {
            let shown: String = path.chars().take(120).collect();
            tracing::warn!(
                path = ?shown,
                "API schema: dropped the operations of a path that is not a clean template (only literal names and {{placeholders}} are accepted)"
            );
        } else if let Some(info) = info {
            let mut methods: Vec<(&String, &Value)> = info.iter().collect();
            methods.sort_by_key(|(m, _)| Method::parse(m));
            for (m, op) in methods {
                let method = Method::parse(m).ok_or_else(|| ApiDataError::Malformed {
                    path: path.into(),
                    method: m.clone(),
                })?;
                let text = |k: &str| {
                    op.get(k)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string()
                };
                out.push(Operation {
                    path: path.into(),
                    method,
                    name: text("name"),
                    description: text("description"),
                    parameters: op.get("parameters").cloned().unwrap_or(Value::Null),
                    returns: op.get("returns").cloned().unwrap_or(Value::Null),
                });
            }
        }
        if let Some(children) = node.get("children").and_then(Value::as_array) {
            walk(children, out)?;
        }
    }
    Ok(())
}

/// Accepts either the JSON tree or the API viewer's `apidata.js`
/// (`const apiSchema = [ ... ];` followed by more script).
pub fn parse_text(text: &str) -> Result<Vec<Operation>, ApiDataError> {
    let trimmed = text.trim_start();
    let json = if trimmed.starts_with('[') {
        trimmed
    } else {
        let at = text.find("apiSchema").ok_or(ApiDataError::NoSchema)?;
        let start = text[at..].find('[').ok_or(ApiDataError::NoSchema)? + at;
        &text[start..]
    };
    // The array is followed by more JavaScript: read exactly one value.
    let mut values = serde_json::Deserializer::from_str(json).into_iter::<Value>();
    let tree = values
        .next()
        .ok_or(ApiDataError::NoSchema)?
        .map_err(|e| ApiDataError::Json(e.to_string()))?;
    parse(&tree)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tree() -> Value {
        json!([{
            "path": "/nodes", "text": "nodes",
            "info": {"GET": {"name": "index", "description": "Nodes.", "method": "GET", "parameters": {"additionalProperties": 0}, "returns": {"type": "array"}}},
            "children": [{
                "path": "/nodes/{node}/qemu/{vmid}/status/start", "text": "start",
                "info": {"POST": {"name": "vm_start", "description": "Start.", "parameters": {"properties": {"node": {"type": "string"}, "vmid": {"type": "integer"}}}}}
            }]
        }])
    }

    #[test]
    fn an_operation_listed_twice_is_kept_once() {
        let op = json!({"GET": {"name": "vmlist", "description": "VMs."}});
        let twice = json!([
            {"path": "/nodes/{node}/qemu", "info": op, "children": [
                {"path": "/nodes/{node}/qemu", "info": op}
            ]},
        ]);
        let ops = parse(&twice).unwrap();
        assert_eq!(ops.len(), 1);
        assert_eq!(ops[0].path, "/nodes/{node}/qemu");
    }

    #[test]
    fn flattens_the_tree() {
        let ops = parse(&tree()).unwrap();
        assert_eq!(ops.len(), 2);
        assert_eq!(ops[1].method, Method::Post);
        assert_eq!(ops[1].name, "vm_start");
        assert_eq!(ops[1].path_params(), ["node", "vmid"]);
    }

    #[test]
    fn paths_with_anything_but_names_and_placeholders_are_dropped() {
        for good in [
            "/nodes",
            "/nodes/{node}/qemu/{vmid}/status/start",
            "/cluster/ha/manager_status",
            "/nodes/{node}/hardware/pci/{pci-id-or-mapping}",
            "/a.b",
        ] {
            assert!(valid_path(good), "{good}");
        }
        for bad in [
            "",
            "/",
            "nodes",
            "/nodes/",
            "/nodes//qemu",
            "/nodes/{node}/../access/users",
            "/nodes/./qemu",
            "/nodes/{node}/%2e%2e/access",
            "/nodes/{}/qemu",
            "/nodes/{a/b}",
            "/nodes/{..}",
            "/nodes/{node}x",
            "/nodes/x?y=1",
            "/nodes/x#y",
            "/nodes/a\\b",
            "/nodes/ä",
            "/nodes/a b",
        ] {
            assert!(!valid_path(bad), "{bad:?}");
        }
        let hostile = json!([
            {"path": "/nodes/{node}/../access/users", "info": {"GET": {"name": "x"}, "POST": {"name": "y"}},
             "children": [{"path": "/nodes/{node}/qemu", "info": {"GET": {"name": "vmlist"}}}]},
            {"path": "/cluster/./acme/plugins", "info": {"GET": {"name": "z"}}},
            {"path": "/nodes", "info": {"GET": {"name": "index"}}}
        ]);
        let ops = parse(&hostile).unwrap();
        let kept: Vec<&str> = ops.iter().map(|o| o.path.as_str()).collect();
        assert_eq!(kept, ["/nodes/{node}/qemu", "/nodes"]);
    }

    #[test]
    fn reads_the_viewer_script() {
        let js = format!(
            "// generated\nconst apiSchema = {};\nlet method2cmd = {{}};\n",
            tree()
        );
        assert_eq!(parse_text(&js).unwrap().len(), 2);
        assert_eq!(parse_text(&tree().to_string()).unwrap().len(), 2);
        assert_eq!(parse_text("var x = 1;"), Err(ApiDataError::NoSchema));
    }
}
