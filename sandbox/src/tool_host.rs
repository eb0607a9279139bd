//! The one capability a script has: asking the host to call a tool.
//!
//! The sandbox knows nothing of what a tool is. It hands the host a name and
//! JSON arguments and passes back whatever JSON or error the host answers.
//! The host (Airlock's gateway) does lookup, validation, policy, approval,
//! audit and the backend call.

use async_trait::async_trait;
use serde::Serialize;
use serde_json::Value;

/// A tool call as the script made it.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    pub name: String,
    pub args: Value,
}

/// A failed tool call. The script sees it as a catchable `Error` named
/// `ToolError` with the properties `tool`, `code`, `message` and `details`.
#[derive(Clone, Debug, PartialEq, Serialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ToolFailure {
    /// Machine-readable; see [`codes`] for the ones the sandbox interprets.
    pub code: String,
    pub message: String,
    /// Anything else worth knowing (the approval request id, the limit hit).
    pub details: Value,
}

impl ToolFailure {
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
            details: Value::Null,
        }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = details;
        self
    }
}

/// Codes with a meaning to the sandbox: when a call failing with one of them
/// is not caught, the execution's error takes the matching kind instead of
/// `ToolError`.
pub mod codes {
    /// → `PolicyDenied { tool, reason: message }`.
    pub const POLICY_DENIED: &str = "policy_denied";
    /// → `ApprovalRequired { tool, request_id, how }` from `details`.
    pub const APPROVAL_REQUIRED: &str = "approval_required";
    /// → `LimitExceeded { limit, value, used }` from `details`. The
    /// sandbox itself uses it when a call outlives `call_timeout_ms`.
    pub const LIMIT_EXCEEDED: &str = "limit_exceeded";
    /// No such tool. The sandbox itself uses it for a name longer than
    /// `abi::MAX_TOOL_NAME_BYTES`, which it refuses without reading.
    pub const NOT_FOUND: &str = "not_found";
}

/// Implemented by whoever may reach a backend. `call` may run concurrently
/// with other calls of the same execution (up to `calls_in_flight`), and is
/// cancelled (dropped) when the execution ends before it completes.
#[async_trait]
pub trait ToolHost: Send + Sync {
    async fn call(&self, call: ToolCall) -> Result<Value, ToolFailure>;

    /// On whose behalf the calls are made (the identity). In `reuse` mode
    /// an instance only ever serves executions of one principal: a guest
    /// that a script managed to corrupt must not carry over into another
    /// identity's executions. `None` (the default) means the instance is
    /// not reused at all.
    fn principal(&self) -> Option<&str> {
        None
    }
}
