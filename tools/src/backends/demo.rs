//! The demo backend: a small in-memory fleet (3 nodes, 12 guests) that
//! answers after a simulated round trip. It lets Airlock run with no
//! cluster at all and exercises every tier; it is not a Proxmox backend
//! and says so in every summary.

use std::{sync::Mutex, time::Duration};

use async_trait::async_trait;
use serde_json::{json, Value};

use crate::{
    backend::{Backend, BackendError, Reply},
    spec::{Hints, Tier, ToolSpec},
};

/// Simulated network round trip per call.
pub const LATENCY: Duration = Duration::from_millis(20);

#[derive(Clone, Debug)]
struct Guest {
    node: &'static str,
    vmid: u32,
    name: &'static str,
    kind: &'static str,
    running: bool,
    maxmem_gib: u64,
}

pub struct DemoFleet {
    guests: Mutex<Vec<Guest>>,
    latency: Duration,
}

const NODES: [(&str, bool); 3] = [("pve1", true), ("pve2", true), ("pve3", false)];

impl DemoFleet {
    pub fn new(latency: Duration) -> Self {
        let g = |node, vmid, name, kind, running, maxmem_gib| Guest {
            node,
            vmid,
            name,
            kind,
            running,
            maxmem_gib,
        };
        Self {
            guests: Mutex::new(vec![
                g("pve1", 100, "web-1", "qemu", true, 4),
                g("pve1", 101, "web-2", "qemu", false, 4),
                g("pve1", 102, "db-1", "qemu", true, 16),
                g("pve1", 200, "dns", "lxc", true, 1),
                g("pve1", 201, "proxy", "lxc", true, 2),
                g("pve2", 103, "web-3", "qemu", false, 4),
                g("pve2", 104, "db-2", "qemu", true, 16),
                g("pve2", 105, "ci-runner", "qemu", true, 8),
                g("pve2", 202, "monitoring", "lxc", true, 2),
                g("pve2", 203, "backup-agent", "lxc", false, 1),
                g("pve3", 106, "web-4", "qemu", false, 4),
                g("pve3", 204, "mail", "lxc", false, 2),
            ]),
            latency,
        }
    }

    fn answer(&self, tool: &str, args: &Value) -> Result<Value, BackendError> {
        match tool {
            "list_nodes" => Ok(Value::Array(
                NODES
                    .iter()
                    .map(|(n, up)| json!({"node": n, "status": if *up { "online" } else { "offline" }}))
                    .collect(),
            )),
            "list_guests" => {
                let node = online_node(args)?;
                let guests = self.guests.lock().unwrap();
                Ok(Value::Array(guests.iter().filter(|g| g.node == node).map(render).collect()))
            }
            "guest_status" => {
                let (node, vmid) = (online_node(args)?, vmid(args));
                let guests = self.guests.lock().unwrap();
                find(&guests, node, vmid).map(render)
            }
            "guest_config" => {
                let (node, vmid) = (online_node(args)?, vmid(args));
                let guests = self.guests.lock().unwrap();
                let g = find(&guests, node, vmid)?;
                // The password is here on purpose: the gateway must redact it.
                Ok(json!({
                    "name": g.name,
                    "memory_mib": g.maxmem_gib * 1024,
                    "cores": 2,
                    "cloudinit": {"user": "admin", "password": format!("demo-{}-pw", g.vmid)},
                }))
            }
            "start_guest" | "stop_guest" => {
                let (node, vmid) = (online_node(args)?, vmid(args));
                let start = tool == "start_guest";
                let mut guests = self.guests.lock().unwrap();
                let g = guests
                    .iter_mut()
                    .find(|g| g.node == node && g.vmid == vmid)
                    .ok_or_else(|| no_guest(node, vmid))?;
                g.running = start;
                Ok(json!({"vmid": vmid, "status": if start { "running" } else { "stopped" }}))
            }
            "delete_guest" => {
                let (node, vmid) = (online_node(args)?, vmid(args));
                let mut guests = self.guests.lock().unwrap();
                let before = guests.len();
                guests.retain(|g| !(g.node == node && g.vmid == vmid));
                if guests.len() == before {
                    return Err(no_guest(node, vmid));
                }
                Ok(json!({"vmid": vmid, "deleted": true}))
            }
            "guest_console" => Err(BackendError::new("unavailable", "the demo fleet has no consoles")),
            other => Err(BackendError::new("not_found", format!("the demo fleet has no tool `{other}`"))),
        }
    }
}

#[async_trait]
impl Backend for DemoFleet {
    fn id(&self) -> &str {
        "demo"
    }

    fn tools(&self) -> Vec<ToolSpec> {
        specs()
    }

    async fn call(
        &self,
        _caller: &crate::gateway::Caller,
        tool: &ToolSpec,
        args: Value,
    ) -> Result<Reply, BackendError> {
        // tokio's timer has 1 ms granularity: even a zero sleep would
        // wait for the next tick.
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        self.answer(&tool.name, &args).map(Reply::new)
    }
}

fn render(g: &Guest) -> Value {
    json!({
        "node": g.node,
        "vmid": g.vmid,
        "name": g.name,
        "type": g.kind,
        "status": if g.running { "running" } else { "stopped" },
        "maxmem": g.maxmem_gib << 30,
    })
}

fn online_node(args: &Value) -> Result<&'static str, BackendError> {
    let name = args.get("node").and_then(Value::as_str).unwrap_or_default();
    match NODES.iter().find(|(n, _)| *n == name) {
        Some((n, true)) => Ok(n),
        Some((n, false)) => Err(BackendError::new(
            "unavailable",
            format!("node {n} is offline"),
        )),
        None => Err(BackendError::new(
            "not_found",
            format!("no node `{name}`; nodes are pve1, pve2, pve3"),
        )),
    }
}

/// Validation already guaranteed an integer in range.
fn vmid(args: &Value) -> u32 {
    args.get("vmid").and_then(Value::as_u64).unwrap_or(0) as u32
}

fn no_guest(node: &str, vmid: u32) -> BackendError {
    BackendError::new("not_found", format!("no guest {vmid} on {node}"))
}

fn find<'a>(guests: &'a [Guest], node: &str, vmid: u32) -> Result<&'a Guest, BackendError> {
    guests
        .iter()
        .find(|g| g.node == node && g.vmid == vmid)
        .ok_or_else(|| no_guest(node, vmid))
}

fn spec(name: &str, tier: Tier, summary: &str, description: &str, params: &[&str]) -> ToolSpec {
    let mut properties = serde_json::Map::new();
    for p in params {
        let schema = match *p {
            "node" => {
                json!({"type": "string", "description": "Node name, e.g. pve1 (see list_nodes).", "pattern": "^[a-zA-Z0-9-]+$"})
            }
            "vmid" => {
                json!({"type": "integer", "minimum": 100, "maximum": 999999999, "description": "Guest id, e.g. 100."})
            }
            _ => json!({"type": "string"}),
        };
        properties.insert(p.to_string(), schema);
    }
    ToolSpec {
        name: name.into(),
        summary: summary.into(),
        description: format!(
            "{description} (Demo backend: an in-memory fleet, not a Proxmox cluster.)"
        ),
        input_schema: json!({"type": "object", "properties": properties, "required": params, "additionalProperties": false}),
        output_schema: None,
        tier,
        hints: Hints::for_tier(tier),
        backend: "demo".into(),
        path_params: params.iter().map(|p| p.to_string()).collect(),
    }
}

/// The demo fleet's tools, one of each tier.
pub fn specs() -> Vec<ToolSpec> {
    vec![
        spec("list_nodes", Tier::Read, "List the nodes of the fleet with their status (online/offline).", "Every node, online or not.", &[]),
        spec(
            "list_guests",
            Tier::Read,
            "List the guests (VMs and containers) on a node with their status and memory.",
            "Each guest has node, vmid, name, type (qemu or lxc), status (running or stopped) and maxmem in bytes.",
            &["node"],
        ),
        spec("guest_status", Tier::Read, "Current status of one guest (VM or container).", "Same fields as list_guests, for one guest.", &["node", "vmid"]),
        spec(
            "guest_config",
            Tier::Read,
            "Configuration of one guest: memory, cores, cloud-init user.",
            "Secrets in the configuration (passwords) are redacted by the gateway.",
            &["node", "vmid"],
        ),
        spec("start_guest", Tier::Operate, "Start (power on) a stopped guest.", "Starts the VM or container.", &["node", "vmid"]),
        spec("stop_guest", Tier::Operate, "Stop (power off) a running guest.", "Stops the VM or container at once.", &["node", "vmid"]),
        spec("delete_guest", Tier::Admin, "Delete (destroy) a guest and its disks.", "Removes the VM or container for good.", &["node", "vmid"]),
        spec("guest_console", Tier::Forbidden, "Open an interactive console on a guest.", "Consoles are never offered to agents.", &["node", "vmid"]),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_and_changes_state() {
        let fleet = DemoFleet::new(Duration::ZERO);
        assert_eq!(
            fleet
                .answer("list_nodes", &json!({}))
                .unwrap()
                .as_array()
                .unwrap()
                .len(),
            3
        );
        assert_eq!(
            fleet
                .answer("list_guests", &json!({"node": "pve1"}))
                .unwrap()
                .as_array()
                .unwrap()
                .len(),
            5
        );
        assert_eq!(
            fleet
                .answer("list_guests", &json!({"node": "pve3"}))
                .unwrap_err()
                .code,
            "unavailable"
        );
        let a = json!({"node": "pve1", "vmid": 101});
        assert_eq!(
            fleet.answer("guest_status", &a).unwrap()["status"],
            "stopped"
        );
        fleet.answer("start_guest", &a).unwrap();
        assert_eq!(
            fleet.answer("guest_status", &a).unwrap()["status"],
            "running"
        );
        fleet.answer("delete_guest", &a).unwrap();
        assert_eq!(
            fleet.answer("guest_status", &a).unwrap_err().code,
            "not_found"
        );
    }

    #[test]
    fn one_tool_of_every_tier() {
        let tiers: Vec<Tier> = specs().iter().map(|s| s.tier).collect();
        for t in Tier::ALL {
            assert!(tiers.contains(&t), "{t}");
        }
    }
}
