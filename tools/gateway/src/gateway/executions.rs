//! An execution's audited start and end, and its place among its
//! identity's executions across the deployment
//! (`rate.executions_per_identity`).

use super::*;

impl Gateway {
    /// Entries kept per identity in this gateway's own maps (rate-limit
    /// counts not yet written, running executions): bounded whatever
    /// number of identities comes and goes (for tests and metrics).
    pub fn identities_held(&self) -> usize {
        self.unwritten
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map
            .len()
            + self
                .executions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .len()
    }

    /// Records the start of a script's execution; returns its id.
    /// With `rate.executions_per_identity` set, the execution first takes
    /// one of its identity's places across the deployment; without one,
    /// nothing is written and nothing runs.
    pub fn execution_started(&self, caller: &Caller, script: &str) -> Result<String, StartError> {
        let id = format!(
            "{}-x{}",
            self.instance,
            self.next_call.fetch_add(1, Ordering::Relaxed)
        );
        self.take_place(&caller.identity, &id).inspect_err(|e| {
            if let (StartError::Busy { .. }, Some(o)) = (e, &self.observer) {
                o.limit_hit("rate.executions_per_identity");
            }
        })?;
        self.execution_started_as(caller, script, id.clone())
            .inspect_err(|e| {
                self.give_place_back(&caller.identity, &id);
                // The store may have kept the start all the same (an
                // insert committed after its caller stopped waiting): the
                // chain gets an end that says it never ran.
                if e.may_have_written() {
                    self.owe_never_ran(caller, &id);
                }
            })
            .map_err(StartError::Audit)
    }

    /// Takes one of `identity`'s places across the deployment for
    /// `execution` (`rate.executions_per_identity`), when the deployment
    /// counts them.
    fn take_place(&self, identity: &str, execution: &str) -> Result<(), StartError> {
        if self.executions_per_identity == 0 {
            return Ok(());
        }
        let now = self.now_ms();
        let until = now.saturating_add(self.execution_hold_ms.min(i64::MAX as u64) as i64);
        let max = self.executions_per_identity;
        match self.state.shares.take(identity, execution, max, now, until) {
            Ok(true) => Ok(()),
            Ok(false) => Err(StartError::Busy {
                identity: identity.to_string(),
                limit: max,
            }),
            Err(e) => Err(StartError::SharesUnavailable(told(&e))),
        }
    }

    /// An execution stops running (it ended or parked): forgotten as
    /// started, its place given back; whose it was, if known.
    fn let_go(&self, execution: &str) -> Option<String> {
        let identity = self
            .executions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(execution);
        if let Some(identity) = &identity {
            self.give_place_back(identity, execution);
        }
        identity
    }

    pub(super) fn give_place_back(&self, identity: &str, execution: &str) {
        if self.executions_per_identity == 0 {
            return;
        }
        if let Err(e) = self.state.shares.give_back(identity, execution) {
            tracing::warn!(execution, error = %e, "could not give an execution's place back; it is freed when its hold time ends");
        }
    }

    pub(super) fn execution_started_as(
        &self,
        caller: &Caller,
        script: &str,
        id: String,
    ) -> Result<String, AuditError> {
        let mut line = Map::new();
        line.insert("execution".into(), Value::String(id.clone()));
        line.insert("identity".into(), Value::String(caller.identity.clone()));
        line.insert(
            "mode".into(),
            Value::String(self.mode_of(caller).as_str().into()),
        );
        line.insert(
            "script_sha256".into(),
            Value::String(sha256_hex(script.as_bytes())),
        );
        line.insert("script_bytes".into(), Value::from(script.len()));
        match &caller.plan {
            Some(PlanRun::Record(r)) => {
                line.insert("plan".into(), Value::String(r.id.clone()));
                line.insert("plan_mode".into(), Value::String("record".into()));
            }
            Some(PlanRun::Apply(a)) => {
                line.insert("plan".into(), Value::String(a.id.clone()));
                line.insert("plan_mode".into(), Value::String("apply".into()));
            }
            None => {}
        }
        self.append_for(&caller.identity, "execution_start", line)?;
        self.executions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone(), caller.identity.clone());
        Ok(id)
    }

    /// A durable execution stopped to wait for decisions (`waiting`, the
    /// approval requests): its place goes back, as it holds no instance
    /// while parked, and the log says what it waits for. It is not over:
    /// [`Gateway::execution_resumed`] goes on with the same id, and its
    /// end line comes once.
    pub fn execution_parked(
        &self,
        execution: &str,
        waiting: &[String],
        tool_calls: u32,
        wall: Duration,
    ) -> Result<(), AuditError> {
        let identity = self.let_go(execution);
        let mut line = Map::new();
        line.insert("execution".into(), Value::String(execution.into()));
        line.insert(
            "waiting".into(),
            Value::Array(waiting.iter().map(|w| audit_fields::code(w)).collect()),
        );
        line.insert("tool_calls".into(), Value::from(tool_calls));
        line.insert("wall_ms".into(), Value::from(wall.as_millis() as u64));
        match &identity {
            Some(identity) => self.append_for(identity, "execution_parked", line),
            None => self.state.audit.append("execution_parked", line),
        }
        .map(|_| ())
    }

    /// A parked execution goes on: it takes a place again (refused, like a
    /// start, when its identity holds all of its own) and the log says so
    /// before anything of it runs.
    pub fn execution_resumed(&self, caller: &Caller, execution: &str) -> Result<(), StartError> {
        self.take_place(&caller.identity, execution)?;
        let mut line = Map::new();
        line.insert("execution".into(), Value::String(execution.into()));
        line.insert("identity".into(), Value::String(caller.identity.clone()));
        if let Err(e) = self.append_for(&caller.identity, "execution_resumed", line) {
            self.give_place_back(&caller.identity, execution);
            return Err(StartError::Audit(e));
        }
        self.executions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(execution.to_string(), caller.identity.clone());
        Ok(())
    }

    /// Records how an execution ended: `outcome` is `ok` or an error kind,
    /// with counts.
    pub fn execution_finished(
        &self,
        execution: &str,
        outcome: &str,
        tool_calls: u32,
        wall: Duration,
    ) -> Result<(), AuditError> {
        let used = LimitsUsed {
            tool_calls,
            wall,
            ..LimitsUsed::default()
        };
        self.execution_ended(execution, outcome, &used)
    }

    /// Records how an execution ended and what it used of its limits:
    /// the line `airlock limits report` reads back.
    pub fn execution_ended(
        &self,
        execution: &str,
        outcome: &str,
        used: &LimitsUsed,
    ) -> Result<(), AuditError> {
        let mut line = Map::new();
        line.insert("execution".into(), Value::String(execution.into()));
        line.insert("outcome".into(), audit_fields::code(outcome));
        line.insert("tool_calls".into(), Value::from(used.tool_calls));
        line.insert("wall_ms".into(), Value::from(used.wall.as_millis() as u64));
        let measured = [
            ("sandbox_ms", used.sandbox.map(|d| d.as_millis() as u64)),
            ("peak_memory_bytes", used.peak_memory_bytes),
            ("result_bytes", used.result_bytes),
            ("journal_bytes", used.journal_bytes),
        ];
        for (field, value) in measured {
            if let Some(v) = value {
                line.insert(field.into(), Value::from(v));
            }
        }
        if let Some(limit) = used.limit {
            line.insert("limit".into(), audit_fields::code(limit));
        }
        let identity = self.let_go(execution);
        let written = match &identity {
            Some(identity) => self.append_for(identity, "execution_end", line.clone()),
            None => self.state.audit.append("execution_end", line.clone()),
        };
        match written {
            Ok(_) => {
                self.write_owed_ends(owed_ends::ON_A_REQUEST);
                Ok(())
            }
            Err(e) => {
                // Only a store that could not be reached owes it: a line
                // refused for what it is would be refused again.
                if e.unreachable() {
                    if let Some(identity) = identity {
                        line.insert("identity".into(), Value::String(identity));
                    }
                    self.owe_end(line);
                }
                Err(e)
            }
        }
    }
}

/// What one execution used of the limits an operator sets, as its end
/// line records it. Only `tool_calls` and `wall` are known for every
/// end; the rest are known when the execution's last run ended in the
/// sandbox (not for one cancelled, or ended by its lifetime).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LimitsUsed {
    pub tool_calls: u32,
    /// From the audited start to the end, waiting included.
    pub wall: Duration,
    /// The last run's time in the sandbox: what `wall_time_ms` bounds.
    pub sandbox: Option<Duration>,
    pub peak_memory_bytes: Option<u64>,
    /// The bytes of the script's value as JSON, before any cut to
    /// `result_bytes`.
    pub result_bytes: Option<u64>,
    /// A durable execution's journal, as counted against `journal_bytes`.
    pub journal_bytes: Option<u64>,
    /// The limit that ended the execution, when one did.
    pub limit: Option<&'static str>,
}

/// Why an execution was not started (nothing ran, nothing was audited
/// as started).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Audit(#[from] AuditError),
    /// `rate.executions_per_identity` across the deployment.
    #[error("limit `rate.executions_per_identity` ({limit}): identity {identity} already has {limit} executions started and not ended on this deployment; await them before starting more")]
    Busy { identity: String, limit: u32 },
    /// The places could not be counted, so none was taken (fail closed).
    #[error("the execution places store is unavailable, so nothing runs: {0}")]
    SharesUnavailable(String),
}

impl Gateway {
    /// Records that an execution's script started a runbook: which
    /// version, approved by whom, and the run id its calls' lines carry,
    /// so `audit verify` can hold those calls to the version's file.
    /// Nothing of the runbook runs when this cannot be written.
    pub fn runbook_started(
        &self,
        caller: &Caller,
        run: &airlock_runbooks::runbook::RunbookRun,
    ) -> Result<(), AuditError> {
        let mut line = Map::new();
        if let Some(x) = &caller.execution {
            line.insert("execution".into(), Value::String(x.clone()));
        }
        line.insert("identity".into(), Value::String(caller.identity.clone()));
        line.insert("runbook".into(), Value::String(run.runbook.name.clone()));
        line.insert(
            "runbook_version".into(),
            Value::String(run.runbook.version.clone()),
        );
        line.insert("runbook_run".into(), Value::String(run.id.clone()));
        if let Some(by) = &run.approved_by {
            line.insert("approved_by".into(), audit_fields::decider(by));
        }
        self.append_for(&caller.identity, "runbook_start", line)?;
        Ok(())
    }
}
