//! Reading guests: lists, status, config, pending changes, snapshots,
//! the agent, RRD data, and the routes that hand changes to
//! [`super::guest_changes`].

use serde_json::{json, Value};

use super::{
    flag, guest,
    guest_changes::{clone, config_update, create, power, snapshot_change},
    guest_rrd, matches, node_ok, rrd, summary, Method, Params, Reply,
};
use crate::pve::cluster::{
    is_disk_key, now_secs, size_of_volume, Cluster, Effect, Guest, Kind, Power,
};

pub(super) fn guest_routes(
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
                    cfg.insert("digest".into(), json!(g.digest()));
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
                            // Values as the configuration file holds them: text.
                            .map(|(key, value)| json!({"key": key, "value": value.as_str().map(str::to_string).unwrap_or_else(|| value.to_string())}))
                            .collect(),
                    ))
                })
                .unwrap_or_else(|e| e),
        );
    }
    if let Some(v) = at(&t("/{vmid}/rrddata"), Method::Get) {
        return Some(
            guest(c, &v, kind)
                .map(|g| Reply::data(rrd(now, |i| guest_rrd(g, i))))
                .unwrap_or_else(|e| e),
        );
    }
    if let Some(v) = at(&t("/{vmid}/interfaces"), Method::Get) {
        return Some(guest(c, &v, kind).map(|g| {
            let ip = format!("10.0.{}.{}", g.vmid / 256, g.vmid % 256);
            let mac = format!("bc:24:11:{:02x}:{:02x}:01", g.vmid / 256, g.vmid % 256);
            let iface = |name: &str, mac: &str, ip: &str, prefix: u8| json!({"name": name, "hwaddr": mac, "hardware-address": mac, "inet": format!("{ip}/{prefix}"), "ip-addresses": [{"ip-address": ip, "ip-address-type": "inet", "prefix": prefix}]});
            Reply::data(json!([iface("lo", "00:00:00:00:00:00", "127.0.0.1", 8), iface("eth0", &mac, &ip, 24)]))
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
            let running = g.power == Power::Running;
            if kind == Kind::Lxc {
                return Reply::data(json!({"running": running, "allowed-nodes": others, "not-allowed-nodes": {}}));
            }
            Reply::data(json!({"running": running, "allowed_nodes": others, "not_allowed_nodes": {}, "local_disks": local_disks(c, g), "local_resources": [], "mapped-resources": [], "mapped-resource-info": {}, "has-dbus-vmstate": 0}))
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
    // VMs: POST runs a task, PUT applies at once; containers only PUT.
    if let Some(v) = at(&t("/{vmid}/config"), Method::Put) {
        return Some(config_update(c, &v, p, user, kind, false));
    }
    if kind == Kind::Qemu {
        if let Some(v) = at(&t("/{vmid}/config"), Method::Post) {
            return Some(config_update(c, &v, p, user, kind, true));
        }
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
                .map(|s| {
                    let mut j = json!({"name": s.name, "description": s.description, "snaptime": s.snaptime});
                    if kind == Kind::Qemu {
                        j["vmstate"] = json!(s.vmstate as u8);
                    }
                    if let Some(parent) = &s.parent {
                        j["parent"] = json!(parent);
                    }
                    j
                })
                .collect();
            let mut current = json!({"name": "current", "description": "You are here!", "running": (g.power == Power::Running) as u8});
            if let Some(last) = g.snapshots.last() {
                current["parent"] = json!(last.name);
            }
            list.push(current);
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
                    .map(|g| agent(g, json!({"result": {}})))
                    .unwrap_or_else(|e| e),
            );
        }
    }
    if let Some(v) = at(&t("/{vmid}/firewall/rules"), Method::Get) {
        return Some(guest(c, &v, kind).map(|_| Reply::data(json!([{"pos": 0, "type": "in", "action": "ACCEPT", "proto": "tcp", "dport": "22", "enable": 1}]))).unwrap_or_else(|e| e));
    }
    if let Some(v) = at(&t("/{vmid}/firewall/log"), Method::Get) {
        return Some(
            guest(c, &v, kind)
                .map(|g| Reply::data(super::nodes::firewall_log(p, &g.node, Some(g.vmid))))
                .unwrap_or_else(|e| e),
        );
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

/// Disks on storage only this node has (not shared): what a migration
/// must copy. CD-ROMs count, as PVE lists them.
fn local_disks(c: &Cluster, g: &Guest) -> Vec<Value> {
    g.config
        .iter()
        .filter(|(k, _)| is_disk_key(k))
        .filter_map(|(_, v)| v.as_str())
        .filter_map(|spec| {
            let volid = spec.split(',').next()?;
            let (storage, _) = volid.split_once(':')?;
            let shared = c.storages.iter().find(|s| s.id == storage)?.shared;
            let cdrom = spec.split(',').any(|o| o == "media=cdrom");
            (!shared).then(|| json!({"volid": volid, "size": size_of_volume(spec).unwrap_or(0), "cdrom": cdrom as u8, "is_unused": 0}))
        })
        .collect()
}
