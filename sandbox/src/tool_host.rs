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
#[derive(Clone, Debug)]
pub struct ToolCall {
    pub name: String,
    pub args: Value,
    /// Where the host says how far the call got, for the trace.
    pub note: CallNote,
    /// The execution's journal shows this call started before a pause or
    /// a crash, with no end: it may have reached the host already. A host
    /// that cannot tell whether it did must not make a change again.
    pub resumed: bool,
    /// The execution's journal as it stands, for a host that writes it
    /// down before it sends a change.
    pub journal: JournalTap,
}

impl ToolCall {
    /// A call with no trace behind it (the host's own tests and tools).
    pub fn new(name: impl Into<String>, args: Value) -> Self {
        Self {
            name: name.into(),
            args,
            note: CallNote::default(),
            resumed: false,
            journal: JournalTap::default(),
        }
    }
}

/// A look at a journaled execution's journal while it runs: everything
/// that crossed its boundary so far, this call's start included. A host
/// writes it where another process finds it before it sends a change
/// (and again once the answer is in), so that a process that dies leaves
/// a record of what it may have sent; replayed from there, the execution
/// reaches the same call without sending anything. Empty for an
/// execution that is not journaled; holds the journal weakly, so a tap
/// kept past its execution keeps nothing alive.
#[derive(Clone, Default)]
pub struct JournalTap(Option<Tap>);

#[derive(Clone)]
enum Tap {
    Live(std::sync::Weak<std::sync::Mutex<crate::replay::Recorder>>),
    Fixed(std::sync::Arc<crate::Journal>),
}

impl JournalTap {
    pub(crate) fn of(recorder: &crate::replay::Shared) -> Self {
        Self(Some(Tap::Live(std::sync::Arc::downgrade(recorder))))
    }

    /// A tap that always shows `journal`: for a tool host's own tests,
    /// which call it without a sandbox.
    pub fn fixed(journal: crate::Journal) -> Self {
        Self(Some(Tap::Fixed(std::sync::Arc::new(journal))))
    }

    /// A copy of the journal now; `None` when the execution is not
    /// journaled, has ended, or its replay diverged (nothing more is
    /// sent then).
    pub fn snapshot(&self) -> Option<crate::Journal> {
        match self.0.as_ref()? {
            Tap::Live(recorder) => {
                let recorder = recorder.upgrade()?;
                let r = recorder.lock().unwrap_or_else(|p| p.into_inner());
                r.journal_now()
            }
            Tap::Fixed(journal) => Some(journal.as_ref().clone()),
        }
    }
}

/// The trace entry of one call, for the host to say where the call stands
/// before it ends. A call the execution abandons (the script finished, or
/// failed, while it waited) is traced as `cancelled` unless the host noted
/// more: a call whose approval request was filed is noted
/// `approval_required`, because that request stays open for an operator
/// after the script is gone, and the trace must not say the call never
/// asked. The call's end, if it comes, overwrites the note.
///
/// It holds the trace weakly: a note kept past its execution keeps nothing
/// alive and changes nothing.
#[derive(Clone, Default)]
pub struct CallNote(Option<(TraceRef, u32)>);

/// Every call the script started, by id, shared with the dispatcher so the
/// trace survives the dispatcher being dropped.
pub type Trace = std::sync::Arc<std::sync::Mutex<Vec<(u32, crate::CallRecord)>>>;

type TraceRef = std::sync::Weak<std::sync::Mutex<Vec<(u32, crate::CallRecord)>>>;

impl CallNote {
    pub(crate) fn of(trace: &Trace, id: u32) -> Self {
        Self(Some((std::sync::Arc::downgrade(trace), id)))
    }

    /// Sets the call's status in the trace while it is still running.
    pub fn status(&self, code: &str) {
        let Some((trace, id)) = &self.0 else { return };
        let Some(trace) = trace.upgrade() else { return };
        let mut trace = trace.lock().unwrap();
        if let Some((_, rec)) = trace.iter_mut().rev().find(|(i, _)| i == id) {
            if rec.duration_us.is_none() {
                rec.status = code.to_string();
            }
        }
    }
}

impl CallNote {
    /// Adds the calls a call made on the script's behalf (a runbook's) to
    /// the trace, after it, each named `"{call} › {tool}"` (U+203A, which
    /// a script's own call names never show unescaped): they count in
    /// the execution's trace as the script's own. Returns how many were
    /// added.
    pub fn nested(&self, calls: &[crate::CallRecord]) -> usize {
        let Some((trace, id)) = &self.0 else { return 0 };
        let Some(trace) = trace.upgrade() else {
            return 0;
        };
        let mut trace = trace.lock().unwrap();
        let Some((parent, start)) = trace
            .iter()
            .rev()
            .find(|(i, _)| i == id)
            .map(|(_, r)| (r.tool.clone(), r.start_us))
        else {
            return 0;
        };
        for c in calls {
            // An id no call of the script has, so a note or an end of
            // the parent call finds the parent's entry, not these.
            trace.push((
                NESTED,
                crate::CallRecord {
                    tool: format!("{parent} \u{203a} {}", c.tool),
                    start_us: start + c.start_us,
                    duration_us: c.duration_us,
                    status: c.status.clone(),
                    replayed: c.replayed,
                },
            ));
        }
        calls.len()
    }
}

impl CallNote {
    /// The call's id in its execution (its place in the trace, from 1),
    /// when it has a trace.
    pub fn call_id(&self) -> Option<u32> {
        self.0.as_ref().map(|(_, id)| *id)
    }

    /// The calls the script itself has started so far, this one
    /// included (not those added by [`CallNote::nested`]).
    pub fn own_calls(&self) -> usize {
        let Some((trace, _)) = &self.0 else { return 0 };
        trace.upgrade().map_or(0, |t| {
            t.lock()
                .unwrap()
                .iter()
                .filter(|(id, _)| *id != NESTED)
                .count()
        })
    }
}

/// How many calls in `trace` were made on a call's behalf.
pub(crate) fn nested_calls(trace: &Trace) -> u32 {
    trace
        .lock()
        .unwrap()
        .iter()
        .filter(|(id, _)| *id == NESTED)
        .count() as u32
}

/// The trace id of calls made on a call's behalf.
pub(crate) const NESTED: u32 = u32::MAX;

impl std::fmt::Debug for JournalTap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JournalTap")
    }
}

impl std::fmt::Debug for CallNote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallNote")
    }
}

/// A failed tool call. The script sees it as a catchable `Error` named
/// `ToolError` with the properties `tool`, `code`, `message` and `details`.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize, thiserror::Error)]
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
    /// A person denied this call's approval (an approver, or the person in
    /// the client declining) → `PolicyDenied { tool, reason: message }`.
    pub const APPROVAL_DENIED: &str = "approval_denied";
    /// → `ApprovalRequired { tool, request_id, how }` from `details`.
    pub const APPROVAL_REQUIRED: &str = "approval_required";
    /// → `LimitExceeded { limit, value, used }` from `details`. The
    /// sandbox itself uses it when a call outlives `call_timeout_ms`.
    pub const LIMIT_EXCEEDED: &str = "limit_exceeded";
    /// No such tool. The sandbox itself uses it for a name longer than
    /// `abi::MAX_TOOL_NAME_BYTES`, which it refuses without reading.
    pub const NOT_FOUND: &str = "not_found";
    /// Not a failure code but a trace status: the call had not ended when
    /// the execution did.
    pub const CANCELLED: &str = "cancelled";
    /// Not a failure: the call cannot go on until something outside the
    /// execution happens (another person decides its approval). A
    /// journaled execution parks on it: once every call it waits for is
    /// waiting, and no timer is armed, it ends as
    /// `Parked { waiting }` with its journal, to be resumed by replay when
    /// the decision is in (the call is then sent again). `message` and
    /// `details` say what it waits for. In an execution that is not
    /// journaled it reaches the script as any failure.
    pub const WAITING: &str = "waiting";
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
