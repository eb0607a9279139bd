//! Write-ahead records of a running durable execution: before each change
//! it sends, and again once the change's answer is in, the execution's
//! journal and what it sent go to the deployment's state under this
//! process's lease. A process killed at any point leaves a record saying
//! exactly which changes it may have sent:
//!
//! - killed before a change's answer came back: the record names the
//!   change as sent and unanswered, and a replay gets `outcome_unknown`
//!   for it instead of sending it again;
//! - killed after the answer (computing, or waiting for a read): the
//!   record holds the answer, and a replay hands it over without sending;
//! - a change after the record's journal was never sent by anyone, since
//!   it would have been recorded first: a replay sends it.
//!
//! Reads are not recorded: sent twice, a read changes nothing.
//!
//! The first record adds the execution's row (held, ready: once the
//! lease runs out the next follow-up takes it as an orphan); a run that
//! parks or ends replaces or removes it as a resumed one does. A first
//! record the state refuses (a cap, the store down) leaves the execution
//! running as it did before it could be journaled: nothing of it is in
//! the state, so nothing of it can be sent twice. A later record that
//! fails stops the change it was for (`journal_unavailable`): the row
//! would no longer say what was sent.

use std::sync::{Arc, Mutex};

use airlock_sandbox::{codes, JournalTap, ToolFailure};
use serde_json::{json, Value};

use crate::durable::{Durable, Parked, Sends};

/// The code of a change not sent because the record of it could not be
/// written.
pub const JOURNAL_UNAVAILABLE: &str = "journal_unavailable";

/// One running execution's records.
pub struct Checkpoints {
    durable: Arc<Durable>,
    execution: String,
    /// What every record carries besides the journal and the sends.
    base: Parked,
    state: Mutex<State>,
}

struct State {
    /// The lease the row is held under; `None` until the first record.
    holder: Option<String>,
    /// The first record was refused: the execution is not journaled.
    off: bool,
    sends: Sends,
}

impl Checkpoints {
    /// Records for `execution`, described by `base` (identity, script,
    /// birth; its journal is replaced by each record's). `holder`: the
    /// lease of the take that resumed it.
    pub fn new(
        durable: Arc<Durable>,
        execution: &str,
        base: Parked,
        holder: Option<String>,
    ) -> Self {
        let mut sends = base.sends.clone();
        sends.recorded = true;
        Self {
            durable,
            execution: execution.to_string(),
            base,
            state: Mutex::new(State {
                holder,
                off: false,
                sends,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The answer a replay hands over for call `id` instead of sending
    /// it, if an earlier run had it.
    pub fn kept_answer(&self, id: u32) -> Option<Result<Value, ToolFailure>> {
        self.state().sends.answered.get(&id).cloned()
    }

    /// Whether an earlier run may have sent call `id` and has no answer.
    pub fn unanswered(&self, id: u32) -> bool {
        self.state().sends.unanswered.contains(&id)
    }

    /// Records change `id` as sent, before it is. `Err`: it must not be
    /// sent.
    pub fn before_send(
        &self,
        id: u32,
        journal: &JournalTap,
        tool: &str,
    ) -> Result<(), ToolFailure> {
        let mut s = self.state();
        if s.off {
            return Ok(());
        }
        let Some(journal) = journal.snapshot() else {
            // The replay stopped: nothing more is sent anyway.
            return Err(unavailable(tool, "the execution's journal has ended"));
        };
        s.sends.unanswered.insert(id);
        match self.write(&mut s, journal) {
            Ok(()) => Ok(()),
            Err(e) => {
                s.sends.unanswered.remove(&id);
                if s.holder.is_none() {
                    // Nothing of it is in the state: it runs on as before
                    // executions were journaled, and cannot park either.
                    tracing::warn!(execution = %self.execution, error = %e, "the execution runs unjournaled: its first record was refused");
                    s.off = true;
                    Ok(())
                } else {
                    let why = match e {
                        crate::durable::ParkError::Unavailable => {
                            "the store of durable executions cannot be reached".to_string()
                        }
                        e => e.to_string(),
                    };
                    Err(unavailable(tool, &why))
                }
            }
        }
    }

    /// Records the answer of change `id`. A call that waits (for a
    /// decision, or for the execution to be followed) got no answer: it
    /// is made again when the execution goes on.
    pub fn after(&self, id: u32, journal: &JournalTap, result: &Result<Value, ToolFailure>) {
        let mut s = self.state();
        s.sends.unanswered.remove(&id);
        let waits = matches!(result, Err(f) if f.code == codes::WAITING);
        if !waits {
            s.sends.answered.insert(id, result.clone());
        }
        if s.off || s.holder.is_none() {
            return;
        }
        let Some(journal) = journal.snapshot() else {
            return;
        };
        // Should this fail, the last record still names the change as
        // sent and unanswered: a replay gets `outcome_unknown`, never a
        // second send.
        if let Err(e) = self.write(&mut s, journal) {
            tracing::warn!(execution = %self.execution, error = %e, "a change's answer could not be journaled");
        }
    }

    fn write(
        &self,
        s: &mut State,
        journal: airlock_sandbox::Journal,
    ) -> Result<(), crate::durable::ParkError> {
        s.sends.settle(&journal);
        let record = Parked {
            calls: journal.calls().0 as u32,
            journal,
            sends: s.sends.clone(),
            waiting: Vec::new(),
            ..self.base.clone()
        };
        let holder = self
            .durable
            .checkpoint(&self.execution, &record, s.holder.as_deref())?;
        s.holder = Some(holder);
        Ok(())
    }

    /// The lease the row is held under, if there is a row; and what was
    /// sent and answered, for the park that ends this run.
    pub fn finish(&self) -> (Option<String>, Sends) {
        let s = self.state();
        (s.holder.clone(), s.sends.clone())
    }
}

fn unavailable(tool: &str, why: &str) -> ToolFailure {
    let quoted = airlock_gateway::catalog::quote_name(tool);
    ToolFailure::new(
        JOURNAL_UNAVAILABLE,
        format!(
            "{quoted} was not sent: a change of a durable execution is written down before it is sent (so that no process sends it twice), and that record could not be written now ({why}). Try again shortly; nothing of it reached the backend"
        ),
    )
    .with_details(json!({"tool": tool}))
}
