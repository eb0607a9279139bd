//! `/nodes`: node status, storage and its content, tasks and their logs,
//! network, DNS, services and the other per-node endpoints.

use serde_json::{json, Value};

use super::{
    datacenter::REPLICATION_JOB, flag, matches, node_ok, rrd, Method, Params, Reply, Vars,
};
use crate::pve::cluster::{now_secs, Cluster, Effect, Power, Storage};

pub(super) fn node_routes(
    c: &mut Cluster,
    m: Method,
    path: &str,
    p: &Params,
    user: &str,
) -> Option<Reply> {
    let now = now_secs();
    if let Some(_v) = on!(m, path, Get, "/nodes") {
        return Some(Reply::data(Value::Array(
            c.nodes
                .iter()
                .map(|n| {
                    json!({"node": n.name, "status": if n.online { "online" } else { "offline" }, "cpu": 0.12, "maxcpu": n.cpus, "mem": c.memory_used(&n.name), "maxmem": n.memory, "uptime": 1_209_600, "level": "", "id": format!("node/{}", n.name), "type": "node", "ssl_fingerprint": ""})
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
        let used = c.memory_used(&node);
        Reply::data(json!({
            "uptime": 1_209_600, "loadavg": ["0.42", "0.51", "0.60"], "cpu": 0.12, "wait": 0.001,
            "cpuinfo": {"cpus": n.cpus, "model": "AMD EPYC 7302P 16-Core Processor", "sockets": 1, "cores": n.cpus},
            "memory": {"total": n.memory, "used": used, "free": n.memory - used, "available": n.memory - used + (1 << 30)},
            "swap": {"total": 8u64 << 30, "used": 0, "free": 8u64 << 30},
            "rootfs": {"total": 100u64 << 30, "used": 12u64 << 30, "avail": 83u64 << 30, "free": 88u64 << 30},
            "boot-info": {"mode": "efi", "secureboot": 0},
            "current-kernel": {"sysname": "Linux", "release": "6.14.8-2-pve", "version": "#1 SMP PREEMPT_DYNAMIC PMX 6.14.8-2 (2025-07-22T10:04Z)", "machine": "x86_64"},
            "kversion": "Linux 6.14.8-2-pve #1 SMP PREEMPT_DYNAMIC", "pveversion": "pve-manager/9.1.1/c4f8c5e0b3f1a2d7",
        }))
    });
    node_get!("/nodes/{node}/services", |node| {
        Reply::data(json!(SERVICES
            .iter()
            .map(|(s, desc)| service(s, desc))
            .collect::<Vec<_>>()))
    });
    if let Some(v) = on!(m, path, Get, "/nodes/{node}/services/{service}/state") {
        return Some(
            node_ok(c, &v)
                .map(
                    |_| match SERVICES.iter().find(|(s, _)| *s == v["service"]) {
                        Some((s, desc)) => Reply::data(service(s, desc)),
                        None => Reply::bad_params(&[(
                            "service",
                            format!(
                                "value '{}' does not have a value in the enumeration '{}'",
                                v["service"],
                                SERVICES
                                    .iter()
                                    .map(|(s, _)| *s)
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        )]),
                    },
                )
                .unwrap_or_else(|e| e),
        );
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
            .map(|t| t.row())
            .collect();
        Reply::data(Value::Array(list))
    });
    node_get!("/nodes/{node}/network", |node| Reply::data(json!([
        {"iface": "vmbr0", "type": "bridge", "active": 1, "autostart": 1, "bridge_ports": "eno1", "cidr": "192.168.10.11/24", "gateway": "192.168.10.1"},
        {"iface": "eno1", "type": "eth", "active": 1, "autostart": 1},
    ])));
    node_get!("/nodes/{node}/disks/list", |node| Reply::data(json!([
        {"devpath": "/dev/nvme0n1", "model": "Samsung SSD 980 PRO 1TB", "size": 1_000_204_886_016u64, "health": "PASSED", "wearout": 97, "type": "nvme", "used": "LVM", "gpt": 1, "mounted": 0, "osdid": -1, "osdid-list": [], "serial": "S5GXNF0R123456", "wwn": "eui.002538b111b2c3d4", "vendor": "Samsung"},
        {"devpath": "/dev/sda", "model": "WDC WD40EFRX", "size": 4_000_787_030_016u64, "health": "PASSED", "wearout": "N/A", "type": "hdd", "used": "ZFS", "gpt": 1, "mounted": 0, "osdid": -1, "osdid-list": [], "serial": "WD-WCC7K1234567", "wwn": "0x50014ee2b1c2d3e4", "vendor": "ATA"},
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
    node_get!("/nodes/{node}/rrddata", |node| {
        let n = c.node(&node).unwrap();
        let used = c.memory_used(&node);
        let (cpus, total) = (n.cpus, n.memory);
        Reply::data(rrd(now, |i| {
            json!({
                "cpu": 0.10 + (i % 7) as f64 / 100.0, "maxcpu": cpus, "iowait": 0.001, "loadavg": 0.45 + (i % 5) as f64 / 10.0,
                "memused": used, "memtotal": total, "swapused": 0, "swaptotal": 8u64 << 30,
                "rootused": 12u64 << 30, "roottotal": 100u64 << 30, "netin": 52_000.0, "netout": 31_000.0,
            })
        }))
    });
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
        json!([{"Package": "pve-manager", "OldVersion": "9.1.1", "Version": "9.1.2", "Priority": "optional", "Section": "admin", "Arch": "all", "Origin": "Proxmox", "Title": "Proxmox Virtual Environment Management Tools", "Description": "Proxmox Virtual Environment Management Tools\n This package contains the Proxmox Virtual Environment management tools."}])
    ));
    node_get!("/nodes/{node}/hardware/pci", |node| Reply::data(
        json!([{"id": "0000:01:00.0", "class": "0x030000", "vendor": "0x10de", "vendor_name": "NVIDIA Corporation", "device": "0x24b0", "device_name": "GA104GL [RTX A4000]", "subsystem_vendor": "0x10de", "subsystem_device": "0x14ad", "iommugroup": 14}])
    ));
    node_get!("/nodes/{node}/netstat", |node| {
        Reply::data(Value::Array(c.guests.values().filter(|g| g.node == node && g.power == Power::Running).map(|g| json!({"vmid": g.vmid.to_string(), "dev": format!("tap{}i0", g.vmid), "in": "123456", "out": "654321"})).collect()))
    });
    node_get!("/nodes/{node}/replication", |node| Reply::data(
        if node == "pve1" {
            json!([replication_state(now)])
        } else {
            json!([])
        }
    ));
    node_get!("/nodes/{node}/firewall/log", |node| Reply::data(
        firewall_log(p, &node, None)
    ));
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
                .map(|node| {
                    if node == "pve1" && v["id"] == REPLICATION_JOB {
                        Reply::data(replication_state(now))
                    } else {
                        Reply::error(500, format!("replication job '{}' does not exist", v["id"]))
                    }
                })
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
                Some(t) => Reply::data(log_page(p, &t.log)),
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
                .map(|s| {
                    // The status is the storage's own; the name and the
                    // fraction are what the node's index adds.
                    let mut j = storage_json(c, s, &v["node"]);
                    if let Some(o) = j.as_object_mut() {
                        o.remove("storage");
                        o.remove("used_fraction");
                    }
                    Reply::data(j)
                })
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
                .map(|s| {
                    let usage = storage_json(c, s, &v["node"]);
                    let (used, total) = (
                        usage["used"].as_u64().unwrap_or(0),
                        usage["total"].as_u64().unwrap_or(0),
                    );
                    // Growing to today's use over the 70 minutes shown.
                    Reply::data(rrd(
                        now,
                        |i| json!({"used": used - used / 200 * (69 - i) / 69, "total": total}),
                    ))
                })
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

fn storage_of<'a>(c: &'a Cluster, v: &Vars) -> Result<&'a Storage, Reply> {
    node_ok(c, v)?;
    let id = v.get("storage").cloned().unwrap_or_default();
    c.storages
        .iter()
        .find(|s| s.id == id)
        .ok_or_else(|| Reply::error(500, format!("storage '{id}' does not exist")))
}

pub(super) fn storage_json(c: &Cluster, s: &Storage, node: &str) -> Value {
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

/// The node's services: systemd unit name and description.
const SERVICES: &[(&str, &str)] = &[
    ("pveproxy", "PVE API Proxy Server"),
    ("pvedaemon", "PVE API Daemon"),
    ("pvestatd", "PVE Status Daemon"),
    ("corosync", "Corosync Cluster Engine"),
    ("pve-cluster", "The Proxmox VE cluster filesystem"),
    ("pve-firewall", "Proxmox VE firewall"),
    ("chrony", "chrony, an NTP client/server"),
    ("sshd", "OpenBSD Secure Shell server"),
];

fn service(name: &str, desc: &str) -> Value {
    json!({"service": name, "name": name, "desc": desc, "state": "running", "active-state": "active", "unit-state": "enabled"})
}

/// The replication job's state as the source node reports it.
fn replication_state(now: u64) -> Value {
    let last = now - now % 900;
    json!({"id": REPLICATION_JOB, "guest": 102, "jobnum": 0, "target": "pve2", "type": "local", "schedule": "*/15", "source": "pve1", "last_sync": last, "last_try": last, "next_sync": last + 900, "duration": 2.4, "fail_count": 0})
}

/// Firewall log lines (`n`, `t`), honouring `start` and `limit`; a
/// guest's own log when `vmid` is given.
pub(super) fn firewall_log(p: &Params, node: &str, vmid: Option<u32>) -> Value {
    let id = vmid.unwrap_or(0);
    let lines: Vec<String> = (0..20u32)
        .map(|i| {
            format!(
                "{id} 5 tap{id}i0-IN 30/Nov/2026:04:{:02}:{:02} +0100 policy DROP: IN=fwbr{id}i0 OUT=fwbr{id}i0 PHYSIN=fwln{id}i0 PHYSOUT=tap{id}i0 SRC=203.0.113.{} DST=10.0.0.{} LEN=60 PROTO=TCP SPT={} DPT=23 SYN ({node})",
                i * 2,
                i % 60,
                10 + i,
                id % 256,
                40000 + i
            )
        })
        .collect();
    log_page(p, &lines)
}

/// Log lines as PVE pages them: `{n, t}` from line `start` (0), at most
/// `limit` (50).
fn log_page(p: &Params, lines: &[String]) -> Value {
    let start = p
        .get("start")
        .and_then(|s| s.parse().ok())
        .unwrap_or(0usize);
    let limit = p
        .get("limit")
        .and_then(|s| s.parse().ok())
        .unwrap_or(50usize);
    Value::Array(
        lines
            .iter()
            .enumerate()
            .skip(start)
            .take(limit)
            .map(|(i, t)| json!({"n": i + 1, "t": t}))
            .collect(),
    )
}
