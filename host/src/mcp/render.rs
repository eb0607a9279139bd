//! Turning results into what an MCP client shows: structured content for
//! programs, and a compact text rendering for the model to read.

use airlock_gateway::{search::Results, visible, SchemaAnswer, UNTRUSTED_NOTE};
use airlock_sandbox::{ExecError, Outcome};
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{json, Value};

fn with_text(structured: Value, text: String, is_error: bool) -> CallToolResult {
    let mut r = if is_error {
        CallToolResult::structured_error(structured)
    } else {
        CallToolResult::structured(structured)
    };
    r.content = vec![ContentBlock::text(text)];
    r
}

pub fn search(results: &Results) -> CallToolResult {
    let mut text = String::new();
    if let Some(hint) = &results.hint {
        text.push_str(hint);
    }
    for h in &results.hits {
        text.push_str(&format!("{} [{}]\n  {}\n", h.signature, h.tier, h.summary));
    }
    with_text(json!(results), text, false)
}

pub fn schemas(answers: &[SchemaAnswer]) -> CallToolResult {
    let mut text = String::new();
    for a in answers {
        match a {
            SchemaAnswer::Found { typescript, .. } => text.push_str(typescript),
            SchemaAnswer::Unknown {
                error,
                did_you_mean,
                ..
            } => text.push_str(&format!(
                "// {error}; did you mean: {}\n",
                did_you_mean.join(", ")
            )),
        }
    }
    with_text(json!({"schemas": answers}), text, false)
}

/// The outcome of `execute`, for the model: the value (or the error with
/// what to do), console lines, and the calls that failed.
pub fn outcome(o: &Outcome) -> CallToolResult {
    let untrusted = o.trace.iter().any(|c| c.status == "ok");
    let mut structured = json!({
        "logs": o.logs,
        "calls": o.trace,
        "stats": o.stats,
    });
    let mut text = String::new();
    match &o.result {
        Ok(v) => {
            structured["result"] = v.clone();
            text.push_str(&crate::report::json_text(v));
            text.push('\n');
            if let Some(t) = &o.truncated {
                structured["truncated"] = json!(t);
                text.push_str(&format!(
                    "(result truncated to {} bytes from {}; return less, e.g. filter or aggregate in the script)\n",
                    t.value, t.original_bytes
                ));
            }
        }
        Err(e) => {
            structured["error"] = json!(e);
            text.push_str(&format!(
                "{}: {}\n",
                e.kind(),
                visible::visible(&e.to_string())
            ));
            match e {
                ExecError::RuntimeError {
                    stack: Some(stack), ..
                } => {
                    for line in stack.lines() {
                        text.push_str(&visible::visible(line));
                        text.push('\n');
                    }
                }
                ExecError::ApprovalRequired { how, .. } => {
                    text.push_str(how);
                    text.push('\n');
                }
                _ => {}
            }
        }
    }
    if !o.logs.is_empty() {
        text.push_str("console:\n");
        for l in &o.logs {
            let tag = l.level.as_str();
            text.push_str(&format!("  [{tag}] {}\n", visible::visible(&l.message)));
        }
    }
    let failed: Vec<String> = o
        .trace
        .iter()
        .filter(|c| c.status != "ok")
        .map(|c| format!("{} → {}", c.tool, c.status))
        .collect();
    if !failed.is_empty() {
        text.push_str(&format!("failed calls: {}\n", failed.join(", ")));
    }
    if untrusted {
        structured["untrusted_data"] = json!(true);
        text.push_str(&format!("({UNTRUSTED_NOTE})\n"));
    }
    with_text(structured, text, o.result.is_err())
}
