//! Task ids (UPIDs). Every mutating PVE call answers with one, e.g.
//! `UPID:pve1:000A1B2C:0F3E4D5A:6751A0B2:qmstart:101:root@pam!airlock:`:
//! node, pid, pstart, start time, type, id, user, all hex where numeric.

use serde::Serialize;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Upid {
    pub node: String,
    pub pid: u32,
    pub pstart: u64,
    /// Unix seconds the task started.
    pub starttime: u64,
    /// Task type, e.g. `qmstart`, `vzdump`.
    pub kind: String,
    /// The object the task works on (a vmid), may be empty.
    pub id: String,
    pub user: String,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("`{0}` is not a task id (expected UPID:node:pid:pstart:starttime:type:id:user:)")]
pub struct UpidError(pub String);

impl std::str::FromStr for Upid {
    type Err = UpidError;

    fn from_str(s: &str) -> Result<Self, UpidError> {
        let err = || UpidError(s.chars().take(120).collect());
        if s.len() > 512 || s.chars().any(|c| c.is_control() || c == '/') {
            return Err(err());
        }
        let parts: Vec<&str> = s.split(':').collect();
        // UPID : node : pid : pstart : starttime : type : id : user : (empty)
        if parts.len() != 9 || parts[0] != "UPID" || !parts[8].is_empty() {
            return Err(err());
        }
        // PVE writes these `%08X`: exactly 8 hex digits for the pid, at
        // least 8 for the others. Anything shorter names no real task, and
        // accepting it would let a printed id differ from the one parsed.
        let digits = |p: &str, max: usize| {
            (8..=max).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_hexdigit())
        };
        let hex32 = |p: &str| {
            digits(p, 8)
                .then(|| u32::from_str_radix(p, 16).ok())
                .flatten()
                .ok_or_else(err)
        };
        let hex64 = |p: &str| {
            digits(p, 16)
                .then(|| u64::from_str_radix(p, 16).ok())
                .flatten()
                .ok_or_else(err)
        };
        let node = parts[1];
        let valid_node = !node.is_empty()
            && node.len() <= 63
            && node.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !node.starts_with('-');
        if !valid_node || parts[5].is_empty() || parts[7].is_empty() {
            return Err(err());
        }
        Ok(Upid {
            node: node.into(),
            pid: hex32(parts[2])?,
            pstart: hex64(parts[3])?,
            starttime: hex64(parts[4])?,
            kind: parts[5].into(),
            id: parts[6].into(),
            user: parts[7].into(),
        })
    }
}

impl std::fmt::Display for Upid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "UPID:{}:{:08X}:{:08X}:{:08X}:{}:{}:{}:",
            self.node, self.pid, self.pstart, self.starttime, self.kind, self.id, self.user
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_round_trips() {
        let s = "UPID:pve1:000A1B2C:0F3E4D5A:6751A0B2:qmstart:101:root@pam!airlock:";
        let u: Upid = s.parse().unwrap();
        assert_eq!(u.node, "pve1");
        assert_eq!(u.pid, 0xA1B2C);
        assert_eq!(u.starttime, 0x6751A0B2);
        assert_eq!(u.kind, "qmstart");
        assert_eq!(u.id, "101");
        assert_eq!(u.user, "root@pam!airlock");
        assert_eq!(u.to_string(), s);
    }

    #[test]
    fn rejects_what_is_not_a_upid() {
        for bad in [
            "",
            // Found by the `upid` fuzz target: short numbers printed back
            // longer than they came (fuzz/regressions/upid).
            "UPID:pve1:1:0F3E4D5A:6751A0B2:qmstart:101:root@pam:",
            "UPID:pve1:000A1B2C:0F3E4D5A:+751A0B2:qmstart:101:root@pam:",
            "UPID:pve1:1:2:3:qmstart:101:root@pam",
            "UPID:pve1:zz:2:3:qmstart:101:root@pam:",
            "UPID:../etc:1:2:3:qmstart:101:root@pam:",
            "UPID:pve1:1:2:3:qmstart:101:root@pam:extra:",
            "TASK:pve1:1:2:3:qmstart:101:root@pam:",
            "UPID:pve1:1:2:3::101:root@pam:",
            "UPID:pve1:1:2:3:qmstart:101:root@pam\n:",
        ] {
            assert!(bad.parse::<Upid>().is_err(), "{bad:?}");
        }
    }
}
