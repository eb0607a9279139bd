//! Printing an outcome for a person (`airlock exec`) or a program
//! (`--json`).

use std::io::Write;

use airlock_sandbox::{ExecError, LogLevel, Outcome};
use airlock_tools::{Mode, UNTRUSTED_NOTE};
use serde_json::{json, Value};

pub struct View<'a> {
    pub outcome: &'a Outcome,
    pub identity: &'a str,
    pub mode: Mode,
    pub execution: &'a str,
}

impl View<'_> {
    /// Whether any tool data reached the script.
    fn untrusted(&self) -> bool {
        self.outcome.trace.iter().any(|c| c.status == "ok")
    }
}

/// Writes the result to stdout and logs, decisions and a summary to
/// stderr. Returns whether the execution succeeded.
pub fn human(view: &View<'_>) -> bool {
    let outcome = view.outcome;
    let mut err = std::io::stderr().lock();
    for line in &outcome.logs {
        let tag = match line.level {
            LogLevel::Log => "log",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        };
        let _ = writeln!(err, "[{tag}] {}", line.message);
    }
    if let Some(t) = &outcome.logs_truncated {
        let _ = writeln!(
            err,
            "[airlock] console output over {} = {} bytes was dropped ({} bytes written)",
            t.limit, t.value, t.original_bytes
        );
    }
    for call in outcome.trace.iter().filter(|c| c.status != "ok") {
        let _ = writeln!(err, "[airlock] tools.{} → {}", call.tool, call.status);
    }
    let s = &outcome.stats;
    let summary = format!(
        "{} tool call{}, {:.1} ms, peak memory {:.1} MiB ({} mode, identity {} with mode {}, execution {})",
        s.tool_calls,
        if s.tool_calls == 1 { "" } else { "s" },
        s.wall_us as f64 / 1000.0,
        s.peak_memory_bytes as f64 / (1 << 20) as f64,
        s.mode,
        view.identity,
        view.mode,
        view.execution,
    );
    match &outcome.result {
        Ok(value) => {
            println!(
                "{}",
                serde_json::to_string_pretty(value).expect("JSON values serialize")
            );
            if let Some(t) = &outcome.truncated {
                let _ = writeln!(
                    err,
                    "[airlock] result truncated to {} = {} bytes (was {} bytes)",
                    t.limit, t.value, t.original_bytes
                );
            }
            let _ = writeln!(err, "ok: {summary}");
            true
        }
        Err(e) => {
            let _ = writeln!(err, "error: {}: {e}", e.kind());
            match e {
                ExecError::RuntimeError {
                    stack: Some(stack), ..
                } => {
                    let _ = write!(err, "{stack}");
                }
                ExecError::ApprovalRequired { how, .. } => {
                    let _ = writeln!(err, "to approve: {how}");
                }
                _ => {}
            }
            let _ = writeln!(err, "after {summary}");
            false
        }
    }
}

pub fn json(view: &View<'_>) -> bool {
    let mut value = serde_json::to_value(view.outcome).expect("outcomes serialize");
    if let Value::Object(map) = &mut value {
        map.insert("identity".into(), json!(view.identity));
        map.insert("access_mode".into(), json!(view.mode));
        map.insert("execution".into(), json!(view.execution));
        map.insert("untrusted_data".into(), json!(view.untrusted()));
        if view.untrusted() {
            map.insert("note".into(), json!(UNTRUSTED_NOTE));
        }
    }
    println!(
        "{}",
        serde_json::to_string_pretty(&value).expect("JSON serializes")
    );
    view.outcome.is_ok()
}
