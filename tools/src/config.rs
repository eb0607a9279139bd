//! The gateway's settings, as the operator writes them (the host maps its
//! TOML file and `AIRLOCK_*` variables onto these).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::{approval::DEFAULT_TTL_MS, policy::PolicyConfig, spec::Tier};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApprovalConfig {
    /// Tiers whose calls need a person's approval.
    pub tiers: Vec<Tier>,
    /// How long a request waits for a decision, and how long a granted
    /// approval stays usable.
    pub ttl_secs: u64,
}

impl Default for ApprovalConfig {
    fn default() -> Self {
        Self {
            tiers: vec![Tier::Operate, Tier::Admin],
            ttl_secs: (DEFAULT_TTL_MS / 1000) as u64,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RateConfig {
    /// Calls one identity may make per minute, across executions.
    pub calls_per_minute: u32,
    /// Calls running at once against one backend.
    pub backend_concurrency: u32,
}

impl Default for RateConfig {
    fn default() -> Self {
        Self {
            calls_per_minute: 600,
            backend_concurrency: 16,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayConfig {
    pub policy: PolicyConfig,
    pub approval: ApprovalConfig,
    pub rate: RateConfig,
    /// The SQLite file holding approvals.
    pub approvals_db: PathBuf,
    /// The hash-chained JSONL audit log.
    pub audit_file: PathBuf,
    /// The command an operator runs to approve a request, up to the
    /// request id; `ApprovalRequired` errors quote it, so it must reach
    /// this gateway's approval store (e.g. carry the same `--config`).
    pub approve_command: String,
}

/// What `approve_command` is when nothing more specific is known.
pub const DEFAULT_APPROVE_COMMAND: &str = "airlock approvals approve";

impl GatewayConfig {
    /// Everything under one state directory: `approvals.db`, `audit.jsonl`.
    pub fn in_dir(dir: impl Into<PathBuf>) -> Self {
        let dir = dir.into();
        Self {
            policy: PolicyConfig::default(),
            approval: ApprovalConfig::default(),
            rate: RateConfig::default(),
            approvals_db: dir.join("approvals.db"),
            audit_file: dir.join("audit.jsonl"),
            approve_command: DEFAULT_APPROVE_COMMAND.to_string(),
        }
    }
}

/// `$AIRLOCK_STATE_DIR`, else `$XDG_STATE_HOME/airlock`, else
/// `~/.local/state/airlock`.
pub fn default_state_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("AIRLOCK_STATE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("airlock");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(h).join(".local/state/airlock");
    }
    std::env::temp_dir().join("airlock-state")
}
