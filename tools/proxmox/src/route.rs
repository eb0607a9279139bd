//! How a Proxmox tool becomes an HTTP request: the operation it calls, and
//! how its arguments map onto the operation's parameters.

use serde_json::Value;

use crate::apidata::Method;

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
