//! The demo tool host: a small in-memory fleet (3 nodes, 12 guests) that
//! answers after a simulated 20 ms round trip. It exists so `airlock exec`
//! and `airlock demo` work with no configuration until the Proxmox gateway
//! lands; it is not a Proxmox backend and says so in `--help`.

use std::{sync::Mutex, time::Duration};

use airlock_sandbox::{ToolCall, ToolFailure, ToolHost};
use async_trait::async_trait;
use serde_json::{json, Value};

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

pub const TOOLS: &str = "list_nodes({}), list_guests({node}), guest_status({node, vmid}), start_guest({node, vmid}), stop_guest({node, vmid})";

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

    fn call_now(&self, call: &ToolCall) -> Result<Value, ToolFailure> {
        let args = &call.args;
        match call.name.as_str() {
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
                let (node, vmid) = (online_node(args)?, vmid(args)?);
                let guests = self.guests.lock().unwrap();
                find(&guests, node, vmid).map(render)
            }
            "start_guest" | "stop_guest" => {
                let (node, vmid) = (online_node(args)?, vmid(args)?);
                let start = call.name == "start_guest";
                let mut guests = self.guests.lock().unwrap();
                let idx = guests
                    .iter()
                    .position(|g| g.node == node && g.vmid == vmid)
                    .ok_or_else(|| no_guest(node, vmid))?;
                guests[idx].running = start;
                Ok(json!({"vmid": vmid, "status": if start { "running" } else { "stopped" }}))
            }
            other => Err(ToolFailure::new(
                "not_found",
                format!("no tool named `{other}` in the demo fleet; it has {TOOLS}"),
            )),
        }
    }
}

#[async_trait]
impl ToolHost for DemoFleet {
    async fn call(&self, call: ToolCall) -> Result<Value, ToolFailure> {
        tokio::time::sleep(self.latency).await;
        self.call_now(&call)
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

fn invalid(message: String) -> ToolFailure {
    ToolFailure::new("invalid_arguments", message)
}

fn online_node(args: &Value) -> Result<&'static str, ToolFailure> {
    let name = args
        .get("node")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("`node` (a string such as \"pve1\") is required".into()))?;
    match NODES.iter().find(|(n, _)| *n == name) {
        Some((n, true)) => Ok(n),
        Some((n, false)) => Err(ToolFailure::new(
            "unavailable",
            format!("node {n} is offline"),
        )),
        None => Err(invalid(format!(
            "unknown node `{name}`; nodes are pve1, pve2, pve3"
        ))),
    }
}

fn vmid(args: &Value) -> Result<u32, ToolFailure> {
    args.get("vmid")
        .and_then(Value::as_u64)
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| invalid("`vmid` (a positive integer) is required".into()))
}

fn no_guest(node: &str, vmid: u32) -> ToolFailure {
    ToolFailure::new("not_found", format!("no guest {vmid} on {node}"))
}

fn find<'a>(guests: &'a [Guest], node: &str, vmid: u32) -> Result<&'a Guest, ToolFailure> {
    guests
        .iter()
        .find(|g| g.node == node && g.vmid == vmid)
        .ok_or_else(|| no_guest(node, vmid))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, args: Value) -> Result<Value, ToolFailure> {
        DemoFleet::new(Duration::ZERO).call_now(&ToolCall {
            name: name.into(),
            args,
        })
    }

    #[test]
    fn lists_and_validates() {
        assert_eq!(
            call("list_nodes", json!({}))
                .unwrap()
                .as_array()
                .unwrap()
                .len(),
            3
        );
        assert_eq!(
            call("list_guests", json!({"node": "pve1"}))
                .unwrap()
                .as_array()
                .unwrap()
                .len(),
            5
        );
        assert_eq!(
            call("list_guests", json!({})).unwrap_err().code,
            "invalid_arguments"
        );
        assert_eq!(
            call("list_guests", json!({"node": "pve3"}))
                .unwrap_err()
                .code,
            "unavailable"
        );
        assert_eq!(
            call("guest_status", json!({"node": "pve1", "vmid": 999}))
                .unwrap_err()
                .code,
            "not_found"
        );
        assert!(call("nope", json!({}))
            .unwrap_err()
            .message
            .contains("list_guests"));
    }

    #[test]
    fn start_changes_state() {
        let fleet = DemoFleet::new(Duration::ZERO);
        let c = |name: &str| ToolCall {
            name: name.into(),
            args: json!({"node": "pve1", "vmid": 101}),
        };
        assert_eq!(
            fleet.call_now(&c("guest_status")).unwrap()["status"],
            "stopped"
        );
        fleet.call_now(&c("start_guest")).unwrap();
        assert_eq!(
            fleet.call_now(&c("guest_status")).unwrap()["status"],
            "running"
        );
    }
}
