//! How a Proxmox tool becomes an HTTP request: the operation it calls, and
//! how its arguments map onto the operation's parameters.

use serde_json::{json, Value};

use crate::apidata::Method;

/// Adds the optional `target` every Proxmox tool takes (which configured
/// cluster to talk to).
pub fn with_target(mut input: Value) -> Value {
    if let Some(props) = input.get_mut("properties").and_then(Value::as_object_mut) {
        props.entry("target").or_insert_with(|| {
            json!({"type": "string", "description": "Which configured cluster to use; the default target when omitted.", "pattern": "^[A-Za-z0-9_-]{1,64}$"})
        });
    }
    input
}

#[derive(Clone, Debug, PartialEq)]
pub enum RouteKind {
    /// One API request.
    Api,
    /// `wait_task`: polls a task's status until it stops.
    WaitTask,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Route {
    pub method: Method,
    /// Path template with `{placeholders}`.
    pub path: String,
    /// Argument name → PVE parameter name, where they differ
    /// (`target_node` → `target`, because `target` picks the cluster).
    pub renames: Vec<(String, String)>,
    /// Parameters always sent (`content=backup` for backup_list).
    pub fixed: Vec<(String, Value)>,
    /// Arguments the backend uses itself and never sends.
    pub local: Vec<String>,
    pub kind: RouteKind,
}

impl Route {
    /// What this route is, in words no catalog can move to another tool:
    /// `<backend>:METHOD PATH`, with the parameters it always sends
    /// (`?content=backup`) and `(wait)` for `wait_task`'s polling. The
    /// curated and the full catalog give one API operation the same key.
    pub fn key(&self, backend: &str) -> String {
        let mut key = format!("{backend}:{} {}", self.method, self.path);
        for (i, (name, value)) in self.fixed.iter().enumerate() {
            let value = match value {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            key.push(if i == 0 { '?' } else { '&' });
            key.push_str(&format!("{name}={value}"));
        }
        if self.kind == RouteKind::WaitTask {
            key.push_str(" (wait)");
        }
        key
    }

    pub fn api(method: Method, path: impl Into<String>) -> Self {
        Self {
            method,
            path: path.into(),
            renames: Vec::new(),
            fixed: Vec::new(),
            local: Vec::new(),
            kind: RouteKind::Api,
        }
    }

    /// The PVE name of argument `arg`.
    pub fn wire_name<'a>(&'a self, arg: &'a str) -> &'a str {
        self.renames
            .iter()
            .find(|(l, _)| l == arg)
            .map(|(_, w)| w.as_str())
            .unwrap_or(arg)
    }

    /// The path's placeholders.
    pub fn path_params(&self) -> Vec<String> {
        self.path
            .split('/')
            .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .map(str::to_string)
            .collect()
    }
}
