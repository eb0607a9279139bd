//! The gateway's settings, as the operator writes them (the host maps its
//! TOML file and `AIRLOCK_*` variables onto these).

use serde::{Deserialize, Serialize};

use crate::{
    approval::{DEFAULT_MAX_OPEN, DEFAULT_TTL_MS},
    policy::PolicyConfig,
};
use airlock_catalog::spec::Tier;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApprovalConfig {
    /// Tiers whose calls need a person's approval.
    pub tiers: Vec<Tier>,
    /// How long a request waits for a decision, and how long a granted
    /// approval stays usable.
    pub ttl_secs: u64,
    /// Requests one identity may have waiting for a decision at once; a
    /// script cannot file hundreds of them (and a person cannot be asked
    /// hundreds of times in a row).
    pub max_open_per_identity: u32,
    /// Tiers whose approval may be asked of the person in the MCP client
    /// (elicitation). For the others an operator approves out of band
    /// (`airlock approvals approve`): a client that can ask can also
    /// answer itself.
    pub in_client: Vec<Tier>,
}

/// The longest `approval.ttl_secs` accepted: a grant that outlives a
/// month is a standing permission, not an approval.
pub const MAX_TTL_SECS: u64 = 30 * 24 * 3600;

impl ApprovalConfig {
    /// Values that would make approval impossible or meaningless.
    pub fn check(&self) -> Result<(), String> {
        if self.ttl_secs == 0 || self.ttl_secs > MAX_TTL_SECS {
            return Err(format!(
                "approval.ttl_secs = {} is out of range: give 1 to {MAX_TTL_SECS} seconds (0 would expire every request and approval at once)",
                self.ttl_secs
            ));
        }
        if self.max_open_per_identity == 0 {
            return Err("approval.max_open_per_identity = 0 would refuse every approval request; give at least 1".into());
        }
        Ok(())
    }
}

impl Default for ApprovalConfig {
    fn default() -> Self {
        Self {
            tiers: vec![Tier::Operate, Tier::Admin],
            ttl_secs: (DEFAULT_TTL_MS / 1000) as u64,
            max_open_per_identity: DEFAULT_MAX_OPEN,
            in_client: vec![Tier::Operate, Tier::Admin],
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
    /// Executions one identity may have started and not ended across
    /// the deployment (all replicas; see `shares`). 0: not counted (each
    /// replica's sandbox still shares its slots between identities).
    pub executions_per_identity: u32,
    /// The longest an execution's place is held if its end is never
    /// recorded (a replica that died); longer than `queue_wait_ms` plus
    /// `wall_time_ms`.
    pub execution_hold_ms: u64,
}

impl RateConfig {
    /// A backend nobody may call is a configuration mistake, not a limit:
    /// 0 is refused rather than read as "one" or "unlimited".
    pub fn check(&self) -> Result<(), String> {
        if self.backend_concurrency == 0 {
            return Err("rate.backend_concurrency = 0 would let no call reach a backend; give the number of calls that may run at once against one backend (default 16)".into());
        }
        Ok(())
    }
}

impl Default for RateConfig {
    fn default() -> Self {
        Self {
            calls_per_minute: 600,
            backend_concurrency: 16,
            executions_per_identity: 0,
            execution_hold_ms: 300_000,
        }
    }
}

/// Where the gateway's state lives is not here: the host opens it (see
/// [`crate::state::Stores`]); these are the rules the gateway applies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayConfig {
    pub policy: PolicyConfig,
    pub approval: ApprovalConfig,
    pub rate: RateConfig,
    /// The command an operator runs to approve a request, up to the
    /// request id; `ApprovalRequired` errors quote it, so it must reach
    /// this gateway's approval store (e.g. carry the same `--config`).
    pub approve_command: String,
    /// What a runbook's call outside its file does (`[runbooks]
    /// outside_bounds`): refused unsent, or asks as any call.
    pub runbook_outside: airlock_runbooks::runbook::Outside,
}

/// What `approve_command` is when nothing more specific is known.
pub const DEFAULT_APPROVE_COMMAND: &str = "airlock approvals approve";

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            policy: PolicyConfig::default(),
            approval: ApprovalConfig::default(),
            rate: RateConfig::default(),
            approve_command: DEFAULT_APPROVE_COMMAND.to_string(),
            runbook_outside: airlock_runbooks::runbook::Outside::default(),
        }
    }
}
