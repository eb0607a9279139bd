//! Turning results into what an MCP client shows: structured content for
//! programs, and a compact text rendering for the model to read.

use std::collections::{BTreeMap, HashMap};

use airlock_catalog::{search::Results, spec::is_js_identifier, visible, SchemaAnswer};
use airlock_runbooks::runbook::Found;
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

pub fn search(results: &Results, runbooks: &[Found]) -> CallToolResult {
    let mut text = String::new();
    if let Some(hint) = &results.hint {
        text.push_str(hint);
        text.push('\n');
    }
    for h in &results.hits {
        text.push_str(&format!("{} [{}]\n  {}\n", h.signature, h.tier, h.summary));
    }
    if let Some(example) = &results.example {
        text.push_str(&format!("e.g. {example}\n"));
    }
    for r in runbooks {
        text.push_str(&format!(
            "{} [runbook, {} {}]\n  {}\n",
            r.signature, r.status, r.version, r.description
        ));
    }
    let mut structured = json!(results);
    if !runbooks.is_empty() {
        structured["runbooks"] = json!(runbooks);
    }
    with_text(structured, text, false)
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

/// Tools a call summary names one by one, past those that answered; the
/// rest are counted together under `…`.
const SUMMARY_TOOLS: usize = 20;

/// Where calls of names no tool can have are counted: a name that is no
/// JavaScript identifier ("vm_delete 1 ok; vm_list") is never shown, so a
/// script cannot write the summary's words itself.
const NOT_A_NAME: &str = "(not a tool name)";

/// How much of a status code the summary shows.
const STATUS_CHARS: usize = 64;

/// Marks a result that holds tool data (the full warning is in the
/// `operate` prompt and docs/MCP.md): a few bytes, not a paragraph.
pub const UNTRUSTED_MARK: &str = "(untrusted data from tools)";

/// The outcome of `execute`, for the model: the value (or the error with
/// what to do), console lines when there are any, and a summary of the
/// calls (count per tool and status, time). The per-call trace and the
/// stats come with `"trace": true` (`full`), and stay readable a while as
/// `airlock://executions/{execution}`.
pub fn outcome(o: &Outcome, execution: &str, full: bool, kept: bool) -> CallToolResult {
    let untrusted = o.trace.iter().any(|c| c.status == "ok");
    let mut structured = json!({});
    if !o.logs.is_empty() {
        structured["logs"] = json!(o.logs);
    }
    if let Some(t) = &o.logs_truncated {
        structured["logs_truncated"] = json!(t);
    }
    let ms = o.stats.wall_us / 1000;
    let calls = per_tool(o);
    if !o.trace.is_empty() {
        structured["calls"] = summary(o, &calls, ms);
    }
    if full {
        structured["trace"] = json!(o.trace);
        structured["stats"] = json!(o.stats);
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
        let tools = calls
            .iter()
            .map(|(tool, statuses)| {
                let s: Vec<String> = statuses.iter().map(|(st, c)| format!("{c} {st}")).collect();
                format!("{tool} {}", s.join(", "))
            })
            .collect::<Vec<_>>()
            .join("; ");
        // Where to look, when a call failed and the trace is not here.
        let failed = calls.iter().any(|(_, s)| s.keys().any(|k| k != "ok"));
        let trace = if failed && !full && kept {
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

/// A name the summary shows: a tool's (a JavaScript identifier), a
/// runbook's (`runbooks.NAME`), or a call a runbook made
/// (`runbooks.NAME › tool`, a separator the sandbox escapes in names a
/// script gives). Any other is counted, never shown.
fn is_summary_name(name: &str) -> bool {
    let runbook = |n: &str| {
        n.strip_prefix("runbooks.")
            .is_some_and(|r| !r.contains('.') && is_js_identifier(r))
    };
    match name.split_once(" \u{203a} ") {
        Some((rb, tool)) => runbook(rb) && is_js_identifier(tool),
        None => is_js_identifier(name) || runbook(name),
    }
}

type PerTool = Vec<(String, BTreeMap<String, usize>)>;

/// Calls per tool and status, in the order tools were first called. Every
/// tool that answered is named; of the others, the first
/// [`SUMMARY_TOOLS`] (counting those that answered), the rest under `…`:
/// a script cannot hide a call that went through behind calls that
/// failed.
fn per_tool(o: &Outcome) -> PerTool {
    let mut all: PerTool = Vec::new();
    let mut at: HashMap<&str, usize> = HashMap::new();
    for c in &o.trace {
        let name = if is_summary_name(&c.tool) {
            c.tool.as_str()
        } else {
            NOT_A_NAME
        };
        let i = *at.entry(name).or_insert_with(|| {
            all.push((name.to_string(), BTreeMap::new()));
            all.len() - 1
        });
        *all[i]
            .1
            .entry(visible::quote(&c.status, STATUS_CHARS))
            .or_default() += 1;
    }
    if all.len() <= SUMMARY_TOOLS {
        return all;
    }
    let answered = |s: &BTreeMap<String, usize>| s.contains_key("ok");
    let mut room = SUMMARY_TOOLS.saturating_sub(all.iter().filter(|(_, s)| answered(s)).count());
    let mut out: PerTool = Vec::new();
    let mut rest: BTreeMap<String, usize> = BTreeMap::new();
    for (name, statuses) in all {
        if answered(&statuses) {
            out.push((name, statuses));
        } else if room > 0 {
            room -= 1;
            out.push((name, statuses));
        } else {
            for (s, n) in statuses {
                *rest.entry(s).or_default() += n;
            }
        }
    }
    if !rest.is_empty() {
        out.push(("…".into(), rest));
    }
    out
}

fn summary(o: &Outcome, calls: &PerTool, ms: u64) -> Value {
    let by_tool: serde_json::Map<String, Value> = calls
        .iter()
        .map(|(tool, statuses)| (tool.clone(), json!(statuses)))
        .collect();
    json!({"count": o.trace.len(), "ms": ms, "by_tool": by_tool})
}

/// Adds a plan's report to an execute result: `plan` in the structured
/// content, its table after the value in the text.
pub fn with_plan(answer: &mut CallToolResult, report: &crate::plans::Report) {
    if let Some(Value::Object(s)) = answer.structured_content.as_mut() {
        s.insert("plan".into(), report.json());
    }
    if let Some(ContentBlock::Text(text)) = answer.content.first_mut() {
        text.text.push_str(&report.text());
    }
}

/// The execution a `waiting` answer names (`None`: the answer is not a
/// waiting one).
pub fn waiting_execution(answer: &CallToolResult) -> Option<&str> {
    let s = answer.structured_content.as_ref()?;
    if s["status"] != "waiting" {
        return None;
    }
    s["execution"].as_str()
}

/// A durable execution parked: what it waits for, who decides and how,
/// and the one follow-up that goes on with it. Not an error: the agent's
/// next step is the follow-up. With the run that parked it (`ran`), its
/// console and calls so far too.
pub fn waiting(
    execution: &str,
    waiting: &[airlock_sandbox::Waiting],
    identity: &str,
    ran: Option<(&Outcome, bool)>,
) -> CallToolResult {
    let shown: Vec<Value> = waiting
        .iter()
        .map(|w| {
            let field = |k: &str| w.details.get(k).cloned().unwrap_or(Value::Null);
            json!({"tool": w.tool, "request_id": field("request_id"), "how": field("how")})
        })
        .collect();
    let follow = json!({"execution": execution});
    let mut structured = json!({
        "status": "waiting",
        "execution": execution,
        "waiting": shown,
        "follow": follow,
    });
    let decisions = waiting
        .iter()
        .filter(|w| w.details.get("request_id").is_some())
        .count();
    let running = waiting.len() - decisions;
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    let what = match (decisions, running) {
        (d, 0) => format!("{d} decision{}", plural(d)),
        (0, r) => format!(
            "{r} call{} still running when this answer was due",
            plural(r)
        ),
        (d, r) => format!(
            "{d} decision{} and {r} call{} still running when this answer was due",
            plural(d),
            plural(r)
        ),
    };
    let mut text = format!(
        "Waiting: execution {execution} ({}) waits for {what}:\n",
        visible::visible(identity),
    );
    for w in waiting {
        let how = w.details.get("how").and_then(Value::as_str).unwrap_or("");
        match w.details.get("request_id").and_then(Value::as_str) {
            Some(id) => text.push_str(&format!(
                "  {}: request {} — {}\n",
                visible::visible(&w.tool),
                visible::visible(id),
                visible::visible(how)
            )),
            None => text.push_str(&format!(
                "  {}: {}\n",
                visible::visible(&w.tool),
                visible::visible(how)
            )),
        }
    }
    text.push_str(&format!(
        "{}follow it with execute({follow}): it goes on from where it stopped, and nothing it did is done again.\n",
        if decisions > 0 { "Once decided, " } else { "Now " }
    ));
    if let Some((o, full)) = ran {
        if !o.logs.is_empty() {
            structured["logs"] = json!(o.logs);
            text.push_str("console so far:\n");
            for l in &o.logs {
                let tag = l.level.as_str();
                text.push_str(&format!("  [{tag}] {}\n", visible::visible(&l.message)));
            }
        }
        if full {
            structured["trace"] = json!(o.trace);
            structured["stats"] = json!(o.stats);
        }
    }
    with_text(structured, text, false)
}

/// The error of an execution that could not park (a cap on parked
/// executions): the first call it waited for, as `ApprovalRequired`, with
/// why it could not wait.
pub fn not_waiting(
    waiting: &[airlock_sandbox::Waiting],
    why: &crate::durable::ParkError,
) -> ExecError {
    // A decision it waited for says what to decide; a call that only
    // waited for the answer to be due says the execution ends here.
    let w = waiting
        .iter()
        .find(|w| w.details.get("request_id").is_some());
    let Some(w) = w else {
        let later = waiting.first();
        return ExecError::ToolError {
            tool: later.map(|w| w.tool.clone()).unwrap_or_default(),
            code: "not_waiting".into(),
            message: format!(
                "this execution's answer was due (answer_within_ms) and it could not wait to be followed ({why}), so it ends here; the calls still pending were not sent. Do not simply run the script again: what it changed before is done (see its trace); run only what is left"
            ),
            details: serde_json::Value::Null,
        };
    };
    let w = Some(w);
    let field = |k: &str| {
        w.and_then(|w| w.details.get(k)?.as_str())
            .unwrap_or("")
            .to_string()
    };
    ExecError::ApprovalRequired {
        tool: w.map(|w| w.tool.clone()).unwrap_or_default(),
        request_id: field("request_id"),
        how: format!(
            "{}. This execution could not wait for the decision ({why}): run the script again once it is decided",
            field("how")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_sandbox::{CallRecord, Stats};

    fn ran(calls: &[(&str, &str)]) -> Outcome {
        Outcome {
            result: Ok(json!(null)),
            truncated: None,
            logs: vec![],
            logs_truncated: None,
            trace: calls
                .iter()
                .map(|(tool, status)| CallRecord {
                    tool: tool.to_string(),
                    start_us: 0,
                    duration_us: Some(1),
                    status: status.to_string(),
                    replayed: false,
                })
                .collect(),
            stats: Stats::default(),
        }
    }

    #[test]
    fn a_script_cannot_write_the_summary_with_a_tool_name() {
        let o = ran(&[("vm_delete 1 ok; vm_list", "not_found")]);
        let t = per_tool(&o);
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].0, NOT_A_NAME);
        assert_eq!(t[0].1["not_found"], 1);
    }

    #[test]
    fn calls_that_answered_are_never_folded_away() {
        let mut calls: Vec<(String, &str)> = (0..SUMMARY_TOOLS + 5)
            .map(|i| (format!("junk_{i}"), "not_found"))
            .collect();
        calls.push(("vm_delete".into(), "ok"));
        let calls: Vec<(&str, &str)> = calls.iter().map(|(t, s)| (t.as_str(), *s)).collect();
        let t = per_tool(&ran(&calls));
        assert!(t
            .iter()
            .any(|(name, s)| name == "vm_delete" && s["ok"] == 1));
        let folded = &t.last().unwrap();
        assert_eq!(folded.0, "…");
        assert_eq!(folded.1["not_found"], 6);
        assert_eq!(t.len(), SUMMARY_TOOLS + 1);
    }

    #[test]
    fn statuses_are_shown_cut_and_visible() {
        let long = format!("\u{202e}{}", "x".repeat(200));
        let t = per_tool(&ran(&[("vm_list", &long)]));
        let shown = t[0].1.keys().next().unwrap();
        assert!(!shown.contains('\u{202e}') && shown.len() < 120, "{shown}");
    }
}
