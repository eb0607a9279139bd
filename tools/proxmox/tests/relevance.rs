//! Search relevance: natural-language queries an operator or agent types,
//! and the tools that must be in the top 3. The catalog here is shaped like
//! Airlock's Proxmox catalog (names, summaries, parameters).

use airlock_catalog::{
    search::Query,
    spec::{Hints, Tier, ToolSpec},
    Catalog,
};
use serde_json::{json, Map, Value};

const CATALOG: &[(&str, Tier, &str, &[&str])] = &[
    (
        "cluster_status",
        Tier::Read,
        "Cluster membership and quorum: nodes, votes, whether the cluster is quorate.",
        &[],
    ),
    (
        "cluster_resources",
        Tier::Read,
        "Every VM, container, storage and node in the cluster with status and usage, in one list.",
        &["type"],
    ),
    (
        "cluster_tasks",
        Tier::Read,
        "Recent tasks across the whole cluster (who ran what, with status).",
        &[],
    ),
    (
        "cluster_log",
        Tier::Read,
        "Recent cluster log entries.",
        &["max"],
    ),
    (
        "version",
        Tier::Read,
        "Proxmox VE version of the API server.",
        &[],
    ),
    (
        "node_list",
        Tier::Read,
        "List cluster nodes with online/offline status, CPU and memory usage.",
        &[],
    ),
    (
        "node_status",
        Tier::Read,
        "One node's status and current usage: uptime, load, CPU, memory, kernel and PVE version.",
        &["node"],
    ),
    (
        "node_services",
        Tier::Read,
        "System services on a node (pveproxy, corosync, ...) and whether they run.",
        &["node"],
    ),
    (
        "node_tasks",
        Tier::Read,
        "Tasks on a node, newest first, filterable by type, status and guest.",
        &["node", "vmid", "typefilter", "errors"],
    ),
    (
        "node_network",
        Tier::Read,
        "Network interfaces and bridges configured on a node.",
        &["node", "type"],
    ),
    (
        "node_disks",
        Tier::Read,
        "Physical disks of a node with size, model, health (SMART) and usage.",
        &["node"],
    ),
    (
        "node_rrd",
        Tier::Read,
        "Usage history of a node (CPU, memory, network, load) for graphs.",
        &["node", "timeframe"],
    ),
    (
        "vm_list",
        Tier::Read,
        "List QEMU virtual machines on a node with status, CPU, memory and uptime.",
        &["node"],
    ),
    (
        "vm_status",
        Tier::Read,
        "Current status of a VM: running or stopped, uptime, CPU and memory use.",
        &["node", "vmid"],
    ),
    (
        "vm_config",
        Tier::Read,
        "Configuration of a VM: CPU, memory, disks, network cards, boot order.",
        &["node", "vmid"],
    ),
    (
        "vm_rrd",
        Tier::Read,
        "Usage history of a VM (CPU, memory, disk and network I/O).",
        &["node", "vmid", "timeframe"],
    ),
    (
        "vm_start",
        Tier::Operate,
        "Start (power on) a VM.",
        &["node", "vmid"],
    ),
    (
        "vm_stop",
        Tier::Operate,
        "Stop a VM at once, like pulling the plug.",
        &["node", "vmid"],
    ),
    (
        "vm_shutdown",
        Tier::Operate,
        "Shut a VM down gracefully through ACPI or the guest agent.",
        &["node", "vmid", "timeout"],
    ),
    (
        "vm_reboot",
        Tier::Operate,
        "Reboot a VM (graceful restart).",
        &["node", "vmid"],
    ),
    (
        "vm_reset",
        Tier::Operate,
        "Reset a VM (hard restart without shutdown).",
        &["node", "vmid"],
    ),
    (
        "vm_suspend",
        Tier::Operate,
        "Suspend (pause) a VM.",
        &["node", "vmid"],
    ),
    (
        "vm_resume",
        Tier::Operate,
        "Resume a suspended VM.",
        &["node", "vmid"],
    ),
    (
        "vm_clone",
        Tier::Admin,
        "Clone a VM or template into a new VM.",
        &["node", "vmid", "newid", "name", "full"],
    ),
    (
        "vm_create",
        Tier::Admin,
        "Create a new VM.",
        &["node", "vmid", "name", "memory", "cores", "ostype"],
    ),
    (
        "vm_delete",
        Tier::Admin,
        "Delete (destroy) a VM and its disks.",
        &["node", "vmid", "purge"],
    ),
    (
        "vm_migrate",
        Tier::Admin,
        "Migrate a VM to another node, online or offline.",
        &["node", "vmid", "target", "online"],
    ),
    (
        "vm_resize_disk",
        Tier::Admin,
        "Grow a VM disk to a new size.",
        &["node", "vmid", "disk", "size"],
    ),
    (
        "vm_config_update",
        Tier::Admin,
        "Change a VM's configuration: memory, cores, network, options.",
        &["node", "vmid", "memory", "cores", "description"],
    ),
    (
        "vm_snapshot_list",
        Tier::Read,
        "List the snapshots of a VM.",
        &["node", "vmid"],
    ),
    (
        "vm_snapshot_create",
        Tier::Admin,
        "Take a snapshot of a VM.",
        &["node", "vmid", "snapname", "vmstate"],
    ),
    (
        "vm_snapshot_rollback",
        Tier::Admin,
        "Roll a VM back to a snapshot.",
        &["node", "vmid", "snapname"],
    ),
    (
        "vm_snapshot_delete",
        Tier::Admin,
        "Delete a snapshot of a VM.",
        &["node", "vmid", "snapname"],
    ),
    (
        "vm_agent_exec",
        Tier::Forbidden,
        "Run a command inside a VM through the QEMU guest agent.",
        &["node", "vmid", "command"],
    ),
    (
        "vm_vnc_console",
        Tier::Forbidden,
        "Open a VNC console to a VM.",
        &["node", "vmid"],
    ),
    (
        "ct_list",
        Tier::Read,
        "List LXC containers on a node with status, CPU, memory and uptime.",
        &["node"],
    ),
    (
        "ct_status",
        Tier::Read,
        "Current status of a container: running or stopped, uptime, usage.",
        &["node", "vmid"],
    ),
    (
        "ct_config",
        Tier::Read,
        "Configuration of a container: cores, memory, rootfs, mount points, network.",
        &["node", "vmid"],
    ),
    (
        "ct_start",
        Tier::Operate,
        "Start a container.",
        &["node", "vmid"],
    ),
    (
        "ct_stop",
        Tier::Operate,
        "Stop a container at once.",
        &["node", "vmid"],
    ),
    (
        "ct_shutdown",
        Tier::Operate,
        "Shut a container down gracefully.",
        &["node", "vmid", "timeout"],
    ),
    (
        "ct_reboot",
        Tier::Operate,
        "Reboot a container.",
        &["node", "vmid"],
    ),
    (
        "ct_clone",
        Tier::Admin,
        "Clone a container.",
        &["node", "vmid", "newid", "hostname"],
    ),
    (
        "ct_create",
        Tier::Admin,
        "Create a new container from a template.",
        &["node", "vmid", "ostemplate", "hostname", "memory"],
    ),
    (
        "ct_delete",
        Tier::Admin,
        "Delete (destroy) a container.",
        &["node", "vmid", "purge"],
    ),
    (
        "ct_migrate",
        Tier::Admin,
        "Migrate a container to another node.",
        &["node", "vmid", "target", "restart"],
    ),
    (
        "ct_resize_disk",
        Tier::Admin,
        "Grow a container's root or mount point volume.",
        &["node", "vmid", "disk", "size"],
    ),
    (
        "ct_snapshot_list",
        Tier::Read,
        "List the snapshots of a container.",
        &["node", "vmid"],
    ),
    (
        "ct_snapshot_create",
        Tier::Admin,
        "Take a snapshot of a container.",
        &["node", "vmid", "snapname"],
    ),
    (
        "ct_snapshot_rollback",
        Tier::Admin,
        "Roll a container back to a snapshot.",
        &["node", "vmid", "snapname"],
    ),
    (
        "storage_list",
        Tier::Read,
        "Storages available on a node with type, content types and space used.",
        &["node"],
    ),
    (
        "storage_status",
        Tier::Read,
        "Capacity and usage of one storage on a node.",
        &["node", "storage"],
    ),
    (
        "storage_content",
        Tier::Read,
        "Volumes on a storage: disk images, ISO images, templates and backups.",
        &["node", "storage", "content"],
    ),
    (
        "backup_create",
        Tier::Admin,
        "Back up guests with vzdump to a storage.",
        &["node", "vmid", "storage", "mode", "compress"],
    ),
    (
        "backup_list",
        Tier::Read,
        "Backup archives on a storage, optionally for one guest.",
        &["node", "storage", "vmid"],
    ),
    (
        "backup_restore",
        Tier::Admin,
        "Restore a VM or container from a backup archive.",
        &["node", "vmid", "archive", "storage"],
    ),
    (
        "backup_jobs",
        Tier::Read,
        "Scheduled backup jobs of the cluster.",
        &[],
    ),
    (
        "pool_list",
        Tier::Read,
        "Resource pools of the cluster.",
        &[],
    ),
    (
        "pool_members",
        Tier::Read,
        "Guests and storages in a resource pool.",
        &["poolid"],
    ),
    (
        "ha_status",
        Tier::Read,
        "High-availability manager status and the state of each HA resource.",
        &[],
    ),
    (
        "ha_resources",
        Tier::Read,
        "Guests managed by HA with their desired state and group.",
        &[],
    ),
    (
        "firewall_cluster_rules",
        Tier::Read,
        "Cluster-wide firewall rules.",
        &[],
    ),
    (
        "firewall_vm_rules",
        Tier::Read,
        "Firewall rules of one VM.",
        &["node", "vmid"],
    ),
    (
        "task_status",
        Tier::Read,
        "Status of a task by UPID: running, or stopped with its exit status.",
        &["node", "upid"],
    ),
    (
        "task_log",
        Tier::Read,
        "Log lines of a task by UPID.",
        &["node", "upid", "start", "limit"],
    ),
    (
        "wait_task",
        Tier::Read,
        "Wait until a task finishes and return its exit status and log tail.",
        &["node", "upid", "timeout"],
    ),
    ("user_list", Tier::Forbidden, "List user accounts.", &[]),
    (
        "token_create",
        Tier::Forbidden,
        "Create an API token for a user.",
        &["userid", "tokenid"],
    ),
    (
        "node_reboot",
        Tier::Forbidden,
        "Reboot a whole node.",
        &["node"],
    ),
];

fn catalog() -> Catalog {
    let specs = CATALOG
        .iter()
        .map(|(name, tier, summary, params)| {
            let props: Map<String, Value> = params
                .iter()
                .map(|p| (p.to_string(), json!({"type": "string"})))
                .collect();
            ToolSpec {
                name: name.to_string(),
                summary: summary.to_string(),
                description: String::new(),
                input_schema: json!({"type": "object", "properties": props}),
                output_schema: None,
                tier: *tier,
                hints: Hints::for_tier(*tier),
                backend: "pve".into(),
                path_params: vec![],
                endpoint: None,
                keywords: String::new(),
                key: String::new(),
                aliases: Vec::new(),
            }
        })
        .collect();
    Catalog::build(vec![("pve".into(), specs)]).unwrap().0
}

/// (query, tools that must all be in the top 3)
const CASES: &[(&str, &[&str])] = &[
    ("start vm", &["vm_start"]),
    ("power on a virtual machine", &["vm_start"]),
    ("boot qemu guest", &["vm_start"]),
    ("stop vm", &["vm_stop"]),
    ("shut down vm gracefully", &["vm_shutdown"]),
    ("reboot vm", &["vm_reboot"]),
    ("restart the qemu machine", &["vm_reboot"]),
    ("hard reset vm", &["vm_reset"]),
    ("pause vm", &["vm_suspend"]),
    ("resume suspended vm", &["vm_resume"]),
    ("which containers are stopped", &["ct_list"]),
    ("list containers", &["ct_list"]),
    ("list lxc", &["ct_list"]),
    ("start container", &["ct_start"]),
    ("restart ct", &["ct_reboot"]),
    ("delete vm", &["vm_delete"]),
    ("destroy container", &["ct_delete"]),
    ("remove a virtual machine", &["vm_delete"]),
    ("clone vm", &["vm_clone"]),
    ("copy container", &["ct_clone"]),
    ("create new vm", &["vm_create"]),
    ("migrate vm to another node", &["vm_migrate"]),
    ("move container to other host", &["ct_migrate"]),
    ("grow disk of vm", &["vm_resize_disk"]),
    ("resize container volume", &["ct_resize_disk"]),
    ("take a snapshot of a vm", &["vm_snapshot_create"]),
    ("rollback vm snapshot", &["vm_snapshot_rollback"]),
    ("list snapshots of container", &["ct_snapshot_list"]),
    ("backup vm", &["backup_create"]),
    ("restore from backup", &["backup_restore"]),
    ("vzdump", &["backup_create"]),
    ("list backups", &["backup_list"]),
    ("node status", &["node_status"]),
    ("which nodes are online", &["node_list"]),
    ("cpu and memory usage of a host", &["node_status"]),
    ("vm configuration", &["vm_config"]),
    ("change vm memory", &["vm_config_update"]),
    ("storage usage", &["storage_status"]),
    ("iso images on storage", &["storage_content"]),
    ("is the cluster quorate", &["cluster_status"]),
    ("all resources in the cluster", &["cluster_resources"]),
    ("task log", &["task_log"]),
    ("wait for task to finish", &["wait_task"]),
    ("high availability status", &["ha_status"]),
    ("firewall rules for a vm", &["firewall_vm_rules"]),
    ("network interfaces of node", &["node_network"]),
    ("physical disks smart health", &["node_disks"]),
    ("resource pools", &["pool_list"]),
    ("services running on node", &["node_services"]),
    ("recent failed tasks", &["node_tasks", "cluster_tasks"]),
    ("vm_start", &["vm_start"]),
    ("proxmox version", &["version"]),
];

#[test]
fn relevance() {
    let catalog = catalog();
    let mut failures = Vec::new();
    for (query, wanted) in CASES {
        let r = catalog.search(&Query {
            text: query.to_string(),
            limit: Some(3),
            ..Query::default()
        });
        let top: Vec<&str> = r.hits.iter().map(|h| h.name.as_str()).collect();
        for w in *wanted {
            if !top.contains(w) {
                failures.push(format!("{query:?}: wanted {w} in the top 3, got {top:?}"));
            }
        }
    }
    assert!(CASES.len() >= 40);
    assert!(
        failures.is_empty(),
        "{} of {} queries failed:\n{}",
        failures.len(),
        CASES.len(),
        failures.join("\n")
    );
}

#[test]
fn useless_queries_get_guidance_not_nothing() {
    let catalog = catalog();
    for q in ["", "   ", "the and of", "zzzqqq"] {
        let r = catalog.search(&Query {
            text: q.into(),
            ..Query::default()
        });
        assert!(r.hits.is_empty(), "{q:?}");
        assert!(r.hint.as_deref().unwrap_or("").contains("e.g."), "{q:?}");
    }
}

#[test]
fn filters_and_limits() {
    let catalog = catalog();
    let r = catalog.search(&Query {
        text: "vm".into(),
        tiers: vec![Tier::Operate],
        limit: Some(5),
        ..Query::default()
    });
    assert_eq!(r.hits.len(), 5);
    assert!(r.hits.iter().all(|h| h.tier == Tier::Operate));
    let r = catalog.search(&Query {
        text: "vm".into(),
        backend: Some("quox".into()),
        ..Query::default()
    });
    assert!(r.hits.is_empty());
    let r = catalog.search(&Query {
        text: "start vm".into(),
        ..Query::default()
    });
    assert_eq!(
        r.hits[0].signature,
        "vm_start(args?: { node?: string; vmid?: string }): Promise<unknown>"
    );
}

/// The same kind of queries against the real curated Proxmox catalog.
const CURATED_CASES: &[(&str, &[&str])] = &[
    ("start vm", &["vm_start"]),
    ("power on a virtual machine", &["vm_start"]),
    ("stop vm", &["vm_stop"]),
    ("shut down vm gracefully", &["vm_shutdown"]),
    ("reboot vm", &["vm_reboot"]),
    ("restart the qemu machine", &["vm_reboot"]),
    ("hard reset vm", &["vm_reset"]),
    ("pause vm", &["vm_suspend"]),
    ("resume suspended vm", &["vm_resume"]),
    ("which containers are stopped", &["ct_list"]),
    ("list lxc containers", &["ct_list"]),
    ("start container", &["ct_start"]),
    ("restart ct", &["ct_reboot"]),
    ("delete vm", &["vm_delete"]),
    ("destroy container", &["ct_delete"]),
    ("clone vm", &["vm_clone"]),
    ("create new vm", &["vm_create"]),
    ("create a container from a template", &["ct_create"]),
    ("migrate vm to another node", &["vm_migrate"]),
    ("move container to other host", &["ct_migrate"]),
    ("grow disk of vm", &["vm_resize_disk"]),
    ("move vm disk to another storage", &["vm_move_disk"]),
    ("take a snapshot of a vm", &["vm_snapshot_create"]),
    ("rollback container snapshot", &["ct_snapshot_rollback"]),
    ("list snapshots of vm", &["vm_snapshot_list"]),
    ("backup vm now", &["backup_create"]),
    ("restore vm from backup", &["backup_restore_vm"]),
    ("list backups", &["backup_list"]),
    ("which guests have no backup", &["backup_not_covered"]),
    ("node status", &["node_status"]),
    ("which nodes are online", &["node_list"]),
    ("vm configuration", &["vm_config"]),
    ("change vm memory", &["vm_config_update"]),
    ("storage usage", &["storage_status"]),
    ("iso images on storage", &["storage_content"]),
    ("is the cluster quorate", &["cluster_status"]),
    ("all resources in the cluster", &["cluster_resources"]),
    ("wait for task to finish", &["wait_task"]),
    ("task log", &["task_log"]),
    ("high availability status", &["ha_status"]),
    ("firewall rules of a vm", &["firewall_vm_rules"]),
    ("ip address of a vm", &["vm_agent_network"]),
    ("next free vmid", &["cluster_nextid"]),
    ("disk health smart", &["node_disk_smart", "node_disks"]),
    ("recent failed tasks", &["node_tasks", "cluster_tasks"]),
    ("download iso from url", &["storage_download_url"]),
];

#[test]
fn curated_catalog_relevance() {
    use airlock_proxmox::{curated, tiers::TierRules};
    let specs = curated::tools(&TierRules::defaults(), &Default::default(), "pve")
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    let catalog = Catalog::build(vec![("pve".into(), specs)]).unwrap().0;
    let mut failures = Vec::new();
    for (query, wanted) in CURATED_CASES {
        let r = catalog.search(&Query {
            text: query.to_string(),
            limit: Some(3),
            ..Query::default()
        });
        let top: Vec<&str> = r.hits.iter().map(|h| h.name.as_str()).collect();
        for w in *wanted {
            if !top.contains(w) {
                failures.push(format!("{query:?}: wanted {w} in the top 3, got {top:?}"));
            }
        }
    }
    assert!(CURATED_CASES.len() >= 40);
    assert!(
        failures.is_empty(),
        "{} of {} queries failed:\n{}",
        failures.len(),
        CURATED_CASES.len(),
        failures.join("\n")
    );
}
