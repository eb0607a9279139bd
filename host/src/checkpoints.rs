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
//! record a cap refuses leaves the execution running as it did before it
//! could be journaled: nothing of it is in the state, so nothing of it
//! can be sent twice. Any other failed record stops the change it was for
//! (`journal_unavailable`): a record that may or may not have landed
//! (the store timed out) is taken as landed, and the row is written again,
//! under the same lease, by the next record.
//!
//! What records cost is bounded: each run writes at most [`crate::durable::RECORD_BYTES`]
//! of them (each holds the whole journal), and keeps at most
//! [`ANSWERS_BYTES`] of answers the guest has not taken yet (past it an
//! answer is not kept, and its change counts as unanswered: a crash makes
//! it `outcome_unknown`, never a second send).

use std::sync::{Arc, Mutex};

use airlock_sandbox::{codes, JournalTap, ToolFailure};
use serde_json::{json, Value};

use crate::durable::{Durable, ParkError, Parked, Sends};

/// The code of a change not sent because the record of it could not be
/// written.
pub const JOURNAL_UNAVAILABLE: &str = "journal_unavailable";

/// Answers a run keeps for its records before the guest takes them.
pub const ANSWERS_BYTES: usize = 1024 * 1024;

/// One running execution's records.
pub struct Checkpoints {
    durable: Arc<Durable>,
    execution: String,
    /// What every record carries besides the journal and the sends.
    base: Parked,
    state: Mutex<State>,
}

/// Whether the execution has a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Row {
    /// None was written (nor tried).
    None,
    /// A first record failed in a way that may have written it, at the
    /// instant given: had it landed, its lease runs out a lease later,
    /// and past that no row of it may be added again (another may have
    /// taken it, gone on and ended it).
    Maybe(std::time::Instant),
    /// Written, held under the lease.
    Held,
}

impl Row {
    /// A first record that may have landed, and whose lease would still
    /// hold: a row of it may be added (again).
    fn may_add(self, lease: std::time::Duration) -> bool {
        matches!(self, Row::Maybe(tried) if tried.elapsed() < lease)
    }
}

struct State {
    /// The lease the row is (to be) held under.
    holder: String,
    row: Row,
    /// A cap refused the first record: the execution is not journaled.
    off: bool,
    sends: Sends,
    /// Record bytes this run wrote.
    written: u64,
}

impl Checkpoints {
    /// Records for `execution`, described by `base` (identity, script,
    /// birth; its journal is replaced by each record's). `holder`: the
    /// lease of the take that resumed it (its row exists).
    pub fn new(
        durable: Arc<Durable>,
        execution: &str,
        base: Parked,
        holder: Option<String>,
    ) -> Self {
        let mut sends = base.sends.clone();
        sends.recorded = true;
        let row = match holder {
            Some(_) => Row::Held,
            None => Row::None,
        };
        Self {
            execution: execution.to_string(),
            base,
            state: Mutex::new(State {
                holder: holder.unwrap_or_else(|| durable.new_holder()),
                row,
                off: false,
                sends,
                written: 0,
            }),
            durable,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The answer a replay hands over for call `id` instead of sending
    /// it, if an earlier run had it.
    pub fn kept_answer(&self, id: u32) -> Option<Result<Value, ToolFailure>> {
        let s = self.state();
        let text = s.sends.answered.get(&id)?;
        // A kept answer that does not read back (it cannot: the body was
        // sealed) is no answer: the call counts as unanswered.
        serde_json::from_str(text).ok()
    }

    /// Whether an earlier run may have sent call `id` with no answer
    /// kept.
    pub fn unanswered(&self, id: u32) -> bool {
        let s = self.state();
        s.sends.unanswered.contains(&id)
            || (s.sends.answered.contains_key(&id)
                && serde_json::from_str::<Result<Value, ToolFailure>>(&s.sends.answered[&id])
                    .is_err())
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
                // Not sent; should the record have landed all the same, a
                // crash now makes it `outcome_unknown`, never a send.
                s.sends.unanswered.remove(&id);
                let cap = matches!(
                    e,
                    ParkError::PerIdentity(_)
                        | ParkError::Total
                        | ParkError::BytesPerIdentity(_)
                        | ParkError::BytesTotal
                );
                if s.row == Row::None && cap {
                    // Nothing of it is in the state: it runs on as before
                    // executions were journaled, and cannot park either.
                    tracing::warn!(execution = %self.execution, error = %e, "the execution runs unjournaled: a cap refused its first record");
                    s.off = true;
                    return Ok(());
                }
                let why = match e {
                    ParkError::Unavailable => {
                        "the store of durable executions cannot be reached".to_string()
                    }
                    e => e.to_string(),
                };
                Err(unavailable(tool, &why))
            }
        }
    }

    /// Records the answer of change `id`. A call that waits (for a
    /// decision, or for the execution to be followed) got no answer: it
    /// is made again when the execution goes on.
    pub fn after(&self, id: u32, journal: &JournalTap, result: &Result<Value, ToolFailure>) {
        let mut s = self.state();
        let journal = journal.snapshot();
        // Answers the guest took are in the journal: they count no more.
        if let Some(j) = &journal {
            s.sends.settle(j);
        }
        let waits = matches!(result, Err(f) if f.code == codes::WAITING);
        if waits {
            s.sends.unanswered.remove(&id);
        } else if let Ok(text) = serde_json::to_string(result) {
            let kept: usize = s.sends.answered.values().map(String::len).sum();
            // Past the bound the answer is not kept: the change stays
            // unanswered in the record until the guest takes its answer.
            if kept + text.len() <= ANSWERS_BYTES {
                s.sends.answered.insert(id, text);
                s.sends.unanswered.remove(&id);
            }
        }
        if s.off || s.row == Row::None {
            return;
        }
        let Some(journal) = journal else {
            return;
        };
        // Should this fail, the last record still names the change as
        // sent and unanswered: a replay gets `outcome_unknown`, never a
        // second send.
        if let Err(e) = self.write(&mut s, journal) {
            tracing::warn!(execution = %self.execution, error = %e, "a change's answer could not be journaled");
        }
    }

    fn write(&self, s: &mut State, journal: airlock_sandbox::Journal) -> Result<(), ParkError> {
        s.sends.settle(&journal);
        let record = Parked {
            calls: journal.calls().0 as u32,
            journal,
            sends: s.sends.clone(),
            waiting: Vec::new(),
            ..self.base.clone()
        };
        let budget = crate::durable::RECORD_BYTES.saturating_sub(s.written);
        let write = |new: bool| {
            self.durable
                .checkpoint(&self.execution, &record, &s.holder, new, budget)
        };
        let written = match s.row {
            Row::Held => write(false),
            Row::None => {
                let tried = std::time::Instant::now();
                write(true).inspect_err(|e| {
                    if matches!(e, ParkError::Unavailable) {
                        s.row = Row::Maybe(tried);
                    }
                })
            }
            // Landed or not: replaced if it did, added if it did not —
            // while the lease it would hold has not run out.
            Row::Maybe(_) => match write(false) {
                Err(ParkError::LeaseLost) if s.row.may_add(self.durable.lease()) => write(true),
                other => other,
            },
        }?;
        s.row = Row::Held;
        s.written += written;
        Ok(())
    }

    /// The lease the row is held under, if it may have one; and what was
    /// sent and answered, for the park that ends this run.
    pub fn finish(&self) -> (Option<String>, Sends) {
        let s = self.state();
        let holder = (s.row != Row::None).then(|| s.holder.clone());
        (holder, s.sends.clone())
    }

    /// Whether the row may not exist (its only record failed): a park
    /// that finds no row under the lease adds one instead, while the
    /// lease it would hold has not run out.
    pub fn row_uncertain(&self) -> bool {
        self.state().row.may_add(self.durable.lease())
    }
}

fn unavailable(tool: &str, why: &str) -> ToolFailure {
    let quoted = airlock_catalog::catalog::quote_name(tool);
    ToolFailure::new(
        JOURNAL_UNAVAILABLE,
        format!(
            "{quoted} was not sent: a change of a durable execution is written down before it is sent (so that no process sends it twice), and that record could not be written now ({why}). Nothing of it reached the backend"
        ),
    )
    .with_details(json!({"tool": tool}))
}
