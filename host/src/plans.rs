//! Change plans around one execution, the same for `execute` over MCP and
//! `airlock exec --plan/--apply`: before the run, the caller is set to
//! record a plan or to apply an approved one (taken once, here); after
//! it, the plan is filed (or its apply is recorded) and reported next to
//! the script's value.
//!
//! A plan-mode script that fails does not file its plan: what it recorded
//! before the failure is shown, but a partial plan is never put to a
//! person to approve.

use std::sync::Arc;

use airlock_catalog::visible::visible;
use airlock_gateway::{
    approval::Status,
    gateway::PlanFiled,
    plan::{PlanError, PlannedChange, Recorder},
    plan_apply::{Applying, PlanRun, Stop},
    Caller, Gateway,
};
use serde_json::{json, Value};

/// What an execute asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanArg {
    /// Run as usual.
    Run,
    /// Record every change instead of making it.
    Record,
    /// Apply the approved plan with this id.
    Apply(String),
}

impl PlanArg {
    /// Reads `mode` and `plan` from execute's arguments; the error says
    /// which field is wrong and what it takes.
    pub fn from_args(args: &Value) -> Result<Self, String> {
        let mode = match args.get("mode") {
            None | Some(Value::Null) => "run",
            Some(Value::String(m)) if m == "run" || m == "plan" => m.as_str(),
            Some(_) => {
                return Err(
                    "`mode` must be \"run\" (the default) or \"plan\" (record every change instead of making it, for one approval of the whole)".into(),
                )
            }
        };
        match (mode, args.get("plan")) {
            ("plan", Some(p)) if !p.is_null() => Err(
                "`mode: \"plan\"` records a new plan and `plan` applies an approved one: give one of them".into(),
            ),
            ("plan", _) => Ok(PlanArg::Record),
            (_, None | Some(Value::Null)) => Ok(PlanArg::Run),
            (_, Some(Value::String(id))) => Ok(PlanArg::Apply(id.clone())),
            (_, Some(_)) => Err(
                "`plan` must be a plan id (\"pl-…\") from an execute in plan mode, approved by a person".into(),
            ),
        }
    }
}

/// Sets `caller` up for `arg`: a fresh recorder, or the approved plan
/// opened for this execution (used once its first change is sent).
pub fn prepare(gateway: &Gateway, caller: Caller, arg: &PlanArg) -> Result<Caller, PlanError> {
    let plan = match arg {
        PlanArg::Run => None,
        PlanArg::Record => Some(PlanRun::Record(Arc::new(Recorder::new()?))),
        PlanArg::Apply(id) => Some(PlanRun::Apply(gateway.open_plan(&caller, id)?)),
    };
    Ok(Caller { plan, ..caller })
}

/// What an execution did with its plan, for the result.
#[derive(Debug)]
pub enum Report {
    Recorded {
        id: String,
        filed: PlanFiled,
        /// The person in the client's answer, when they were asked.
        decided: Option<Status>,
        how: String,
    },
    /// The script failed: what it recorded, not filed.
    NotFiled {
        id: String,
        changes: Vec<PlannedChange>,
    },
    Applied {
        id: String,
        applied: Vec<PlannedChange>,
        not_applied: Vec<PlannedChange>,
        /// Where the plan stopped, and why, if it did.
        stopped: Option<Stop>,
    },
    /// The execution sent none of the plan's changes: it is still
    /// approved.
    NotStarted {
        id: String,
        changes: Vec<PlannedChange>,
    },
}

/// After the run, before the execution's end line: files a recorded plan
/// (when the script succeeded) or records how an apply went.
pub fn conclude(gateway: &Gateway, caller: &Caller, succeeded: bool) -> Option<Report> {
    match caller.plan.as_ref()? {
        PlanRun::Record(recorder) if !succeeded => Some(Report::NotFiled {
            id: recorder.id.clone(),
            changes: recorder.changes(),
        }),
        PlanRun::Record(recorder) => {
            let filed = match gateway.file_plan(caller, recorder) {
                Ok(f) => f,
                Err(e) => {
                    tracing::warn!(plan = %recorder.id, error = %e, "a plan could not be filed");
                    return Some(Report::NotFiled {
                        id: recorder.id.clone(),
                        changes: recorder.changes(),
                    });
                }
            };
            Some(Report::Recorded {
                id: recorder.id.clone(),
                how: gateway.plan_instruction(&recorder.id),
                filed,
                decided: None,
            })
        }
        PlanRun::Apply(plan) if !plan.taken() => Some(Report::NotStarted {
            id: plan.id.clone(),
            changes: plan.changes.clone(),
        }),
        PlanRun::Apply(plan) => {
            gateway.plan_finished(caller, plan);
            Some(applied(plan))
        }
    }
}

fn applied(plan: &Applying) -> Report {
    Report::Applied {
        id: plan.id.clone(),
        applied: plan.applied().into_iter().cloned().collect(),
        not_applied: plan.not_applied().into_iter().cloned().collect(),
        stopped: plan.stopped(),
    }
}

/// A plan's changes as a client reads them.
fn changes_json(changes: &[PlannedChange]) -> Value {
    Value::Array(
        changes
            .iter()
            .map(|c| {
                let mut change = json!({
                    "n": c.n,
                    "tool": c.tool,
                    "tier": c.tier,
                    "target": c.target,
                    "args": c.summary,
                    "needs_approval": c.needs_approval,
                });
                if let Some(k) = c.waits_on {
                    change["waits_on"] = json!(k);
                }
                change
            })
            .collect(),
    )
}

/// One line per change, for a person or a model: the table the plan was
/// filed with, indented, and shown as it is (a summary is escaped when it
/// is made; escaping again changes nothing).
pub fn table(changes: &[PlannedChange]) -> String {
    airlock_gateway::plan::table(changes)
        .lines()
        .map(|l| format!("  {}\n", visible(l)))
        .collect()
}

/// [`table`] with every argument in full, for a person asked to decide
/// (a long value the list form summarised, whole).
pub fn full_table(changes: &[PlannedChange]) -> String {
    let whole: Vec<PlannedChange> = changes
        .iter()
        .map(|c| PlannedChange {
            summary: c.detail.clone().unwrap_or_else(|| c.summary.clone()),
            ..c.clone()
        })
        .collect();
    table(&whole)
}

impl Report {
    pub fn id(&self) -> &str {
        match self {
            Report::Recorded { id, .. }
            | Report::NotFiled { id, .. }
            | Report::Applied { id, .. }
            | Report::NotStarted { id, .. } => id,
        }
    }

    /// The plan's changes waiting for a decision, if it was filed.
    pub fn waiting(&self) -> Option<&[PlannedChange]> {
        match self {
            Report::Recorded {
                filed: PlanFiled::Filed(r),
                decided: None,
                ..
            } => r.changes.as_deref(),
            _ => None,
        }
    }

    /// The status word and what to do next.
    fn status(&self) -> (&'static str, String) {
        match self {
            Report::Recorded { filed, decided, how, .. } => match (filed, decided) {
                (PlanFiled::Empty, _) => ("empty", "the script makes no change; nothing to approve".into()),
                (PlanFiled::NothingToApprove(_), _) => (
                    "nothing_to_approve",
                    "no change needs an approval: run the script without plan mode".into(),
                ),
                (PlanFiled::TooManyOpen { limit, .. }, _) => (
                    "approval_limit",
                    format!("not filed: this identity already has {limit} approval requests waiting (approval.max_open_per_identity); decide or let expire the open ones, then plan again"),
                ),
                (PlanFiled::Filed(_), Some(Status::Approved)) => (
                    "approved",
                    format!("the person in the client approved it; run the same script with execute's `plan: \"{}\"` to make these changes", self.id()),
                ),
                (PlanFiled::Filed(_), Some(_)) => (
                    "denied",
                    "the person in the client declined it; nothing will run from it".into(),
                ),
                (PlanFiled::Filed(_), None) => ("pending", how.clone()),
            },
            Report::NotFiled { .. } => (
                "not_filed",
                "the script failed, so its plan was not filed (a partial plan is never put to a person); fix the script and plan again".into(),
            ),
            Report::Applied {
                not_applied,
                stopped,
                ..
            } => match stopped {
                Some(stop) => (
                    "stopped",
                    format!("the plan stopped at step {} ({}); nothing after it was sent. The plan is used up: the changes not applied need a new plan", stop.at, stop.why),
                ),
                None if not_applied.is_empty() => (
                    "applied",
                    "every change of the plan was made; the plan is used up".into(),
                ),
                None => (
                    "applied",
                    "the script did not make every change; the plan is used up, and the changes not applied need a new plan".into(),
                ),
            },
            Report::NotStarted { .. } => (
                "not_started",
                "the script sent none of the plan's changes, so the plan is still approved (until it expires): run the same script with it again".into(),
            ),
        }
    }

    fn changes(&self) -> &[PlannedChange] {
        match self {
            Report::Recorded { filed, .. } => match filed {
                PlanFiled::Empty => &[],
                PlanFiled::NothingToApprove(c) | PlanFiled::TooManyOpen { changes: c, .. } => c,
                PlanFiled::Filed(r) => r.changes.as_deref().unwrap_or_default(),
            },
            Report::NotFiled { changes, .. } | Report::NotStarted { changes, .. } => changes,
            Report::Applied { applied, .. } => applied,
        }
    }

    /// The `plan` member of a result.
    pub fn json(&self) -> Value {
        let (status, next) = self.status();
        let mut out = json!({"id": self.id(), "status": status, "next": next});
        match self {
            Report::Applied {
                applied,
                not_applied,
                stopped,
                ..
            } => {
                out["applied"] = changes_json(applied);
                out["not_applied"] = changes_json(not_applied);
                if let Some(stop) = stopped {
                    out["stopped"] = json!({"at": stop.at, "why": stop.why});
                }
            }
            _ => out["changes"] = changes_json(self.changes()),
        }
        out
    }

    /// The plan as text after the script's value.
    pub fn text(&self) -> String {
        let (status, next) = self.status();
        let mut out = match self {
            Report::Applied {
                applied,
                not_applied,
                ..
            } => {
                let mut s = format!(
                    "plan {}: {} of {} changes applied\n",
                    self.id(),
                    applied.len(),
                    applied.len() + not_applied.len()
                );
                if !not_applied.is_empty() {
                    s.push_str("not applied:\n");
                    s.push_str(&table(not_applied));
                }
                s
            }
            _ => {
                let steps = self.changes();
                let n = steps.iter().filter(|c| c.is_change()).count();
                let reads = steps.len() - n;
                format!(
                    "plan {} ({status}): {n} change{}{}\n{}",
                    self.id(),
                    if n == 1 { "" } else { "s" },
                    match reads {
                        0 => String::new(),
                        1 => ", and 1 read of a task".into(),
                        r => format!(", and {r} reads of tasks"),
                    },
                    table(steps)
                )
            }
        };
        out.push_str(&format!("next: {next}\n"));
        out
    }
}
