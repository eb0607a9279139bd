//! Shared pieces of the benches: the fastest possible in-process tool host,
//! so that what is measured is the sandbox, not a backend.

use airlock_sandbox::{ToolCall, ToolFailure, ToolHost};
use async_trait::async_trait;
use serde_json::Value;

/// Answers every call at once with its arguments. Labelled "in-process
/// echo host" in reports: overhead numbers, not end-to-end numbers.
pub struct EchoHost;

#[async_trait]
impl ToolHost for EchoHost {
    async fn call(&self, call: ToolCall) -> Result<Value, ToolFailure> {
        Ok(call.args)
    }

    /// One principal, so `reuse` mode really reuses instances.
    fn principal(&self) -> Option<&str> {
        Some("bench")
    }
}

/// The workloads of the sandbox bench, by name.
pub const WORKLOADS: &[(&str, &str)] = &[
    ("one_plus_one", "1+1"),
    ("one_call", "await tools.echo({n: 1})"),
    (
        "ten_sequential",
        "let s = 0; for (let i = 0; i < 10; i++) { s += (await tools.echo({n: i})).n } s",
    ),
    (
        "ten_parallel",
        "(await Promise.all(Array.from({length: 10}, (_, i) => tools.echo({n: i})))).length",
    ),
];
