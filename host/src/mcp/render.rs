//! Turning results into what an MCP client shows: structured content for
//! programs, and a compact text rendering for the model to read.

use std::collections::BTreeMap;

use airlock_gateway::{search::Results, visible, SchemaAnswer};
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

/// Tools a call summary names one by one; the rest are counted together.
const SUMMARY_TOOLS: usize = 20;

/// Marks a result that holds tool data (the full warning is in the
/// `operate` prompt and docs/MCP.md): a few bytes, not a paragraph.
pub const UNTRUSTED_MARK: &str = "(untrusted data from tools)";

/// The outcome of `execute`, for the model: the value (or the error with
/// what to do), console lines when there are any, and a summary of the
/// calls (count per tool and status, time). The per-call trace and the
/// stats come with `"trace": true` (`full`), and stay readable a while as
/// `airlock://executions/{execution}`.
pub fn outcome(o: &Outcome, execution: &str, full: bool) -> CallToolResult {
    let untrusted = o.trace.iter().any(|c| c.status == "ok");
    let mut structured = json!({});
    if !o.logs.is_empty() {
        structured["logs"] = json!(o.logs);
    }
    if let Some(t) = &o.logs_truncated {
        structured["logs_truncated"] = json!(t);
    }
    let ms = o.stats.wall_us / 1000;
    if !o.trace.is_empty() {
        structured["calls"] = summary(o, ms);
    }
    if full {
        let doc = super::traces::document(execution, &o.trace, &o.stats);
        structured["trace"] = doc["trace"].clone();
        structured["stats"] = doc["stats"].clone();
    }
    structured["execution"] = json!(execution);
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
    if !o.trace.is_empty() {
        let n = o.trace.len();
        let tools = per_tool(o)
            .iter()
            .map(|(tool, statuses)| {
                let s: Vec<String> = statuses.iter().map(|(st, c)| format!("{c} {st}")).collect();
                format!("{tool} {}", s.join(", "))
            })
            .collect::<Vec<_>>()
            .join("; ");
        // Where to look, when a call failed and the trace is not here.
        let failed = o.trace.iter().any(|c| c.status != "ok");
        let trace = if failed && !full {
            format!("; trace: {}{execution}", super::resources::EXECUTION_PREFIX)
        } else {
            String::new()
        };
        text.push_str(&format!(
            "{n} call{} in {ms} ms: {tools}{trace}\n",
            if n == 1 { "" } else { "s" }
        ));
    }
    if untrusted {
        structured["untrusted_data"] = json!(true);
        text.push_str(UNTRUSTED_MARK);
        text.push('\n');
    }
    with_text(structured, text, o.result.is_err())
}

/// Calls per tool and status, in the order tools were first called; past
/// [`SUMMARY_TOOLS`] tools, the rest under `…`.
fn per_tool(o: &Outcome) -> Vec<(String, BTreeMap<String, usize>)> {
    let mut out: Vec<(String, BTreeMap<String, usize>)> = Vec::new();
    for c in &o.trace {
        let i = match out.iter().position(|(t, _)| *t == c.tool) {
            Some(i) => i,
            None if out.len() < SUMMARY_TOOLS => {
                out.push((c.tool.clone(), BTreeMap::new()));
                out.len() - 1
            }
            None => match out.iter().position(|(t, _)| t == "…") {
                Some(i) => i,
                None => {
                    out.push(("…".into(), BTreeMap::new()));
                    out.len() - 1
                }
            },
        };
        *out[i].1.entry(c.status.clone()).or_default() += 1;
    }
    out
}

fn summary(o: &Outcome, ms: u64) -> Value {
    let by_tool: serde_json::Map<String, Value> = per_tool(o)
        .into_iter()
        .map(|(tool, statuses)| (tool, json!(statuses)))
        .collect();
    json!({"count": o.trace.len(), "ms": ms, "by_tool": by_tool})
}
