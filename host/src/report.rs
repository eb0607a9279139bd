//! Printing an outcome for a person (`airlock exec`) or a program
//! (`--json`).

use std::io::Write;

use airlock_sandbox::{LogLevel, Outcome};

/// Writes the result to stdout and logs plus a summary to stderr. Returns
/// whether the execution succeeded.
pub fn human(outcome: &Outcome) -> bool {
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
    let s = &outcome.stats;
    let summary = format!(
        "{} tool call{}, {:.1} ms, peak memory {:.1} MiB ({} mode)",
        s.tool_calls,
        if s.tool_calls == 1 { "" } else { "s" },
        s.wall_us as f64 / 1000.0,
        s.peak_memory_bytes as f64 / (1 << 20) as f64,
        s.mode,
    );
    match &outcome.result {
        Ok(value) => {
            let text = serde_json::to_string_pretty(value).expect("JSON values serialize");
            println!("{text}");
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
            if let airlock_sandbox::ExecError::RuntimeError {
                stack: Some(stack), ..
            } = e
            {
                let _ = write!(err, "{stack}");
            }
            let _ = writeln!(err, "after {summary}");
            false
        }
    }
}

pub fn json(outcome: &Outcome) -> bool {
    println!(
        "{}",
        serde_json::to_string_pretty(outcome).expect("outcomes serialize")
    );
    outcome.is_ok()
}
