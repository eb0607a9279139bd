//! What operators call the things PVE's paths name in its own words:
//! `wakeonlan` is "wake on lan", `aplinfo` the container templates one can
//! download, `unlink` removing unused disks. Search reads these words for
//! the full catalog, whose descriptions are PVE's API-viewer lines
//! ("Execute get-fsinfo."); agents never see them.
//!
//! A key is one path word, or several in a row (`ha/rules`, where `rules`
//! alone would also be the firewall's); every key an operation's path
//! holds adds its words. A key may name a method too (`POST qemu`): then
//! the path must end with its words. Written from the API's list of path
//! words, one entry per word whose meaning its spelling hides.

use crate::apidata::Method;

const GLOSSARY: &[(&str, &str)] = &[
    // The guest agent.
    ("agent", "guest agent qemu-guest-agent inside the guest"),
    ("get-fsinfo", "mounted file systems disks usage"),
    ("get-osinfo", "operating system version kernel distribution"),
    ("fsfreeze-freeze", "freeze quiesce file systems consistent"),
    ("fsfreeze-thaw", "thaw unfreeze file systems"),
    ("fsfreeze-status", "whether file systems are frozen"),
    ("fstrim", "trim discard unused blocks thin disk space"),
    ("file-read", "read a file contents"),
    ("file-write", "write a file"),
    ("exec", "run a command program"),
    ("exec-status", "command output exit code result"),
    ("get-host-name", "hostname"),
    ("get-time", "clock time"),
    ("get-timezone", "timezone"),
    ("get-users", "logged in users sessions"),
    ("get-vcpus", "virtual cpus"),
    ("network-get-interfaces", "ip addresses mac interfaces"),
    ("set-user-password", "change password of a user"),
    // Guests.
    (
        "feature",
        "check whether possible supported can snapshot clone copy",
    ),
    ("unlink", "detach remove unused disks delete disk images"),
    ("pending", "pending changes not applied yet until reboot"),
    ("sendkey", "send keys key press keyboard ctrl-alt-del"),
    ("vncproxy", "console vnc screen"),
    ("spiceproxy", "console spice remote viewer"),
    ("termproxy", "console terminal serial shell xterm"),
    ("vncshell", "node shell console"),
    ("spiceshell", "node shell console"),
    ("vncwebsocket", "console websocket"),
    ("mtunnel", "migration tunnel internal"),
    ("remote_migrate", "remote cluster cross-cluster migration"),
    ("move_disk", "disk to another storage"),
    ("move_volume", "volume mount point to another storage"),
    ("migrateall", "evacuate every guest off a node maintenance"),
    ("startall", "start every guest on boot"),
    ("stopall", "stop every guest"),
    ("suspendall", "suspend every guest"),
    ("template", "convert into a template"),
    ("POST qemu", "new vm or restore one from a backup archive"),
    (
        "POST lxc",
        "new container or restore one from a backup archive",
    ),
    ("cloudinit", "cloud-init user data ssh keys"),
    (
        "cloudinit/dump",
        "generated cloud-init user-data network-config meta-data",
    ),
    (
        "rrddata",
        "usage history graph statistics over time cpu memory network io",
    ),
    ("rrd", "usage graph image"),
    ("nextid", "next free vmid guest id"),
    // Nodes.
    (
        "netstat",
        "network traffic counters per guest interface bytes",
    ),
    (
        "wakeonlan",
        "wake on lan magic packet power on a sleeping node remotely",
    ),
    ("report", "system report diagnostics support"),
    ("hosts", "/etc/hosts host names file"),
    ("dns", "nameservers resolver search domain"),
    ("time", "clock timezone"),
    ("syslog", "system log messages"),
    ("journal", "systemd journal log"),
    ("subscription", "license subscription key"),
    ("apt", "packages"),
    ("changelog", "package changelog"),
    (
        "repositories",
        "package repositories sources enterprise no-subscription",
    ),
    ("apt/versions", "installed package versions"),
    ("services", "daemons systemd units"),
    ("reload", "reload configuration"),
    ("capabilities", "supported cpu models machine types"),
    ("machines", "machine types q35 i440fx"),
    ("hardware", "host devices"),
    (
        "query-url-metadata",
        "file size name type of a download url",
    ),
    ("certificates", "tls ssl https certificate"),
    ("custom", "own certificate upload"),
    ("acme", "let's encrypt letsencrypt automatic certificate"),
    ("acme/account", "registration account"),
    ("acme/plugins", "dns challenge plugins"),
    ("acme/certificate", "order renew a certificate"),
    ("tos", "terms of service"),
    ("challenge-schema", "dns challenge types"),
    // Disks and storage.
    ("initgpt", "initialize disk gpt partition table"),
    ("wipedisk", "wipe erase disk partitions"),
    ("smart", "disk health smart"),
    (
        "directory",
        "directory storage mount a file system on a disk",
    ),
    ("lvmthin", "thin pools"),
    ("zfs", "zpool"),
    (
        "content",
        "volumes disk images isos templates backup files archives stored on a storage",
    ),
    ("upload", "upload an iso or template"),
    ("download-url", "download an iso or template from a url"),
    ("oci-registry-pull", "docker oci image pull registry"),
    (
        "aplinfo",
        "appliance container templates available to download turnkey",
    ),
    ("scan", "discover probe"),
    ("pbs", "proxmox backup server"),
    ("nfs", "nfs server exports"),
    ("cifs", "smb windows shares"),
    ("iscsi", "iscsi targets portal"),
    ("prunebackups", "retention keep-last remove old backups"),
    ("file-restore", "single file restore files in a backup"),
    ("vzdump", "backup"),
    ("extractconfig", "configuration stored in a backup archive"),
    ("cluster/backup", "scheduled backup jobs"),
    ("not-backed-up", "guests no backup job covers"),
    ("included_volumes", "disks a backup job includes"),
    ("replication", "storage replication zfs sync between nodes"),
    ("schedule_now", "run now immediately"),
    (
        "schedule-analyze",
        "next run times of a calendar event schedule",
    ),
    // High availability.
    ("ha", "high availability failover"),
    (
        "ha/rules",
        "affinity anti-affinity keep guests together or apart node preference",
    ),
    (
        "ha/resources",
        "restart a guest on another node automatically when its node fails",
    ),
    ("ha/groups", "node priorities failover domain"),
    ("arm-ha", "re-arm ha stack watchdogs"),
    ("disarm-ha", "disarm ha stack watchdogs maintenance"),
    ("manager_status", "ha manager crm lrm"),
    // Ceph.
    ("ceph", "hyper-converged storage"),
    ("osd", "object storage daemon disk"),
    ("crush", "crush map placement"),
    ("ceph/rules", "crush rules placement"),
    ("ceph/pool", "rbd pools replicas placement groups"),
    ("flags", "cluster-wide flags maintenance"),
    ("scrub", "consistency check"),
    ("cmd-safety", "safe to stop or destroy check"),
    ("lv-info", "osd logical volume details"),
    ("cfg/raw", "ceph.conf configuration file"),
    ("cfg/db", "configuration database"),
    // Access.
    ("tfa", "two-factor 2fa totp webauthn yubico recovery keys"),
    ("unlock-tfa", "unlock two-factor 2fa"),
    ("ticket", "log in authenticate session"),
    ("password", "change password"),
    (
        "permissions",
        "effective permissions privileges what a user may do",
    ),
    ("acl", "access control permissions grant role on a path"),
    ("roles", "privileges"),
    (
        "domains",
        "realms authentication ldap active directory openid",
    ),
    ("realm-sync", "sync users and groups from ldap"),
    ("openid", "single sign-on sso"),
    ("token", "api token"),
    // Cluster.
    (
        "resources",
        "every guest storage and node in the cluster inventory",
    ),
    (
        "cluster/options",
        "datacenter options keyboard language migration settings",
    ),
    ("bulk-action", "many guests at once bulk"),
    ("qdevice", "quorum device external vote"),
    ("totem", "corosync"),
    ("join", "join a node to the cluster"),
    (
        "config/nodes",
        "cluster members corosync add or remove a node",
    ),
    ("apiversion", "api version"),
    ("metrics", "external metric servers influxdb graphite"),
    ("metrics/export", "metrics data prometheus"),
    (
        "mapping",
        "cluster-wide resource mapping passthrough device mapping",
    ),
    ("pci", "pci devices passthrough gpu"),
    ("usb", "usb devices passthrough"),
    ("mdev", "mediated devices vgpu"),
    (
        "mapping/dir",
        "directory mapping virtiofs shared host directory",
    ),
    ("notifications", "alerts notify"),
    ("endpoints", "notification targets destinations"),
    ("sendmail", "email mail"),
    ("smtp", "email mail server"),
    ("gotify", "push notifications gotify server"),
    (
        "webhook",
        "http request to a url webhook chat slack teams mattermost discord",
    ),
    (
        "matchers",
        "notification routing which events go where filter",
    ),
    ("notifications/targets", "where notifications can go"),
    ("jobs", "scheduled jobs"),
    // Firewall.
    ("firewall", "packet filter"),
    ("ipset", "ip set address list"),
    ("aliases", "named ip addresses networks"),
    ("refs", "aliases and ip sets usable in rules"),
    ("macros", "predefined services"),
    // SDN.
    ("sdn", "software defined network"),
    ("zones", "sdn zones vxlan evpn vlan simple qinq"),
    ("vnets", "virtual networks"),
    ("subnets", "subnet ip range gateway dhcp"),
    ("ipams", "ip address management"),
    ("fabrics", "openfabric ospf routing underlay"),
    ("controllers", "evpn bgp controllers"),
    ("dry-run", "preview pending changes diff"),
    ("sdn/lock", "global configuration lock"),
    ("sdn/rollback", "discard pending changes"),
    ("neighbors", "routing neighbors peers"),
    ("routes", "routing table"),
    ("ip-vrf", "evpn ip routes"),
    ("mac-vrf", "evpn mac addresses"),
];

/// The words operators use for what `method` on `path` does: those of
/// every key the path's words (placeholders left out) hold in a row.
pub fn keywords(method: Method, path: &str) -> String {
    let words: Vec<&str> = path
        .split('/')
        .filter(|s| !s.is_empty() && !s.starts_with('{'))
        .collect();
    let ends_in_word = !path.ends_with('}');
    let mut out: Vec<&str> = Vec::new();
    for (key, gloss) in GLOSSARY {
        let found = match key.split_once(' ') {
            Some((m, rest)) => {
                let key: Vec<&str> = rest.split('/').collect();
                m == method.as_str() && ends_in_word && words.ends_with(&key)
            }
            None => {
                let key: Vec<&str> = key.split('/').collect();
                words.windows(key.len()).any(|w| w == key.as_slice())
            }
        };
        if found {
            out.push(gloss);
        }
    }
    out.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_of_several_words_needs_them_in_a_row() {
        assert!(keywords(Method::Get, "/cluster/ha/rules/{rule}").contains("affinity"));
        assert!(!keywords(Method::Get, "/cluster/firewall/rules/{pos}").contains("affinity"));
        assert!(keywords(Method::Post, "/nodes/{node}/wakeonlan").contains("wake on lan"));
        assert_eq!(
            keywords(Method::Post, "/nodes/{node}/qemu/{vmid}/status/start"),
            ""
        );
    }

    #[test]
    fn a_key_with_a_method_needs_it_and_the_path_to_end_there() {
        assert!(keywords(Method::Post, "/nodes/{node}/qemu").contains("restore"));
        assert!(!keywords(Method::Get, "/nodes/{node}/qemu").contains("restore"));
        assert!(!keywords(Method::Post, "/nodes/{node}/qemu/{vmid}/clone").contains("restore"));
    }

    #[test]
    fn keys_are_distinct() {
        let mut seen = std::collections::HashSet::new();
        for (key, _) in GLOSSARY {
            assert!(seen.insert(key), "{key} twice");
        }
    }
}
