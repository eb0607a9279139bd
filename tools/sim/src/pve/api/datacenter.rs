//! The datacenter: `/cluster/...`, `/pools`, `/access` and `/version`.

use serde_json::{json, Value};

use super::{matches, nodes::storage_json, summary, Method, Params, Reply};

/// The one storage replication job: VM 102 (the database) to pve2.
pub(super) const REPLICATION_JOB: &str = "102-0";
use crate::pve::cluster::{now_secs, Cluster};

pub(super) fn cluster_routes(c: &mut Cluster, m: Method, path: &str, p: &Params) -> Option<Reply> {
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
            Value::Array(c.tasks.iter().rev().take(50).map(|t| t.row()).collect())
        }),
        (
            "/cluster/options",
            |_| json!({"keyboard": "en-us", "console": "xtermjs", "migration": {"type": "secure"}}),
        ),
        (
            "/cluster/ha/status/current",
            |_| json!([{"id": "quorum", "type": "quorum", "node": "pve1", "status": "OK", "quorate": 1}, {"id": "master", "type": "master", "node": "pve1", "status": "pve1 (active, Sat Nov 29 10:00:00 2026)"}]),
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
            |_| json!([{"group": "webserver", "comment": "HTTP and HTTPS", "digest": "3f0e1c9d2b7a"}]),
        ),
        (
            "/cluster/firewall/ipset",
            |_| json!([{"name": "management", "comment": "admin networks", "digest": "8a41c2e07d55"}]),
        ),
        (
            "/cluster/firewall/aliases",
            |_| json!([{"name": "office", "cidr": "203.0.113.0/24", "digest": "c93b0f6e2a18"}]),
        ),
        (
            "/cluster/backup",
            |_| json!([{"id": "backup-nightly", "schedule": "02:00", "storage": "local", "mode": "snapshot", "all": 1, "enabled": 1}]),
        ),
        ("/cluster/backup-info/not-backed-up", |_| json!([])),
        (
            "/cluster/replication",
            |_| json!([{"id": REPLICATION_JOB, "type": "local", "guest": 102, "jobnum": 0, "target": "pve2", "schedule": "*/15", "source": "pve1"}]),
        ),
        ("/cluster/config/join", |c| {
            let nodelist: Vec<Value> = c.nodes.iter().enumerate().map(|(i, n)| json!({"name": n.name, "nodeid": i + 1, "pve_addr": format!("192.168.10.{}", 11 + i), "pve_fp": "3C:9A:0E:57:B4:21:6D:F8:12:AE:90:4B:C7:33:58:E6:01:7F:A9:2D:C4:68:B0:1E:95:53:FA:0C:87:3D:E2:41", "quorum_votes": 1, "ring0_addr": format!("192.168.10.{}", 11 + i)})).collect();
            json!({"config_digest": "5d2f8c1a9e4b7036c1f2a8d9e0b3c4d5e6f70819", "nodelist": nodelist, "preferred_node": "pve1", "totem": {"cluster_name": c.name, "config_version": "7", "interface": {"0": {"linknumber": "0"}}, "ip_version": "ipv4-6", "link_mode": "passive", "secauth": "on", "version": "2"}})
        }),
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
                s["type"] = json!(g.kind.as_str());
                // Resource rows call the guest's CPU count maxcpu.
                if let Some(o) = s.as_object_mut() {
                    if let Some(n) = o.remove("cpus") {
                        o.insert("maxcpu".into(), n);
                    }
                }
                s["node"] = json!(g.node);
                list.push(s);
            }
        }
        if wanted.is_none() || wanted == Some("node") {
            for n in &c.nodes {
                let mut row = json!({"id": format!("node/{}", n.name), "type": "node", "node": n.name, "status": if n.online { "online" } else { "offline" }, "maxcpu": n.cpus, "maxmem": n.memory, "level": ""});
                if n.online {
                    let used = c.memory_used(&n.name);
                    for (k, v) in [
                        ("cpu", json!(0.12)),
                        ("mem", json!(used)),
                        ("uptime", json!(1_209_600)),
                        ("disk", json!(12u64 << 30)),
                        ("maxdisk", json!(100u64 << 30)),
                        ("cgroup-mode", json!(2)),
                    ] {
                        row[k] = v;
                    }
                }
                list.push(row);
            }
        }
        if wanted.is_none() || wanted == Some("storage") {
            for n in &c.nodes {
                for s in &c.storages {
                    // Resource rows name sizes as disk/maxdisk, not used/total.
                    let usage = storage_json(c, s, &n.name);
                    list.push(json!({
                        "id": format!("storage/{}/{}", n.name, s.id),
                        "type": "storage",
                        "storage": s.id,
                        "node": n.name,
                        "plugintype": s.kind,
                        "status": if n.online { "available" } else { "unknown" },
                        "shared": s.shared as u8,
                        "content": s.content,
                        "disk": usage["used"],
                        "maxdisk": usage["total"],
                    }));
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
