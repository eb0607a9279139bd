//! The simulated cluster's state: nodes, guests with power state, config
//! and snapshots, storages and their volumes, and tasks that go from
//! running to stopped (OK or an error) after a delay, changing the state
//! when they finish — as a real cluster's worker tasks do.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use serde_json::{json, Map, Value};

use super::task_id::Upid;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Qemu,
    Lxc,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Qemu => "qemu",
            Kind::Lxc => "lxc",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Power {
    Running,
    Stopped,
    Paused,
}

impl Power {
    pub fn as_str(self) -> &'static str {
        match self {
            Power::Running => "running",
            Power::Stopped => "stopped",
            Power::Paused => "paused",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Snapshot {
    pub name: String,
    pub description: String,
    pub snaptime: u64,
    pub vmstate: bool,
    pub parent: Option<String>,
    pub config: Map<String, Value>,
}

#[derive(Clone, Debug)]
pub struct Guest {
    pub vmid: u32,
    pub node: String,
    pub kind: Kind,
    pub power: Power,
    pub config: Map<String, Value>,
    pub snapshots: Vec<Snapshot>,
    pub started_at: Option<u64>,
}

impl Guest {
    /// What PVE reports as the config's `digest` and checks a change's
    /// `digest` against: 40 hex digits that change when the config does.
    pub fn digest(&self) -> String {
        use sha2::{Digest, Sha256};
        let text = serde_json::to_vec(&self.config).unwrap_or_default();
        hex::encode(&Sha256::digest(&text)[..20])
    }

    pub fn name(&self) -> String {
        let key = if self.kind == Kind::Qemu {
            "name"
        } else {
            "hostname"
        };
        self.config
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    }

    pub fn memory_mib(&self) -> u64 {
        match self.config.get("memory") {
            Some(Value::String(s)) => s
                .trim_start_matches("current=")
                .split(',')
                .next()
                .unwrap_or("512")
                .parse()
                .unwrap_or(512),
            Some(v) => v.as_u64().unwrap_or(512),
            None => 512,
        }
    }

    pub fn cores(&self) -> u64 {
        self.config
            .get("cores")
            .and_then(Value::as_u64)
            .unwrap_or(1)
    }

    pub fn template(&self) -> bool {
        self.config.get("template").and_then(Value::as_u64) == Some(1)
    }

    pub fn disk_bytes(&self) -> u64 {
        self.config
            .iter()
            .filter(|(k, _)| is_disk_key(k))
            .filter_map(|(_, v)| v.as_str())
            .filter_map(size_of_volume)
            .sum()
    }

    pub fn uptime(&self, now: u64) -> u64 {
        match (self.power, self.started_at) {
            (Power::Running | Power::Paused, Some(t)) => now.saturating_sub(t),
            _ => 0,
        }
    }
}

pub fn is_disk_key(k: &str) -> bool {
    let family = k.trim_end_matches(|c: char| c.is_ascii_digit());
    family != k && matches!(family, "scsi" | "virtio" | "sata" | "ide" | "mp") || k == "rootfs"
}

/// `local-lvm:vm-100-disk-0,size=32G` → bytes.
pub fn size_of_volume(spec: &str) -> Option<u64> {
    let size = spec.split(',').find_map(|p| p.strip_prefix("size="))?;
    parse_size(size)
}

pub fn parse_size(s: &str) -> Option<u64> {
    let (num, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len()));
    let n: f64 = num.parse().ok()?;
    let mult = match unit {
        "" => 1u64,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        _ => return None,
    };
    Some((n * mult as f64) as u64)
}

pub fn format_size(bytes: u64) -> String {
    if bytes.is_multiple_of(1 << 30) {
        format!("{}G", bytes >> 30)
    } else {
        format!("{}M", bytes >> 20)
    }
}

#[derive(Clone, Debug)]
pub struct Node {
    pub name: String,
    pub online: bool,
    pub cpus: u64,
    pub memory: u64,
}

#[derive(Clone, Debug)]
pub struct Storage {
    pub id: String,
    pub kind: &'static str,
    pub content: &'static str,
    pub total: u64,
    pub shared: bool,
}

#[derive(Clone, Debug)]
pub struct Volume {
    pub storage: String,
    pub node: String,
    pub volid: String,
    pub content: &'static str,
    pub format: &'static str,
    pub size: u64,
    pub vmid: Option<u32>,
    pub ctime: u64,
    pub notes: Option<String>,
}

/// What a task does to the cluster when it finishes.
#[derive(Clone, Debug)]
pub enum Effect {
    Power {
        vmid: u32,
        to: Power,
    },
    Reboot {
        vmid: u32,
    },
    Create {
        guest: Box<Guest>,
    },
    Delete {
        vmid: u32,
    },
    Migrate {
        vmid: u32,
        to: String,
    },
    Config {
        vmid: u32,
        set: Map<String, Value>,
        delete: Vec<String>,
    },
    Resize {
        vmid: u32,
        disk: String,
        size: String,
    },
    MoveDisk {
        vmid: u32,
        disk: String,
        storage: String,
    },
    Template {
        vmid: u32,
    },
    SnapshotCreate {
        vmid: u32,
        name: String,
        description: String,
        vmstate: bool,
    },
    SnapshotRollback {
        vmid: u32,
        name: String,
        start: bool,
    },
    SnapshotDelete {
        vmid: u32,
        name: String,
    },
    Backup {
        vmids: Vec<u32>,
        storage: String,
        notes: Option<String>,
        protected: bool,
    },
    Download {
        node: String,
        storage: String,
        filename: String,
        content: &'static str,
    },
    Nothing,
}

#[derive(Clone, Debug)]
pub struct Task {
    pub upid: Upid,
    pub finish_at: Instant,
    pub endtime: Option<u64>,
    pub exitstatus: Option<String>,
    pub log: Vec<String>,
    pub effect: Effect,
    /// Set when the task will fail, with PVE's message.
    pub fails_with: Option<String>,
}

impl Task {
    pub fn running(&self) -> bool {
        self.exitstatus.is_none()
    }

    /// A task as `/tasks/{upid}/status` shows it: `status` is running or
    /// stopped, with the `exitstatus` once stopped.
    pub fn json(&self) -> Value {
        let mut v = self.base();
        v["status"] = json!(if self.running() { "running" } else { "stopped" });
        if let Some(e) = &self.exitstatus {
            v["exitstatus"] = json!(e);
        }
        v
    }

    /// A task as task lists show it: an ended one carries `endtime`, and
    /// its exit status as `status`.
    pub fn row(&self) -> Value {
        let mut v = self.base();
        if let Some(e) = &self.exitstatus {
            v["status"] = json!(e);
            v["endtime"] = json!(self.endtime);
        }
        v
    }

    fn base(&self) -> Value {
        json!({
            "upid": self.upid.to_string(),
            "node": self.upid.node,
            "pid": self.upid.pid,
            "pstart": self.upid.pstart,
            "starttime": self.upid.starttime,
            "type": self.upid.kind,
            "id": self.upid.id,
            "user": self.upid.user,
        })
    }
}

pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

pub struct Cluster {
    pub name: String,
    pub nodes: Vec<Node>,
    pub guests: BTreeMap<u32, Guest>,
    pub storages: Vec<Storage>,
    pub volumes: Vec<Volume>,
    pub tasks: Vec<Task>,
    pub task_delay: Duration,
    next_pid: u32,
    /// Every request the simulator answered, for tests to inspect.
    pub requests: Vec<(String, String, String)>,
}

fn config(pairs: &[(&str, Value)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

impl Cluster {
    /// A three-node cluster with a dozen guests, two storages, ISO images,
    /// templates and a few backups.
    pub fn demo(task_delay: Duration) -> Self {
        let nodes = ["pve1", "pve2", "pve3"]
            .iter()
            .map(|n| Node {
                name: n.to_string(),
                online: true,
                cpus: 16,
                memory: 64 << 30,
            })
            .collect();
        let mut guests = BTreeMap::new();
        let qm =
            |vmid: u32, node: &str, name: &str, mem: u64, cores: u64, disk: u64, power: Power| {
                Guest {
                    vmid,
                    node: node.into(),
                    kind: Kind::Qemu,
                    power,
                    config: config(&[
                        ("name", json!(name)),
                        ("memory", json!(mem.to_string())),
                        ("cores", json!(cores)),
                        ("sockets", json!(1)),
                        ("ostype", json!("l26")),
                        ("scsihw", json!("virtio-scsi-single")),
                        (
                            "scsi0",
                            json!(format!(
                                "local-lvm:vm-{vmid}-disk-0,iothread=1,size={disk}G"
                            )),
                        ),
                        (
                            "net0",
                            json!(format!(
                                "virtio=BC:24:11:00:{:02X}:{:02X},bridge=vmbr0,firewall=1",
                                vmid / 256,
                                vmid % 256
                            )),
                        ),
                        ("boot", json!("order=scsi0;net0")),
                        ("agent", json!("1")),
                        ("onboot", json!(1)),
                    ]),
                    snapshots: Vec::new(),
                    started_at: (power == Power::Running).then(|| now_secs() - 86_400),
                }
            };
        let ct = |vmid: u32, node: &str, name: &str, mem: u64, cores: u64, power: Power| Guest {
            vmid,
            node: node.into(),
            kind: Kind::Lxc,
            power,
            config: config(&[
                ("hostname", json!(name)),
                ("memory", json!(mem)),
                ("swap", json!(512)),
                ("cores", json!(cores)),
                ("ostype", json!("debian")),
                ("arch", json!("amd64")),
                (
                    "rootfs",
                    json!(format!("local-lvm:subvol-{vmid}-disk-0,size=8G")),
                ),
                (
                    "net0",
                    json!(format!(
                        "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:01:{:02X}:{:02X},ip=dhcp,type=veth",
                        vmid / 256,
                        vmid % 256
                    )),
                ),
                ("unprivileged", json!(1)),
            ]),
            snapshots: Vec::new(),
            started_at: (power == Power::Running).then(|| now_secs() - 3_600),
        };
        use Power::{Running, Stopped};
        for g in [
            qm(100, "pve1", "web-1", 4096, 2, 32, Running),
            qm(101, "pve1", "web-2", 4096, 2, 32, Running),
            qm(102, "pve1", "db-1", 16384, 8, 200, Running),
            qm(103, "pve1", "build-1", 8192, 4, 64, Stopped),
            qm(104, "pve2", "web-3", 4096, 2, 32, Running),
            qm(105, "pve2", "db-2", 16384, 8, 200, Running),
            qm(106, "pve2", "win-jump", 8192, 4, 80, Stopped),
            qm(107, "pve3", "monitoring", 4096, 2, 50, Running),
            qm(108, "pve3", "ci-runner", 8192, 4, 100, Running),
            qm(9000, "pve1", "debian-12-template", 2048, 2, 16, Stopped),
            ct(200, "pve1", "dns-1", 512, 1, Running),
            ct(201, "pve2", "dns-2", 512, 1, Running),
            ct(202, "pve3", "proxy", 1024, 2, Running),
            ct(203, "pve3", "mail", 2048, 2, Stopped),
            ct(204, "pve2", "backup-agent", 1024, 1, Stopped),
        ] {
            guests.insert(g.vmid, g);
        }
        if let Some(t) = guests.get_mut(&9000) {
            t.config.insert("template".into(), json!(1));
        }
        // Cloud-init on web-1: PVE shows the password only as asterisks.
        if let Some(g) = guests.get_mut(&100) {
            g.config.insert("ciuser".into(), json!("admin"));
            g.config.insert("cipassword".into(), json!("**********"));
        }
        let storages = vec![
            Storage {
                id: "local".into(),
                kind: "dir",
                content: "iso,vztmpl,backup,snippets",
                total: 100 << 30,
                shared: false,
            },
            Storage {
                id: "local-lvm".into(),
                kind: "lvmthin",
                content: "images,rootdir",
                total: 1 << 40,
                shared: false,
            },
        ];
        let t0 = now_secs() - 7 * 86_400;
        let mut volumes = Vec::new();
        for node in ["pve1", "pve2", "pve3"] {
            let v = |volid: &str,
                     content: &'static str,
                     format: &'static str,
                     size: u64,
                     vmid: Option<u32>| Volume {
                storage: "local".into(),
                node: node.into(),
                volid: volid.into(),
                content,
                format,
                size,
                vmid,
                ctime: t0,
                notes: None,
            };
            volumes.push(v(
                "local:iso/debian-12.8.0-amd64-netinst.iso",
                "iso",
                "iso",
                660 << 20,
                None,
            ));
            volumes.push(v(
                "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
                "vztmpl",
                "tzst",
                120 << 20,
                None,
            ));
        }
        let mut cluster = Self {
            name: "airlock-sim".into(),
            nodes,
            guests,
            storages,
            volumes,
            tasks: Vec::new(),
            task_delay,
            next_pid: 0x1000,
            requests: Vec::new(),
        };
        for vmid in [100, 102, 200] {
            let node = cluster.guests[&vmid].node.clone();
            let kind = cluster.guests[&vmid].kind;
            cluster
                .volumes
                .push(backup_volume(&node, vmid, kind, t0 + 86_400, None, false));
        }
        cluster
    }

    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// Memory in use on a node: its running guests', and 4 GiB of the
    /// host's own.
    pub fn memory_used(&self, node: &str) -> u64 {
        let guests: u64 = self
            .guests
            .values()
            .filter(|g| g.node == node && g.power == Power::Running)
            .map(|g| g.memory_mib() << 20)
            .sum();
        guests + (4 << 30)
    }

    /// Finishes every task whose time has come, applying its effect.
    pub fn advance(&mut self) {
        let now = Instant::now();
        let due: Vec<usize> = (0..self.tasks.len())
            .filter(|&i| self.tasks[i].running() && self.tasks[i].finish_at <= now)
            .collect();
        for i in due {
            let effect = std::mem::replace(&mut self.tasks[i].effect, Effect::Nothing);
            let result = match self.tasks[i].fails_with.clone() {
                Some(e) => Err(e),
                None => self.apply(effect),
            };
            let task = &mut self.tasks[i];
            task.endtime = Some(now_secs());
            match result {
                Ok(lines) => {
                    task.log.extend(lines);
                    task.log.push("TASK OK".into());
                    task.exitstatus = Some("OK".into());
                }
                Err(e) => {
                    task.log.push(format!("TASK ERROR: {e}"));
                    task.exitstatus = Some(e);
                }
            }
        }
    }

    /// Finishes every running task now (tests use it instead of waiting).
    pub fn finish_all(&mut self) {
        let now = Instant::now();
        for t in self.tasks.iter_mut().filter(|t| t.running()) {
            t.finish_at = now;
        }
        self.advance();
    }

    /// Starts a task; it finishes after the configured delay.
    pub fn start_task(
        &mut self,
        node: &str,
        kind: &str,
        id: &str,
        user: &str,
        effect: Effect,
        fails_with: Option<String>,
    ) -> String {
        self.next_pid += 1;
        let upid = Upid {
            node: node.into(),
            pid: self.next_pid,
            pstart: 0x2A0B3C + self.next_pid as u64,
            starttime: now_secs(),
            kind: kind.into(),
            id: id.into(),
            user: user.into(),
        };
        let text = upid.to_string();
        self.tasks.push(Task {
            upid,
            finish_at: Instant::now() + self.task_delay,
            endtime: None,
            exitstatus: None,
            log: vec![format!("starting task {kind} {id}")],
            effect,
            fails_with,
        });
        text
    }

    fn guest_mut(&mut self, vmid: u32) -> Result<&mut Guest, String> {
        self.guests
            .get_mut(&vmid)
            .ok_or_else(|| format!("guest {vmid} no longer exists"))
    }

    fn apply(&mut self, effect: Effect) -> Result<Vec<String>, String> {
        let now = now_secs();
        match effect {
            Effect::Nothing => Ok(vec![]),
            Effect::Power { vmid, to } => {
                let g = self.guest_mut(vmid)?;
                match (g.power, to) {
                    (Power::Running, Power::Running) => {
                        return Err(format!("VM {vmid} already running"))
                    }
                    (Power::Stopped, Power::Stopped) => {
                        return Err(format!("VM {vmid} not running"))
                    }
                    (Power::Stopped, Power::Paused) => {
                        return Err(format!("VM {vmid} not running"))
                    }
                    _ => {}
                }
                if to == Power::Running && g.power == Power::Stopped {
                    g.started_at = Some(now);
                }
                if to == Power::Stopped {
                    g.started_at = None;
                }
                g.power = to;
                Ok(vec![format!(
                    "{} {vmid} is now {}",
                    g.kind.as_str(),
                    to.as_str()
                )])
            }
            Effect::Reboot { vmid } => {
                let g = self.guest_mut(vmid)?;
                if g.power != Power::Running {
                    return Err(format!("VM {vmid} not running"));
                }
                g.started_at = Some(now);
                Ok(vec![format!("rebooted {vmid}")])
            }
            Effect::Create { guest } => {
                if self.guests.contains_key(&guest.vmid) {
                    return Err(format!(
                        "unable to create VM {}: config file already exists",
                        guest.vmid
                    ));
                }
                let lines = vec![format!("created {} {}", guest.kind.as_str(), guest.vmid)];
                self.guests.insert(guest.vmid, *guest);
                Ok(lines)
            }
            Effect::Delete { vmid } => {
                let g = self
                    .guests
                    .get(&vmid)
                    .ok_or_else(|| format!("guest {vmid} does not exist"))?;
                if g.power != Power::Stopped {
                    return Err(format!("VM {vmid} is running - destroy failed"));
                }
                self.guests.remove(&vmid);
                self.volumes
                    .retain(|v| !(v.content == "images" && v.vmid == Some(vmid)));
                Ok(vec![format!("destroyed {vmid}")])
            }
            Effect::Migrate { vmid, to } => {
                let g = self.guest_mut(vmid)?;
                let from = std::mem::replace(&mut g.node, to.clone());
                Ok(vec![format!("migrated {vmid} from {from} to {to}")])
            }
            Effect::Config { vmid, set, delete } => {
                let g = self.guest_mut(vmid)?;
                for k in delete {
                    g.config.shift_remove(&k);
                }
                g.config.extend(set);
                Ok(vec![format!("updated configuration of {vmid}")])
            }
            Effect::Resize { vmid, disk, size } => {
                let g = self.guest_mut(vmid)?;
                let spec = g
                    .config
                    .get(&disk)
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("disk '{disk}' does not exist"))?
                    .to_string();
                let current = size_of_volume(&spec).unwrap_or(0);
                let new = match size.strip_prefix('+') {
                    Some(grow) => current + parse_size(grow).ok_or("invalid size")?,
                    None => parse_size(&size).ok_or("invalid size")?,
                };
                if new < current {
                    return Err("shrinking disks is not supported".into());
                }
                let spec: Vec<String> = spec
                    .split(',')
                    .map(|p| {
                        if p.starts_with("size=") {
                            format!("size={}", format_size(new))
                        } else {
                            p.to_string()
                        }
                    })
                    .collect();
                g.config.insert(disk.clone(), json!(spec.join(",")));
                Ok(vec![format!(
                    "resized {disk} of {vmid} to {}",
                    format_size(new)
                )])
            }
            Effect::MoveDisk {
                vmid,
                disk,
                storage,
            } => {
                let g = self.guest_mut(vmid)?;
                let spec = g
                    .config
                    .get(&disk)
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("disk '{disk}' does not exist"))?
                    .to_string();
                let rest = spec.split_once(':').map(|(_, r)| r).unwrap_or(&spec);
                g.config
                    .insert(disk.clone(), json!(format!("{storage}:{rest}")));
                Ok(vec![format!("moved {disk} of {vmid} to {storage}")])
            }
            Effect::Template { vmid } => {
                let g = self.guest_mut(vmid)?;
                g.config.insert("template".into(), json!(1));
                Ok(vec![format!("converted {vmid} to a template")])
            }
            Effect::SnapshotCreate {
                vmid,
                name,
                description,
                vmstate,
            } => {
                let g = self.guest_mut(vmid)?;
                if g.snapshots.iter().any(|s| s.name == name) {
                    return Err(format!("snapshot name '{name}' already used"));
                }
                let parent = g.snapshots.last().map(|s| s.name.clone());
                let config = g.config.clone();
                g.snapshots.push(Snapshot {
                    name: name.clone(),
                    description,
                    snaptime: now,
                    vmstate,
                    parent,
                    config,
                });
                Ok(vec![format!("snapshot '{name}' of {vmid} created")])
            }
            Effect::SnapshotRollback { vmid, name, start } => {
                let g = self.guest_mut(vmid)?;
                let snap = g
                    .snapshots
                    .iter()
                    .find(|s| s.name == name)
                    .ok_or_else(|| format!("snapshot '{name}' does not exist"))?
                    .clone();
                g.config = snap.config;
                g.power = if start || snap.vmstate {
                    Power::Running
                } else {
                    Power::Stopped
                };
                Ok(vec![format!("rolled {vmid} back to '{name}'")])
            }
            Effect::SnapshotDelete { vmid, name } => {
                let g = self.guest_mut(vmid)?;
                let before = g.snapshots.len();
                g.snapshots.retain(|s| s.name != name);
                if g.snapshots.len() == before {
                    return Err(format!("snapshot '{name}' does not exist"));
                }
                Ok(vec![format!("snapshot '{name}' of {vmid} deleted")])
            }
            Effect::Backup {
                vmids,
                storage,
                notes,
                protected,
            } => {
                let mut lines = Vec::new();
                for vmid in vmids {
                    let g = self
                        .guests
                        .get(&vmid)
                        .ok_or_else(|| format!("guest {vmid} does not exist"))?;
                    let mut vol =
                        backup_volume(&g.node, vmid, g.kind, now, notes.clone(), protected);
                    vol.storage = storage.clone();
                    vol.volid = vol.volid.replacen("local:", &format!("{storage}:"), 1);
                    lines.push(format!("INFO: backup of {vmid} finished: {}", vol.volid));
                    self.volumes.push(vol);
                }
                Ok(lines)
            }
            Effect::Download {
                node,
                storage,
                filename,
                content,
            } => {
                let volid = format!("{storage}:{content}/{filename}");
                self.volumes.push(Volume {
                    storage,
                    node,
                    volid: volid.clone(),
                    content,
                    format: if content == "iso" { "iso" } else { "tzst" },
                    size: 500 << 20,
                    vmid: None,
                    ctime: now,
                    notes: None,
                });
                Ok(vec![format!("downloaded {volid}")])
            }
        }
    }
}

pub fn backup_volume(
    node: &str,
    vmid: u32,
    kind: Kind,
    when: u64,
    notes: Option<String>,
    protected: bool,
) -> Volume {
    let stamp = humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(when))
        .to_string()
        .replace(['-', ':'], "_")
        .replace('T', "-")
        .trim_end_matches('Z')
        .to_string();
    let (kind_s, ext) = match kind {
        Kind::Qemu => ("qemu", "vma.zst"),
        Kind::Lxc => ("lxc", "tar.zst"),
    };
    let _ = protected;
    Volume {
        storage: "local".into(),
        node: node.into(),
        volid: format!("local:backup/vzdump-{kind_s}-{vmid}-{stamp}.{ext}"),
        content: "backup",
        format: if kind == Kind::Qemu {
            "vma.zst"
        } else {
            "tar.zst"
        },
        size: 2 << 30,
        vmid: Some(vmid),
        ctime: when,
        notes,
    }
}
