//! Change plans on the path: filing a recorded plan as one approval
//! request when its execution ends, opening an approved plan for
//! applying, taking it from the store as its first change is sent, and
//! each step's guard, which stops the plan if the step is dropped before
//! its answer.

use super::*;

/// What became of a recorded plan at the end of its execution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanFiled {
    /// The script made no change.
    Empty,
    /// No change needs an approval: nothing to decide; the script runs
    /// as it is.
    NothingToApprove(Vec<PlannedChange>),
    /// Filed for a decision.
    Filed(Box<crate::approval::Request>),
    /// Not filed: the identity has `limit` requests waiting.
    TooManyOpen {
        changes: Vec<PlannedChange>,
        limit: u32,
    },
}

impl Gateway {
    /// Ends a plan-mode execution: files its changes as one approval
    /// request when any needs approval, and writes the plan's audit line
    /// (`plan`: its id, execution, how many changes, and the hash of
    /// their list, which the `planned` call lines of the execution add
    /// up to).
    pub fn file_plan(&self, caller: &Caller, recorder: &Recorder) -> Result<PlanFiled, CallError> {
        let changes = recorder.changes();
        if changes.is_empty() {
            return Ok(PlanFiled::Empty);
        }
        if !recorder.complete() {
            return Err(CallError::AuditUnavailable(
                "a planned change could not be written to the audit log, so the plan is not filed"
                    .into(),
            ));
        }
        let filed = if changes.iter().any(|c| c.needs_approval) {
            let check = self
                .state
                .approvals
                .file_plan(&recorder.id, &caller.identity, &changes, self.now_ms())
                .map_err(|e| CallError::ApprovalUnavailable(told(&e)))?;
            match check {
                Check::Required(r) => PlanFiled::Filed(Box::new(r)),
                Check::TooManyOpen { limit } => PlanFiled::TooManyOpen {
                    changes: changes.clone(),
                    limit,
                },
                other => unreachable!("filing a plan answers Required or TooManyOpen: {other:?}"),
            }
        } else {
            PlanFiled::NothingToApprove(changes.clone())
        };
        let mut line = Map::new();
        line.insert("plan".into(), Value::String(recorder.id.clone()));
        line.insert("identity".into(), Value::String(caller.identity.clone()));
        if let Some(e) = &caller.execution {
            line.insert("execution".into(), Value::String(e.clone()));
        }
        line.insert("changes".into(), Value::from(changes.len()));
        line.insert(
            "changes_sha256".into(),
            Value::String(crate::plan::list_hash(&changes)),
        );
        let status = match &filed {
            PlanFiled::Filed(_) => "pending",
            PlanFiled::TooManyOpen { .. } => "approval_limit",
            _ => "nothing_to_approve",
        };
        line.insert("status".into(), Value::String(status.into()));
        if let Err(e) = self.append_for(&caller.identity, "plan", line) {
            // Filed but not in the chain: made undecidable, never applied.
            if let PlanFiled::Filed(r) = &filed {
                let airlock = crate::decision::Decider {
                    who: "airlock: the plan's audit line could not be written".into(),
                    channel: crate::decision::Channel::Airlock,
                    may_approve_own: false,
                    reason: Some(
                        "its audit line could not be written, so it may never apply".into(),
                    ),
                };
                if let Err(denied) = self.state.approvals.deny(&r.id, &airlock, self.now_ms()) {
                    tracing::error!(plan = %r.id, error = %denied, "a plan whose audit line failed could not be denied either; deny it with `airlock approvals deny`");
                }
            }
            return Err(CallError::AuditUnavailable(told(&e)));
        }
        if let PlanFiled::Filed(r) = &filed {
            self.tell_filed(r);
        }
        Ok(filed)
    }

    /// Opens `caller`'s approved plan `id` for one execution to apply,
    /// without using it: the plan is taken from the store when its first
    /// change is about to be sent, so an execution that is refused, does
    /// not compile, is cancelled or sends nothing leaves it approved. A
    /// plan that could not be taken now is refused here already, with a
    /// `plan_apply` line saying why.
    pub fn open_plan(&self, caller: &Caller, id: &str) -> Result<Arc<Applying>, PlanError> {
        let found = if crate::plan::is_plan_id(id) {
            self.state
                .approvals
                .get(id)
                .map_err(|e| self.plan_store_error(e.into()))
                .and_then(|r| {
                    match crate::approval::untakeable(&r, &caller.identity, self.now_ms()) {
                        Some(refused) => Err(refused),
                        None => Ok(r),
                    }
                })
        } else {
            Err(PlanError::NotFound(quote_name(id)))
        };
        match found {
            Ok(r) => Ok(Arc::new(Applying::new(r.id, r.changes.unwrap_or_default()))),
            Err(e) => {
                self.plan_apply_line(caller, id, Err(&e)).map_err(|audit| {
                    PlanError::Storage(format!(
                        "the audit log cannot be written, so nothing runs: {audit}"
                    ))
                })?;
                Err(e)
            }
        }
    }

    /// Says a store failure while taking a plan as every store failure
    /// is said: no host, no server text.
    fn plan_store_error(&self, e: PlanError) -> PlanError {
        match e {
            PlanError::Storage(m) => PlanError::Storage(told(&ApprovalError::Storage(m))),
            other => other,
        }
    }

    /// Writes `plan_apply`: the plan taken for applying (with the hash of
    /// its list and who approved it), or refused and why.
    fn plan_apply_line(
        &self,
        caller: &Caller,
        id: &str,
        taken: Result<&crate::approval::Request, &PlanError>,
    ) -> Result<(), String> {
        let mut line = Map::new();
        line.insert("plan".into(), audit_fields::code(id));
        line.insert("identity".into(), Value::String(caller.identity.clone()));
        if let Some(e) = &caller.execution {
            line.insert("execution".into(), Value::String(e.clone()));
        }
        match taken {
            Ok(r) => {
                line.insert("decision".into(), Value::String("applying".into()));
                line.insert("changes_sha256".into(), Value::String(r.args_hash.clone()));
                if let Some(by) = &r.decided_by {
                    line.insert("approved_by".into(), audit_fields::decider(by));
                }
            }
            Err(e) => {
                line.insert("decision".into(), Value::String("refused".into()));
                line.insert("reason".into(), audit_fields::code(e.code()));
            }
        }
        self.append_for(&caller.identity, "plan_apply", line)
            .map(|_| ())
            .map_err(|e| told(&e))
    }

    /// Takes the plan from the store as its first change is about to be
    /// sent (approved → used, once, whatever runs at the same time), and
    /// writes `plan_apply`. Refused, the plan stops: nothing of it is
    /// sent.
    pub(super) fn take_plan_now(
        &self,
        caller: &Caller,
        plan: &Applying,
        tool: &str,
    ) -> Result<(), CallError> {
        let taken = self
            .state
            .approvals
            .take_plan(&plan.id, &caller.identity, self.now_ms())
            .map_err(|e| self.plan_store_error(e));
        let written = self.plan_apply_line(caller, &plan.id, taken.as_ref());
        match (taken, written) {
            (Ok(r), Ok(())) => {
                plan.mark_taken(r.decided_by);
                Ok(())
            }
            (Ok(_), Err(audit)) => {
                // Taken but unrecorded: nothing of it runs (and it stays
                // used).
                plan.mark_taken(None);
                plan.stop_before_next("audit_unavailable");
                Err(CallError::AuditUnavailable(audit))
            }
            (Err(error), _) => {
                plan.stop_before_next(error.code());
                Err(CallError::Plan {
                    tool: tool.to_string(),
                    error,
                })
            }
        }
    }

    /// Records how applying a plan went (`plan_end`): how many changes
    /// were made, which were not, and where it stopped if it did. A plan
    /// this execution never took (it sent nothing) is still approved and
    /// gets no line.
    pub fn plan_finished(&self, caller: &Caller, plan: &Applying) {
        if !plan.taken() {
            return;
        }
        let left: Vec<Value> = plan
            .not_applied()
            .iter()
            .map(|c| Value::from(c.n))
            .collect();
        let mut line = Map::new();
        line.insert("plan".into(), Value::String(plan.id.clone()));
        if let Some(e) = &caller.execution {
            line.insert("execution".into(), Value::String(e.clone()));
        }
        line.insert("applied".into(), Value::from(plan.applied().len()));
        line.insert("not_applied".into(), Value::Array(left));
        if let Some(stop) = plan.stopped() {
            line.insert("stopped_at".into(), Value::from(stop.at));
            line.insert("stopped".into(), audit_fields::code(&stop.why));
        }
        if let Err(e) = self.append_for(&caller.identity, "plan_end", line) {
            tracing::warn!(plan = %plan.id, error = %e, "could not record the end of a plan's apply in the audit log");
        }
    }

    /// Records a person's decision on a plan (`plan_decision`), made in
    /// the client or by an operator command.
    pub fn plan_decided(&self, request: &crate::approval::Request) -> Result<(), AuditError> {
        crate::decision::record(&*self.state.audit, request)
    }
}

/// The tool `spec` is, as a plan matches it.
pub(super) fn called(spec: &ToolSpec) -> PlanCalled<'_> {
    PlanCalled {
        name: &spec.name,
        key: &spec.key,
    }
}

/// A plan step on its way to the backend. Dropped before its answer (the
/// execution was cancelled or ran out of time), it stops the plan: the
/// change may or may not have been made, so nothing after it is.
pub(super) struct StepGuard<'a> {
    pub(super) plan: &'a Applying,
    pub(super) n: u32,
    /// A read of an earlier change's result (a wait for its task).
    pub(super) waits: bool,
    /// Handed to the backend (until then a cancellation made nothing).
    pub(super) sent: bool,
    pub(super) ended: bool,
}

impl StepGuard<'_> {
    /// How a successful answer ends the step: a change is made (and what
    /// it answered kept for the reads of it); a read of a task is made
    /// only once the task ended OK.
    pub(super) fn end_of(
        &self,
        backend: &dyn Backend,
        spec: &ToolSpec,
        reply: &crate::Reply,
    ) -> StepEnd {
        if !self.waits {
            let answered = reply
                .request_id
                .clone()
                .or_else(|| reply.value.as_str().map(str::to_string));
            return StepEnd::Made(answered);
        }
        match backend.task_end(spec, &reply.value) {
            Some(TaskEnd::Ok) => StepEnd::Made(None),
            // Only task reads are recorded as steps; a plan that says
            // otherwise (an older Airlock's, a backend that changed) is
            // not trusted to have waited.
            None => StepEnd::Failed("not a read of a task".into()),
            Some(TaskEnd::Running) => StepEnd::NotEnded,
            Some(TaskEnd::Failed(status)) => {
                StepEnd::Failed(airlock_catalog::visible::quote(&status, 64))
            }
        }
    }

    pub(super) fn end(&mut self, end: StepEnd) {
        self.ended = true;
        self.plan.ended(end);
    }
}

impl Drop for StepGuard<'_> {
    fn drop(&mut self) {
        if !self.ended {
            let why = if self.sent {
                "cancelled"
            } else {
                "cancelled before it was sent"
            };
            self.plan.ended(StepEnd::Failed(why.into()));
        }
    }
}
