//! Printing an outcome for a person (`airlock exec`) or a program
//! (`--json`).

use std::io::Write;

use airlock_catalog::visible;
use airlock_gateway::{Mode, UNTRUSTED_NOTE};
use airlock_sandbox::{ExecError, Outcome};
use serde_json::{json, Value};

/// Largest compact JSON that is shown indented. Indenting costs two spaces
/// per level on every line: a 256 KiB value nested 64 deep would grow to
/// tens of megabytes, in an agent's context or on a terminal.
const PRETTY_MAX: usize = 16 * 1024;

/// A JSON value as text for people and models: indented when small, compact
/// otherwise, and with every character a terminal or renderer would act on
/// (bidi overrides, invisible formatting; controls are escaped by JSON
/// already) written as a JSON `\u` escape, so the text is still the same
/// JSON and shows what the bytes say.
pub fn json_text(value: &Value) -> String {
    let compact = serde_json::to_string(value).expect("JSON values serialize");
    let text = if compact.len() <= PRETTY_MAX {
        serde_json::to_string_pretty(value).expect("JSON values serialize")
    } else {
        compact
    };
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        // C0 controls in serde's output are its own line breaks and
        // indentation (inside strings it escapes them itself).
        if c >= '\u{7f}' && visible::must_escape(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A text from a script shown on the operator's terminal, line by line,
/// with controls and invisible characters made visible.
fn lines_visible(text: &str) -> String {
    text.lines()
        .map(visible::visible)
        .collect::<Vec<_>>()
        .join("\n")
}

pub struct View<'a> {
    pub outcome: &'a Outcome,
    pub identity: &'a str,
    pub mode: Mode,
    pub execution: &'a str,
    /// What the execution did with a change plan, if it had one.
    pub plan: Option<&'a crate::plans::Report>,
    /// Print the value to stderr too (the demo's later runs: stdout holds
    /// the first result alone).
    pub value_on_stderr: bool,
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
        let tag = line.level.as_str();
        let _ = writeln!(err, "[{tag}] {}", visible::visible(&line.message));
    }
    if let Some(t) = &outcome.logs_truncated {
        let _ = writeln!(
            err,
            "[airlock] console output over {} = {} bytes was dropped ({} bytes written)",
            t.limit, t.value, t.original_bytes
        );
    }
    for call in outcome.trace.iter().filter(|c| c.status != "ok") {
        let _ = writeln!(
            err,
            "[airlock] tools.{} → {}",
            visible::visible(&call.tool),
            visible::visible(&call.status)
        );
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
            if view.value_on_stderr {
                let _ = writeln!(err, "{}", json_text(value));
            } else {
                println!("{}", json_text(value));
            }
            if let Some(t) = &outcome.truncated {
                let _ = writeln!(
                    err,
                    "[airlock] result truncated to {} = {} bytes (was {} bytes)",
                    t.limit, t.value, t.original_bytes
                );
            }
            if let Some(plan) = view.plan {
                let _ = write!(err, "{}", lines_visible(&plan.text()));
                let _ = writeln!(err);
            }
            let _ = writeln!(err, "ok: {summary}");
            true
        }
        Err(e) => {
            let _ = writeln!(
                err,
                "error: {}: {}",
                e.kind(),
                lines_visible(&e.to_string())
            );
            match e {
                ExecError::RuntimeError {
                    stack: Some(stack), ..
                } => {
                    let _ = writeln!(err, "{}", lines_visible(stack));
                }
                // The error's own text says how, as a rule; said once.
                ExecError::ApprovalRequired { how, .. }
                    if !e.to_string().contains(how.as_str()) =>
                {
                    let _ = writeln!(err, "to approve: {}", visible::visible(how));
                }
                _ => {}
            }
            if let Some(plan) = view.plan {
                let _ = write!(err, "{}", lines_visible(&plan.text()));
                let _ = writeln!(err);
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
        if let Some(plan) = view.plan {
            map.insert("plan".into(), plan.json());
        }
        if view.untrusted() {
            map.insert("note".into(), json!(UNTRUSTED_NOTE));
        }
    }
    println!("{}", json_text(&value));
    view.outcome.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deep_values_are_not_indented_into_megabytes() {
        // 130,000 elements 63 levels deep: 260 KB compact.
        let mut v = Value::Array(vec![json!(0); 130_000]);
        for _ in 0..63 {
            v = Value::Array(vec![v]);
        }
        let compact = serde_json::to_string(&v).unwrap().len();
        let text = json_text(&v);
        assert_eq!(text.len(), compact, "compact, not indented");
        let small = json!({"vms": [{"vmid": 100}]});
        assert!(
            json_text(&small).contains("\n  "),
            "small values stay indented"
        );
    }

    #[test]
    fn invisible_characters_become_json_escapes() {
        let v = json!({"name": "web\u{202e}gnp.exe", "tag": "\u{e0041}", "ok": "é"});
        let text = json_text(&v);
        assert!(text.contains("web\\u202egnp.exe"), "{text}");
        assert!(text.contains("\\udb40\\udc41"), "{text}");
        assert!(text.contains('é'));
        let back: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, v, "still the same JSON");
    }
}
