//! The simulated cluster's API: PVE's paths, parameters, answers and
//! errors for every curated operation, against [`Cluster`] state, with
//! per-token privileges. One file per API area: guests (`/nodes/{node}/qemu`
//! and `/lxc`) and the changes made to them, nodes (with storage, tasks
//! and the node's own settings), and the datacenter (`/cluster`, `/pools`,
//! `/access`, `/version`).

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use super::cluster::{Cluster, Guest, Kind, Power};
use datacenter::cluster_routes;
use guests::guest_routes;
use nodes::node_routes;

/// The four HTTP methods PVE's API uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
}

/// What a token may do, coarse-grained like PVE's built-in roles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// PVEAuditor: read everything, change nothing.
    Reader,
    /// Read, and power guests on and off.
    Operator,
    /// Everything.
    Admin,
}

/// An answer: status, PVE's reason phrase, and the JSON body.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    pub status: u16,
    pub reason: String,
    pub body: Value,
}

impl Reply {
    fn data(v: Value) -> Self {
        Self {
            status: 200,
            reason: "OK".into(),
            body: json!({"data": v}),
        }
    }

    fn error(status: u16, message: impl Into<String>) -> Self {
        let message = message.into();
        Self {
            status,
            reason: message.clone(),
            body: json!({"data": null, "message": format!("{message}\n")}),
        }
    }

    fn bad_params(errors: &[(&str, String)]) -> Self {
        let map: Map<String, Value> = errors
            .iter()
            .map(|(k, v)| (k.to_string(), json!(format!("{v}\n"))))
            .collect();
        Self {
            status: 400,
            reason: "Parameter verification failed.".into(),
            body: json!({"data": null, "errors": map}),
        }
    }
}

type Params = HashMap<String, String>;
type Vars = HashMap<String, String>;

/// Matches `path` against a template, returning the placeholders.
fn matches(template: &str, path: &str) -> Option<Vars> {
    let t: Vec<&str> = template.trim_matches('/').split('/').collect();
    let p: Vec<&str> = path.trim_matches('/').split('/').collect();
    if t.len() != p.len() {
        return None;
    }
    let mut vars = Vars::new();
    for (a, b) in t.iter().zip(&p) {
        if let Some(name) = a.strip_prefix('{').and_then(|a| a.strip_suffix('}')) {
            let decoded = percent_encoding::percent_decode_str(b)
                .decode_utf8()
                .ok()?
                .into_owned();
            vars.insert(name.to_string(), decoded);
        } else if a != b {
            return None;
        }
    }
    Some(vars)
}

fn flag(p: &Params, k: &str) -> bool {
    matches!(p.get(k).map(String::as_str), Some("1" | "true"))
}

/// Power actions an operator token may take.
fn is_power(method: Method, path: &str) -> bool {
    method == Method::Post
        && [
            "/status/start",
            "/status/stop",
            "/status/shutdown",
            "/status/reboot",
            "/status/reset",
            "/status/suspend",
            "/status/resume",
        ]
        .iter()
        .any(|s| path.ends_with(s))
}

pub fn handle(
    c: &mut Cluster,
    method: Method,
    path: &str,
    p: &Params,
    user: &str,
    role: Role,
) -> Reply {
    c.advance();
    let mut shown: Vec<String> = p.iter().map(|(k, v)| format!("{k}={v}")).collect();
    shown.sort();
    c.requests.push((
        method.as_str().into(),
        format!("{path}?{}", shown.join("&")),
        user.into(),
    ));
    let read_like = method == Method::Get || path.ends_with("/agent/ping");
    let allowed = match role {
        Role::Admin => true,
        Role::Operator => {
            read_like
                || is_power(method, path)
                || (method == Method::Delete && path.contains("/tasks/"))
        }
        Role::Reader => read_like,
    };
    if !allowed {
        let privilege = if is_power(method, path) {
            "VM.PowerMgmt"
        } else {
            "VM.Allocate"
        };
        return Reply::error(
            403,
            format!("Permission check failed ({path}, {privilege})"),
        );
    }
    route(c, method, path, p, user)
}

macro_rules! on {
    ($m:expr, $path:expr, $method:ident, $template:literal) => {
        if $m == Method::$method {
            if let Some(v) = matches($template, $path) {
                Some(v)
            } else {
                None
            }
        } else {
            None
        }
    };
}

// After `on!`, so the area files can use it.
mod datacenter;
mod guest_changes;
mod guests;
mod nodes;

fn node_ok(c: &Cluster, v: &Vars) -> Result<String, Reply> {
    let name = v.get("node").cloned().unwrap_or_default();
    match c.node(&name) {
        Some(n) if n.online => Ok(name),
        Some(_) => Err(Reply::error(595, format!("no route to host {name}"))),
        None => Err(Reply::error(500, format!("hostname lookup '{name}' failed - failed to get address info for: {name}: Name or service not known"))),
    }
}

fn guest<'a>(c: &'a Cluster, v: &Vars, kind: Kind) -> Result<&'a Guest, Reply> {
    let node = node_ok(c, v)?;
    let vmid: u32 = v.get("vmid").and_then(|s| s.parse().ok()).ok_or_else(|| {
        Reply::bad_params(&[("vmid", "value does not look like a valid VM ID".into())])
    })?;
    match c.guests.get(&vmid) {
        Some(g) if g.kind == kind && g.node == node => Ok(g),
        Some(g) if g.kind == kind => Err(Reply::error(
            500,
            format!(
                "Configuration file 'nodes/{node}/{}/{vmid}.conf' does not exist",
                if kind == Kind::Qemu {
                    "qemu-server"
                } else {
                    "lxc"
                }
            ),
        )),
        _ => Err(Reply::error(
            500,
            format!(
                "Configuration file 'nodes/{node}/{}/{vmid}.conf' does not exist",
                if kind == Kind::Qemu {
                    "qemu-server"
                } else {
                    "lxc"
                }
            ),
        )),
    }
}

fn route(c: &mut Cluster, m: Method, path: &str, p: &Params, user: &str) -> Reply {
    if let Some(refusal) = missing_required(m, path, p) {
        return refusal;
    }
    for kind in [Kind::Qemu, Kind::Lxc] {
        if let Some(r) = guest_routes(c, m, path, p, user, kind) {
            return r;
        }
    }
    if let Some(r) = node_routes(c, m, path, p, user) {
        return r;
    }
    if let Some(r) = cluster_routes(c, m, path, p) {
        return r;
    }
    Reply::error(
        501,
        format!("Method '{} {path}' not implemented", m.as_str()),
    )
}

/// A guest as lists show it (`/nodes/{node}/qemu`, `/cluster/resources`
/// adds its `id`, `type` and `node`).
fn summary(g: &Guest, now: u64) -> Value {
    let mut v = json!({
        "vmid": g.vmid,
        "name": g.name(),
        "status": g.power.as_str(),
        "cpus": g.cores(),
        "cpu": if g.power == Power::Running { 0.03 } else { 0.0 },
        "maxmem": g.memory_mib() << 20,
        "mem": if g.power == Power::Running { (g.memory_mib() << 20) / 3 } else { 0 },
        "maxdisk": g.disk_bytes(),
        "uptime": g.uptime(now),
    });
    if g.template() {
        v["template"] = json!(1);
    }
    if let Some(t) = g.config.get("tags") {
        v["tags"] = t.clone();
    }
    v
}

/// RRD points for the last 70 minutes, as graphs read them: `point(i)`
/// gives the i-th point's values (0 is the oldest), the time is added.
fn rrd(now: u64, point: impl Fn(u64) -> Value) -> Value {
    Value::Array(
        (0..70u64)
            .map(|i| {
                let mut v = point(i);
                v["time"] = json!(now - (69 - i) * 60);
                v
            })
            .collect(),
    )
}

/// A guest's RRD point: its own size, and no load while it is stopped.
fn guest_rrd(g: &Guest, i: u64) -> Value {
    let maxmem = g.memory_mib() << 20;
    let on = g.power == Power::Running;
    let wave = (i % 7) as f64 / 100.0;
    json!({
        "cpu": if on { 0.02 + wave } else { 0.0 },
        "maxcpu": g.cores(),
        "mem": if on { maxmem / 3 + (i % 5) * (1 << 20) } else { 0 },
        "maxmem": maxmem,
        "disk": 0,
        "maxdisk": g.disk_bytes(),
        "netin": if on { 1000.0 + (g.vmid % 10) as f64 * 100.0 } else { 0.0 },
        "netout": if on { 600.0 + (g.vmid % 10) as f64 * 50.0 } else { 0.0 },
        "diskread": if on { 4096.0 } else { 0.0 },
        "diskwrite": if on { 8192.0 } else { 0.0 },
    })
}

/// Parameters PVE requires on operations whose handlers read them
/// optionally; a call without them gets PVE's 400 naming every one.
const REQUIRED: &[(Method, &str, &[&str])] = &[
    (Method::Get, "/nodes/{node}/rrddata", &["timeframe"]),
    (
        Method::Get,
        "/nodes/{node}/qemu/{vmid}/rrddata",
        &["timeframe"],
    ),
    (
        Method::Get,
        "/nodes/{node}/lxc/{vmid}/rrddata",
        &["timeframe"],
    ),
    (
        Method::Get,
        "/nodes/{node}/storage/{storage}/rrddata",
        &["timeframe"],
    ),
    (
        Method::Get,
        "/nodes/{node}/qemu/{vmid}/cloudinit/dump",
        &["type"],
    ),
    (
        Method::Get,
        "/nodes/{node}/qemu/{vmid}/feature",
        &["feature"],
    ),
    (
        Method::Get,
        "/nodes/{node}/vzdump/extractconfig",
        &["volume"],
    ),
    (Method::Get, "/nodes/{node}/disks/smart", &["disk"]),
    (
        Method::Post,
        "/nodes/{node}/qemu/{vmid}/move_disk",
        &["disk"],
    ),
    (
        Method::Put,
        "/nodes/{node}/qemu/{vmid}/resize",
        &["disk", "size"],
    ),
    (
        Method::Put,
        "/nodes/{node}/lxc/{vmid}/resize",
        &["disk", "size"],
    ),
    (
        Method::Post,
        "/nodes/{node}/lxc/{vmid}/move_volume",
        &["volume"],
    ),
    (
        Method::Post,
        "/nodes/{node}/storage/{storage}/download-url",
        &["content", "filename", "url"],
    ),
];

fn missing_required(m: Method, path: &str, p: &Params) -> Option<Reply> {
    let (_, _, names) = REQUIRED
        .iter()
        .find(|(method, template, _)| *method == m && matches(template, path).is_some())?;
    let missing: Vec<(&str, String)> = names
        .iter()
        .filter(|n| !p.contains_key(**n))
        .map(|n| (*n, "property is missing and it is not optional".to_string()))
        .collect();
    (!missing.is_empty()).then(|| Reply::bad_params(&missing))
}
