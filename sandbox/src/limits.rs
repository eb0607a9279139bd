//! What one execution may use, and what the whole sandbox admits at once.
//!
//! Limits are data: every field can be set from a config file, the
//! environment or the command line (the `airlock` binary maps them), and a
//! hit limit is reported as [`crate::ExecError::LimitExceeded`] naming the
//! [`Limit`], its configured value and the amount used.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Per-execution limits. Defaults are sized for an agent's script: small
/// source, a few hundred tool calls, a result that fits comfortably in a
/// model's context.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Script source size. Agents' scripts are a few KiB; 128 KiB leaves room
    /// for embedded data without letting a prompt-injected agent ship a
    /// megabyte of code.
    #[serde(deserialize_with = "size")]
    pub source_bytes: u64,
    /// Guest linear memory, including the ~10 MiB the JS runtime starts
    /// with. 256 MiB holds a fleet-wide inventory with room to spare.
    #[serde(deserialize_with = "size")]
    pub memory_bytes: u64,
    /// Wall-clock budget for the whole execution, time spent waiting on
    /// tools included.
    pub wall_time_ms: u64,
    /// Optional instruction budget (wasmtime fuel). Needs an engine built
    /// with fuel metering, which slows all guest code; off by default
    /// because the wall-clock budget already bounds CPU.
    pub fuel: Option<u64>,
    /// Tool calls one execution may start.
    pub tool_calls: u32,
    /// Tool calls running at once; more wait in order for a free slot, so
    /// `Promise.all` over a long list is throttled, not refused.
    pub calls_in_flight: u32,
    /// Longest a single tool call may take before it fails (catchably)
    /// with code `limit_exceeded`.
    pub call_timeout_ms: u64,
    /// Size of the JSON result handed back; larger results are truncated to
    /// valid JSON and marked.
    #[serde(deserialize_with = "size")]
    pub result_bytes: u64,
    /// Console output kept; further lines are dropped and counted. Each
    /// line costs its bytes plus a fixed overhead
    /// (`abi::LOG_LINE_OVERHEAD`), so empty lines are bounded too.
    #[serde(deserialize_with = "size")]
    pub log_bytes: u64,
    /// JSON argument bytes all tool calls of one execution may hand the
    /// host, charged before the host reads them: the host parses and
    /// holds arguments in its own memory, outside `memory_bytes`.
    #[serde(deserialize_with = "size")]
    pub args_bytes: u64,
    /// Timers (`setTimeout`) armed and not yet fired or cleared at once;
    /// each is a task on the host.
    pub timers: u32,
    /// What a journaled (durable) execution's journal may hold: every
    /// tool result it took, clock reading and random draw, each costing
    /// its bytes plus `journal::ENTRY_OVERHEAD`. The journal is what a
    /// paused execution keeps while it holds no instance.
    #[serde(deserialize_with = "size")]
    pub journal_bytes: u64,
    /// How long an `execute` of a durable execution may hold its answer:
    /// past it, a read still running and any call made after wait for
    /// the execution to be followed (`execute({"execution": ID})`), so a
    /// task of minutes never outlasts a client's request timeout. Not
    /// read by the sandbox; the host applies it.
    pub answer_within_ms: u64,
    /// How long a durable execution may live from its first start, its
    /// time waiting (for decisions, long tasks, a follow-up) included:
    /// past it, it ends (`LifetimeExceeded`) followed or not, so a parked
    /// execution nobody follows does not hold its row for ever. Not read
    /// by the sandbox; the host applies it.
    pub lifetime_ms: u64,
}

/// `4096`, `64KiB`, `256MiB`, `1GiB` (also `KB`/`MB`/`GB` as powers of
/// 1024): how sizes are written in flags, variables and the TOML file.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().map_err(|_| {
        if num.is_empty() {
            format!("`{s}` is not a size; write e.g. 4096, 64KiB, 256MiB or 1GiB")
        } else {
            format!("`{s}` is too large")
        }
    })?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        other => {
            return Err(format!(
                "unknown size unit `{other}` in `{s}`; use KiB, MiB or GiB"
            ))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("`{s}` is too large"))
}

/// A byte size in the file: a number of bytes, or a string with a unit
/// (`"64MiB"`), as flags and variables take it.
fn size<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Bytes(u64),
        Text(String),
    }
    match Size::deserialize(d) {
        Ok(Size::Bytes(n)) => Ok(n),
        Ok(Size::Text(s)) => parse_bytes(&s).map_err(serde::de::Error::custom),
        Err(_) => Err(serde::de::Error::custom(
            "expected a size: a number of bytes or a string such as \"64MiB\"",
        )),
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            source_bytes: 128 * 1024,
            memory_bytes: 256 * 1024 * 1024,
            wall_time_ms: 60_000,
            fuel: None,
            tool_calls: 500,
            calls_in_flight: 16,
            call_timeout_ms: 30_000,
            result_bytes: 256 * 1024,
            log_bytes: 64 * 1024,
            args_bytes: 1024 * 1024,
            timers: 1000,
            journal_bytes: 32 * 1024 * 1024,
            answer_within_ms: 20_000,
            lifetime_ms: 24 * 3600 * 1000,
        }
    }
}

impl Limits {
    pub fn wall_time(&self) -> Duration {
        Duration::from_millis(self.wall_time_ms)
    }

    pub fn call_timeout(&self) -> Duration {
        Duration::from_millis(self.call_timeout_ms)
    }

    pub fn answer_within(&self) -> Duration {
        Duration::from_millis(self.answer_within_ms)
    }

    pub fn lifetime(&self) -> Duration {
        Duration::from_millis(self.lifetime_ms)
    }

    /// Rejects values that cannot work, naming the field and the rule.
    pub fn validate(&self) -> Result<(), LimitsError> {
        let positive = [
            ("source_bytes", self.source_bytes),
            ("memory_bytes", self.memory_bytes),
            ("wall_time_ms", self.wall_time_ms),
            ("tool_calls", self.tool_calls as u64),
            ("calls_in_flight", self.calls_in_flight as u64),
            ("call_timeout_ms", self.call_timeout_ms),
            ("result_bytes", self.result_bytes),
            ("args_bytes", self.args_bytes),
            ("timers", self.timers as u64),
            ("journal_bytes", self.journal_bytes),
            ("answer_within_ms", self.answer_within_ms),
            ("lifetime_ms", self.lifetime_ms),
        ];
        for (field, v) in positive {
            if v == 0 {
                return Err(LimitsError::Zero { field });
            }
        }
        if self.memory_bytes > MAX_MEMORY_BYTES {
            return Err(LimitsError::TooLarge {
                field: "memory_bytes",
                value: self.memory_bytes,
                max: MAX_MEMORY_BYTES,
            });
        }
        for (field, value) in [
            ("result_bytes", self.result_bytes),
            ("args_bytes", self.args_bytes),
        ] {
            if value > MAX_HANDOVER_BYTES {
                return Err(LimitsError::TooLarge {
                    field,
                    value,
                    max: MAX_HANDOVER_BYTES,
                });
            }
        }
        if self.journal_bytes > MAX_JOURNAL_BYTES {
            return Err(LimitsError::TooLarge {
                field: "journal_bytes",
                value: self.journal_bytes,
                max: MAX_JOURNAL_BYTES,
            });
        }
        if self.lifetime_ms > MAX_LIFETIME_MS {
            return Err(LimitsError::TooLarge {
                field: "lifetime_ms",
                value: self.lifetime_ms,
                max: MAX_LIFETIME_MS,
            });
        }
        if self.lifetime_ms < self.wall_time_ms {
            return Err(LimitsError::BelowIncluded {
                field: "lifetime_ms",
                value: self.lifetime_ms,
                of: "wall_time_ms",
                min: self.wall_time_ms,
            });
        }
        if self.fuel == Some(0) {
            return Err(LimitsError::Zero { field: "fuel" });
        }
        Ok(())
    }
}

/// The most `lifetime_ms` may be (30 days): a parked execution holds a
/// row and a place under the parking caps for as long as it lives, and
/// the approvals it waits for last 30 days at most.
pub const MAX_LIFETIME_MS: u64 = 30 * 24 * 3600 * 1000;

/// A 32-bit guest cannot address more than 4 GiB, and its top 1 MiB stays
/// unmapped: the guest's own stack sits at the bottom of its memory, and a
/// stack run past its bottom wraps to just under 4 GiB, where it must
/// fault (reported as `stack_bytes`) rather than write over the heap.
pub const MAX_MEMORY_BYTES: u64 = 4 * 1024 * 1024 * 1024 - (1 << 20);

/// The most `result_bytes` and `args_bytes` may be: what the host parses
/// into its own memory (several times the text's size) must stay far below
/// what a guest could make it read.
pub const MAX_HANDOVER_BYTES: u64 = 64 * 1024 * 1024;

/// The most `journal_bytes` may be: a journal is held in the host's memory
/// while its execution runs, and in a store row while it waits.
pub const MAX_JOURNAL_BYTES: u64 = 1024 * 1024 * 1024;

/// Sandbox-wide admission: how many executions run at once and how many may
/// wait. Read when the [`crate::Sandbox`] is built.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Capacity {
    /// Executions running at once. Each holds a wasm instance and a share
    /// of the CPU; beyond the core count they only add latency.
    pub executions_in_flight: u32,
    /// Executions allowed to wait for a slot; one more is refused at once.
    pub queue_depth: u32,
    /// Longest an execution waits for a slot before it is refused.
    pub queue_wait_ms: u64,
    /// Executions of one identity running at once, so that one identity's
    /// work (busy or only waiting on a timer) cannot hold every slot; its
    /// further executions wait their turn. Unset: half of
    /// `executions_in_flight` (at least 1).
    pub executions_per_identity: Option<u32>,
    /// Executions of one identity waiting at once; one more is refused.
    /// Unset: half of `queue_depth`.
    pub queued_per_identity: Option<u32>,
}

impl Default for Capacity {
    fn default() -> Self {
        Self {
            executions_in_flight: 16,
            queue_depth: 64,
            queue_wait_ms: 10_000,
            executions_per_identity: None,
            queued_per_identity: None,
        }
    }
}

impl Capacity {
    /// One identity's share: executions running and executions waiting.
    pub fn identity_share(&self) -> (u32, u32) {
        (
            self.executions_per_identity
                .unwrap_or((self.executions_in_flight / 2).max(1)),
            self.queued_per_identity
                .unwrap_or((self.queue_depth / 2).max(1).min(self.queue_depth)),
        )
    }

    pub fn validate(&self) -> Result<(), LimitsError> {
        if self.executions_in_flight == 0 {
            return Err(LimitsError::Zero {
                field: "executions_in_flight",
            });
        }
        if self.executions_per_identity == Some(0) {
            return Err(LimitsError::Zero {
                field: "executions_per_identity",
            });
        }
        for (field, value, max, of) in [
            (
                "executions_per_identity",
                self.executions_per_identity,
                self.executions_in_flight,
                "executions_in_flight",
            ),
            (
                "queued_per_identity",
                self.queued_per_identity,
                self.queue_depth,
                "queue_depth",
            ),
        ] {
            if let Some(value) = value.filter(|v| *v > max) {
                return Err(LimitsError::AboveShared {
                    field,
                    value,
                    of,
                    max,
                });
            }
        }
        if self.executions_in_flight > MAX_EXECUTIONS_IN_FLIGHT {
            return Err(LimitsError::TooLarge {
                field: "executions_in_flight",
                value: self.executions_in_flight as u64,
                max: MAX_EXECUTIONS_IN_FLIGHT as u64,
            });
        }
        Ok(())
    }
}

/// Instance slots are reserved up front (address space, not memory); this
/// bounds that reservation.
pub const MAX_EXECUTIONS_IN_FLIGHT: u32 = 1000;

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LimitsError {
    #[error("limit `{field}` must be greater than 0")]
    Zero { field: &'static str },
    #[error("limit `{field}` is {value}, above the maximum of {max}")]
    TooLarge {
        field: &'static str,
        value: u64,
        max: u64,
    },
    #[error("limit `{field}` is {value}, above `{of}` ({max}), which it is a share of; lower it or raise `{of}`")]
    AboveShared {
        field: &'static str,
        value: u32,
        of: &'static str,
        max: u32,
    },
    #[error("limit `{field}` is {value}, below `{of}` ({min}), which it includes; raise it or lower `{of}`")]
    BelowIncluded {
        field: &'static str,
        value: u64,
        of: &'static str,
        min: u64,
    },
    #[error("limit `fuel` is set but the sandbox was built without fuel metering; build it with `fuel_metering: true` (CLI: --fuel)")]
    FuelNotMetered,
}

/// Which limit was hit; its name is what operators set (`--wall-time-ms`,
/// `wall_time_ms = ...`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    SourceBytes,
    MemoryBytes,
    WallTimeMs,
    Fuel,
    ToolCalls,
    CallTimeoutMs,
    ResultBytes,
    LogBytes,
    ArgsBytes,
    Timers,
    JournalBytes,
    ExecutionsInFlight,
    QueueDepth,
    QueueWaitMs,
    ExecutionsPerIdentity,
    QueuedPerIdentity,
    /// The guest's native stack (fixed; JS recursion is stopped earlier by
    /// `recursion_depth`).
    StackBytes,
    /// Nested JS function calls (fixed by the JS engine at 512).
    RecursionDepth,
    /// Values on the JS engine's operand stack (fixed at 10240).
    JsStackSize,
}

impl Limit {
    /// The configuration name of the limit.
    pub fn name(self) -> &'static str {
        match self {
            Self::SourceBytes => "source_bytes",
            Self::MemoryBytes => "memory_bytes",
            Self::WallTimeMs => "wall_time_ms",
            Self::Fuel => "fuel",
            Self::ToolCalls => "tool_calls",
            Self::CallTimeoutMs => "call_timeout_ms",
            Self::ResultBytes => "result_bytes",
            Self::LogBytes => "log_bytes",
            Self::ArgsBytes => "args_bytes",
            Self::Timers => "timers",
            Self::JournalBytes => "journal_bytes",
            Self::ExecutionsInFlight => "executions_in_flight",
            Self::QueueDepth => "queue_depth",
            Self::QueueWaitMs => "queue_wait_ms",
            Self::ExecutionsPerIdentity => "executions_per_identity",
            Self::QueuedPerIdentity => "queued_per_identity",
            Self::StackBytes => "stack_bytes",
            Self::RecursionDepth => "recursion_depth",
            Self::JsStackSize => "js_stack_size",
        }
    }

    /// What to do about it, for the agent or the operator reading the error.
    pub fn advice(self) -> &'static str {
        match self {
            Self::SourceBytes => "send a shorter script, or move data into tool arguments",
            Self::MemoryBytes => "process data in smaller pieces, or ask the operator to raise memory_bytes",
            Self::WallTimeMs => "do less per execution (fewer or narrower tool calls), or ask the operator to raise wall_time_ms",
            Self::Fuel => "do less computation per execution, or ask the operator to raise fuel",
            Self::ToolCalls => "batch work into fewer calls or split it across executions",
            Self::CallTimeoutMs => "the tool was too slow; retry, narrow the request, or ask the operator to raise call_timeout_ms",
            Self::ResultBytes => "return only the fields you need (filter and aggregate in the script)",
            Self::LogBytes => "log less; return data as the result instead",
            Self::ArgsBytes => "pass smaller arguments (send identifiers, not data), or split the work across executions",
            Self::Timers => "arm fewer timers at once (await one before arming the next)",
            Self::JournalBytes => "take narrower tool results and read the clock less (everything a durable execution takes is kept until it ends), split the work across executions, or ask the operator to raise journal_bytes",
            Self::ExecutionsInFlight | Self::QueueDepth | Self::QueueWaitMs => "the sandbox is busy; retry shortly",
            Self::ExecutionsPerIdentity | Self::QueuedPerIdentity => {
                "this identity already has its share of executions running and waiting; await them before starting more"
            }
            Self::StackBytes | Self::RecursionDepth | Self::JsStackSize => {
                "recurse less deeply (use a loop with an explicit stack) or nest data less"
            }
        }
    }
}

impl Limit {
    /// Whether hitting it means the execution was not admitted (nothing
    /// of it ran): a retry shortly may be.
    pub fn is_admission(self) -> bool {
        matches!(
            self,
            Self::ExecutionsInFlight
                | Self::QueueDepth
                | Self::QueueWaitMs
                | Self::ExecutionsPerIdentity
                | Self::QueuedPerIdentity
        )
    }
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 4 GiB would map the addresses a wrapped guest stack writes to.
    #[test]
    fn memory_stops_short_of_the_wrapped_stack() {
        let at = |memory_bytes| {
            Limits {
                memory_bytes,
                ..Limits::default()
            }
            .validate()
        };
        assert!(at(MAX_MEMORY_BYTES).is_ok());
        assert!(matches!(
            at(4 << 30),
            Err(LimitsError::TooLarge {
                field: "memory_bytes",
                ..
            })
        ));
    }
}
