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

/// Data work a script does inside the sandbox (issue 19): name, script,
/// and the value it must end with, so a faster engine that computes
/// something else does not count. The same work in Python for
/// ProxmoxMCP-Plus's Monty is in `benches/peer/compute.py`.
pub const COMPUTE: &[(&str, &str, &str)] = &[
    (
        "calls_300k",
        "const f = (x) => x + 1; let s = 0; for (let i = 0; i < 300000; i++) s = f(s); s",
        "300000",
    ),
    (
        "sort_20k_comparator",
        "const a = []; let x = 12345;
         for (let i = 0; i < 20000; i++) { x = (x * 1103515245 + 12345) % 2147483648; a.push(x); }
         a.sort((p, q) => p - q); a[0] + a[19999]",
        "2147490816",
    ),
    (
        "group_5k_by_key",
        "const rows = [];
         for (let i = 0; i < 5000; i++) rows.push({ id: i, node: 'pve' + (i % 7), status: i % 3 ? 'running' : 'stopped', mem: i * 1024 });
         const g = {}; for (const r of rows) { (g[r.node] ||= []).push(r); }
         Object.keys(g).map((k) => g[k].length)",
        "[715,715,714,714,714,714,714]",
    ),
    (
        "json_1k_rows_round_trip",
        "const rows = [];
         for (let i = 0; i < 1000; i++) rows.push({ id: i, name: 'vm-' + i, node: 'pve' + (i % 3), tags: ['a', 'b'], mem: i * 1048576, running: i % 2 == 0 });
         JSON.parse(JSON.stringify(rows)).length",
        "1000",
    ),
    (
        "concat_50k_pieces",
        "let s = ''; for (let i = 0; i < 50000; i++) s += 'x' + (i % 10); s.length",
        "100000",
    ),
    (
        "regex_10k_lines",
        "const lines = [];
         for (let i = 0; i < 10000; i++) lines.push(`2026-12-01T10:${String(i % 60).padStart(2, '0')}:00Z pve${i % 3} ${i % 17 == 0 ? 'ERROR' : 'INFO'} task ${i} finished in ${i % 100} ms`);
         lines.filter((l) => /ERROR .* finished in \\d+ ms/.test(l)).length",
        "589",
    ),
];
