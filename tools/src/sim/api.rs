//! The simulated cluster's API: PVE's paths, parameters, answers and
//! errors for every curated operation, against [`Cluster`] state, with
//! per-token privileges.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use super::cluster::{is_disk_key, now_secs, Cluster, Effect, Guest, Kind, Power};
use crate::proxmox::apidata::Method;

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
        "type": g.kind.as_str(),
    });
    if g.template() {
        v["template"] = json!(1);
    }
    if let Some(t) = g.config.get("tags") {
        v["tags"] = t.clone();
    }
    v
}

fn guest_routes(
    c: &mut Cluster,
    m: Method,
    path: &str,
    p: &Params,
    user: &str,
    kind: Kind,
) -> Option<Reply> {
    let k = kind.as_str();
    let base = format!("/nodes/{{node}}/{k}");
    let t = |suffix: &str| format!("{base}{suffix}");
    let now = now_secs();
    let at = |template: &str, method: Method| {
        if m == method {
            matches(template, path)
        } else {
            None
        }
    };

    if let Some(v) = at(&t(""), Method::Get) {
        return Some(
            node_ok(c, &v)
                .map(|node| {
                    Reply::data(Value::Array(
                        c.guests
                            .values()
                            .filter(|g| g.kind == kind && g.node == node)
                            .map(|g| summary(g, now))
                            .collect(),
                    ))
                })
                .unwrap_or_else(|e| e),
        );
    }
    if let Some(v) = at(&t(""), Method::Post) {
        return Some(create(c, &v, p, user, kind));
    }
    if let Some(v) = at(&t("/{vmid}/status/current"), Method::Get) {
        return Some(
            guest(c, &v, kind)
                .map(|g| {
                    let mut s = summary(g, now);
                    s["ha"] = json!({"managed": 0});
                    if kind == Kind::Qemu {
                        s["qmpstatus"] = json!(g.power.as_str());
                        s["agent"] = json!(1);
                    }
                    Reply::data(s)
                })
                .unwrap_or_else(|e| e),
        );
    }
    if let Some(v) = at(&t("/{vmid}/config"), Method::Get) {
        return Some(
            guest(c, &v, kind)
                .map(|g| {
                    let source = match p.get("snapshot") {
                        Some(s) => match g.snapshots.iter().find(|x| &x.name == s) {
                            Some(x) => x.config.clone(),
                            None => {
                                return Reply::error(500, format!("snapshot '{s}' does not exist"))
                            }
                        },
                        None => g.config.clone(),
                    };
                    let mut cfg = source;
                    cfg.insert(
                        "digest".into(),
                        json!(
                            crate::digest::sha256_json(&Value::Object(g.config.clone()))[..40]
                                .to_string()
                        ),
                    );
                    Reply::data(Value::Object(cfg))
                })
                .unwrap_or_else(|e| e),
        );
    }
    if let Some(v) = at(&t("/{vmid}/pending"), Method::Get) {
        return Some(
            guest(c, &v, kind)
                .map(|g| {
                    Reply::data(Value::Array(
                        g.config
                            .iter()
                            .map(|(key, value)| json!({"key": key, "value": value}))
                            .collect(),
                    ))
                })
                .unwrap_or_else(|e| e),
        );
    }
    if let Some(v) = at(&t("/{vmid}/rrddata"), Method::Get) {
        return Some(
            guest(c, &v, kind)
                .map(|g| Reply::data(rrd(now, g.power == Power::Running)))
                .unwrap_or_else(|e| e),
        );
    }
    if let Some(v) = at(&t("/{vmid}/interfaces"), Method::Get) {
        return Some(guest(c, &v, kind).map(|g| {
            Reply::data(json!([{"name": "lo", "inet": "127.0.0.1/8"}, {"name": "eth0", "inet": format!("10.0.{}.{}/24", g.vmid / 256, g.vmid % 256), "hwaddr": "bc:24:11:01:00:01"}]))
        }).unwrap_or_else(|e| e));
    }
    for action in [
        "start", "stop", "shutdown", "reboot", "reset", "suspend", "resume",
    ] {
        if let Some(v) = at(&t(&format!("/{{vmid}}/status/{action}")), Method::Post) {
            return Some(power(c, &v, p, user, kind, action));
        }
    }
    if let Some(v) = at(&t("/{vmid}"), Method::Delete) {
        return Some(
            guest(c, &v, kind)
                .map(|g| (g.vmid, g.node.clone(), g.power))
                .map(|(vmid, node, power)| {
                    if power != Power::Stopped {
                        return Reply::error(500, format!("VM {vmid} is running - destroy failed"));
                    }
                    let tk = if kind == Kind::Qemu {
                        "qmdestroy"
                    } else {
                        "vzdestroy"
                    };
                    Reply::data(json!(c.start_task(
                        &node,
                        tk,
                        &vmid.to_string(),
                        user,
                        Effect::Delete { vmid },
                        None
                    )))
                })
                .unwrap_or_else(|e| e),
        );
    }
    if let Some(v) = at(&t("/{vmid}/clone"), Method::Post) {
        return Some(clone(c, &v, p, user, kind));
    }
    if let Some(v) = at(&t("/{vmid}/migrate"), Method::Get) {
        return Some(guest(c, &v, kind).map(|g| {
            let others: Vec<&str> = c.nodes.iter().filter(|n| n.name != g.node && n.online).map(|n| n.name.as_str()).collect();
            Reply::data(json!({"running": g.power == Power::Running, "allowed_nodes": others, "not_allowed_nodes": {}, "local_disks": [], "local_resources": []}))
        }).unwrap_or_else(|e| e));
    }
    if let Some(v) = at(&t("/{vmid}/migrate"), Method::Post) {
        return Some(
            guest(c, &v, kind)
                .map(|g| (g.vmid, g.node.clone(), g.power))
                .map(|(vmid, node, power)| {
                    let Some(target) = p.get("target") else {
                        return Reply::bad_params(&[(
                            "target",
                            "property is missing and it is not optional".into(),
                        )]);
                    };
                    match c.node(target) {
                        None => {
                            return Reply::error(500, format!("no such cluster node '{target}'"))
                        }
                        Some(_) if *target == node => {
                            return Reply::error(500, "target is local node.")
                        }
                        Some(n) if !n.online => {
                            return Reply::error(500, format!("target node '{target}' is offline"))
                        }
                        _ => {}
                    }
                    if power == Power::Running && kind == Kind::Qemu && !flag(p, "online") {
                        return Reply::error(500, "can't migrate running VM without --online");
                    }
                    if power == Power::Running
                        && kind == Kind::Lxc
                        && !flag(p, "restart")
                        && !flag(p, "online")
                    {
                        return Reply::error(
                            500,
                            "CT is running - use online or restart migration",
                        );
                    }
                    let tk = if kind == Kind::Qemu {
                        "qmigrate"
                    } else {
                        "vzmigrate"
                    };
                    Reply::data(json!(c.start_task(
                        &node,
                        tk,
                        &vmid.to_string(),
                        user,
                        Effect::Migrate {
                            vmid,
                            to: target.clone()
                        },
                        None
                    )))
                })
                .unwrap_or_else(|e| e),
        );
    }
    if let Some(v) = at(&t("/{vmid}/resize"), Method::Put) {
        return Some(
            guest(c, &v, kind)
                .map(|g| (g.vmid, g.node.clone(), g.config.clone()))
                .map(|(vmid, node, cfg)| {
                    let (Some(disk), Some(size)) = (p.get("disk"), p.get("size")) else {
                        return Reply::bad_params(&[(
                            "disk",
                            "property is missing and it is not optional".into(),
                        )]);
                    };
                    if !cfg.contains_key(disk) {
                        return Reply::error(500, format!("disk '{disk}' does not exist"));
                    }
                    Reply::data(json!(c.start_task(
                        &node,
                        "resize",
                        &vmid.to_string(),
                        user,
                        Effect::Resize {
                            vmid,
                            disk: disk.clone(),
                            size: size.clone()
                        },
                        None
                    )))
                })
                .unwrap_or_else(|e| e),
        );
    }
    let move_path = if kind == Kind::Qemu {
        "/{vmid}/move_disk"
    } else {
        "/{vmid}/move_volume"
    };
    if let Some(v) = at(&t(move_path), Method::Post) {
        return Some(
            guest(c, &v, kind)
                .map(|g| (g.vmid, g.node.clone()))
                .map(|(vmid, node)| {
                    let disk = p
                        .get(if kind == Kind::Qemu { "disk" } else { "volume" })
                        .cloned()
                        .unwrap_or_default();
                    let storage = p
                        .get("storage")
                        .cloned()
                        .unwrap_or_else(|| "local-lvm".into());
                    let tk = if kind == Kind::Qemu {
                        "qmmove"
                    } else {
                        "move_volume"
                    };
                    Reply::data(json!(c.start_task(
                        &node,
                        tk,
                        &vmid.to_string(),
                        user,
                        Effect::MoveDisk {
                            vmid,
                            disk,
                            storage
                        },
                        None
                    )))
                })
                .unwrap_or_else(|e| e),
        );
    }
    let config_method = if kind == Kind::Qemu {
        Method::Post
    } else {
        Method::Put
    };
    if let Some(v) = at(&t("/{vmid}/config"), config_method) {
        return Some(config_update(c, &v, p, user, kind));
    }
    if let Some(v) = at(&t("/{vmid}/template"), Method::Post) {
        return Some(
            guest(c, &v, kind)
                .map(|g| (g.vmid, g.node.clone(), g.power))
                .map(|(vmid, node, power)| {
                    if power != Power::Stopped {
                        return Reply::error(
                            500,
                            format!("VM {vmid} is running - can't convert to template"),
                        );
                    }
                    let upid = c.start_task(
                        &node,
                        "qmtemplate",
                        &vmid.to_string(),
                        user,
                        Effect::Template { vmid },
                        None,
                    );
                    Reply::data(if kind == Kind::Qemu {
                        json!(upid)
                    } else {
                        Value::Null
                    })
                })
                .unwrap_or_else(|e| e),
        );
    }
    if let Some(v) = at(&t("/{vmid}/snapshot"), Method::Get) {
        return Some(guest(c, &v, kind).map(|g| {
            let mut list: Vec<Value> = g
                .snapshots
                .iter()
                .map(|s| json!({"name": s.name, "description": s.description, "snaptime": s.snaptime, "vmstate": s.vmstate as u8, "parent": s.parent}))
                .collect();
            list.push(json!({"name": "current", "description": "You are here!", "running": (g.power == Power::Running) as u8, "parent": g.snapshots.last().map(|s| s.name.clone())}));
            Reply::data(Value::Array(list))
        }).unwrap_or_else(|e| e));
    }
    if let Some(v) = at(&t("/{vmid}/snapshot"), Method::Post) {
        return Some(
            guest(c, &v, kind)
                .map(|g| {
                    (
                        g.vmid,
                        g.node.clone(),
                        g.snapshots
                            .iter()
                            .any(|s| Some(&s.name) == p.get("snapname")),
                    )
                })
                .map(|(vmid, node, exists)| {
                    let Some(name) = p.get("snapname") else {
                        return Reply::bad_params(&[(
                            "snapname",
                            "property is missing and it is not optional".into(),
                        )]);
                    };
                    if exists {
                        return Reply::error(500, format!("snapshot name '{name}' already used"));
                    }
                    let effect = Effect::SnapshotCreate {
                        vmid,
                        name: name.clone(),
                        description: p.get("description").cloned().unwrap_or_default(),
                        vmstate: flag(p, "vmstate"),
                    };
                    Reply::data(json!(c.start_task(
                        &node,
                        if kind == Kind::Qemu {
                            "qmsnapshot"
                        } else {
                            "vzsnapshot"
                        },
                        &vmid.to_string(),
                        user,
                        effect,
                        None
                    )))
                })
                .unwrap_or_else(|e| e),
        );
    }
    if let Some(v) = at(&t("/{vmid}/snapshot/{snapname}/config"), Method::Get) {
        return Some(
            guest(c, &v, kind)
                .map(|g| {
                    match g
                        .snapshots
                        .iter()
                        .find(|s| Some(&s.name) == v.get("snapname"))
                    {
                        Some(s) => Reply::data(Value::Object(s.config.clone())),
                        None => Reply::error(
                            500,
                            format!("snapshot '{}' does not exist", v["snapname"]),
                        ),
                    }
                })
                .unwrap_or_else(|e| e),
        );
    }
    if let Some(v) = at(&t("/{vmid}/snapshot/{snapname}/rollback"), Method::Post) {
        return Some(snapshot_change(c, &v, p, user, kind, true));
    }
    if let Some(v) = at(&t("/{vmid}/snapshot/{snapname}"), Method::Delete) {
        return Some(snapshot_change(c, &v, p, user, kind, false));
    }
    if kind == Kind::Qemu {
        if let Some(v) = at(&t("/{vmid}/feature"), Method::Get) {
            return Some(
                guest(c, &v, kind)
                    .map(|_| {
                        Reply::data(json!({"hasFeature": 1, "nodes": ["pve1", "pve2", "pve3"]}))
                    })
                    .unwrap_or_else(|e| e),
            );
        }
        if let Some(v) = at(&t("/{vmid}/cloudinit/dump"), Method::Get) {
            return Some(
                guest(c, &v, kind)
                    .map(|g| {
                        Reply::data(json!(format!(
                            "#cloud-config\nhostname: {}\nmanage_etc_hosts: true\n",
                            g.name()
                        )))
                    })
                    .unwrap_or_else(|e| e),
            );
        }
        if let Some(v) = at(&t("/{vmid}/agent/get-osinfo"), Method::Get) {
            return Some(guest(c, &v, kind).map(|g| agent(g, json!({"result": {"id": "debian", "name": "Debian GNU/Linux", "version-id": "12", "kernel-release": "6.1.0-28-amd64"}}))).unwrap_or_else(|e| e));
        }
        if let Some(v) = at(&t("/{vmid}/agent/network-get-interfaces"), Method::Get) {
            return Some(guest(c, &v, kind).map(|g| {
                let ip = format!("10.0.{}.{}", g.vmid / 256, g.vmid % 256);
                agent(g, json!({"result": [{"name": "eth0", "ip-addresses": [{"ip-address": ip, "ip-address-type": "ipv4", "prefix": 24}]}]}))
            }).unwrap_or_else(|e| e));
        }
        if let Some(v) = at(&t("/{vmid}/agent/ping"), Method::Post) {
            return Some(
                guest(c, &v, kind)
                    .map(|g| agent(g, Value::Null))
                    .unwrap_or_else(|e| e),
            );
        }
    }
    if let Some(v) = at(&t("/{vmid}/firewall/rules"), Method::Get) {
        return Some(guest(c, &v, kind).map(|_| Reply::data(json!([{"pos": 0, "type": "in", "action": "ACCEPT", "proto": "tcp", "dport": "22", "enable": 1}]))).unwrap_or_else(|e| e));
    }
    if let Some(v) = at(&t("/{vmid}/firewall/options"), Method::Get) {
        return Some(guest(c, &v, kind).map(|_| Reply::data(json!({"enable": 1, "policy_in": "DROP", "policy_out": "ACCEPT", "macfilter": 1}))).unwrap_or_else(|e| e));
    }
    None
}

fn agent(g: &Guest, answer: Value) -> Reply {
    if g.power != Power::Running {
        return Reply::error(500, format!("VM {} is not running", g.vmid));
    }
    Reply::data(answer)
}

fn rrd(now: u64, busy: bool) -> Value {
    Value::Array(
        (0..70u64)
            .map(|i| json!({"time": now - (69 - i) * 60, "cpu": if busy { 0.05 + (i % 7) as f64 / 100.0 } else { 0.0 }, "mem": 2_147_483_648u64, "netin": 1200.0, "netout": 800.0}))
            .collect(),
    )
}

fn power(c: &mut Cluster, v: &Vars, p: &Params, user: &str, kind: Kind, action: &str) -> Reply {
    let g = match guest(c, v, kind) {
        Ok(g) => g,
        Err(e) => return e,
    };
    let (vmid, node, state, template) = (g.vmid, g.node.clone(), g.power, g.template());
    if template && action == "start" {
        return Reply::error(500, "you can't start a vm if it's a template");
    }
    let prefix = if kind == Kind::Qemu { "qm" } else { "vz" };
    let (effect, fails) = match action {
        "start" => (
            Effect::Power {
                vmid,
                to: Power::Running,
            },
            (state == Power::Running).then(|| format!("VM {vmid} already running")),
        ),
        "stop" | "shutdown" => (
            Effect::Power {
                vmid,
                to: Power::Stopped,
            },
            (state == Power::Stopped).then(|| format!("VM {vmid} not running")),
        ),
        "suspend" => (
            Effect::Power {
                vmid,
                to: Power::Paused,
            },
            (state != Power::Running).then(|| format!("VM {vmid} not running")),
        ),
        "resume" => (
            Effect::Power {
                vmid,
                to: Power::Running,
            },
            (state == Power::Stopped).then(|| format!("VM {vmid} not running")),
        ),
        _ => (
            Effect::Reboot { vmid },
            (state != Power::Running).then(|| format!("VM {vmid} not running")),
        ),
    };
    let _ = p;
    let kind_name = match (kind, action) {
        (Kind::Lxc, "shutdown") => "vzshutdown".to_string(),
        _ => format!("{prefix}{action}"),
    };
    Reply::data(json!(c.start_task(
        &node,
        &kind_name,
        &vmid.to_string(),
        user,
        effect,
        fails
    )))
}

/// Keys a create or update may set, taken from the parameters.
fn config_from(p: &Params, kind: Kind) -> Map<String, Value> {
    let skip = [
        "node",
        "vmid",
        "archive",
        "ostemplate",
        "storage",
        "force",
        "unique",
        "pool",
        "start",
        "delete",
        "digest",
        "restore",
        "bwlimit",
        "password",
        "ssh-public-keys",
    ];
    let mut cfg = Map::new();
    for (k, v) in p {
        if skip.contains(&k.as_str()) {
            continue;
        }
        let numeric = matches!(
            k.as_str(),
            "cores" | "sockets" | "balloon" | "swap" | "onboot" | "protection" | "unprivileged"
        ) || (kind == Kind::Lxc && k == "memory");
        cfg.insert(
            k.clone(),
            if numeric {
                v.parse::<u64>()
                    .map(Value::from)
                    .unwrap_or_else(|_| json!(v))
            } else {
                json!(v)
            },
        );
    }
    cfg
}

fn create(c: &mut Cluster, v: &Vars, p: &Params, user: &str, kind: Kind) -> Reply {
    let node = match node_ok(c, v) {
        Ok(n) => n,
        Err(e) => return e,
    };
    let Some(vmid) = p
        .get("vmid")
        .and_then(|s| s.parse::<u32>().ok())
        .filter(|v| *v >= 100)
    else {
        return Reply::bad_params(&[("vmid", "property is missing and it is not optional".into())]);
    };
    let restoring = p.contains_key("archive") || flag(p, "restore");
    if c.guests.contains_key(&vmid) && !(restoring && flag(p, "force")) {
        return Reply::error(
            500,
            format!(
                "unable to create VM {vmid} - VM {vmid} already exists on node '{}'",
                c.guests[&vmid].node
            ),
        );
    }
    if kind == Kind::Lxc && !p.contains_key("ostemplate") {
        return Reply::bad_params(&[(
            "ostemplate",
            "property is missing and it is not optional".into(),
        )]);
    }
    let mut config = config_from(p, kind);
    let task_kind;
    if restoring {
        let archive = p
            .get("archive")
            .or_else(|| p.get("ostemplate"))
            .cloned()
            .unwrap_or_default();
        let Some(vol) = c
            .volumes
            .iter()
            .find(|x| x.volid == archive && x.content == "backup")
        else {
            return Reply::error(500, format!("volume '{archive}' does not exist"));
        };
        if let Some(src) = vol.vmid.and_then(|id| c.guests.get(&id)) {
            let mut restored = src.config.clone();
            restored.extend(config);
            config = restored;
        }
        c.guests.remove(&vmid).filter(|_| flag(p, "force"));
        task_kind = if kind == Kind::Qemu {
            "qmrestore"
        } else {
            "vzrestore"
        };
    } else {
        if kind == Kind::Lxc {
            let template = &p["ostemplate"];
            if !c
                .volumes
                .iter()
                .any(|x| &x.volid == template && x.content == "vztmpl")
            {
                return Reply::error(500, format!("volume '{template}' does not exist"));
            }
            config
                .entry("rootfs")
                .or_insert_with(|| json!(format!("local-lvm:subvol-{vmid}-disk-0,size=8G")));
        }
        for (k, val) in config.iter_mut() {
            // `local-lvm:32` allocates a new 32 GiB disk.
            if let Some(spec) = val.as_str().filter(|_| is_disk_key(k)) {
                if let Some((storage, rest)) = spec.split_once(':') {
                    let (size, opts) = rest.split_once(',').unwrap_or((rest, ""));
                    if size.chars().all(|ch| ch.is_ascii_digit()) {
                        let opts = if opts.is_empty() {
                            String::new()
                        } else {
                            format!(",{opts}")
                        };
                        *val = json!(format!("{storage}:vm-{vmid}-disk-0{opts},size={size}G"));
                    }
                }
            }
        }
        task_kind = if kind == Kind::Qemu {
            "qmcreate"
        } else {
            "vzcreate"
        };
    }
    let start = flag(p, "start");
    let guest = Guest {
        vmid,
        node: node.clone(),
        kind,
        power: if start {
            Power::Running
        } else {
            Power::Stopped
        },
        config,
        snapshots: Vec::new(),
        started_at: start.then(now_secs),
    };
    Reply::data(json!(c.start_task(
        &node,
        task_kind,
        &vmid.to_string(),
        user,
        Effect::Create {
            guest: Box::new(guest)
        },
        None
    )))
}

fn clone(c: &mut Cluster, v: &Vars, p: &Params, user: &str, kind: Kind) -> Reply {
    let g = match guest(c, v, kind) {
        Ok(g) => g.clone(),
        Err(e) => return e,
    };
    let Some(newid) = p
        .get("newid")
        .and_then(|s| s.parse::<u32>().ok())
        .filter(|v| *v >= 100)
    else {
        return Reply::bad_params(&[(
            "newid",
            "property is missing and it is not optional".into(),
        )]);
    };
    if c.guests.contains_key(&newid) {
        return Reply::error(
            500,
            format!("unable to create VM {newid}: config file already exists"),
        );
    }
    let node = p.get("target").cloned().unwrap_or_else(|| g.node.clone());
    if c.node(&node).is_none() {
        return Reply::error(500, format!("no such cluster node '{node}'"));
    }
    let mut config = g.config.clone();
    config.shift_remove("template");
    let name_key = if kind == Kind::Qemu {
        "name"
    } else {
        "hostname"
    };
    let name = p
        .get(name_key)
        .cloned()
        .unwrap_or_else(|| format!("Copy-of-VM-{}", g.name()));
    config.insert(name_key.into(), json!(name));
    if let Some(d) = p.get("description") {
        config.insert("description".into(), json!(d));
    }
    for (k, val) in config.iter_mut() {
        if let Some(spec) = val.as_str().filter(|_| is_disk_key(k)) {
            *val = json!(spec.replace(&format!("-{}-disk", g.vmid), &format!("-{newid}-disk")));
        }
    }
    let copy = Guest {
        vmid: newid,
        node: node.clone(),
        kind,
        power: Power::Stopped,
        config,
        snapshots: Vec::new(),
        started_at: None,
    };
    let tk = if kind == Kind::Qemu {
        "qmclone"
    } else {
        "vzclone"
    };
    Reply::data(json!(c.start_task(
        &g.node,
        tk,
        &g.vmid.to_string(),
        user,
        Effect::Create {
            guest: Box::new(copy)
        },
        None
    )))
}

fn config_update(c: &mut Cluster, v: &Vars, p: &Params, user: &str, kind: Kind) -> Reply {
    let g = match guest(c, v, kind) {
        Ok(g) => g.clone(),
        Err(e) => return e,
    };
    if let Some(d) = p.get("digest") {
        let current =
            crate::digest::sha256_json(&Value::Object(g.config.clone()))[..40].to_string();
        if *d != current {
            return Reply::error(
                500,
                "detected modified configuration - file changed by other user? Try again.",
            );
        }
    }
    let delete: Vec<String> = p
        .get("delete")
        .map(|d| {
            d.split([',', ';', ' '])
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let set = config_from(p, kind);
    let effect = Effect::Config {
        vmid: g.vmid,
        set,
        delete,
    };
    if kind == Kind::Qemu {
        Reply::data(json!(c.start_task(
            &g.node,
            "qmconfig",
            &g.vmid.to_string(),
            user,
            effect,
            None
        )))
    } else {
        // LXC configuration changes apply at once, without a task.
        c.start_task(&g.node, "vzconfig", &g.vmid.to_string(), user, effect, None);
        if let Some(t) = c.tasks.last_mut() {
            t.finish_at = std::time::Instant::now();
        }
        c.advance();
        Reply::data(Value::Null)
    }
}

fn snapshot_change(
    c: &mut Cluster,
    v: &Vars,
    p: &Params,
    user: &str,
    kind: Kind,
    rollback: bool,
) -> Reply {
    let g = match guest(c, v, kind) {
        Ok(g) => g.clone(),
        Err(e) => return e,
    };
    let name = v.get("snapname").cloned().unwrap_or_default();
    if !g.snapshots.iter().any(|s| s.name == name) {
        return Reply::error(500, format!("snapshot '{name}' does not exist"));
    }
    let prefix = if kind == Kind::Qemu { "qm" } else { "vz" };
    let (tk, effect) = if rollback {
        (
            format!("{prefix}rollback"),
            Effect::SnapshotRollback {
                vmid: g.vmid,
                name,
                start: flag(p, "start"),
            },
        )
    } else {
        (
            format!("{prefix}delsnapshot"),
            Effect::SnapshotDelete { vmid: g.vmid, name },
        )
    };
    Reply::data(json!(c.start_task(
        &g.node,
        &tk,
        &g.vmid.to_string(),
        user,
        effect,
        None
    )))
}

fn node_routes(c: &mut Cluster, m: Method, path: &str, p: &Params, user: &str) -> Option<Reply> {
    let now = now_secs();
    if let Some(_v) = on!(m, path, Get, "/nodes") {
        return Some(Reply::data(Value::Array(
            c.nodes
                .iter()
                .map(|n| {
                    let used: u64 = c.guests.values().filter(|g| g.node == n.name && g.power == Power::Running).map(|g| g.memory_mib() << 20).sum();
                    json!({"node": n.name, "status": if n.online { "online" } else { "offline" }, "cpu": 0.12, "maxcpu": n.cpus, "mem": used + (4 << 30), "maxmem": n.memory, "uptime": 1_209_600, "level": "", "id": format!("node/{}", n.name), "type": "node", "ssl_fingerprint": ""})
                })
                .collect(),
        )));
    }
    macro_rules! node_get {
        ($template:literal, |$node:ident| $body:expr) => {
            if let Some(v) = on!(m, path, Get, $template) {
                return Some(match node_ok(c, &v) {
                    Ok($node) => {
                        let _ = &$node;
                        $body
                    }
                    Err(e) => e,
                });
            }
        };
    }
    node_get!("/nodes/{node}/status", |node| {
        let n = c.node(&node).unwrap();
        let used: u64 = c
            .guests
            .values()
            .filter(|g| g.node == node && g.power == Power::Running)
            .map(|g| g.memory_mib() << 20)
            .sum();
        Reply::data(json!({
            "uptime": 1_209_600, "loadavg": ["0.42", "0.51", "0.60"], "cpu": 0.12, "wait": 0.001,
            "cpuinfo": {"cpus": n.cpus, "model": "AMD EPYC 7302P 16-Core Processor", "sockets": 1, "cores": n.cpus},
            "memory": {"total": n.memory, "used": used + (4 << 30), "free": n.memory - used - (4 << 30)},
            "swap": {"total": 8u64 << 30, "used": 0, "free": 8u64 << 30},
            "rootfs": {"total": 100u64 << 30, "used": 12u64 << 30, "avail": 88u64 << 30},
            "kversion": "Linux 6.14.8-2-pve #1 SMP PREEMPT_DYNAMIC", "pveversion": "pve-manager/9.1.1/c4f8c5e0b3f1a2d7",
        }))
    });
    node_get!("/nodes/{node}/services", |node| {
        Reply::data(json!(["pveproxy", "pvedaemon", "pvestatd", "corosync", "pve-cluster", "pve-firewall", "chrony", "sshd"].iter().map(|s| json!({"service": s, "name": s, "state": "running", "active-state": "active", "unit-state": "enabled"})).collect::<Vec<_>>()))
    });
    if let Some(v) = on!(m, path, Get, "/nodes/{node}/services/{service}/state") {
        return Some(node_ok(c, &v).map(|_| Reply::data(json!({"service": v["service"], "name": v["service"], "state": "running", "active-state": "active"}))).unwrap_or_else(|e| e));
    }
    node_get!("/nodes/{node}/tasks", |node| {
        let limit = p
            .get("limit")
            .and_then(|l| l.parse().ok())
            .unwrap_or(50usize);
        let start = p
            .get("start")
            .and_then(|l| l.parse().ok())
            .unwrap_or(0usize);
        let vmid = p.get("vmid");
        let only_errors = flag(p, "errors");
        let source = p.get("source").map(String::as_str).unwrap_or("archive");
        let list: Vec<Value> = c
            .tasks
            .iter()
            .rev()
            .filter(|t| t.upid.node == node)
            .filter(|t| vmid.is_none_or(|v| &t.upid.id == v))
            .filter(|t| p.get("typefilter").is_none_or(|f| &t.upid.kind == f))
            .filter(|t| !only_errors || t.exitstatus.as_deref().is_some_and(|e| e != "OK"))
            .filter(|t| match source {
                "active" => t.running(),
                "all" => true,
                _ => !t.running(),
            })
            .skip(start)
            .take(limit)
            .map(|t| t.json())
            .collect();
        Reply::data(Value::Array(list))
    });
    node_get!("/nodes/{node}/network", |node| Reply::data(json!([
        {"iface": "vmbr0", "type": "bridge", "active": 1, "autostart": 1, "bridge_ports": "eno1", "cidr": "192.168.10.11/24", "gateway": "192.168.10.1"},
        {"iface": "eno1", "type": "eth", "active": 1, "autostart": 1},
    ])));
    node_get!("/nodes/{node}/disks/list", |node| Reply::data(json!([
        {"devpath": "/dev/nvme0n1", "model": "Samsung SSD 980 PRO 1TB", "size": 1_000_204_886_016u64, "health": "PASSED", "wearout": 97, "type": "nvme", "used": "LVM"},
        {"devpath": "/dev/sda", "model": "WDC WD40EFRX", "size": 4_000_787_030_016u64, "health": "PASSED", "wearout": "N/A", "type": "hdd", "used": "ZFS"},
    ])));
    node_get!("/nodes/{node}/disks/smart", |node| Reply::data(
        json!({"health": "PASSED", "type": "ata", "attributes": if flag(p, "healthonly") { json!([]) } else { json!([{"id": "5", "name": "Reallocated_Sector_Ct", "raw": "0", "value": "100"}]) }})
    ));
    node_get!("/nodes/{node}/disks/zfs", |node| Reply::data(
        json!([{"name": "tank", "size": 4_000_000_000_000u64, "alloc": 1_200_000_000_000u64, "free": 2_800_000_000_000u64, "health": "ONLINE", "frag": 3, "dedup": 1.0}])
    ));
    node_get!("/nodes/{node}/disks/lvm", |node| Reply::data(
        json!({"leaf": 0, "children": [{"name": "pve", "size": 999_653_638_144u64, "free": 16_101_933_056u64, "leaf": 0}]})
    ));
    node_get!("/nodes/{node}/rrddata", |node| Reply::data(rrd(now, true)));
    node_get!("/nodes/{node}/version", |node| Reply::data(
        json!({"version": "9.1.1", "release": "9.1", "repoid": "c4f8c5e0"})
    ));
    node_get!("/nodes/{node}/time", |node| Reply::data(
        json!({"timezone": "Europe/Berlin", "time": now, "localtime": now + 3600})
    ));
    node_get!("/nodes/{node}/dns", |node| Reply::data(
        json!({"search": "lab.example", "dns1": "192.168.10.1"})
    ));
    node_get!("/nodes/{node}/subscription", |node| Reply::data(
        json!({"status": "notfound", "message": "There is no subscription key"})
    ));
    node_get!("/nodes/{node}/apt/update", |node| Reply::data(
        json!([{"Package": "pve-manager", "OldVersion": "9.1.1", "Version": "9.1.2", "Priority": "optional", "Title": "Proxmox Virtual Environment Management Tools"}])
    ));
    node_get!("/nodes/{node}/hardware/pci", |node| Reply::data(
        json!([{"id": "0000:01:00.0", "class": "0x030000", "vendor_name": "NVIDIA Corporation", "device_name": "GA104GL [RTX A4000]", "iommugroup": 14}])
    ));
    node_get!("/nodes/{node}/netstat", |node| {
        Reply::data(Value::Array(c.guests.values().filter(|g| g.node == node && g.power == Power::Running).map(|g| json!({"vmid": g.vmid.to_string(), "dev": format!("tap{}i0", g.vmid), "in": "123456", "out": "654321"})).collect()))
    });
    node_get!("/nodes/{node}/replication", |node| Reply::data(json!([])));
    node_get!("/nodes/{node}/syslog", |node| Reply::data(
        json!([{"n": 1, "t": "Nov 30 04:00:01 pve1 pvedaemon[1234]: <root@pam> successful auth for user 'root@pam'"}])
    ));
    node_get!("/nodes/{node}/journal", |node| Reply::data(json!([
        "-- Journal begins --",
        "Nov 30 04:00:01 pve1 systemd[1]: Started pvedaemon.service."
    ])));
    node_get!("/nodes/{node}/firewall/rules", |node| Reply::data(
        json!([])
    ));
    if let Some(v) = on!(m, path, Get, "/nodes/{node}/replication/{id}/status") {
        return Some(
            node_ok(c, &v)
                .map(|_| Reply::error(500, format!("replication job '{}' does not exist", v["id"])))
                .unwrap_or_else(|e| e),
        );
    }
    if let Some(v) = on!(m, path, Get, "/nodes/{node}/tasks/{upid}/status") {
        return Some(
            match c.tasks.iter().find(|t| t.upid.to_string() == v["upid"]) {
                Some(t) => Reply::data(t.json()),
                None => Reply::error(500, format!("no such task '{}'", v["upid"])),
            },
        );
    }
    if let Some(v) = on!(m, path, Get, "/nodes/{node}/tasks/{upid}/log") {
        return Some(
            match c.tasks.iter().find(|t| t.upid.to_string() == v["upid"]) {
                Some(t) => {
                    let start = p
                        .get("start")
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0usize);
                    let limit = p
                        .get("limit")
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(50usize);
                    Reply::data(Value::Array(
                        t.log
                            .iter()
                            .enumerate()
                            .skip(start)
                            .take(limit)
                            .map(|(i, l)| json!({"n": i + 1, "t": l}))
                            .collect(),
                    ))
                }
                None => Reply::error(500, format!("no such task '{}'", v["upid"])),
            },
        );
    }
    if let Some(v) = on!(m, path, Delete, "/nodes/{node}/tasks/{upid}") {
        return Some(
            match c.tasks.iter_mut().find(|t| t.upid.to_string() == v["upid"]) {
                Some(t) => {
                    if t.running() {
                        t.effect = Effect::Nothing;
                        t.fails_with = Some("interrupted by signal".into());
                        t.finish_at = std::time::Instant::now();
                    }
                    c.advance();
                    Reply::data(Value::Null)
                }
                None => Reply::error(500, format!("no such task '{}'", v["upid"])),
            },
        );
    }
    node_get!("/nodes/{node}/storage", |node| Reply::data(Value::Array(
        c.storages
            .iter()
            .map(|s| storage_json(c, s, &node))
            .collect()
    )));
    if let Some(v) = on!(m, path, Get, "/nodes/{node}/storage/{storage}/status") {
        return Some(
            storage_of(c, &v)
                .map(|s| Reply::data(storage_json(c, s, &v["node"])))
                .unwrap_or_else(|e| e),
        );
    }
    if let Some(v) = on!(m, path, Get, "/nodes/{node}/storage/{storage}/content") {
        return Some(storage_of(c, &v).map(|s| {
            let wanted: Vec<&str> = p.get("content").map(|c| c.split(',').collect()).unwrap_or_default();
            let list: Vec<Value> = c
                .volumes
                .iter()
                .filter(|x| x.storage == s.id && x.node == v["node"])
                .filter(|x| wanted.is_empty() || wanted.contains(&x.content))
                .filter(|x| p.get("vmid").is_none_or(|id| x.vmid.map(|i| i.to_string()).as_ref() == Some(id)))
                .map(|x| {
                    let mut j = json!({"volid": x.volid, "content": x.content, "format": x.format, "size": x.size, "ctime": x.ctime});
                    if let Some(id) = x.vmid {
                        j["vmid"] = json!(id);
                    }
                    if let Some(n) = &x.notes {
                        j["notes"] = json!(n);
                    }
                    j
                })
                .collect();
            Reply::data(Value::Array(list))
        }).unwrap_or_else(|e| e));
    }
    if let Some(v) = on!(m, path, Get, "/nodes/{node}/storage/{storage}/rrddata") {
        return Some(
            storage_of(c, &v)
                .map(|_| Reply::data(rrd(now, true)))
                .unwrap_or_else(|e| e),
        );
    }
    if let Some(v) = on!(m, path, Get, "/nodes/{node}/storage/{storage}/prunebackups") {
        return Some(storage_of(c, &v).map(|s| {
            let list: Vec<Value> = c.volumes.iter().filter(|x| x.storage == s.id && x.content == "backup").map(|x| json!({"volid": x.volid, "vmid": x.vmid, "ctime": x.ctime, "mark": "keep", "type": if x.format.starts_with("vma") { "qemu" } else { "lxc" }})).collect();
            Reply::data(Value::Array(list))
        }).unwrap_or_else(|e| e));
    }
    if let Some(v) = on!(
        m,
        path,
        Post,
        "/nodes/{node}/storage/{storage}/download-url"
    ) {
        let node = v["node"].clone();
        return Some(
            storage_of(c, &v)
                .map(|s| s.id.clone())
                .map(|storage| {
                    let (Some(_url), Some(filename)) = (p.get("url"), p.get("filename")) else {
                        return Reply::bad_params(&[(
                            "url",
                            "property is missing and it is not optional".into(),
                        )]);
                    };
                    let content = if p.get("content").map(String::as_str) == Some("vztmpl") {
                        "vztmpl"
                    } else {
                        "iso"
                    };
                    Reply::data(json!(c.start_task(
                        &node,
                        "download",
                        &storage,
                        user,
                        Effect::Download {
                            node: node.clone(),
                            storage: storage.clone(),
                            filename: filename.clone(),
                            content
                        },
                        None
                    )))
                })
                .unwrap_or_else(|e| e),
        );
    }
    if let Some(v) = on!(m, path, Post, "/nodes/{node}/vzdump") {
        return Some(match node_ok(c, &v) {
            Err(e) => e,
            Ok(node) => {
                let mut vmids: Vec<u32> = if flag(p, "all") {
                    let excluded: Vec<u32> = p
                        .get("exclude")
                        .map(|e| {
                            e.split([',', ';', ' '])
                                .filter_map(|x| x.parse().ok())
                                .collect()
                        })
                        .unwrap_or_default();
                    c.guests
                        .values()
                        .filter(|g| g.node == node && !g.template() && !excluded.contains(&g.vmid))
                        .map(|g| g.vmid)
                        .collect()
                } else {
                    p.get("vmid")
                        .map(|e| {
                            e.split([',', ';', ' '])
                                .filter_map(|x| x.parse().ok())
                                .collect()
                        })
                        .unwrap_or_default()
                };
                vmids.dedup();
                if vmids.is_empty() {
                    return Some(Reply::error(
                        500,
                        "no guests selected - specify vmid or all",
                    ));
                }
                let missing: Vec<String> = vmids
                    .iter()
                    .filter(|id| !c.guests.contains_key(id))
                    .map(|id| id.to_string())
                    .collect();
                let fails = (!missing.is_empty())
                    .then(|| format!("guest(s) {} do not exist", missing.join(",")));
                let storage = p.get("storage").cloned().unwrap_or_else(|| "local".into());
                let effect = Effect::Backup {
                    vmids: vmids.clone(),
                    storage,
                    notes: p.get("notes-template").cloned(),
                    protected: flag(p, "protected"),
                };
                let id = if vmids.len() == 1 {
                    vmids[0].to_string()
                } else {
                    String::new()
                };
                Reply::data(json!(
                    c.start_task(&node, "vzdump", &id, user, effect, fails)
                ))
            }
        });
    }
    if let Some(v) = on!(m, path, Get, "/nodes/{node}/vzdump/extractconfig") {
        return Some(
            node_ok(c, &v)
                .map(|_| {
                    let volume = p.get("volume").cloned().unwrap_or_default();
                    match c
                        .volumes
                        .iter()
                        .find(|x| x.volid == volume && x.content == "backup")
                    {
                        Some(x) => {
                            let cfg = x
                                .vmid
                                .and_then(|id| c.guests.get(&id))
                                .map(|g| {
                                    g.config
                                        .iter()
                                        .map(|(k, v)| {
                                            format!(
                                                "{k}: {}",
                                                v.as_str()
                                                    .map(str::to_string)
                                                    .unwrap_or_else(|| v.to_string())
                                            )
                                        })
                                        .collect::<Vec<_>>()
                                        .join("\n")
                                })
                                .unwrap_or_default();
                            Reply::data(json!(cfg))
                        }
                        None => Reply::error(500, format!("volume '{volume}' does not exist")),
                    }
                })
                .unwrap_or_else(|e| e),
        );
    }
    None
}

fn storage_of<'a>(c: &'a Cluster, v: &Vars) -> Result<&'a super::cluster::Storage, Reply> {
    node_ok(c, v)?;
    let id = v.get("storage").cloned().unwrap_or_default();
    c.storages
        .iter()
        .find(|s| s.id == id)
        .ok_or_else(|| Reply::error(500, format!("storage '{id}' does not exist")))
}

fn storage_json(c: &Cluster, s: &super::cluster::Storage, node: &str) -> Value {
    let used: u64 = if s.kind == "lvmthin" {
        c.guests
            .values()
            .filter(|g| g.node == node)
            .map(|g| g.disk_bytes())
            .sum()
    } else {
        c.volumes
            .iter()
            .filter(|x| x.storage == s.id && x.node == node)
            .map(|x| x.size)
            .sum()
    };
    json!({"storage": s.id, "type": s.kind, "content": s.content, "active": 1, "enabled": 1, "shared": s.shared as u8, "total": s.total, "used": used, "avail": s.total.saturating_sub(used), "used_fraction": used as f64 / s.total as f64})
}

fn cluster_routes(c: &mut Cluster, m: Method, path: &str, p: &Params) -> Option<Reply> {
    let now = now_secs();
    type Render = fn(&Cluster) -> Value;
    let simple: &[(&str, Render)] = &[
        (
            "/version",
            |_| json!({"version": "9.1.1", "release": "9.1", "repoid": "c4f8c5e0"}),
        ),
        ("/cluster/status", |c| {
            let mut list = vec![
                json!({"type": "cluster", "id": "cluster", "name": c.name, "nodes": c.nodes.len(), "quorate": 1, "version": 7}),
            ];
            for (i, n) in c.nodes.iter().enumerate() {
                list.push(json!({"type": "node", "id": format!("node/{}", n.name), "name": n.name, "online": n.online as u8, "local": (i == 0) as u8, "nodeid": i + 1, "ip": format!("192.168.10.{}", 11 + i)}));
            }
            Value::Array(list)
        }),
        ("/cluster/tasks", |c| {
            Value::Array(c.tasks.iter().rev().take(50).map(|t| t.json()).collect())
        }),
        (
            "/cluster/options",
            |_| json!({"keyboard": "en-us", "console": "xtermjs", "migration": {"type": "secure"}}),
        ),
        (
            "/cluster/ha/status/current",
            |_| json!([{"id": "quorum", "type": "quorum", "status": "OK", "quorate": 1}, {"id": "master", "type": "master", "node": "pve1", "status": "pve1 (active, Sat Nov 29 10:00:00 2026)"}]),
        ),
        (
            "/cluster/ha/resources",
            |_| json!([{"sid": "vm:102", "type": "vm", "state": "started", "max_restart": 1, "max_relocate": 1}]),
        ),
        ("/cluster/ha/groups", |_| json!([])),
        (
            "/cluster/ha/rules",
            |_| json!([{"rule": "db-on-fast-nodes", "type": "node-affinity", "resources": "vm:102", "nodes": "pve1:2,pve2:1"}]),
        ),
        (
            "/pools",
            |_| json!([{"poolid": "production", "comment": "Customer-facing services"}]),
        ),
        (
            "/cluster/firewall/rules",
            |_| json!([{"pos": 0, "type": "in", "action": "ACCEPT", "proto": "tcp", "dport": "8006", "source": "+management", "enable": 1}]),
        ),
        (
            "/cluster/firewall/options",
            |_| json!({"enable": 1, "policy_in": "DROP", "policy_out": "ACCEPT"}),
        ),
        (
            "/cluster/firewall/groups",
            |_| json!([{"group": "webserver", "comment": "HTTP and HTTPS"}]),
        ),
        (
            "/cluster/firewall/ipset",
            |_| json!([{"name": "management", "comment": "admin networks"}]),
        ),
        (
            "/cluster/firewall/aliases",
            |_| json!([{"name": "office", "cidr": "203.0.113.0/24"}]),
        ),
        (
            "/cluster/backup",
            |_| json!([{"id": "backup-nightly", "schedule": "02:00", "storage": "local", "mode": "snapshot", "all": 1, "enabled": 1}]),
        ),
        ("/cluster/backup-info/not-backed-up", |_| json!([])),
        ("/cluster/replication", |_| json!([])),
        ("/cluster/metrics/server", |_| json!([])),
        ("/storage", |c| {
            Value::Array(c.storages.iter().map(|s| json!({"storage": s.id, "type": s.kind, "content": s.content, "shared": s.shared as u8})).collect())
        }),
        (
            "/access/users",
            |_| json!([{"userid": "root@pam", "enable": 1}]),
        ),
        ("/access/acl", |_| json!([])),
    ];
    if m == Method::Get {
        for (t, f) in simple {
            if path == *t {
                return Some(Reply::data(f(c)));
            }
        }
    }
    if let Some(_v) = on!(m, path, Get, "/cluster/resources") {
        let wanted = p.get("type").map(String::as_str);
        let mut list = Vec::new();
        if wanted.is_none() || wanted == Some("vm") {
            for g in c.guests.values() {
                let mut s = summary(g, now);
                s["id"] = json!(format!("{}/{}", g.kind.as_str(), g.vmid));
                s["node"] = json!(g.node);
                list.push(s);
            }
        }
        if wanted.is_none() || wanted == Some("node") {
            for n in &c.nodes {
                list.push(json!({"id": format!("node/{}", n.name), "type": "node", "node": n.name, "status": if n.online { "online" } else { "offline" }, "maxcpu": n.cpus, "maxmem": n.memory}));
            }
        }
        if wanted.is_none() || wanted == Some("storage") {
            for n in &c.nodes {
                for s in &c.storages {
                    let mut j = storage_json(c, s, &n.name);
                    j["id"] = json!(format!("storage/{}/{}", n.name, s.id));
                    j["node"] = json!(n.name);
                    j["type"] = json!("storage");
                    j["plugintype"] = json!(s.kind);
                    list.push(j);
                }
            }
        }
        return Some(Reply::data(Value::Array(list)));
    }
    if let Some(_v) = on!(m, path, Get, "/cluster/log") {
        let max = p.get("max").and_then(|x| x.parse().ok()).unwrap_or(50usize);
        return Some(Reply::data(Value::Array(c.tasks.iter().rev().take(max).map(|t| json!({"time": t.upid.starttime, "node": t.upid.node, "user": t.upid.user, "msg": format!("starting task {}", t.upid)})).collect())));
    }
    if let Some(_v) = on!(m, path, Get, "/cluster/nextid") {
        if let Some(want) = p.get("vmid") {
            return Some(match want.parse::<u32>() {
                Ok(id) if !c.guests.contains_key(&id) => Reply::data(json!(id.to_string())),
                _ => Reply::bad_params(&[("vmid", format!("VM {want} already exists"))]),
            });
        }
        let id = (100..).find(|id| !c.guests.contains_key(id)).unwrap_or(100);
        return Some(Reply::data(json!(id.to_string())));
    }
    if let Some(v) = on!(m, path, Get, "/cluster/ha/resources/{sid}") {
        return Some(if v["sid"] == "vm:102" || v["sid"] == "102" {
            Reply::data(json!({"sid": "vm:102", "type": "vm", "state": "started", "digest": "00"}))
        } else {
            Reply::error(500, format!("no such resource '{}'", v["sid"]))
        });
    }
    if let Some(v) = on!(m, path, Get, "/pools/{poolid}") {
        return Some(if v["poolid"] == "production" {
            let members: Vec<Value> = [102u32, 105].iter().filter_map(|id| c.guests.get(id)).map(|g| json!({"id": format!("{}/{}", g.kind.as_str(), g.vmid), "vmid": g.vmid, "type": g.kind.as_str(), "node": g.node, "name": g.name(), "status": g.power.as_str()})).collect();
            Reply::data(json!({"comment": "Customer-facing services", "members": members}))
        } else {
            Reply::error(500, format!("pool '{}' does not exist", v["poolid"]))
        });
    }
    if let Some(v) = on!(m, path, Get, "/cluster/backup/{id}") {
        return Some(if v["id"] == "backup-nightly" {
            Reply::data(
                json!({"id": "backup-nightly", "schedule": "02:00", "storage": "local", "mode": "snapshot", "all": 1, "enabled": 1}),
            )
        } else {
            Reply::error(500, format!("job '{}' does not exist", v["id"]))
        });
    }
    if let Some(v) = on!(m, path, Get, "/storage/{storage}") {
        return Some(match c.storages.iter().find(|s| s.id == v["storage"]) {
            Some(s) => Reply::data(
                json!({"storage": s.id, "type": s.kind, "content": s.content, "digest": "00"}),
            ),
            None => Reply::error(500, format!("storage '{}' does not exist", v["storage"])),
        });
    }
    None
}
