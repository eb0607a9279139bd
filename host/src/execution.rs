//! One execution's life, the same for `exec`, `demo`, `serve` and `bench`:
//! its start is written to the audit log before the sandbox runs anything
//! (when that write fails, nothing runs), every tool call goes through the
//! gateway as the execution's caller, and its end is written with the
//! outcome's kind, the number of calls and the time it took, also when
//! the client cancelled it.
//!
//! The callers differ only in what they do around it: the MCP server
//! races the run against the client's cancellation and asks for approval
//! in the client; `exec` prints a report; `bench` times it.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use airlock_gateway::{
    audit::AuditError,
    gateway::{LimitsUsed, StartError},
    Caller, Gateway,
};
use airlock_sandbox::{ExecError, Limits, Outcome, Sandbox, ToolHost};

use crate::wiring::ScriptTools;

/// The script did not run: the audit log refused the start line, or
/// the identity already holds its places across the deployment.
#[derive(Debug, thiserror::Error)]
pub enum NotStarted {
    #[error("the audit log cannot be written, so nothing runs: {0}")]
    Audit(AuditError),
    #[error("{0}")]
    Refused(StartError),
}

/// How long a client is told to wait before trying again when a state
/// store cannot be reached (the same as a script's refused call).
pub use airlock_gateway::gateway::STATE_RETRY_AFTER_MS;

impl NotStarted {
    /// The store that could not be reached, when that is why nothing ran:
    /// not the client's mistake, and worth retrying.
    pub fn unavailable_store(&self) -> Option<&'static str> {
        match self {
            NotStarted::Audit(_) => Some("audit"),
            NotStarted::Refused(StartError::SharesUnavailable(_)) => Some("execution_places"),
            NotStarted::Refused(_) => None,
        }
    }
}

/// The one error every caller gets when a state store cannot be reached:
/// nothing ran, nothing is wrong with the request, and trying again
/// shortly is the thing to do.
pub fn state_unavailable(store: &str, message: &str) -> serde_json::Value {
    serde_json::json!({"error": {
        "kind": "StateUnavailable",
        "store": store,
        "retryable": true,
        "retry_after_ms": STATE_RETRY_AFTER_MS,
        "message": format!("{message}; nothing ran and nothing is wrong with the request: run it again in a few seconds (the operator is told)"),
    }})
}

impl From<StartError> for NotStarted {
    fn from(e: StartError) -> Self {
        match e {
            StartError::Audit(a) => Self::Audit(a),
            other => Self::Refused(other),
        }
    }
}

/// An execution whose start is in the audit log and whose end is not yet.
/// Dropping it without [`Execution::finish`] leaves the end unwritten;
/// every path in this crate finishes it.
pub struct Execution {
    gateway: Arc<Gateway>,
    caller: Caller,
    started: Instant,
}

/// How an execution ended.
pub enum Ended<'a> {
    /// The sandbox returned an outcome (a value or an error).
    Ran(&'a Outcome),
    /// The client cancelled it; `calls` had been made by then.
    Cancelled { calls: u32 },
}

/// What was written as the execution's end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finished {
    /// The execution's id in the audit log.
    pub id: String,
    /// `ok`, an error kind (`LimitExceeded`, ...) or `Cancelled`.
    pub kind: &'static str,
    pub calls: u32,
    pub took: Duration,
}

impl Execution {
    /// Writes the start line: who runs it, in which mode, the script's
    /// hash and size.
    pub fn start(gateway: &Arc<Gateway>, caller: Caller, script: &str) -> Result<Self, NotStarted> {
        let id = gateway.execution_started(&caller, script)?;
        Ok(Self {
            gateway: gateway.clone(),
            caller: Caller {
                execution: Some(id),
                ..caller
            },
            started: Instant::now(),
        })
    }

    /// Goes on with a parked execution under its id: it takes a place
    /// again and the log says so, or nothing of it runs.
    pub fn resume(gateway: &Arc<Gateway>, caller: Caller, id: &str) -> Result<Self, NotStarted> {
        gateway.execution_resumed(&caller, id)?;
        crate::metrics::global().resumed();
        Ok(Self {
            gateway: gateway.clone(),
            caller: Caller {
                execution: Some(id.to_string()),
                ..caller
            },
            started: Instant::now(),
        })
    }

    /// The execution stopped to wait for the decisions `waiting` (request
    /// ids): logged as parked, its place given back. No end line: it goes
    /// on later under the same id, and ends once.
    pub fn park(self, waiting: &[String], ran: &Outcome) {
        let waited = Duration::from_micros(ran.stats.queue_us);
        crate::metrics::global().admission(&self.caller.identity, waited, None);
        self.parked(waiting, ran.stats.tool_calls);
    }

    /// The server stopped while the execution ran, and let go of it to be
    /// resumed from its last record: logged as parked, waiting for
    /// nothing but to be followed. No end line, as for [`Self::park`].
    pub fn let_go(self, calls: u32) {
        self.parked(&[], calls);
    }

    fn parked(self, waiting: &[String], calls: u32) {
        // The run is over (the execution is not): counted as one, ending
        // `Parked`.
        crate::metrics::global().execution("Parked", None, self.started.elapsed());
        let id = self.id().to_string();
        if let Err(e) = self
            .gateway
            .execution_parked(&id, waiting, calls, self.started.elapsed())
        {
            tracing::warn!(execution = %id, error = %e, "could not record that an execution parked in the audit log");
        }
    }

    /// How long it has run here (since its start or resume).
    pub fn ran_for(&self) -> Duration {
        self.started.elapsed()
    }

    /// The caller every tool call of this execution is made as.
    pub fn caller(&self) -> &Caller {
        &self.caller
    }

    pub fn id(&self) -> &str {
        self.caller.execution.as_deref().unwrap_or_default()
    }

    /// The gateway as this execution's tool host, running no runbooks.
    pub fn tools(&self) -> ScriptTools {
        ScriptTools {
            gateway: self.gateway.clone(),
            caller: self.caller.clone(),
            runbooks: None,
            budget: None,
            durable: false,
        }
    }

    /// The gateway as this execution's tool host, running the runbooks
    /// its script calls in `sandbox` within `limits`.
    pub fn tools_running_runbooks(&self, sandbox: &Sandbox, limits: &Limits) -> ScriptTools {
        ScriptTools {
            runbooks: Some(crate::runbooks::Runner::new(sandbox, limits)),
            ..self.tools()
        }
    }

    /// Runs `script` with `host` answering its tool calls, then writes the
    /// end. For callers with nothing to race the run against.
    pub async fn run(
        self,
        sandbox: &Sandbox,
        script: &str,
        limits: &Limits,
        host: &dyn ToolHost,
    ) -> (Outcome, Finished) {
        let outcome = sandbox.execute(script, limits, host).await;
        let finished = self.finish(Ended::Ran(&outcome));
        (outcome, finished)
    }

    /// Writes the end line. A failure to write it is logged, not returned:
    /// the work is done, and its calls are in the log line by line.
    pub fn finish(self, ended: Ended<'_>) -> Finished {
        let took = self.started.elapsed();
        let used = match ended {
            Ended::Ran(o) => LimitsUsed {
                tool_calls: o.stats.tool_calls,
                wall: took,
                // A run refused before it had an instance measured
                // nothing: left out, not counted as zero.
                sandbox: entered(o).then(|| Duration::from_micros(o.stats.wall_us)),
                peak_memory_bytes: entered(o).then_some(o.stats.peak_memory_bytes),
                result_bytes: result_bytes(o),
                journal_bytes: o.stats.journal.as_ref().map(|j| j.bytes),
                limit: match o.error() {
                    Some(ExecError::LimitExceeded { limit, .. }) => Some(limit.name()),
                    _ => None,
                },
            },
            Ended::Cancelled { calls } => LimitsUsed {
                tool_calls: calls,
                wall: took,
                ..LimitsUsed::default()
            },
        };
        let kind = match ended {
            Ended::Ran(o) => o.error().map(|e| e.kind()).unwrap_or("ok"),
            Ended::Cancelled { .. } => "Cancelled",
        };
        let calls = used.tool_calls;
        let metrics = crate::metrics::global();
        metrics.execution(kind, used.limit, took);
        metrics.used(self.gateway.mode_of(&self.caller).as_str(), &used);
        if let Ended::Ran(o) = ended {
            let waited = Duration::from_micros(o.stats.queue_us);
            metrics.admission(&self.caller.identity, waited, used.limit);
        }
        let id = self.id().to_string();
        if let Err(e) = self.gateway.execution_ended(&id, kind, &used) {
            tracing::warn!(execution = %id, error = %e, "could not record the end of an execution in the audit log");
        }
        Finished {
            id,
            kind,
            calls,
            took,
        }
    }
}

/// Whether the run had an instance: one refused at admission, or before
/// its instance was made, used no memory.
fn entered(o: &Outcome) -> bool {
    o.stats.peak_memory_bytes > 0
}

/// The bytes of an outcome's value as JSON, counted without building the
/// text; the size before the cut when the value was cut to `result_bytes`
/// (the guest's own count, so held to what a guest's memory can hold);
/// none for a run that ended without a value.
fn result_bytes(o: &Outcome) -> Option<u64> {
    if let Some(t) = &o.truncated {
        return Some(t.original_bytes.min(airlock_sandbox::MAX_MEMORY_BYTES));
    }
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let value = o.result.as_ref().ok()?;
    serde_json::to_writer(&mut count, value).ok()?;
    Some(count.0)
}
