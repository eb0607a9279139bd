//! Running a runbook a script called (`await runbooks.NAME({...})`).
//!
//! The script's call is answered here, not by a backend: the current
//! version of the runbook is read from the state store, its input checked
//! against its schema, and its source run in a fresh sandbox instance of
//! its own, so the calling script cannot reach into the reviewed code's
//! realm (replace `Array.prototype.filter`, say) and steer it. Its calls
//! go through the gateway as the caller's, marked with the run
//! ([`RunbookRun`]), which holds them to the runbook's file; they count
//! against the caller's `tool_calls` and appear in its trace as
//! `runbooks.NAME › tool`.
//!
//! One runbook at a time per execution, never one inside another, never
//! in plan mode (an approved version's changes are sent at once, which a
//! plan's recording must not do).

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU32, Ordering},
        Arc,
    },
    time::Instant,
};

use airlock_gateway::{Caller, Gateway};
use airlock_runbooks::runbook::{short, Runbook, RunbookRun};
use airlock_sandbox::{CallNote, Limit, Limits, Sandbox, ToolFailure};
use serde_json::{json, Value};

use crate::wiring::ScriptTools;

/// The code of every refusal of a runbook call itself.
pub const REFUSED: &str = crate::wiring::RUNBOOK_REFUSED;

/// What an execution needs to run the runbooks its script calls.
pub struct Runner {
    sandbox: Sandbox,
    limits: Limits,
    started: Instant,
    busy: AtomicBool,
    /// Calls its runbooks have made, counted as each starts.
    nested: Arc<AtomicU32>,
}

/// A runbook's share of its caller's `tool_calls`: each of its calls
/// counts as it starts, against what the caller's script has started
/// too, so the two together never pass the limit.
pub struct CallBudget {
    caller: CallNote,
    nested: Arc<AtomicU32>,
    limit: u32,
}

/// Refuses a call once the script's own calls and `nested` (its
/// runbooks') together pass `limit`.
fn within(caller: &CallNote, nested: u32, limit: u32) -> Result<(), ToolFailure> {
    let (used, value) = (caller.own_calls() as u64 + nested as u64, limit as u64);
    if used <= value {
        return Ok(());
    }
    Err(ToolFailure::new(
        airlock_sandbox::codes::LIMIT_EXCEEDED,
        format!("tool_calls: the script and its runbooks made {value} calls, the limit"),
    )
    .with_details(json!({"limit": Limit::ToolCalls, "value": value, "used": used})))
}

impl crate::wiring::CallShare for CallBudget {
    fn take(&self) -> Result<(), ToolFailure> {
        let nested = self.nested.fetch_add(1, Ordering::SeqCst) + 1;
        within(&self.caller, nested, self.limit)
    }
}

fn refused(message: String) -> ToolFailure {
    ToolFailure::new(REFUSED, message)
}

#[async_trait::async_trait]
impl crate::wiring::Runbooks for Runner {
    /// Whether the script has used its `tool_calls`, its runbooks' calls
    /// counted: a call past them ends the execution as its own would.
    fn over_calls(&self, note: &CallNote) -> Result<(), ToolFailure> {
        within(
            note,
            self.nested.load(Ordering::SeqCst),
            self.limits.tool_calls,
        )
    }

    /// Runs the current version of runbook `name` with `args` for
    /// `caller`, and answers its value.
    async fn run(
        &self,
        gateway: &Arc<Gateway>,
        caller: &Caller,
        name: &str,
        args: Value,
        note: &CallNote,
    ) -> Result<Value, ToolFailure> {
        if caller.plan.is_some() {
            return Err(refused("runbooks do not run in plan mode (an approved runbook's changes are sent, not recorded); run it in an execute of its own".into()));
        }
        if caller.runbook.is_some() {
            return Err(crate::wiring::not_here());
        }
        gateway
            .take_token(&caller.identity)
            .map_err(|e| crate::wiring::call_failure(gateway, &e, false))?;
        if self.busy.swap(true, Ordering::SeqCst) {
            return Err(refused(
                "this execution is running a runbook already; await it before starting the next"
                    .into(),
            ));
        }
        let result = self.run_one(gateway, caller, name, args, note).await;
        self.busy.store(false, Ordering::SeqCst);
        result
    }
}

impl Runner {
    pub fn new(sandbox: &Sandbox, limits: &Limits) -> Arc<Self> {
        Arc::new(Self {
            sandbox: sandbox.clone(),
            limits: limits.clone(),
            started: Instant::now(),
            busy: AtomicBool::new(false),
            nested: Arc::default(),
        })
    }

    async fn run_one(
        &self,
        gateway: &Arc<Gateway>,
        caller: &Caller,
        name: &str,
        args: Value,
        note: &CallNote,
    ) -> Result<Value, ToolFailure> {
        let quoted = airlock_catalog::visible::quote(name, 64);
        let current = gateway
            .state()
            .runbooks
            .current()
            .map_err(|e| ToolFailure::new("runbook_unavailable", e.to_string()))?;
        let Some(stored) = current.into_iter().find(|s| s.name == name) else {
            return Err(ToolFailure::new(
                airlock_sandbox::codes::NOT_FOUND,
                format!("no runbook named {quoted}: `search` lists the runbooks there are (kind \"runbook\")"),
            ));
        };
        let runbook = Runbook::parse(&stored.text)
            .ok()
            .filter(|r| r.version == stored.version)
            .ok_or_else(|| {
                ToolFailure::new(
                    "runbook_unavailable",
                    format!(
                        "the stored version {} does not read back as the file that was added; an operator adds it again",
                        short(&stored.version)
                    ),
                )
            })?;
        if !runbook.may_run(&caller.identity) {
            return Err(refused(format!(
                "identity {} is not among those its file lets run it (run_by)",
                caller.identity
            )));
        }
        let problems = runbook.input_problems(&args);
        if !problems.is_empty() {
            return Err(ToolFailure::new("invalid_args", problems.join("; "))
                .with_details(json!({"problems": problems, "input_schema": runbook.input()})));
        }
        let run = Arc::new(RunbookRun::new(
            Arc::new(runbook),
            stored.approved_by.clone(),
            run_id(),
            gateway.runbook_outside(),
        ));
        gateway.runbook_started(caller, &run).map_err(|e| {
            ToolFailure::new(
                "audit_unavailable",
                format!("the audit log cannot be written, so it does not run: {e}"),
            )
        })?;
        // Parsed, not a literal: in a literal, a `"__proto__"` key the
        // schema saw as a property would set the object's prototype, and
        // lend the runbook properties the schema never checked.
        let json = serde_json::to_string(&args).unwrap_or_else(|_| "{}".into());
        // `<` and `>` as escapes: the guest refuses `<!--` and `-->`
        // anywhere in a script (an argument holding one failed every run).
        let literal = serde_json::to_string(&json)
            .unwrap_or_default()
            .replace('<', "\\u003c")
            .replace('>', "\\u003e");
        let script = format!(
            "const input = Object.freeze(JSON.parse({literal}));\n{}",
            run.runbook.source
        );
        let mut limits = self.limits.clone();
        let used = note.own_calls() as u32 + self.nested.load(Ordering::SeqCst);
        limits.tool_calls = self.limits.tool_calls.saturating_sub(used).max(1);
        let spent = self.started.elapsed().as_millis() as u64;
        limits.wall_time_ms = self.limits.wall_time_ms.saturating_sub(spent).max(1);
        limits.source_bytes = limits.source_bytes.max(script.len() as u64);
        let host = ScriptTools {
            gateway: gateway.clone(),
            caller: Caller {
                runbook: Some(run.clone()),
                ..caller.clone()
            },
            runbooks: None,
            durable: false,
            budget: Some(Box::new(CallBudget {
                caller: note.clone(),
                nested: self.nested.clone(),
                limit: self.limits.tool_calls,
            })),
        };
        let before = self.nested.load(Ordering::SeqCst);
        let outcome = self.sandbox.execute_within(&script, &limits, &host).await;
        note.nested(&outcome.trace);
        // Calls it started count, as the script's own do, also those
        // its end cancelled before they reached the host.
        self.nested
            .fetch_max(before + outcome.trace.len() as u32, Ordering::SeqCst);
        match outcome.result {
            Ok(value) => Ok(value),
            Err(e) => Err(ToolFailure::new(
                "runbook_failed",
                format!("version {}: {e}", short(&run.runbook.version)),
            )
            .with_details(json!({
                "runbook": name,
                "version": run.runbook.version,
                "run": run.id,
                "error": e,
            }))),
        }
    }
}

fn run_id() -> String {
    let mut bytes = [0u8; 6];
    let _ = getrandom::fill(&mut bytes);
    format!("rb-{}", hex::encode(bytes))
}

/// Runbooks whose name or description match `query`, for `search` to
/// list beside the tools (at most 5). A store that cannot be read adds a
/// note to the tools' `results` instead.
pub fn search(
    gateway: &Gateway,
    query: &str,
    tiers: &[airlock_catalog::spec::Tier],
    results: &mut airlock_catalog::search::Results,
) -> Vec<airlock_runbooks::runbook::Found> {
    match gateway.state().runbooks.current() {
        Ok(current) => airlock_runbooks::runbook::search(&current, query, tiers, 5),
        Err(e) => {
            results.add_hint(format!("Runbooks not searched: {e}."));
            Vec::new()
        }
    }
}
