//! `airlock executions`: the durable executions parked in the
//! deployment's state, what each waits for, and cancelling one an
//! operator will not let go on. Reads the same store every server of the
//! deployment parks in (the state directory's `executions.db`, or the
//! PostgreSQL table).

use std::process::ExitCode;

use airlock_catalog::visible::visible;
use airlock_gateway::parked::ParkedInfo;
use clap::Subcommand;
use serde_json::{json, Value};

use crate::{
    admin::{now_ms, state},
    approvers::Known,
    settings::ConfigFile,
};

/// The most rows `list` prints (the deployment holds at most
/// [`crate::durable::PARKED_TOTAL`]).
const LIST_LIMIT: u32 = crate::durable::PARKED_TOTAL as u32;

#[derive(Subcommand)]
pub enum ExecutionsAction {
    /// Durable executions, oldest first: waiting (for which approval
    /// requests, or to be followed), running (journaled by their server),
    /// or being resumed; whose, and since when.
    List {
        /// Only this identity's.
        #[arg(long)]
        identity: Option<String>,
        /// Print them as JSON.
        #[arg(long)]
        json: bool,
    },
    /// One execution: whose, since when, where it stands (running,
    /// resuming, waiting), what it waits for, its calls and stored bytes.
    /// Exits 1 when the state holds no such execution (it ended, or never
    /// waited).
    Show {
        /// The execution's id (as `list` and the agent's answer show it).
        id: String,
        /// Print it as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Wait until an execution is no longer kept (it ended, was
    /// cancelled, or outlived its lifetime), then print how it ended,
    /// from its end line in the audit chain. Exits 0 when it ended `ok`,
    /// 1 when it ended otherwise (or the chain has no end for it), 3 when
    /// `--timeout-secs` passed first: it still waits or runs.
    Wait {
        /// The execution's id (as `list` and the agent's answer show it).
        id: String,
        /// Longest to wait, in seconds.
        #[arg(long, default_value_t = 600)]
        timeout_secs: u64,
        /// Print the end line as JSON.
        #[arg(long)]
        json: bool,
    },
    /// End a waiting execution: it never goes on, its identity's
    /// follow-up is told it is unknown, and the audit gets its end line
    /// (outcome `Cancelled`, and who). The approval requests it waited
    /// for stay open until decided or expired.
    Cancel {
        /// The execution's id (as `list` and the agent's answer show it).
        id: String,
        /// Who cancels (written to the audit). Default: the login name
        /// ($USER).
        #[arg(long)]
        by: Option<String>,
    },
}

pub fn executions(file: &ConfigFile, action: ExecutionsAction) -> ExitCode {
    let s = match state(file) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let now = now_ms();
    match action {
        ExecutionsAction::List { identity, json } => {
            let rows = match s.parked.list(identity.as_deref(), now, LIST_LIMIT) {
                Ok(rows) => rows,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            if json {
                let rows: Vec<Value> = rows.iter().map(|r| as_json(r, now)).collect();
                println!("{}", Value::Array(rows));
            } else if rows.is_empty() {
                println!("no executions are waiting");
            } else {
                for r in &rows {
                    println!("{}", describe(r, now));
                }
            }
            ExitCode::SUCCESS
        }
        ExecutionsAction::Show { id, json } => {
            let kept = match kept(&s, &id, now) {
                Ok(kept) => kept,
                Err(code) => return code,
            };
            let Some(r) = kept else {
                eprintln!(
                    "error: the state holds no execution {} (it ended, or never waited or ran journaled); its lines are in the audit chain (`airlock audit export`)",
                    visible(&id)
                );
                return ExitCode::from(1);
            };
            if json {
                println!("{}", as_json(&r, now));
            } else {
                println!("{}", describe(&r, now));
            }
            ExitCode::SUCCESS
        }
        ExecutionsAction::Wait {
            id,
            timeout_secs,
            json,
        } => wait(&s, &id, timeout_secs, json),
        ExecutionsAction::Cancel { id, by } => {
            let known = match Known::of(file, s.keys.as_deref()) {
                Ok(k) => k,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            let by = match known.decider(by.as_deref()) {
                Ok(by) => by,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            let gone = match airlock_gateway::parked::cancel(
                s.parked.as_ref(),
                s.audit.as_ref(),
                &id,
                by.as_str(),
                now,
            ) {
                Ok(gone) => gone,
                Err(e @ airlock_gateway::parked::CancelError::NotWaiting(_)) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(1);
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            println!(
                "cancelled execution {} of {}",
                visible(&gone.execution),
                visible(&gone.identity)
            );
            ExitCode::SUCCESS
        }
    }
}

fn as_json(r: &ParkedInfo, now: i64) -> Value {
    json!({
        "execution": r.execution,
        "identity": r.identity,
        "age_s": now.saturating_sub(r.born_ms).max(0) / 1000,
        "parked_s": now.saturating_sub(r.parked_ms).max(0) / 1000,
        "waiting": r.waiting,
        "bytes": r.bytes,
        "tool_calls": r.calls,
        "held": r.held,
        "state": r.standing(),
    })
}

/// One row for a terminal, every stored field escaped (a row is the
/// state's, which an operator should not have to trust with their
/// terminal).
/// Execution `id` as the state keeps it now (`None`: it does not); a
/// store that cannot be read is said, and exits 2.
fn kept(
    s: &airlock_gateway::state::State,
    id: &str,
    now: i64,
) -> Result<Option<ParkedInfo>, ExitCode> {
    match s.parked.list(None, now, LIST_LIMIT) {
        Ok(rows) => Ok(rows.into_iter().find(|r| r.execution == id)),
        Err(e) => {
            eprintln!("error: {e}");
            Err(ExitCode::from(2))
        }
    }
}

/// How often `wait` looks at the store.
const WAIT_POLL: std::time::Duration = std::time::Duration::from_millis(500);

fn wait(s: &airlock_gateway::state::State, id: &str, timeout_secs: u64, json: bool) -> ExitCode {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(timeout_secs);
    let mut said: Option<String> = None;
    loop {
        let now = now_ms();
        let r = match kept(s, id, now) {
            Ok(Some(r)) => r,
            Ok(None) => break,
            Err(code) => return code,
        };
        // Each change of where it stands, once.
        let stands = describe(&r, now);
        let standing = format!("{} {:?}", r.standing(), r.waiting);
        if said.as_deref() != Some(&standing) {
            eprintln!("{stands}");
            said = Some(standing);
        }
        if std::time::Instant::now() >= until {
            eprintln!(
                "execution {} still {} after {timeout_secs} s",
                visible(id),
                r.standing()
            );
            return ExitCode::from(3);
        }
        std::thread::sleep(WAIT_POLL);
    }
    // No longer kept: its end line says how it ended.
    let search = airlock_console::trail::Search {
        execution: Some(id.to_string()),
        event: Some("execution_end".into()),
        ..Default::default()
    };
    let trail = match airlock_console::trail::read(s.audit.as_ref(), &search) {
        Ok(t) => t,
        Err(e) => {
            eprintln!(
                "error: execution {} is no longer kept, but the audit chain cannot be read: {e}",
                visible(id)
            );
            return ExitCode::from(2);
        }
    };
    let Some(end) = trail.shown.first() else {
        eprintln!(
            "error: the state holds no execution {} and the audit chain has no end for it (it never waited or ran journaled, or its end line is owed: `airlock audit close`)",
            visible(id)
        );
        return ExitCode::from(1);
    };
    let outcome = end.get("outcome").and_then(Value::as_str).unwrap_or("");
    if json {
        println!("{}", Value::Object(end.clone()));
    } else {
        let by = end
            .get("cancelled_by")
            .and_then(Value::as_str)
            .map(|b| format!(", cancelled by {}", visible(b)))
            .unwrap_or_default();
        println!(
            "execution {} of {} ended {}: {} tool calls, {} ms{by}",
            visible(id),
            visible(end.get("identity").and_then(Value::as_str).unwrap_or("?")),
            visible(outcome),
            end.get("tool_calls").and_then(Value::as_u64).unwrap_or(0),
            end.get("wall_ms").and_then(Value::as_u64).unwrap_or(0),
        );
    }
    match outcome {
        "ok" => ExitCode::SUCCESS,
        _ => ExitCode::from(1),
    }
}

fn describe(r: &ParkedInfo, now: i64) -> String {
    let ago = |ms: i64| {
        humantime::format_duration(std::time::Duration::from_secs(
            (now.saturating_sub(ms).max(0) / 1000) as u64,
        ))
        .to_string()
    };
    let waiting: Vec<String> = r.waiting.iter().map(|w| visible(w)).collect();
    let what = match (r.standing(), waiting.is_empty()) {
        ("running", _) => "running".to_string(),
        ("resuming", _) => format!("being resumed, was waiting for {}", waiting.join(", ")),
        (_, true) => "waiting to be followed (a long task, a server that stopped)".to_string(),
        (_, false) => format!("waiting for {}", waiting.join(", ")),
    };
    format!(
        "{}  {}  started {} ago, written {} ago, {} tool calls, {} bytes; {what}",
        visible(&r.execution),
        visible(&r.identity),
        ago(r.born_ms),
        ago(r.parked_ms),
        r.calls,
        r.bytes,
    )
}
