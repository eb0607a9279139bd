//! The curated catalog: the Proxmox VE operations operators use daily,
//! each with a summary an agent understands, an exact input schema (from
//! [`super::vocabulary`]) and a tier.
//!
//! Parameters are written compactly: `name` takes the vocabulary entry of
//! that name; `name=key` another entry; `name>wire` is sent to PVE under
//! another name; `name*=key` is an indexed family (`net0`, `net1`, …);
//! `~name=key` is used by Airlock itself and never sent; a trailing `!`
//! makes it required (path placeholders always are).

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use crate::{
    apidata::Method::{self, Delete, Get, Post, Put},
    route::{with_target, Route, RouteKind},
    tiers::TierRules,
    vocabulary,
};
use airlock_catalog::spec::{Hints, Tier, ToolSpec};

use Tier::{Admin, Forbidden, Operate, Read};

struct Def {
    name: &'static str,
    method: Method,
    path: &'static str,
    tier: Tier,
    summary: &'static str,
    params: &'static [&'static str],
    /// Returns a task id.
    upid: bool,
    fixed: &'static [(&'static str, &'static str)],
}

const fn d(
    name: &'static str,
    method: Method,
    path: &'static str,
    tier: Tier,
    summary: &'static str,
    params: &'static [&'static str],
) -> Def {
    Def {
        name,
        method,
        path,
        tier,
        summary,
        params,
        upid: false,
        fixed: &[],
    }
}

const fn task(
    name: &'static str,
    method: Method,
    path: &'static str,
    tier: Tier,
    summary: &'static str,
    params: &'static [&'static str],
) -> Def {
    Def {
        name,
        method,
        path,
        tier,
        summary,
        params,
        upid: true,
        fixed: &[],
    }
}

const NODE_VMID: &[&str] = &["node", "vmid"];

/// The table. Order is the order of listing.
const DEFS: &[Def] = &[
    // Cluster
    d("cluster_status", Get, "/cluster/status", Read, "Cluster membership and quorum: nodes, whether they are online, whether the cluster is quorate.", &[]),
    d("cluster_resources", Get, "/cluster/resources", Read, "Every VM, container, storage and node in the cluster with status and CPU/memory/disk usage, in one list.", &["type=resources_type"]),
    d("cluster_tasks", Get, "/cluster/tasks", Read, "Recent tasks across the whole cluster: who started what, when, and whether it succeeded.", &[]),
    d("cluster_log", Get, "/cluster/log", Read, "Recent cluster log entries.", &["max=log_max"]),
    d("cluster_options", Get, "/cluster/options", Read, "Datacenter-wide options (keyboard, migration network, default console, ...).", &[]),
    d("cluster_nextid", Get, "/cluster/nextid", Read, "The next free guest id, for creating or cloning a VM or container.", &["vmid=vmid_filter"]),
    d("version", Get, "/version", Read, "Proxmox VE version and release of the API server.", &[]),
    // HA
    d("ha_status", Get, "/cluster/ha/status/current", Read, "High-availability manager status and the state of every HA resource.", &[]),
    d("ha_resources", Get, "/cluster/ha/resources", Read, "Guests managed by HA with their requested state.", &["type=ha_type"]),
    d("ha_resource", Get, "/cluster/ha/resources/{sid}", Read, "One HA resource's configuration.", &["sid"]),
    d("ha_groups", Get, "/cluster/ha/groups", Read, "HA groups (which nodes a resource may run on).", &[]),
    d("ha_rules", Get, "/cluster/ha/rules", Read, "HA rules (node and resource affinity).", &[]),
    // Pools
    d("pool_list", Get, "/pools", Read, "Resource pools of the cluster.", &[]),
    d("pool_get", Get, "/pools/{poolid}", Read, "Members of one resource pool: guests and storages.", &["poolid"]),
    // Firewall (read)
    d("firewall_cluster_rules", Get, "/cluster/firewall/rules", Read, "Cluster-wide firewall rules.", &[]),
    d("firewall_cluster_options", Get, "/cluster/firewall/options", Read, "Cluster firewall options: enabled, default policies.", &[]),
    d("firewall_groups", Get, "/cluster/firewall/groups", Read, "Firewall security groups.", &[]),
    d("firewall_ipsets", Get, "/cluster/firewall/ipset", Read, "Firewall IP sets.", &[]),
    d("firewall_aliases", Get, "/cluster/firewall/aliases", Read, "Firewall aliases (named addresses).", &[]),
    d("firewall_node_rules", Get, "/nodes/{node}/firewall/rules", Read, "Firewall rules of a node.", &["node"]),
    d("firewall_vm_rules", Get, "/nodes/{node}/qemu/{vmid}/firewall/rules", Read, "Firewall rules of a VM.", NODE_VMID),
    d("firewall_vm_options", Get, "/nodes/{node}/qemu/{vmid}/firewall/options", Read, "Firewall options of a VM: enabled, policies, MAC/IP filters.", NODE_VMID),
    d("firewall_ct_rules", Get, "/nodes/{node}/lxc/{vmid}/firewall/rules", Read, "Firewall rules of a container.", NODE_VMID),
    // Nodes
    d("node_list", Get, "/nodes", Read, "List cluster nodes with online/offline status, CPU, memory and uptime.", &[]),
    d("node_status", Get, "/nodes/{node}/status", Read, "One node's status and current usage: uptime, load, CPU, memory, swap, kernel and PVE version.", &["node"]),
    d("node_services", Get, "/nodes/{node}/services", Read, "System services on a node (pveproxy, corosync, ...) and whether they are running.", &["node"]),
    d("node_service_state", Get, "/nodes/{node}/services/{service}/state", Read, "State of one system service on a node.", &["node", "service"]),
    d("node_tasks", Get, "/nodes/{node}/tasks", Read, "Tasks on a node, newest first, filterable by guest, type, status and time (recent, failed or running tasks).", &["node", "vmid=vmid_filter", "limit=tasks_limit", "start=start_offset", "errors", "typefilter", "statusfilter", "source", "since=since_epoch", "until=until_epoch", "userfilter"]),
    d("node_network", Get, "/nodes/{node}/network", Read, "Network interfaces, bridges and bonds configured on a node.", &["node", "type=network_type"]),
    d("node_disks", Get, "/nodes/{node}/disks/list", Read, "Physical disks of a node with size, model, wearout and SMART health.", &["node", "include-partitions=include_partitions", "skipsmart"]),
    d("node_disk_smart", Get, "/nodes/{node}/disks/smart", Read, "SMART health and attributes of one disk of a node.", &["node", "disk=device!", "healthonly"]),
    d("node_zfs_pools", Get, "/nodes/{node}/disks/zfs", Read, "ZFS pools on a node with size, free space and health.", &["node"]),
    d("node_lvm", Get, "/nodes/{node}/disks/lvm", Read, "LVM volume groups on a node.", &["node"]),
    d("node_rrd", Get, "/nodes/{node}/rrddata", Read, "Usage history of a node (CPU, memory, network, load) over a period, for trends and graphs.", &["node", "timeframe!", "cf"]),
    d("node_version", Get, "/nodes/{node}/version", Read, "PVE version running on a node.", &["node"]),
    d("node_time", Get, "/nodes/{node}/time", Read, "Time and time zone of a node.", &["node"]),
    d("node_dns", Get, "/nodes/{node}/dns", Read, "DNS settings of a node.", &["node"]),
    d("node_subscription", Get, "/nodes/{node}/subscription", Read, "Subscription status of a node.", &["node"]),
    d("node_apt_updates", Get, "/nodes/{node}/apt/update", Read, "Package updates available on a node.", &["node"]),
    d("node_pci_devices", Get, "/nodes/{node}/hardware/pci", Read, "PCI devices of a node (for passthrough).", &["node", "verbose"]),
    d("node_netstat", Get, "/nodes/{node}/netstat", Read, "Network traffic counters of the guests' interfaces on a node.", &["node"]),
    d("node_replication", Get, "/nodes/{node}/replication", Read, "Storage replication jobs on a node with their last sync and status.", &["node", "guest"]),
    d("node_syslog", Get, "/nodes/{node}/syslog", Read, "System log lines of a node.", &["node", "limit=lines_limit", "start=start_offset", "since=since_date", "until=until_date", "service=journal_service"]),
    d("node_journal", Get, "/nodes/{node}/journal", Read, "Systemd journal of a node.", &["node", "lastentries", "since=since_epoch", "until=until_epoch"]),
    d("node_reboot", Post, "/nodes/{node}/status", Forbidden, "Reboot or shut down a whole node (host power).", &["node", "command!"]),
    d("node_network_update", Put, "/nodes/{node}/network/{iface}", Forbidden, "Change a host network interface.", &["node", "iface", "type=iface_type!", "address=ipv4", "netmask=ipv4_mask", "gateway=ipv4", "bridge_ports", "comments", "autostart"]),
    d("node_shell", Post, "/nodes/{node}/termproxy", Forbidden, "Open a root shell on a node.", &["node", "cmd=shell_cmd"]),
    d("node_service_restart", Post, "/nodes/{node}/services/{service}/restart", Forbidden, "Restart a system service on a node.", &["node", "service"]),
    // Tasks
    d("task_status", Get, "/nodes/{node}/tasks/{upid}/status", Read, "Status of a task by its UPID: running, or stopped with its exit status.", &["node", "upid"]),
    d("task_log", Get, "/nodes/{node}/tasks/{upid}/log", Read, "Log lines of a task by its UPID.", &["node", "upid", "start=start_offset", "limit=lines_limit"]),
    d("task_stop", Delete, "/nodes/{node}/tasks/{upid}", Operate, "Stop (abort) a running task.", &["node", "upid"]),
    Def { name: "wait_task", method: Get, path: "/nodes/{node}/tasks/{upid}/status", tier: Read, summary: "Wait until a task finishes; returns its exit status (OK, WARNINGS: n, or the error) and the end of its log.", params: &["node", "upid", "~timeout=wait_timeout", "~log_lines=log_tail"], upid: false, fixed: &[] },
    // QEMU virtual machines
    d("vm_list", Get, "/nodes/{node}/qemu", Read, "List the QEMU virtual machines on a node with status (running/stopped), CPU, memory and uptime.", &["node", "full=list_full"]),
    d("vm_status", Get, "/nodes/{node}/qemu/{vmid}/status/current", Read, "Current status of a VM: running or stopped, uptime, CPU, memory, disk and network use.", NODE_VMID),
    d("vm_config", Get, "/nodes/{node}/qemu/{vmid}/config", Read, "Configuration of a VM: CPU, memory, disks, network cards, boot order, options.", &["node", "vmid", "current=config_current", "snapshot=config_snapshot"]),
    d("vm_pending", Get, "/nodes/{node}/qemu/{vmid}/pending", Read, "Configuration changes of a VM that wait for a restart.", NODE_VMID),
    d("vm_rrd", Get, "/nodes/{node}/qemu/{vmid}/rrddata", Read, "Usage history of a VM (CPU, memory, disk and network I/O) over a period.", &["node", "vmid", "timeframe!", "cf"]),
    task("vm_start", Post, "/nodes/{node}/qemu/{vmid}/status/start", Operate, "Start (power on, boot) a VM.", &["node", "vmid", "timeout", "skiplock"]),
    task("vm_stop", Post, "/nodes/{node}/qemu/{vmid}/status/stop", Operate, "Stop a VM at once, like pulling the plug (use vm_shutdown for a clean shutdown).", &["node", "vmid", "timeout", "skiplock", "keepActive=keep_active", "overrule-shutdown=overrule_shutdown"]),
    task("vm_shutdown", Post, "/nodes/{node}/qemu/{vmid}/status/shutdown", Operate, "Shut a VM down gracefully (ACPI or guest agent), optionally forcing a stop after a timeout.", &["node", "vmid", "timeout", "forceStop=force_stop", "keepActive=keep_active", "skiplock"]),
    task("vm_reboot", Post, "/nodes/{node}/qemu/{vmid}/status/reboot", Operate, "Reboot (restart) a VM gracefully.", &["node", "vmid", "timeout"]),
    task("vm_reset", Post, "/nodes/{node}/qemu/{vmid}/status/reset", Operate, "Reset a VM: a hard restart without shutting down.", &["node", "vmid", "skiplock"]),
    task("vm_suspend", Post, "/nodes/{node}/qemu/{vmid}/status/suspend", Operate, "Suspend (pause) a VM, or hibernate it to disk.", &["node", "vmid", "todisk", "statestorage=storage", "skiplock"]),
    task("vm_resume", Post, "/nodes/{node}/qemu/{vmid}/status/resume", Operate, "Resume a suspended (paused) VM.", &["node", "vmid", "skiplock", "nocheck"]),
    task("vm_clone", Post, "/nodes/{node}/qemu/{vmid}/clone", Admin, "Clone a VM or template into a new VM.", &["node", "vmid", "newid!", "name", "description", "full", "pool", "snapname", "storage=target_storage", "target_node>target", "format=disk_format", "bwlimit"]),
    task("vm_create", Post, "/nodes/{node}/qemu", Admin, "Create a new VM.", &["node", "vmid!", "name", "memory=qm_memory", "balloon", "cores", "sockets", "cpu", "ostype", "scsihw", "boot", "agent", "scsi*=qm_disk_family", "virtio*=qm_disk_family", "sata*=qm_disk_family", "ide*=qm_disk_family", "net*=qm_net_family", "onboot", "start", "pool", "description", "tags", "protection", "startup"]),
    task("vm_delete", Delete, "/nodes/{node}/qemu/{vmid}", Admin, "Delete (destroy, remove) a VM and its disks.", &["node", "vmid", "purge", "destroy-unreferenced-disks=destroy_unreferenced_disks", "skiplock"]),
    task("vm_migrate", Post, "/nodes/{node}/qemu/{vmid}/migrate", Admin, "Migrate (move) a VM to another node, online or offline.", &["node", "vmid", "target_node>target!", "online", "with-local-disks=with_local_disks", "targetstorage=storage_pairs", "bwlimit", "force"]),
    d("vm_migrate_check", Get, "/nodes/{node}/qemu/{vmid}/migrate", Read, "Check whether a VM can be migrated and to which nodes (local disks, resources).", &["node", "vmid", "target_node>target"]),
    task("vm_resize_disk", Put, "/nodes/{node}/qemu/{vmid}/resize", Admin, "Grow (resize, extend) a VM disk, e.g. by +10G.", &["node", "vmid", "disk=qm_disk!", "size!", "digest", "skiplock"]),
    task("vm_move_disk", Post, "/nodes/{node}/qemu/{vmid}/move_disk", Admin, "Move a VM disk to another storage (or another VM).", &["node", "vmid", "disk=qm_disk!", "storage=target_storage", "format=disk_format", "delete=delete_source", "target-vmid=target_vmid", "target-disk=qm_disk", "bwlimit"]),
    task("vm_config_update", Post, "/nodes/{node}/qemu/{vmid}/config", Admin, "Change a VM's configuration: memory, cores, name, network, disks, options.", &["node", "vmid", "name", "memory=qm_memory", "balloon", "cores", "sockets", "cpu", "description", "tags", "onboot", "boot", "agent", "protection", "startup", "net*=qm_net_family", "scsi*=qm_disk_family", "virtio*=qm_disk_family", "delete=delete_keys", "digest"]),
    task("vm_template", Post, "/nodes/{node}/qemu/{vmid}/template", Admin, "Convert a VM into a template.", &["node", "vmid", "disk=qm_disk"]),
    d("vm_snapshot_list", Get, "/nodes/{node}/qemu/{vmid}/snapshot", Read, "List the snapshots of a VM.", NODE_VMID),
    task("vm_snapshot_create", Post, "/nodes/{node}/qemu/{vmid}/snapshot", Admin, "Take a snapshot of a VM (optionally with its RAM).", &["node", "vmid", "snapname!", "description", "vmstate"]),
    d("vm_snapshot_config", Get, "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}/config", Read, "Configuration of a VM as saved in a snapshot.", &["node", "vmid", "snapname"]),
    task("vm_snapshot_rollback", Post, "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}/rollback", Admin, "Roll a VM back to a snapshot (revert).", &["node", "vmid", "snapname", "start"]),
    task("vm_snapshot_delete", Delete, "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}", Admin, "Delete a snapshot of a VM.", &["node", "vmid", "snapname", "force"]),
    d("vm_feature", Get, "/nodes/{node}/qemu/{vmid}/feature", Read, "Whether a VM supports snapshot, clone or copy on its storage.", &["node", "vmid", "feature!", "snapname"]),
    d("vm_cloudinit", Get, "/nodes/{node}/qemu/{vmid}/cloudinit/dump", Read, "The cloud-init configuration generated for a VM.", &["node", "vmid", "type=cloudinit_type!"]),
    d("vm_agent_osinfo", Get, "/nodes/{node}/qemu/{vmid}/agent/get-osinfo", Read, "Operating system inside a VM, from the QEMU guest agent.", NODE_VMID),
    d("vm_agent_network", Get, "/nodes/{node}/qemu/{vmid}/agent/network-get-interfaces", Read, "IP addresses inside a VM, from the QEMU guest agent.", NODE_VMID),
    d("vm_agent_ping", Post, "/nodes/{node}/qemu/{vmid}/agent/ping", Read, "Check that the QEMU guest agent in a VM answers.", NODE_VMID),
    d("vm_agent_exec", Post, "/nodes/{node}/qemu/{vmid}/agent/exec", Forbidden, "Run a command inside a VM through the guest agent.", &["node", "vmid", "command=agent_command!"]),
    d("vm_console", Post, "/nodes/{node}/qemu/{vmid}/vncproxy", Forbidden, "Open a VNC console to a VM.", &["node", "vmid", "websocket", "generate-password=generate_password"]),
    d("vm_shell", Post, "/nodes/{node}/qemu/{vmid}/termproxy", Forbidden, "Open a serial terminal to a VM.", &["node", "vmid", "serial"]),
    // LXC containers
    d("ct_list", Get, "/nodes/{node}/lxc", Read, "List the LXC containers on a node with status (running/stopped), CPU, memory and uptime.", &["node"]),
    d("ct_status", Get, "/nodes/{node}/lxc/{vmid}/status/current", Read, "Current status of a container: running or stopped, uptime, CPU, memory and disk use.", NODE_VMID),
    d("ct_config", Get, "/nodes/{node}/lxc/{vmid}/config", Read, "Configuration of a container: cores, memory, root disk, mount points, network.", &["node", "vmid", "current=config_current", "snapshot=config_snapshot"]),
    d("ct_pending", Get, "/nodes/{node}/lxc/{vmid}/pending", Read, "Configuration changes of a container that wait for a restart.", NODE_VMID),
    d("ct_rrd", Get, "/nodes/{node}/lxc/{vmid}/rrddata", Read, "Usage history of a container over a period.", &["node", "vmid", "timeframe!", "cf"]),
    d("ct_interfaces", Get, "/nodes/{node}/lxc/{vmid}/interfaces", Read, "IP addresses of a running container.", NODE_VMID),
    task("ct_start", Post, "/nodes/{node}/lxc/{vmid}/status/start", Operate, "Start (boot) a container.", &["node", "vmid", "skiplock"]),
    task("ct_stop", Post, "/nodes/{node}/lxc/{vmid}/status/stop", Operate, "Stop a container at once (use ct_shutdown for a clean shutdown).", &["node", "vmid", "skiplock", "overrule-shutdown=overrule_shutdown"]),
    task("ct_shutdown", Post, "/nodes/{node}/lxc/{vmid}/status/shutdown", Operate, "Shut a container down gracefully, optionally forcing a stop after a timeout.", &["node", "vmid", "timeout", "forceStop=force_stop"]),
    task("ct_reboot", Post, "/nodes/{node}/lxc/{vmid}/status/reboot", Operate, "Reboot (restart) a container.", &["node", "vmid", "timeout"]),
    task("ct_suspend", Post, "/nodes/{node}/lxc/{vmid}/status/suspend", Operate, "Suspend (freeze) a container.", NODE_VMID),
    task("ct_resume", Post, "/nodes/{node}/lxc/{vmid}/status/resume", Operate, "Resume a suspended container.", NODE_VMID),
    task("ct_clone", Post, "/nodes/{node}/lxc/{vmid}/clone", Admin, "Clone a container or template into a new container.", &["node", "vmid", "newid!", "hostname", "description", "full", "pool", "snapname", "storage=target_storage", "target_node>target", "bwlimit=bwlimit_number"]),
    task("ct_create", Post, "/nodes/{node}/lxc", Admin, "Create a new container from a template.", &["node", "vmid!", "ostemplate!", "hostname", "memory=ct_memory", "swap", "cores", "cpulimit", "rootfs", "storage", "net*=ct_net_family", "mp*=ct_mp_family", "password", "ssh-public-keys=ssh_public_keys", "unprivileged", "features", "nameserver", "searchdomain", "start", "onboot", "pool", "description", "tags", "protection"]),
    task("ct_delete", Delete, "/nodes/{node}/lxc/{vmid}", Admin, "Delete (destroy, remove) a container and its volumes.", &["node", "vmid", "purge", "force", "destroy-unreferenced-disks=destroy_unreferenced_disks"]),
    task("ct_migrate", Post, "/nodes/{node}/lxc/{vmid}/migrate", Admin, "Migrate (move) a container to another node.", &["node", "vmid", "target_node>target!", "online", "restart", "timeout", "target-storage=storage_pairs", "bwlimit=bwlimit_number"]),
    task("ct_resize_disk", Put, "/nodes/{node}/lxc/{vmid}/resize", Admin, "Grow (resize, extend) a container's root or mount-point volume.", &["node", "vmid", "disk=ct_volume!", "size!", "digest"]),
    task("ct_move_volume", Post, "/nodes/{node}/lxc/{vmid}/move_volume", Admin, "Move a container volume to another storage.", &["node", "vmid", "volume=ct_volume!", "storage=target_storage", "delete=delete_source", "target-vmid=target_vmid", "target-volume=ct_volume", "bwlimit=bwlimit_number"]),
    d("ct_config_update", Put, "/nodes/{node}/lxc/{vmid}/config", Admin, "Change a container's configuration: memory, cores, hostname, network, options.", &["node", "vmid", "hostname", "memory=ct_memory", "swap", "cores", "cpulimit", "description", "tags", "onboot", "protection", "startup", "features", "nameserver", "searchdomain", "net*=ct_net_family", "mp*=ct_mp_family", "delete=delete_keys", "digest"]),
    d("ct_template", Post, "/nodes/{node}/lxc/{vmid}/template", Admin, "Convert a container into a template.", NODE_VMID),
    d("ct_snapshot_list", Get, "/nodes/{node}/lxc/{vmid}/snapshot", Read, "List the snapshots of a container.", NODE_VMID),
    task("ct_snapshot_create", Post, "/nodes/{node}/lxc/{vmid}/snapshot", Admin, "Take a snapshot of a container.", &["node", "vmid", "snapname!", "description"]),
    task("ct_snapshot_rollback", Post, "/nodes/{node}/lxc/{vmid}/snapshot/{snapname}/rollback", Admin, "Roll a container back to a snapshot (revert).", &["node", "vmid", "snapname", "start"]),
    task("ct_snapshot_delete", Delete, "/nodes/{node}/lxc/{vmid}/snapshot/{snapname}", Admin, "Delete a snapshot of a container.", &["node", "vmid", "snapname", "force"]),
    d("ct_console", Post, "/nodes/{node}/lxc/{vmid}/vncproxy", Forbidden, "Open a VNC console to a container.", &["node", "vmid", "websocket", "width", "height"]),
    d("ct_shell", Post, "/nodes/{node}/lxc/{vmid}/termproxy", Forbidden, "Open a terminal in a container.", NODE_VMID),
    // Storage
    d("storage_list", Get, "/nodes/{node}/storage", Read, "Storages available on a node with type, content types, and space used and free.", &["node", "content", "enabled", "storage", "target_node>target"]),
    d("storage_status", Get, "/nodes/{node}/storage/{storage}/status", Read, "Capacity and usage of one storage on a node.", &["node", "storage"]),
    d("storage_content", Get, "/nodes/{node}/storage/{storage}/content", Read, "Volumes on a storage: disk images, ISO images, container templates and backups.", &["node", "storage", "content", "vmid=vmid_filter"]),
    d("storage_rrd", Get, "/nodes/{node}/storage/{storage}/rrddata", Read, "Usage history of a storage over a period.", &["node", "storage", "timeframe!", "cf"]),
    d("storage_config_list", Get, "/storage", Read, "Storage definitions of the datacenter (all nodes).", &["type=storage_type"]),
    d("storage_config", Get, "/storage/{storage}", Read, "One storage definition.", &["storage"]),
    d("storage_prune_preview", Get, "/nodes/{node}/storage/{storage}/prunebackups", Read, "Which backups a retention policy would keep and remove (a dry run).", &["node", "storage", "prune-backups=prune_backups", "type=guest_type", "vmid=vmid_filter"]),
    task("storage_download_url", Post, "/nodes/{node}/storage/{storage}/download-url", Admin, "Download an ISO image or container template from a URL onto a storage.", &["node", "storage", "url!", "filename!", "content=download_content!", "checksum", "checksum-algorithm=checksum_algorithm", "verify-certificates=verify_certificates"]),
    // Backups
    task("backup_create", Post, "/nodes/{node}/vzdump", Admin, "Back up guests now with vzdump (snapshot, suspend or stop mode) to a storage.", &["node", "vmid=vmid_list", "all=backup_all", "storage", "mode=backup_mode", "compress", "notes-template=notes_template", "remove=remove_old", "protected", "pool", "exclude"]),
    Def { name: "backup_list", method: Get, path: "/nodes/{node}/storage/{storage}/content", tier: Read, summary: "Backup archives on a storage, optionally only one guest's.", params: &["node", "storage", "vmid=vmid_filter"], upid: false, fixed: &[("content", "backup")] },
    task("backup_restore_vm", Post, "/nodes/{node}/qemu", Admin, "Restore a VM from a backup archive (as a new or the same guest id).", &["node", "vmid!", "archive!", "storage", "force", "unique", "pool", "start", "bwlimit"]),
    Def { name: "backup_restore_ct", method: Post, path: "/nodes/{node}/lxc", tier: Admin, summary: "Restore a container from a backup archive.", params: &["node", "vmid!", "archive>ostemplate!", "storage", "force", "unique", "pool", "start", "bwlimit=bwlimit_number"], upid: true, fixed: &[("restore", "1")] },
    d("backup_extract_config", Get, "/nodes/{node}/vzdump/extractconfig", Read, "The guest configuration stored in a backup archive.", &["node", "volume!"]),
    d("backup_jobs", Get, "/cluster/backup", Read, "Scheduled backup jobs of the datacenter.", &[]),
    d("backup_job", Get, "/cluster/backup/{id}", Read, "One scheduled backup job.", &["id=job_id"]),
    d("backup_not_covered", Get, "/cluster/backup-info/not-backed-up", Read, "Guests that no backup job covers.", &[]),
    // Replication and metrics
    d("replication_jobs", Get, "/cluster/replication", Read, "Storage replication jobs of the cluster.", &[]),
    d("replication_status", Get, "/nodes/{node}/replication/{id}/status", Read, "Status of one replication job on a node.", &["node", "id=job_id"]),
    d("metrics_servers", Get, "/cluster/metrics/server", Read, "External metric servers (InfluxDB, Graphite) the cluster reports to.", &[]),
    // Access: never for agents
    d("user_list", Get, "/access/users", Forbidden, "List user accounts.", &[]),
    d("user_token_create", Post, "/access/users/{userid}/token/{tokenid}", Forbidden, "Create an API token.", &["userid", "tokenid", "comment", "expire", "privsep"]),
    d("acl_list", Get, "/access/acl", Forbidden, "List access control entries.", &[]),
    d("acl_update", Put, "/access/acl", Forbidden, "Grant or revoke permissions.", &["path=acl_path!", "roles!", "users", "groups", "tokens", "propagate", "delete=delete_acl"]),
    d("password_change", Put, "/access/password", Forbidden, "Change a user's password.", &["userid!", "password=new_password!"]),
];

/// One parsed parameter entry.
struct Param {
    local: String,
    wire: String,
    vocab: String,
    required: bool,
    family: bool,
    local_only: bool,
}

fn parse(entry: &str) -> Param {
    let (entry, required) = match entry.strip_suffix('!') {
        Some(e) => (e, true),
        None => (entry, false),
    };
    let (entry, local_only) = match entry.strip_prefix('~') {
        Some(e) => (e, true),
        None => (entry, false),
    };
    let (head, vocab) = match entry.split_once('=') {
        Some((h, v)) => (h, Some(v)),
        None => (entry, None),
    };
    let (head, family) = match head.strip_suffix('*') {
        Some(h) => (h, true),
        None => (head, false),
    };
    let (local, wire) = match head.split_once('>') {
        Some((l, w)) => (l, w),
        None => (head, head),
    };
    Param {
        local: local.into(),
        wire: if family {
            format!("{wire}[n]")
        } else {
            wire.into()
        },
        vocab: vocab.unwrap_or(local).replace('-', "_"),
        required,
        family,
        local_only,
    }
}

/// Operator overrides of curated tiers, by tool name.
pub type TierOverrides = HashMap<String, Tier>;

/// Builds the curated tools. `rules` are the operator's method/path tier
/// rules (only the overrides apply; curated tiers are the defaults) and
/// `by_name` overrides by tool name.
pub fn tools(rules: &TierRules, by_name: &TierOverrides, backend: &str) -> Vec<(ToolSpec, Route)> {
    DEFS.iter()
        .map(|def| build(def, rules, by_name, backend))
        .collect()
}

/// Number of curated tools.
pub fn count() -> usize {
    DEFS.len()
}

fn build(
    def: &Def,
    rules: &TierRules,
    by_name: &TierOverrides,
    backend: &str,
) -> (ToolSpec, Route) {
    let mut route = Route::api(def.method, def.path);
    if def.name == "wait_task" {
        route.kind = RouteKind::WaitTask;
    }
    let placeholders = route.path_params();
    let mut properties = Map::new();
    let mut patterns = Map::new();
    let mut required = Vec::new();
    for entry in def.params {
        let p = parse(entry);
        let schema = vocabulary::schema(&p.vocab)
            .unwrap_or_else(|| panic!("{}: no vocabulary entry `{}`", def.name, p.vocab));
        if p.family {
            patterns.insert(format!("^{}[0-9]{{1,3}}$", p.local), schema);
            if p.local != p.wire.trim_end_matches("[n]") {
                route.renames.push((p.local.clone(), p.wire.clone()));
            }
            continue;
        }
        if p.local != p.wire {
            route.renames.push((p.local.clone(), p.wire.clone()));
        }
        if p.local_only {
            route.local.push(p.local.clone());
        }
        if p.required || placeholders.contains(&p.wire) {
            required.push(Value::String(p.local.clone()));
        }
        properties.insert(p.local, schema);
    }
    for (k, v) in def.fixed {
        route
            .fixed
            .push((k.to_string(), Value::String(v.to_string())));
    }
    let mut input = Map::new();
    input.insert("type".into(), json!("object"));
    input.insert("properties".into(), Value::Object(properties));
    if !patterns.is_empty() {
        input.insert("patternProperties".into(), Value::Object(patterns));
    }
    if !required.is_empty() {
        input.insert("required".into(), Value::Array(required));
    }
    input.insert("additionalProperties".into(), Value::Bool(false));
    let tier = by_name
        .get(def.name)
        .copied()
        .or_else(|| rules.override_for(def.method, def.path))
        .unwrap_or(def.tier);
    let mut description = def.summary.to_string();
    if def.upid {
        description.push_str(
            " Returns a task id (UPID) at once; pass it to wait_task to wait for the result.",
        );
    }
    description.push_str(&format!("\n\nPVE: {} {}", def.method, def.path));
    let output_schema = if def.upid {
        Some(json!({"type": "string", "description": "Task id (UPID); pass it to wait_task."}))
    } else if def.name == "wait_task" {
        Some(json!({"type": "object", "properties": {
            "status": {"type": "string", "description": "running or stopped"},
            "exitstatus": {"type": "string", "description": "OK, WARNINGS: n, or the error"},
            "ok": {"type": "boolean"},
            "log": {"type": "array", "items": {"type": "string"}}
        }}))
    } else {
        None
    };
    let path_params = placeholders
        .iter()
        .map(|w| {
            route
                .renames
                .iter()
                .find(|(_, wire)| wire == w)
                .map(|(l, _)| l.clone())
                .unwrap_or_else(|| w.clone())
        })
        .collect();
    let spec = ToolSpec {
        name: def.name.into(),
        summary: def.summary.into(),
        description,
        input_schema: with_target(Value::Object(input)),
        output_schema,
        tier,
        hints: Hints::for_tier(tier),
        backend: backend.into(),
        path_params,
        endpoint: (route.kind == RouteKind::Api)
            .then(|| format!("{} {}", route.method, route.path)),
        keywords: String::new(),
        key: route.key(backend),
        aliases: Vec::new(),
    };
    (spec, route)
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_catalog::Catalog;

    #[test]
    fn keys_name_operations() {
        let tools = tools(&TierRules::defaults(), &Default::default(), "pve");
        // A key is shared only by tools that send the same request.
        let mut seen: std::collections::HashMap<String, &Route> = Default::default();
        for (spec, route) in &tools {
            assert!(spec.key.starts_with("pve:"), "{}", spec.key);
            if let Some(other) = seen.insert(spec.key.clone(), route) {
                assert_eq!(
                    (other.method, &other.path, &other.fixed, &other.kind),
                    (route.method, &route.path, &route.fixed, &route.kind),
                    "{}",
                    spec.key
                );
            }
        }
        let key = |n: &str| {
            tools
                .iter()
                .find(|(s, _)| s.name == n)
                .unwrap()
                .0
                .key
                .clone()
        };
        assert_eq!(
            key("vm_stop"),
            "pve:POST /nodes/{node}/qemu/{vmid}/status/stop"
        );
        assert_eq!(
            key("wait_task"),
            "pve:GET /nodes/{node}/tasks/{upid}/status (wait)"
        );
        assert_eq!(
            key("task_status"),
            "pve:GET /nodes/{node}/tasks/{upid}/status"
        );
        assert_eq!(
            key("backup_list"),
            "pve:GET /nodes/{node}/storage/{storage}/content?content=backup"
        );
    }

    #[test]
    fn at_least_120_tools_that_build() {
        let tools = tools(&TierRules::defaults(), &HashMap::new(), "pve");
        assert!(tools.len() >= 120, "{}", tools.len());
        let (catalog, clashes) = Catalog::build(vec![(
            "pve".into(),
            tools.iter().map(|(s, _)| s.clone()).collect(),
        )])
        .unwrap();
        assert!(clashes.is_empty());
        assert_eq!(catalog.len(), tools.len());
        let start = catalog.get("vm_start").unwrap();
        assert!(start
            .problems(&json!({"node": "pve1", "vmid": 100}))
            .is_empty());
        assert!(!start.problems(&json!({"node": "pve1"})).is_empty());
        assert!(!start
            .problems(&json!({"node": "pve1", "vmid": 100, "bogus": 1}))
            .is_empty());
        let create = catalog.get("vm_create").unwrap();
        assert!(create.problems(&json!({"node": "pve1", "vmid": 120, "net0": "virtio,bridge=vmbr0", "scsi0": "local-lvm:32", "memory": 4096})).is_empty());
        assert!(!create
            .problems(&json!({"node": "pve1", "vmid": 120, "netx": "a"}))
            .is_empty());
    }

    #[test]
    fn tiers_follow_the_rules_and_overrides() {
        let tools = tools(&TierRules::defaults(), &HashMap::new(), "pve");
        let tier = |n: &str| tools.iter().find(|(s, _)| s.name == n).unwrap().0.tier;
        assert_eq!(tier("vm_start"), Operate);
        assert_eq!(tier("vm_clone"), Admin);
        assert_eq!(tier("vm_list"), Read);
        assert_eq!(tier("vm_agent_exec"), Forbidden);
        assert_eq!(tier("user_token_create"), Forbidden);
        let mut by_name = HashMap::new();
        by_name.insert("vm_snapshot_create".to_string(), Operate);
        let rules = TierRules::new(&[crate::tiers::TierRule {
            method: "POST".into(),
            path: "/nodes/[^/]+/qemu/[^/]+/clone".into(),
            tier: Operate,
        }])
        .unwrap();
        let tools = super::tools(&rules, &by_name, "pve");
        let tier = |n: &str| tools.iter().find(|(s, _)| s.name == n).unwrap().0.tier;
        assert_eq!(tier("vm_snapshot_create"), Operate);
        assert_eq!(tier("vm_clone"), Operate);
        assert_eq!(tier("vm_delete"), Admin);
    }

    #[test]
    fn renames_and_fixed_parameters() {
        let tools = tools(&TierRules::defaults(), &HashMap::new(), "pve");
        let route = |n: &str| tools.iter().find(|(s, _)| s.name == n).unwrap().1.clone();
        assert_eq!(route("vm_migrate").wire_name("target_node"), "target");
        assert_eq!(
            route("backup_restore_ct").wire_name("archive"),
            "ostemplate"
        );
        assert_eq!(
            route("backup_list").fixed,
            vec![("content".to_string(), json!("backup"))]
        );
        assert_eq!(route("wait_task").kind, RouteKind::WaitTask);
        assert_eq!(route("wait_task").local, ["timeout", "log_lines"]);
    }
}
