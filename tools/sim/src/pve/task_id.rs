//! The task ids this cluster hands out, written the way pvedaemon writes
//! them: `UPID:<node>:<pid>:<pstart>:<starttime>:<type>:<id>:<user>:`, the
//! three numbers as at least eight upper-case hex digits. Only the writing
//! side lives here; reading one back is the client's business.

/// One task's identity, kept as parts so listings can filter on them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upid {
    pub node: String,
    pub pid: u32,
    pub pstart: u64,
    /// Unix seconds the task started.
    pub starttime: u64,
    /// Task type, e.g. `qmstart`, `vzdump`.
    pub kind: String,
    /// What the task works on (a vmid), may be empty.
    pub id: String,
    pub user: String,
}

impl std::fmt::Display for Upid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Upid {
            node,
            pid,
            pstart,
            starttime,
            kind,
            id,
            user,
        } = self;
        write!(
            f,
            "UPID:{node}:{pid:08X}:{pstart:08X}:{starttime:08X}:{kind}:{id}:{user}:"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_as_pvedaemon_writes_it() {
        let upid = Upid {
            node: "pve1".into(),
            pid: 0xA1B2C,
            pstart: 0x0F3E4D5A,
            starttime: 0x6751A0B2,
            kind: "qmstart".into(),
            id: "101".into(),
            user: "root@pam!airlock".into(),
        };
        assert_eq!(
            upid.to_string(),
            "UPID:pve1:000A1B2C:0F3E4D5A:6751A0B2:qmstart:101:root@pam!airlock:"
        );
    }
}
