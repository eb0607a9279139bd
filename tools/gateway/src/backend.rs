//! What the gateway needs from a backend: its tools, and a way to call one.
//! A backend is only ever called by the gateway, after validation, policy,
//! approval and limits.

use async_trait::async_trait;
use serde_json::{json, Value};

use crate::caller::Caller;
use airlock_catalog::spec::ToolSpec;

/// A successful backend answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    pub value: Value,
    /// The backend's own id for the request (a Proxmox UPID, a collector
    /// request id), recorded in the audit line.
    pub request_id: Option<String>,
}

impl Reply {
    pub fn new(value: Value) -> Self {
        Self {
            value,
            request_id: None,
        }
    }
}

/// A failed backend call: a machine-readable code and a message fit for an
/// agent (no internal addresses, no secrets).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct BackendError {
    pub code: String,
    pub message: String,
}

impl BackendError {
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
        }
    }
}

/// How a read's answer says a task ended (for a plan that waits on it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskEnd {
    /// Ended, and well.
    Ok,
    /// Still running: not ended yet.
    Running,
    /// Ended otherwise; the exit status as the backend says it.
    Failed(String),
}

#[async_trait]
pub trait Backend: Send + Sync {
    /// Short, stable id (`pve`, `quox`, `demo`): tools record it, clashes
    /// are renamed with it.
    fn id(&self) -> &str;

    /// The tools it serves, in the order they should be listed.
    fn tools(&self) -> Vec<ToolSpec>;

    /// Changes whenever `tools()` would answer differently (a backend that
    /// discovers its tools at run time); the gateway rebuilds its catalog
    /// when it sees a new value. Fixed backends keep the default.
    fn generation(&self) -> u64 {
        0
    }

    /// The prefix of every tool name this backend may add later, so that
    /// policy lists may name such tools before they are discovered.
    fn namespace(&self) -> Option<&str> {
        None
    }

    /// Why this backend's tools are missing from the catalog, while they
    /// are (a collector that has not answered since start-up): a call to
    /// a name in its namespace is then told so, as `unavailable`, instead
    /// of "no tool named ...".
    fn unavailable(&self) -> Option<String> {
        None
    }

    /// What a change recorded in plan mode answers the script instead of
    /// the backend's reply: shaped like the reply, so the script goes on,
    /// and carrying `token` (`pl-….n`) wherever a later call would pass
    /// it on (a task id), so that call is answered by the plan too. The
    /// default follows the tool's output schema: a string for a string,
    /// else an object `{"planned": token}`.
    fn planned(&self, tool: &ToolSpec, args: &Value, token: &str) -> Value {
        let _ = args;
        match tool.output_schema.as_ref().and_then(|s| s.get("type")) {
            Some(Value::String(t)) if t == "string" => Value::String(format!("planned:{token}")),
            _ => json!({"planned": token}),
        }
    }

    /// The answer, in plan mode, to a read whose arguments carry a
    /// planned value (waiting for a planned task): the object it names
    /// does not exist, so the read is not sent. The default says so.
    fn planned_read(&self, tool: &ToolSpec, args: &Value) -> Value {
        let _ = (tool, args);
        json!({"planned": true, "message": "answered by the plan: an argument is the result of a planned change, which has not been made"})
    }

    /// Whether `tool` reads a task (waits for one, or reads its status),
    /// so that its answer says how the task ended ([`Backend::task_end`]).
    /// In plan mode only such a read of a planned change's task becomes
    /// a step of the plan: what the approver is told it checks, it checks.
    fn reads_task(&self, tool: &ToolSpec) -> bool {
        let _ = tool;
        false
    }

    /// What a read's answer says of the task it looked at, if it looked
    /// at one (a wait for a task, a task's status); `None` for any other
    /// read. A plan that recorded such a read after a change stops when
    /// the task ended other than OK.
    fn task_end(&self, tool: &ToolSpec, value: &Value) -> Option<TaskEnd> {
        let _ = (tool, value);
        None
    }

    /// Runs `tool` with arguments that already passed validation, on
    /// behalf of `caller` (whose credentials the backend may hold).
    async fn call(
        &self,
        caller: &Caller,
        tool: &ToolSpec,
        args: Value,
    ) -> Result<Reply, BackendError>;
}
