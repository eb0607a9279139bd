//! The executions and audit trail pages, drawn from one [`trail::read`]
//! pass. Every value comes from the audit chain, which holds what agents
//! sent: all of it is escaped by maud and spelled out by `visible`.

use airlock_catalog::visible::visible;
use airlock_gateway::parked::ParkedInfo;
use maud::{html, Markup};
use serde_json::{Map, Value};

use crate::{
    config::Role,
    pages::layout,
    sessions::Session,
    trail::{Search, Trail, MAX_SHOWN},
};

/// What the whole chain's check says, above any list drawn from it.
fn verdict(t: &Trail) -> Markup {
    let v = &t.verdict;
    html! {
        @match &v.problem {
            None => p.verdict.ok {
                "The chain verifies: all " (v.good_lines) " lines, head seq " (v.head.seq) " hash "
                code { (visible(&v.head.hash.chars().take(16).collect::<String>())) } "…, as "
                code { "airlock audit verify" } " would say."
            },
            Some((line, why)) => p.verdict.broken {
                "The chain is broken at line " (line) ": " (visible(why)) ". Lines 1-" (v.good_lines)
                " verify; nothing from line " (line) " on is vouched for. Run "
                code { "airlock audit verify" } " on a replica and look into it."
            },
        }
    }
}

fn text<'a>(line: &'a Map<String, Value>, key: &str) -> &'a str {
    line.get(key).and_then(Value::as_str).unwrap_or("")
}

fn search_form(s: &Search) -> Markup {
    let field = |name: &str, label: &str, value: &Option<String>, hint: &str| {
        html! {
            label { (label) br; input type="text" name=(name) value=(value.as_deref().unwrap_or("")) placeholder=(hint) maxlength="256"; }
        }
    };
    html! {
        form.search method="get" action="/console/audit" {
            (field("identity", "identity", &s.identity, "alice"))
            (field("tool", "tool", &s.tool, "vm_stop"))
            (field("event", "event", &s.event, "call"))
            (field("plan", "plan", &s.plan, "pl-…"))
            (field("execution", "execution", &s.execution, "…-x12"))
            (field("since", "since (UTC)", &s.since, "2026-12-03T14:00"))
            (field("until", "until (UTC)", &s.until, "2026-12-03"))
            button type="submit" { "Search" }
        }
    }
}

/// The audit trail: the newest lines matching `search`.
pub fn audit(who: &Session, search: &Search, t: &Trail) -> Markup {
    layout(
        "Audit trail",
        Some(who),
        html! {
            h1 { "Audit trail" }
            (verdict(t))
            (search_form(search))
            p {
                (t.matched) " of " (t.lines) " lines match"
                @if t.matched as usize > MAX_SHOWN { "; the newest " (MAX_SHOWN) " are shown (narrow the search, or export it with " code { "airlock audit export" } ")" }
                "."
            }
            @if !t.shown.is_empty() {
                table {
                    thead { tr { th { "seq" } th { "time (UTC)" } th { "event" } th { "identity" } th { "what" } th { "line" } } }
                    tbody {
                        @for line in &t.shown {
                            tr {
                                td { (line.get("seq").and_then(Value::as_u64).unwrap_or(0)) }
                                td { (visible(text(line, "ts"))) }
                                td { (visible(text(line, "event"))) }
                                td { (visible(text(line, "identity"))) }
                                td { (what(line)) }
                                td.args { details { summary { "all fields" } (fields(line)) } }
                            }
                        }
                    }
                }
            }
        },
    )
}

/// The fields that say what a line is about, linked to a search for each.
fn what(line: &Map<String, Value>) -> Markup {
    let link = |key: &str, value: &str| {
        let href = format!("/console/audit?{key}={}", url_encode(value));
        html! { (key) " " a href=(href) { code { (visible(value)) } } " " }
    };
    html! {
        @for key in ["tool", "decision", "decided_by", "channel", "reason", "execution", "plan", "approval", "outcome", "status"] {
            @let v = text(line, key);
            @if !v.is_empty() {
                @if matches!(key, "tool" | "execution" | "plan") { (link(key, v)) }
                @else { (key) " " code { (visible(v)) } " " }
            }
        }
    }
}

/// A line's fields, one per row, values spelled out. Hashes of arguments
/// and scripts are left out: unkeyed, they would let a reader test
/// guesses of a secret argument offline.
fn fields(line: &Map<String, Value>) -> String {
    line.iter()
        .filter(|(k, _)| !matches!(k.as_str(), "args_sha256" | "script_sha256"))
        .map(|(k, v)| {
            let v = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            format!("{}: {}", visible(k), visible(&v))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn url_encode(v: &str) -> String {
    url::form_urlencoded::byte_serialize(v.as_bytes()).collect()
}

/// How long ago `since_ms` was, as `1h02m`, `3m05s` or `12s`.
fn age(since_ms: i64, now_ms: i64) -> String {
    let s = now_ms.saturating_sub(since_ms).max(0) / 1000;
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s:02}s"),
        (h, m, _) => format!("{h}h{m:02}m"),
    }
}

/// Durable executions kept in the state, as `airlock executions list`
/// shows them: what each waits for, and (for approvers) a way to end one
/// that waits. `None`: the store could not be read just now.
fn durable(who: &Session, parked: Option<&[ParkedInfo]>, now_ms: i64) -> Markup {
    let approver = who.role == Role::Approver;
    html! {
        h2 { "Durable executions kept to go on" }
        @match parked {
            None => p.verdict.broken { "The store of durable executions cannot be read just now; try again shortly." },
            Some([]) => p.kept-none { "None: no execution waits for a decision, a task or its agent." },
            Some(rows) => {
                p { (rows.len()) " kept (oldest first"
                    @if rows.len() >= MAX_SHOWN { "; the first " (MAX_SHOWN) " shown, all with " code { "airlock executions list" } }
                    "). Its agent follows one with " code { "execute({\"execution\": ID})" } "; one that waits ends when its lifetime does." }
                table {
                    thead { tr { th { "execution" } th { "identity" } th { "started" } th { "stands" } th { "waits for" } th { "calls" } th { "kept" } @if approver { th { "" } } } }
                    tbody {
                        @for r in rows {
                            tr {
                                td { a href={ "/console/audit?execution=" (url_encode(&r.execution)) } { code { (visible(&r.execution)) } } }
                                td { (visible(&r.identity)) }
                                td { (age(r.born_ms, now_ms)) " ago" }
                                td { span class={ "status " @if r.standing() == "waiting" { "pending" } @else { "approved" } } { (r.standing()) } }
                                td {
                                    @if r.waiting.is_empty() { "its agent to follow it" }
                                    @for id in &r.waiting { a href={ "/console/requests/" (url_encode(id)) } { (visible(id)) } " " }
                                }
                                td { (r.calls) }
                                td { (r.bytes / 1024) " KiB" }
                                @if approver {
                                    td {
                                        @if r.held { small { "running now" } }
                                        @else {
                                            form.decide method="post" action={ "/console/executions/" (url_encode(&r.execution)) "/cancel" } {
                                                input type="hidden" name="csrf" value=(who.csrf);
                                                button type="submit" { "Cancel" }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Executions: the durable ones kept in the state, those with no end
/// line yet, then the newest ones.
pub fn executions(who: &Session, t: &Trail, parked: Option<&[ParkedInfo]>, now_ms: i64) -> Markup {
    // From the whole chain's check, not only the newest executions.
    let running = &t.verdict.unfinished;
    layout(
        "Executions",
        Some(who),
        html! {
            h1 { "Executions" }
            (verdict(t))
            (durable(who, parked, now_ms))
            h2 { "In the audit chain" }
            p { (running.len()) " without an end line (running, or their process stopped)"
                @if !running.is_empty() { ":" } @else { "." } }
            @if !running.is_empty() {
                ul {
                    @for u in running.iter().take(MAX_SHOWN) {
                        li { a href={ "/console/audit?execution=" (url_encode(&u.execution)) } { code { (visible(&u.execution)) } }
                            " by " (visible(u.identity.as_deref().unwrap_or("?"))) ", started " (visible(&u.started)) }
                    }
                }
            }
            p { "The newest " (t.executions.len()) ", with what their allowed calls were:" }
            @if !t.executions.is_empty() {
                table {
                    thead { tr { th { "execution" } th { "identity" } th { "started (UTC)" } th { "outcome" } th { "took" } th { "calls per tool" } th { "plan" } } }
                    tbody {
                        @for e in &t.executions {
                            tr {
                                td { a href={ "/console/audit?execution=" (url_encode(&e.id)) } { code { (visible(&e.id)) } } }
                                td { (visible(&e.identity)) }
                                td { (visible(&e.started)) }
                                td { @match &e.outcome { Some(o) => span class={ "status " @if o == "ok" { "approved" } @else { "denied" } } { (visible(o)) }, None => span.status.pending { "running" } } }
                                td { @if let Some(ms) = e.wall_ms { (ms) " ms" } }
                                td.args { @for (tool, n) in &e.calls { (visible(tool)) " ×" (n) br; } }
                                td { @if let Some(p) = &e.plan { a href={ "/console/requests/" (url_encode(p)) } { (visible(p)) } " " (visible(e.mode.as_deref().unwrap_or(""))) } }
                            }
                        }
                    }
                }
            }
        },
    )
}
