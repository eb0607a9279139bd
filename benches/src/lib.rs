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

/// Data work a script does inside the sandbox (issue 19): name, script
/// (`benches/compute/NAME.js`, where `benches/profile/profile.sh` finds it
/// too), and the value it must end with, so a faster engine that computes
/// something else does not count. The same work in Python for
/// ProxmoxMCP-Plus's Monty is in `benches/peer/compute.py`.
pub const COMPUTE: &[(&str, &str, &str)] = &[
    (
        "calls_300k",
        include_str!("../compute/calls_300k.js"),
        "300000",
    ),
    (
        "sort_20k_comparator",
        include_str!("../compute/sort_20k_comparator.js"),
        "2147699569",
    ),
    (
        "group_5k_by_key",
        include_str!("../compute/group_5k_by_key.js"),
        "[715,715,714,714,714,714,714]",
    ),
    (
        "json_1k_rows_round_trip",
        include_str!("../compute/json_1k_rows_round_trip.js"),
        "1000",
    ),
    (
        "concat_50k_pieces",
        include_str!("../compute/concat_50k_pieces.js"),
        "100000",
    ),
    (
        "regex_10k_lines",
        include_str!("../compute/regex_10k_lines.js"),
        "589",
    ),
    (
        "typed_fill_1mib",
        include_str!("../compute/typed_fill_1mib.js"),
        "15",
    ),
    (
        "typed_bytes_loop_1mib",
        include_str!("../compute/typed_bytes_loop_1mib.js"),
        "133693440",
    ),
    (
        "objects_10k_x10",
        include_str!("../compute/objects_10k_x10.js"),
        r#"{"pve1":411174,"pve2":411186,"pve0":411200}"#,
    ),
];
