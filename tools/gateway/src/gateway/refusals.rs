//! What a call that did not run, or did not succeed, is told: the errors
//! with the stable codes scripts match on, their details, the decision
//! they are audited as, and what a store's failure may say to a script.

use super::*;

/// A call that ran.
#[derive(Clone, Debug, PartialEq)]
pub struct Called {
    pub value: Value,
    /// Secret-looking fields replaced before the value left the gateway.
    pub redacted: usize,
}

/// A call that did not succeed, from [`Gateway::call_keeping_args`].
#[derive(Debug)]
pub struct Refused {
    pub error: CallError,
    /// The call's arguments, when it was refused before they were handed
    /// to a backend.
    pub args: Option<Value>,
}

impl Refused {
    pub(super) fn before_backend(error: CallError, args: Value) -> Self {
        Self {
            error,
            args: Some(args),
        }
    }

    pub(super) fn after_backend(error: CallError) -> Self {
        Self { error, args: None }
    }
}

/// Why a call did not run or did not succeed. Each has a stable `code`
/// that scripts see as `e.code`.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CallError {
    /// `name` is quoted as `catalog::quote_name` does: cut and visible.
    #[error("no tool named `{name}`{}", did_you_mean_text(.did_you_mean))]
    UnknownTool {
        name: String,
        did_you_mean: Vec<String>,
    },
    /// Refused before any lookup; `name` is quoted, `bytes` its length.
    #[error(
        "no tool named `{name}`: a tool name is at most {} bytes; this one is {bytes}",
        catalog::MAX_NAME_BYTES
    )]
    NameTooLong { name: String, bytes: usize },
    #[error("invalid arguments for {tool}: {}", .problems.join("; "))]
    InvalidArguments { tool: String, problems: Vec<String> },
    #[error("{reason}")]
    PolicyDenied { tool: String, reason: String },
    /// A person denied the approval this call asked for: its request, and
    /// who and why in `reason`.
    #[error("{reason}")]
    ApprovalDenied {
        tool: String,
        request_id: String,
        reason: String,
    },
    #[error("{tool} needs approval: request {request_id} ({summary}); {how}")]
    ApprovalRequired {
        tool: String,
        request_id: String,
        summary: String,
        how: String,
    },
    #[error("{tool} needs approval, but {reason}")]
    ApprovalTooLarge { tool: String, reason: String },
    #[error("{tool} needs approval, but identity {identity} already has {limit} approval requests waiting (approval.max_open_per_identity = {limit}), so no more are filed; decide or let expire the open requests first: `{list_command}`")]
    ApprovalLimit {
        tool: String,
        identity: String,
        limit: u32,
        list_command: String,
    },
    #[error("identity {identity} made more than {limit} calls in the last minute; wait and retry, or ask the operator to raise rate.calls_per_minute")]
    RateLimited { identity: String, limit: u32 },
    #[error("{message}")]
    Backend {
        tool: String,
        code: String,
        message: String,
    },
    #[error("the audit log cannot be written, so no call runs: {0}")]
    AuditUnavailable(String),
    #[error("the approval store is unavailable, so calls needing approval are refused: {0}")]
    ApprovalUnavailable(String),
    #[error("the rate limiter cannot be asked, so no call runs: {0}")]
    RateUnavailable(String),
    /// Plan mode could not record this change (the plan is full).
    #[error("{tool} could not be added to the plan: {error}")]
    Plan { tool: String, error: PlanError },
    /// A call of a runbook's script outside what its file declares, or a
    /// change of a version no one approved.
    #[error("{tool} refused in runbook {runbook}: {reason}")]
    Runbook {
        tool: String,
        runbook: String,
        reason: String,
    },
}

/// What a script is told when a store fails: what went wrong (a full
/// disk, a lock held too long), never where the store is or what a
/// database server said (host names and server messages are the
/// operator's, in the log, which gets the whole error).
pub(super) trait Told: std::fmt::Display {
    fn reason(&self) -> String;
}

const DATABASE_DOWN: &str = "the state database is unavailable";

impl Told for AuditError {
    fn reason(&self) -> String {
        match self {
            AuditError::Write { message, .. } | AuditError::Read { message, .. } => message.clone(),
            AuditError::Locked { waited, .. } => format!(
                "the log is locked by another process for more than {} s",
                waited.as_secs_f64()
            ),
            AuditError::Store { .. } | AuditError::Unsettled { .. } => DATABASE_DOWN.into(),
            other => other.to_string(),
        }
    }
}

impl Told for ApprovalError {
    fn reason(&self) -> String {
        match self {
            ApprovalError::Storage(m) if m.starts_with("PostgreSQL") => DATABASE_DOWN.into(),
            ApprovalError::Storage(m) => m.clone(),
            other => other.to_string(),
        }
    }
}

impl Told for crate::rate::RateUnavailable {
    fn reason(&self) -> String {
        DATABASE_DOWN.into()
    }
}

pub(super) fn told(e: &impl Told) -> String {
    tracing::error!(error = %e, "a state store failed; the call is refused");
    e.reason()
}

/// How long a script is told to wait before calling again when a state
/// store cannot be reached.
pub const STATE_RETRY_AFTER_MS: u64 = 2_000;

/// The details of a refusal because `store` could not be reached.
fn unavailable(store: &str) -> Value {
    json!({"retryable": true, "store": store, "retry_after_ms": STATE_RETRY_AFTER_MS})
}

pub(super) fn did_you_mean_text(names: &[String]) -> String {
    if names.is_empty() {
        String::new()
    } else {
        format!(
            "; did you mean {}?",
            names
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

impl CallError {
    /// The code a script sees as `e.code`.
    pub fn code(&self) -> &str {
        match self {
            CallError::UnknownTool { .. } | CallError::NameTooLong { .. } => "not_found",
            CallError::InvalidArguments { .. } => "invalid_arguments",
            CallError::PolicyDenied { .. } => "policy_denied",
            CallError::ApprovalDenied { .. } => "approval_denied",
            CallError::ApprovalRequired { .. } => "approval_required",
            CallError::ApprovalTooLarge { .. } => "approval_too_large",
            CallError::ApprovalLimit { .. } => "approval_limit",
            CallError::RateLimited { .. } => "rate_limited",
            CallError::Backend { code, .. } => code,
            CallError::AuditUnavailable(_) => "audit_unavailable",
            CallError::ApprovalUnavailable(_) => "approval_unavailable",
            CallError::RateUnavailable(_) => "rate_unavailable",
            CallError::Plan { error, .. } => error.code(),
            CallError::Runbook { .. } => "runbook_refused",
        }
    }

    /// Structured details a script can act on (`e.details`).
    pub fn details(&self) -> Value {
        match self {
            CallError::UnknownTool { did_you_mean, .. } => json!({"did_you_mean": did_you_mean}),
            CallError::NameTooLong { bytes, .. } => {
                json!({"did_you_mean": [], "name_bytes": bytes, "max_name_bytes": catalog::MAX_NAME_BYTES})
            }
            CallError::ApprovalTooLarge { .. } => {
                json!({"max_summary_chars": summary::MAX_SUMMARY_CHARS, "max_detail_chars": summary::MAX_DETAIL_CHARS})
            }
            CallError::ApprovalLimit { limit, .. } => json!({"max_open_per_identity": limit}),
            CallError::InvalidArguments { problems, .. } => json!({"problems": problems}),
            CallError::ApprovalRequired {
                request_id,
                summary,
                how,
                ..
            } => {
                json!({"request_id": request_id, "summary": summary, "how": how})
            }
            CallError::RateLimited { limit, .. } => json!({"calls_per_minute": limit}),
            CallError::ApprovalDenied { request_id, .. } => json!({"request_id": request_id}),
            CallError::Plan { .. } => json!({
                "max_plan_changes": crate::plan::MAX_PLAN_CHANGES,
                "max_plan_summary_chars": crate::plan::MAX_PLAN_SUMMARY_CHARS,
            }),
            // Not the script's mistake: the same call goes through once
            // the store answers again.
            CallError::AuditUnavailable(_) => unavailable("audit"),
            CallError::ApprovalUnavailable(_) => unavailable("approvals"),
            CallError::RateUnavailable(_) => unavailable("rate"),
            _ => Value::Null,
        }
    }

    /// The word the audit line records as the decision.
    pub fn decision(&self) -> &'static str {
        match self {
            CallError::UnknownTool { .. } | CallError::NameTooLong { .. } => "unknown_tool",
            CallError::InvalidArguments { .. } => "invalid",
            CallError::PolicyDenied { .. } | CallError::ApprovalDenied { .. } => "denied",
            CallError::ApprovalRequired { .. } => "approval_required",
            CallError::ApprovalTooLarge { .. } => "approval_too_large",
            CallError::ApprovalLimit { .. } => "approval_limit",
            CallError::RateLimited { .. } => "rate_limited",
            CallError::AuditUnavailable(_)
            | CallError::ApprovalUnavailable(_)
            | CallError::RateUnavailable(_) => "refused",
            CallError::Plan { .. } => "plan_refused",
            CallError::Runbook { .. } => "runbook_refused",
            CallError::Backend { .. } => "allowed",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error(transparent)]
    Approval(#[from] ApprovalError),
    #[error(transparent)]
    Audit(#[from] AuditError),
    /// The stores could not be opened (their own words).
    #[error("{0}")]
    State(#[source] OpenError),
    #[error("two backends have the id `{0}`")]
    DuplicateBackend(String),
    #[error("{0}")]
    Config(String),
}
