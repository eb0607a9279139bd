//! Parameter schemas shared by the curated tools, written once so every
//! tool that takes a `node` or a `vmid` describes and checks it the same
//! way. Keys are parameter names; a few carry a prefix where QEMU and LXC
//! differ (`qm_memory` is a property string, `ct_memory` an integer).

use serde_json::{json, Value};

const NODE_PATTERN: &str = "^[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$";
const STORAGE_PATTERN: &str = "^[a-zA-Z][a-zA-Z0-9_.-]*[a-zA-Z0-9]$";
const SNAPNAME_PATTERN: &str = "^[a-zA-Z][a-zA-Z0-9_-]{0,39}$";

fn vmid(description: &str) -> Value {
    json!({"type": "integer", "minimum": 100, "maximum": 999999999, "description": description})
}

fn boolean(description: &str) -> Value {
    json!({"type": "boolean", "description": description})
}

fn string(description: &str) -> Value {
    json!({"type": "string", "description": description})
}

fn int_min(min: i64, description: &str) -> Value {
    json!({"type": "integer", "minimum": min, "description": description})
}

fn one_of(values: &[&str], description: &str) -> Value {
    json!({"type": "string", "enum": values, "description": description})
}

fn disks(prefixes: &[(&str, u32)]) -> Vec<String> {
    prefixes
        .iter()
        .flat_map(|(p, n)| (0..*n).map(move |i| format!("{p}{i}")))
        .collect()
}

/// The schema of a vocabulary parameter; `None` for an unknown key.
pub fn schema(key: &str) -> Option<Value> {
    let qm_disks = disks(&[
        ("ide", 4),
        ("sata", 6),
        ("scsi", 31),
        ("virtio", 16),
        ("efidisk", 1),
        ("tpmstate", 1),
    ]);
    let ct_volumes: Vec<String> = std::iter::once("rootfs".to_string())
        .chain((0..256).map(|i| format!("mp{i}")))
        .collect();
    Some(match key {
        "node" => json!({"type": "string", "pattern": NODE_PATTERN, "description": "Cluster node name, e.g. pve1 (see node_list)."}),
        "vmid" => vmid("Guest id (VM or container), e.g. 100."),
        "vmid_filter" => vmid("Only this guest."),
        "newid" => vmid("Id for the new guest (see cluster_nextid)."),
        "target_vmid" => vmid("Move to this guest instead of keeping it on the same one."),
        "storage" => json!({"type": "string", "pattern": STORAGE_PATTERN, "description": "Storage id, e.g. local-lvm (see storage_list)."}),
        "target_storage" => json!({"type": "string", "pattern": STORAGE_PATTERN, "description": "Storage for the result."}),
        "target_node" => json!({"type": "string", "pattern": NODE_PATTERN, "description": "Destination node."}),
        "storage_pairs" => string("Storage mapping: one storage id for all, or `source:target` pairs, comma-separated."),
        "snapname" => json!({"type": "string", "pattern": SNAPNAME_PATTERN, "description": "Snapshot name (letters, digits, - and _; starts with a letter)."}),
        "upid" => json!({"type": "string", "pattern": "^UPID:[a-zA-Z0-9-]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+:[^:\\s/]+:[^:\\s/]*:[^:\\s/]+:$", "maxLength": 512, "description": "Task id returned by a mutating call, e.g. UPID:pve1:0000A1B2:...:qmstart:100:root@pam:"}),
        "poolid" => json!({"type": "string", "pattern": "^[A-Za-z0-9_.-]+$", "description": "Resource pool id."}),
        "pool" => json!({"type": "string", "pattern": "^[A-Za-z0-9_.-]+$", "description": "Add the new guest to this resource pool."}),
        "sid" => json!({"type": "string", "pattern": "^(vm|ct):[0-9]+$|^[0-9]+$", "description": "HA resource id, e.g. vm:100."}),
        "job_id" => json!({"type": "string", "pattern": "^[A-Za-z0-9_.:-]+$", "description": "Job id."}),
        "service" => json!({"type": "string", "pattern": "^[a-z][a-z0-9-]*$", "description": "Service name, e.g. pveproxy, corosync."}),
        "timeframe" => one_of(&["hour", "day", "week", "month", "year", "decade"], "Period to return."),
        "cf" => one_of(&["AVERAGE", "MAX"], "Consolidation function."),
        "timeout" => int_min(0, "Seconds to wait before giving up (or forcing, where the tool says so)."),
        "skiplock" => boolean("Ignore a lock on the guest (root only)."),
        "force" => boolean("Force the operation."),
        "full" => boolean("Full clone (independent copy) instead of a linked clone."),
        "online" => boolean("Migrate while running (live migration)."),
        "restart" => boolean("Migrate a running container by stopping and restarting it."),
        "purge" => boolean("Also remove the guest from replication jobs, backup jobs and HA."),
        "destroy_unreferenced_disks" => boolean("Also destroy disks not referenced in the configuration."),
        "start" => boolean("Start the guest after the operation."),
        "keep_active" => boolean("Do not deactivate storage volumes."),
        "force_stop" => boolean("Stop the guest at once if it has not shut down within the timeout."),
        "overrule_shutdown" => boolean("Abort a shutdown in progress first."),
        "todisk" => boolean("Hibernate: save the guest's memory to disk and stop it."),
        "nocheck" => boolean("Skip the check that the guest is suspended."),
        "vmstate" => boolean("Include the guest's memory (RAM) in the snapshot."),
        "description" => json!({"type": "string", "maxLength": 8192, "description": "Free-form notes."}),
        "name" => json!({"type": "string", "pattern": "^[a-zA-Z0-9]([a-zA-Z0-9.-]*[a-zA-Z0-9])?$", "maxLength": 63, "description": "Guest name (a DNS name)."}),
        "hostname" => json!({"type": "string", "pattern": "^[a-zA-Z0-9]([a-zA-Z0-9.-]*[a-zA-Z0-9])?$", "maxLength": 255, "description": "Container host name."}),
        "tags" => string("Tags, separated by `;`."),
        "onboot" => boolean("Start the guest when the node boots."),
        "protection" => boolean("Protect the guest from removal and from removal of its disks."),
        "startup" => string("Start/stop order, e.g. `order=1,up=30,down=60`."),
        "cores" => int_min(1, "CPU cores (per socket for VMs)."),
        "sockets" => int_min(1, "CPU sockets."),
        "cpu" => string("CPU type, e.g. `host` or `x86-64-v2-AES`."),
        "cpulimit" => json!({"type": "number", "minimum": 0, "maximum": 8192, "description": "Limit of CPU usage (0 = unlimited)."}),
        "balloon" => int_min(0, "Minimum memory in MiB for the balloon device (0 disables ballooning)."),
        "qm_memory" => json!({"type": ["integer", "string"], "description": "Memory in MiB, e.g. 4096 (or the property string `current=4096`)."}),
        "ct_memory" => int_min(16, "Memory in MiB."),
        "swap" => int_min(0, "Swap in MiB."),
        "ostype" => one_of(&["other", "wxp", "w2k", "w2k3", "w2k8", "wvista", "win7", "win8", "win10", "win11", "l24", "l26", "solaris"], "Guest operating system (l26 = Linux 2.6+)."),
        "scsihw" => one_of(&["lsi", "lsi53c810", "virtio-scsi-pci", "virtio-scsi-single", "megasas", "pvscsi"], "SCSI controller model."),
        "boot" => string("Boot order, e.g. `order=scsi0;net0`."),
        "agent" => string("QEMU guest agent, e.g. `1` or `enabled=1,fstrim_cloned_disks=1`."),
        "qm_disk_family" => string("A disk, e.g. `local-lvm:32` (new 32 GiB disk) or `local:iso/debian.iso,media=cdrom`."),
        "qm_net_family" => string("A network card, e.g. `virtio,bridge=vmbr0,firewall=1`."),
        "ct_net_family" => string("A network interface, e.g. `name=eth0,bridge=vmbr0,ip=dhcp`."),
        "ct_mp_family" => string("A mount point, e.g. `local-lvm:8,mp=/data`."),
        "rootfs" => string("Root volume, e.g. `local-lvm:8` (8 GiB)."),
        "ostemplate" => json!({"type": "string", "maxLength": 255, "description": "Template volume, e.g. `local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst`."}),
        "archive" => json!({"type": "string", "maxLength": 255, "description": "Backup volume to restore, e.g. `local:backup/vzdump-qemu-100-2025_01_01-00_00_00.vma.zst` (see backup_list)."}),
        "password" => json!({"type": "string", "minLength": 5, "maxLength": 64, "description": "Root password of the container (never logged or audited)."}),
        "ssh_public_keys" => string("Public SSH keys for root, one per line."),
        "unprivileged" => boolean("Run as an unprivileged container (recommended)."),
        "features" => string("Container features, e.g. `nesting=1,keyctl=1`."),
        "nameserver" => string("DNS servers, separated by spaces."),
        "searchdomain" => string("DNS search domains."),
        "delete_keys" => string("Configuration keys to remove, comma-separated, e.g. `net1,scsi2`."),
        "digest" => json!({"type": "string", "maxLength": 64, "description": "Refuse the change if the configuration changed since you read this digest."}),
        "qm_disk" => json!({"type": "string", "enum": qm_disks, "description": "Disk, e.g. scsi0."}),
        "ct_volume" => json!({"type": "string", "enum": ct_volumes, "description": "Volume: rootfs or a mount point mp0..mp255."}),
        "size" => json!({"type": "string", "pattern": "^\\+?\\d+(\\.\\d+)?[KMGT]?$", "description": "New size, e.g. `+10G` (grow by 10 GiB) or `50G` (absolute)."}),
        "disk_format" => one_of(&["raw", "qcow2", "vmdk"], "Disk image format."),
        "delete_source" => boolean("Remove the source volume after moving it."),
        "bwlimit" => int_min(0, "Bandwidth limit in KiB/s."),
        "bwlimit_number" => json!({"type": "number", "minimum": 0, "description": "Bandwidth limit in KiB/s."}),
        "with_local_disks" => boolean("Also migrate local disks."),
        "feature" => one_of(&["snapshot", "clone", "copy"], "Feature to check."),
        "cloudinit_type" => one_of(&["user", "network", "meta"], "Which cloud-init section."),
        "resources_type" => one_of(&["vm", "storage", "node", "sdn"], "Only resources of this kind."),
        "ha_type" => one_of(&["ct", "vm"], "Only HA resources of this kind."),
        "log_max" => int_min(1, "Lines to return."),
        "tasks_limit" => int_min(0, "Tasks to return (default 50)."),
        "start_offset" => int_min(0, "Skip this many entries first."),
        "lines_limit" => int_min(0, "Lines to return."),
        "errors" => boolean("Only tasks that failed."),
        "typefilter" => string("Only tasks of this type, e.g. qmstart, vzdump."),
        "statusfilter" => string("Only tasks with these statuses, comma-separated (ok, error, warning, unknown)."),
        "source" => one_of(&["archive", "active", "all"], "Finished tasks (archive), running ones (active) or both."),
        "since_epoch" => int_min(0, "Only entries since this Unix time."),
        "until_epoch" => int_min(0, "Only entries until this Unix time."),
        "since_date" => json!({"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}( \\d{2}:\\d{2}(:\\d{2})?)?$", "description": "Only entries since this time, `YYYY-MM-DD[ HH:MM[:SS]]`."}),
        "until_date" => json!({"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}( \\d{2}:\\d{2}(:\\d{2})?)?$", "description": "Only entries until this time, `YYYY-MM-DD[ HH:MM[:SS]]`."}),
        "userfilter" => string("Only tasks of this user."),
        "journal_service" => json!({"type": "string", "maxLength": 128, "description": "Only this service's entries."}),
        "lastentries" => int_min(0, "The last N entries."),
        "network_type" => one_of(&["bridge", "bond", "eth", "alias", "vlan", "fabric", "OVSBridge", "OVSBond", "OVSPort", "OVSIntPort", "vnet", "any_bridge", "any_local_bridge", "include_sdn"], "Only interfaces of this type."),
        "include_partitions" => boolean("Also list partitions."),
        "skipsmart" => boolean("Skip the SMART health check (faster)."),
        "device" => json!({"type": "string", "pattern": "^/dev/[a-zA-Z0-9/]+$", "description": "Block device, e.g. /dev/sda."}),
        "healthonly" => boolean("Only the health summary, not every attribute."),
        "verbose" => boolean("Include more details."),
        "guest" => vmid("Only jobs of this guest."),
        "config_current" => boolean("The current values, not pending changes."),
        "config_snapshot" => json!({"type": "string", "pattern": SNAPNAME_PATTERN, "description": "Read the configuration of this snapshot instead."}),
        "list_full" => boolean("Include full status (slower)."),
        "content" => string("Content types, comma-separated: images, rootdir, vztmpl, iso, backup, snippets, import."),
        "enabled" => boolean("Only enabled storages."),
        "storage_type" => one_of(&["btrfs", "cephfs", "cifs", "dir", "esxi", "iscsi", "iscsidirect", "lvm", "lvmthin", "nfs", "pbs", "rbd", "zfs", "zfspool"], "Only storages of this type."),
        "prune_backups" => string("Retention to preview, e.g. `keep-last=3,keep-daily=7`."),
        "guest_type" => one_of(&["qemu", "lxc"], "Only backups of this guest type."),
        "url" => json!({"type": "string", "pattern": "^https?://", "maxLength": 2048, "description": "URL to download from."}),
        "filename" => json!({"type": "string", "pattern": "^[^/\\\\]+$", "maxLength": 255, "description": "File name to store it as."}),
        "download_content" => one_of(&["iso", "vztmpl", "import"], "What the file is."),
        "checksum" => string("Expected checksum of the file."),
        "checksum_algorithm" => one_of(&["md5", "sha1", "sha224", "sha256", "sha384", "sha512"], "Checksum algorithm."),
        "verify_certificates" => boolean("Verify the server's TLS certificate (default true)."),
        "vmid_list" => json!({"type": "string", "pattern": "^[0-9]+([,; ][0-9]+)*$", "description": "Guest ids to back up, e.g. `100,101`."}),
        "backup_all" => boolean("Back up every guest on the node."),
        "backup_mode" => one_of(&["snapshot", "suspend", "stop"], "snapshot (no downtime), suspend or stop."),
        "compress" => one_of(&["0", "1", "gzip", "lzo", "zstd"], "Compression (zstd recommended)."),
        "notes_template" => json!({"type": "string", "maxLength": 1024, "description": "Notes for the backup, e.g. `{{guestname}} before upgrade`."}),
        "remove_old" => boolean("Prune older backups by the storage's retention."),
        "protected" => boolean("Protect the backup from pruning and removal."),
        "exclude" => json!({"type": "string", "pattern": "^[0-9]+([,; ][0-9]+)*$", "description": "Guest ids to skip with `all`."}),
        "volume" => json!({"type": "string", "maxLength": 255, "description": "Volume id, e.g. `local:backup/vzdump-qemu-100-....vma.zst`."}),
        "unique" => boolean("Give the restored guest new MAC addresses."),
        "command" => one_of(&["reboot", "shutdown"], "Host power action."),
        "iface" => json!({"type": "string", "pattern": "^[a-zA-Z][a-zA-Z0-9_.-]{0,19}$", "description": "Interface name."}),
        "iface_type" => one_of(&["bridge", "bond", "eth", "alias", "vlan", "fabric", "OVSBridge", "OVSBond", "OVSPort", "OVSIntPort", "vnet", "unknown"], "Interface type."),
        "ipv4" => string("IPv4 address."),
        "ipv4_mask" => string("IPv4 netmask."),
        "bridge_ports" => string("Bridge ports."),
        "comments" => string("Comments."),
        "autostart" => boolean("Bring the interface up at boot."),
        "shell_cmd" => one_of(&["ceph_install", "login", "upgrade"], "Command to run in the shell."),
        "websocket" => boolean("Prepare for a websocket upgrade."),
        "generate_password" => boolean("Generate a one-time password."),
        "serial" => one_of(&["serial0", "serial1", "serial2", "serial3"], "Serial device."),
        "width" => json!({"type": "integer", "minimum": 16, "maximum": 4096, "description": "Width in pixels."}),
        "height" => json!({"type": "integer", "minimum": 16, "maximum": 2160, "description": "Height in pixels."}),
        "agent_command" => json!({"type": "array", "items": {"type": "string"}, "description": "Program and arguments."}),
        "userid" => json!({"type": "string", "maxLength": 64, "description": "User, e.g. alice@pve."}),
        "tokenid" => json!({"type": "string", "pattern": "^[A-Za-z][A-Za-z0-9.\\-_]+$", "description": "Token name."}),
        "comment" => string("Comment."),
        "expire" => int_min(0, "Expiry as Unix time (0 = never)."),
        "privsep" => boolean("Restrict the token's privileges separately from the user's."),
        "acl_path" => string("ACL path, e.g. /vms/100."),
        "roles" => string("Roles, comma-separated."),
        "users" => string("Users, comma-separated."),
        "groups" => string("Groups, comma-separated."),
        "tokens" => string("API tokens, comma-separated."),
        "propagate" => boolean("Apply to sub-paths too."),
        "delete_acl" => boolean("Remove the ACL entries instead of adding them."),
        "new_password" => json!({"type": "string", "maxLength": 64, "description": "New password."}),
        "wait_timeout" => json!({"type": "integer", "minimum": 1, "maximum": 3600, "default": 300, "description": "Seconds to wait before returning with the task still running."}),
        "log_tail" => json!({"type": "integer", "minimum": 0, "maximum": 500, "default": 20, "description": "Log lines to return from the end of the task log."}),
        _ => return None,
    })
}
