//! What an execution returns: the value or one structured error, and always
//! the console output, a trace of every tool call and the resources used.

use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

use crate::{limits::Limit, Mode};

/// Everything one `execute` produced.
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    /// The script's value (JSON), or why there is none.
    #[serde(serialize_with = "serialize_result", rename = "result")]
    pub result: Result<Value, ExecError>,
    /// Set when the value was larger than `result_bytes` and was cut down.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated: Option<Truncation>,
    pub logs: Vec<LogEntry>,
    /// Set when console output went past `log_bytes` and lines were dropped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logs_truncated: Option<Truncation>,
    pub trace: Vec<CallRecord>,
    pub stats: Stats,
}

impl Outcome {
    pub fn is_ok(&self) -> bool {
        self.result.is_ok()
    }

    pub fn error(&self) -> Option<&ExecError> {
        self.result.as_ref().err()
    }

    /// The value, or `Value::Null` on failure.
    pub fn value(&self) -> &Value {
        static NULL: Value = Value::Null;
        self.result.as_ref().unwrap_or(&NULL)
    }
}

fn serialize_result<S: Serializer>(r: &Result<Value, ExecError>, s: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    #[serde(rename_all = "lowercase")]
    enum Tagged<'a> {
        Ok(&'a Value),
        Error(&'a ExecError),
    }
    match r {
        Ok(v) => Tagged::Ok(v).serialize(s),
        Err(e) => Tagged::Error(e).serialize(s),
    }
}

/// A limit that cut output short without failing the execution.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Truncation {
    pub limit: Limit,
    pub value: u64,
    /// Bytes the full output would have taken.
    pub original_bytes: u64,
}

/// The console level is the ABI's own: one enum from the guest's call to
/// the JSON outcome (`"level": "warn"`).
pub use airlock_guest_sdk::abi::LogLevel;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LogEntry {
    #[serde(serialize_with = "level_name")]
    pub level: LogLevel,
    pub message: String,
}

fn level_name<S: serde::Serializer>(level: &LogLevel, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(level.as_str())
}

/// One tool call as the host saw it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CallRecord {
    pub tool: String,
    /// Microseconds from the start of the execution to the call's start.
    pub start_us: u64,
    /// Microseconds the call took, queueing for a slot excluded; `None` if
    /// it was still running when the execution ended.
    pub duration_us: Option<u64>,
    /// `"ok"`, or the error code the call failed with.
    pub status: String,
    /// The call ran before a pause or a crash, and its end was replayed
    /// from the execution's journal, not sent again.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
}

/// A call a parked execution waits for, as its tool host described it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Waiting {
    /// The call's id in the execution (its place in the trace, from 1).
    pub call: u32,
    pub tool: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub details: Value,
}

/// Resources one execution used.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Stats {
    pub mode: Mode,
    /// Executions this instance has served, this one included (always 1 in
    /// `fresh` mode).
    pub instance_uses: u32,
    pub tool_calls: u32,
    pub peak_calls_in_flight: u32,
    pub peak_memory_bytes: u64,
    pub wall_us: u64,
    /// Time spent waiting for an execution slot.
    pub queue_us: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fuel_used: Option<u64>,
    /// A durable execution's journal, as it stands after this run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub journal: Option<JournalStats>,
}

/// How much of a durable execution's journal this run replayed and how
/// large it is now.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct JournalStats {
    pub entries: u64,
    pub replayed_entries: u64,
    /// What the journal counts against `journal_bytes`.
    pub bytes: u64,
}

/// Why an execution produced no value. Each kind carries what an agent
/// needs to fix its script or an operator to fix the configuration.
#[derive(Clone, Debug, PartialEq, thiserror::Error, Serialize)]
#[serde(tag = "kind")]
pub enum ExecError {
    #[error("SyntaxError at line {line}, column {column}: {message}")]
    SyntaxError {
        line: u32,
        column: u32,
        message: String,
    },

    #[error("{message}")]
    RuntimeError {
        message: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        stack: Option<String>,
    },

    #[error("limit {limit} exceeded: used {used} of {value}; {advice}", advice = limit.advice())]
    LimitExceeded { limit: Limit, value: u64, used: u64 },

    #[error("tool {tool} failed ({code}): {message}")]
    ToolError {
        tool: String,
        code: String,
        message: String,
        #[serde(skip_serializing_if = "Value::is_null")]
        details: Value,
    },

    #[error("tool {tool} is not allowed: {reason}")]
    PolicyDenied { tool: String, reason: String },

    #[error("tool {tool} needs approval (request {request_id}): {how}")]
    ApprovalRequired {
        tool: String,
        request_id: String,
        how: String,
    },

    #[error("the execution was cancelled")]
    Cancelled,

    /// A journaled execution stopped to wait: every call it was waiting
    /// for waits for something outside it (a person's decision). Its
    /// journal holds everything up to here; run it again with the journal
    /// once the decision is in, and it goes on from here.
    #[error("the execution waits for {n} call{s} (first: {first})", n = waiting.len(), s = if waiting.len() == 1 { "" } else { "s" }, first = waiting.first().map(|w| w.message.as_str()).unwrap_or(""))]
    Parked { waiting: Vec<Waiting> },

    /// Replaying a journal, the script asked for something the journal
    /// does not hold (at entry `entry`), or the journal is another
    /// script's. Nothing was sent.
    #[error("{message}")]
    ReplayDiverged { entry: u64, message: String },

    /// The request itself cannot run (bad limits); nothing was executed.
    #[error("invalid request: {message}")]
    InvalidRequest { message: String },

    /// The sandbox itself failed (the guest crashed or broke the ABI). The
    /// host is unaffected; the instance is discarded.
    #[error("sandbox failure: {message}")]
    Internal { message: String },
}

impl ExecError {
    pub fn limit(limit: Limit, value: u64, used: u64) -> Self {
        Self::LimitExceeded { limit, value, used }
    }

    /// The name of the kind, as serialized in `kind`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::SyntaxError { .. } => "SyntaxError",
            Self::RuntimeError { .. } => "RuntimeError",
            Self::LimitExceeded { .. } => "LimitExceeded",
            Self::ToolError { .. } => "ToolError",
            Self::PolicyDenied { .. } => "PolicyDenied",
            Self::ApprovalRequired { .. } => "ApprovalRequired",
            Self::Cancelled => "Cancelled",
            Self::ReplayDiverged { .. } => "ReplayDiverged",
            Self::Parked { .. } => "Parked",
            Self::InvalidRequest { .. } => "InvalidRequest",
            Self::Internal { .. } => "Internal",
        }
    }
}
