//! Changing guests: power actions, create, clone, config updates and
//! snapshots, each started as a task the way PVE does.

use serde_json::{json, Map, Value};

use super::{flag, guest, node_ok, Params, Reply, Vars};
use crate::pve::cluster::{is_disk_key, now_secs, Cluster, Effect, Guest, Kind, Power};

pub(super) fn power(
    c: &mut Cluster,
    v: &Vars,
    p: &Params,
    user: &str,
    kind: Kind,
    action: &str,
) -> Reply {
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

pub(super) fn create(c: &mut Cluster, v: &Vars, p: &Params, user: &str, kind: Kind) -> Reply {
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

pub(super) fn clone(c: &mut Cluster, v: &Vars, p: &Params, user: &str, kind: Kind) -> Reply {
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

pub(super) fn config_update(
    c: &mut Cluster,
    v: &Vars,
    p: &Params,
    user: &str,
    kind: Kind,
    as_task: bool,
) -> Reply {
    let g = match guest(c, v, kind) {
        Ok(g) => g.clone(),
        Err(e) => return e,
    };
    if let Some(d) = p.get("digest") {
        let current = g.digest();
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
    let task_kind = if kind == Kind::Qemu {
        "qmconfig"
    } else {
        "vzconfig"
    };
    if as_task {
        Reply::data(json!(c.start_task(
            &g.node,
            task_kind,
            &g.vmid.to_string(),
            user,
            effect,
            None
        )))
    } else {
        // Applied at once: the answer comes when the change is made.
        c.start_task(&g.node, task_kind, &g.vmid.to_string(), user, effect, None);
        if let Some(t) = c.tasks.last_mut() {
            t.finish_at = std::time::Instant::now();
        }
        c.advance();
        Reply::data(Value::Null)
    }
}

pub(super) fn snapshot_change(
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
