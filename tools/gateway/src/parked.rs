//! Durable executions waiting for decisions, kept where every replica and
//! the next start of this one find them.
//!
//! An execution that parks keeps no instance and no slot: only a row
//! with its identity, when it was born, what it waits for, and its
//! body — the script and the journal of what crossed its sandbox
//! boundary, sealed by the host (the store cannot read or forge it and
//! does not try). A follow-up *takes* the row under a lease naming the
//! process that holds it; a holder that dies leaves its lease to run out,
//! and the next taker is told the row is an orphan, so the calls the dead
//! holder may have sent are not sent again blindly.
//!
//! The stores (a SQLite file on one machine, a PostgreSQL table a
//! deployment shares) live in `airlock-state` and pass one suite of tests.

/// One parked execution, as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParkedRow {
    pub execution: String,
    pub identity: String,
    /// When the execution first started (ms since the epoch): its
    /// lifetime counts from here, across parks and replicas.
    pub born_ms: i64,
    /// What the body holds in bytes as the caps count them (script and
    /// journal).
    pub bytes: i64,
    /// The approval requests it waits for (for `airlock executions` and a
    /// 2026-07-28 client's answers; the body holds the same, sealed).
    pub waiting: Vec<String>,
    /// The host's sealed script and journal; opaque here.
    pub body: String,
    /// Tool calls it made so far (for its end line).
    pub calls: u32,
    /// Questions put to the person in the client, across parks.
    pub asked: u32,
    /// The person declined one of them.
    pub declined: bool,
}

/// What a row says about itself without its body (listings).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParkedInfo {
    pub execution: String,
    pub identity: String,
    pub born_ms: i64,
    pub parked_ms: i64,
    pub bytes: i64,
    pub waiting: Vec<String>,
    pub calls: u32,
    /// Taken by a follow-up now (its lease has not run out).
    pub held: bool,
}

impl ParkedInfo {
    /// Where the execution stands: `running` (held, nothing waited for:
    /// its holder records it as it goes), `resuming` (held by a
    /// follow-up), `waiting`.
    pub fn standing(&self) -> &'static str {
        match (self.held, self.waiting.is_empty()) {
            (true, true) => "running",
            (true, false) => "resuming",
            (false, _) => "waiting",
        }
    }
}

/// The caps a park is checked against, all rows of the deployment
/// counted (held ones too: a resumed execution keeps its place).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParkCaps {
    pub per_identity: u32,
    pub total: u32,
    pub bytes_per_identity: i64,
    pub bytes_total: i64,
}

/// Why a park was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParkRefusal {
    PerIdentity,
    Total,
    BytesPerIdentity,
    BytesTotal,
    /// The lease of the process parking it again ran out and another took
    /// the row (or it was ended meanwhile): the row is not overwritten.
    LeaseLost,
}

/// What [`ParkedStore::take`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Take {
    /// Taken, held by the caller's process until the lease ends. `orphan`:
    /// a holder since it last parked neither parked it again nor ended it
    /// before its lease ran out (it died mid-resume); it stays an orphan
    /// until it parks again.
    Taken { row: ParkedRow, orphan: bool },
    /// Held by a live lease (another follow-up of its identity), or not
    /// yet ready to be followed.
    Busy,
    /// No such execution of this identity.
    Unknown,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the store of parked executions is unavailable: {0}")]
pub struct ParkedUnavailable(pub String);

/// Where parked executions are kept.
///
/// Every method is one step: two replicas taking the same row, or parking
/// past the last place, cannot both succeed.
pub trait ParkedStore: Send + Sync {
    /// Keeps `row`, not to be followed before [`ParkedStore::ready`].
    /// With `holder` (a resumed execution parking again) the row that
    /// process holds is replaced and its lease released, the caps counted
    /// without it; without, a new row is added within `caps`.
    fn park(
        &self,
        row: &ParkedRow,
        holder: Option<&str>,
        caps: &ParkCaps,
        now_ms: i64,
    ) -> Result<Result<(), ParkRefusal>, ParkedUnavailable>;

    /// Keeps `row` as the journal of an execution running under
    /// `holder`'s lease, extended to `lease_until_ms`: written before each
    /// change it sends and after each answer, so a holder that dies
    /// leaves a row saying what it may have sent. With `new`, the row is
    /// added within `caps`, ready and held from the start (its lease runs
    /// out if the holder dies, and the next taker finds an orphan);
    /// without, the row `holder` holds is replaced (`LeaseLost` when
    /// another holds it now, or it is gone).
    fn checkpoint(
        &self,
        row: &ParkedRow,
        holder: &str,
        new: bool,
        lease_until_ms: i64,
        caps: &ParkCaps,
        now_ms: i64,
    ) -> Result<Result<(), ParkRefusal>, ParkedUnavailable>;

    /// Its parked line is written: its identity may follow it now.
    fn ready(&self, execution: &str) -> Result<(), ParkedUnavailable>;

    /// Takes `execution` for `holder` until `lease_until_ms`, when
    /// `identity` parked it, it is ready, and no live lease holds it.
    fn take(
        &self,
        execution: &str,
        identity: &str,
        holder: &str,
        now_ms: i64,
        lease_until_ms: i64,
    ) -> Result<Take, ParkedUnavailable>;

    /// Releases `holder`'s lease on `execution`, the row as it was: the
    /// follow-up found nothing decided, or could not start.
    fn put_back(&self, execution: &str, holder: &str) -> Result<(), ParkedUnavailable>;

    /// Ends `holder`'s lease on `execution` now, as if the holder had
    /// died: its process stops without running it further, and the next
    /// taker (at once, not when the lease would have run out) resumes it
    /// as an orphan, from its last record. The holder's name is given up
    /// with it: nothing it writes lands on the row any more.
    fn let_go(&self, execution: &str, holder: &str) -> Result<(), ParkedUnavailable>;

    /// The execution `holder` resumed ended: its row goes, only while that
    /// take still holds it (a holder whose lease ran out, and whose row
    /// another take parked again meanwhile, deletes nothing).
    fn ended(&self, execution: &str, holder: &str) -> Result<(), ParkedUnavailable>;

    /// Removes and returns the rows born before `born_before_ms` that no
    /// live lease holds, for their end lines.
    fn expired(
        &self,
        born_before_ms: i64,
        now_ms: i64,
    ) -> Result<Vec<ParkedInfo>, ParkedUnavailable>;

    /// The row of `execution`, if `identity` parked it and it is ready
    /// and not held.
    fn get(
        &self,
        execution: &str,
        identity: &str,
        now_ms: i64,
    ) -> Result<Option<ParkedRow>, ParkedUnavailable>;

    /// Counts questions put to the person, or a decline, on `identity`'s
    /// `execution`.
    fn prompted(
        &self,
        execution: &str,
        identity: &str,
        asked: u32,
        declined: bool,
    ) -> Result<(), ParkedUnavailable>;

    /// The rows, oldest first, of one identity or of all; at most `limit`.
    fn list(
        &self,
        identity: Option<&str>,
        now_ms: i64,
        limit: u32,
    ) -> Result<Vec<ParkedInfo>, ParkedUnavailable>;

    /// How many are parked in the deployment now.
    fn count(&self) -> Result<u64, ParkedUnavailable>;

    /// Removes `execution` if it is ready and no live lease holds it (an
    /// operator cancels it); the row as it was, or `None` when there is
    /// none, it is held, or its parked line is not written yet.
    fn cancel(&self, execution: &str, now_ms: i64)
        -> Result<Option<ParkedInfo>, ParkedUnavailable>;
}

/// The waiting list's stored form: request ids joined by spaces (ids
/// never hold one).
pub fn waiting_to_text(waiting: &[String]) -> String {
    waiting.join(" ")
}

/// The waiting list from its stored form.
pub fn waiting_from_text(text: &str) -> Vec<String> {
    text.split(' ')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// The cap a new row of `bytes` passes, given what its identity's other
/// rows and all other rows hold as (count, bytes): the one rule both
/// stores apply.
pub fn cap_hit(
    caps: &ParkCaps,
    own: (i64, i64),
    all: (i64, i64),
    bytes: i64,
) -> Option<ParkRefusal> {
    if all.0 >= caps.total as i64 {
        Some(ParkRefusal::Total)
    } else if own.0 >= caps.per_identity as i64 {
        Some(ParkRefusal::PerIdentity)
    } else if own.1.saturating_add(bytes) > caps.bytes_per_identity {
        Some(ParkRefusal::BytesPerIdentity)
    } else if all.1.saturating_add(bytes) > caps.bytes_total {
        Some(ParkRefusal::BytesTotal)
    } else {
        None
    }
}

/// Why an operator's cancel of a waiting execution did not end it.
#[derive(Debug, thiserror::Error)]
pub enum CancelError {
    #[error("no execution {0} is waiting (it ended, or a follow-up is resuming it right now: try again once that one answers)")]
    NotWaiting(String),
    #[error(transparent)]
    Unavailable(#[from] ParkedUnavailable),
    /// The row is gone (the execution never goes on); only its end line
    /// is owed.
    #[error("execution {execution} is cancelled, but its end line could not be written: {error}; `airlock audit close` writes it later")]
    EndLine { execution: String, error: String },
}

/// An operator (`by`, a person the deployment knows) ends a waiting
/// execution: its row goes, so it never goes on, and its end line says
/// `Cancelled` and who. The command line and the console both cancel
/// here, so the line is the same wherever it was done.
pub fn cancel(
    parked: &dyn ParkedStore,
    audit: &dyn crate::audit::AuditStore,
    execution: &str,
    by: &str,
    now_ms: i64,
) -> Result<ParkedInfo, CancelError> {
    let gone = parked
        .cancel(execution, now_ms)?
        .ok_or_else(|| CancelError::NotWaiting(airlock_catalog::visible::visible(execution)))?;
    let mut line = serde_json::Map::new();
    line.insert("execution".into(), gone.execution.clone().into());
    line.insert("identity".into(), gone.identity.clone().into());
    line.insert("outcome".into(), "Cancelled".into());
    line.insert("tool_calls".into(), gone.calls.into());
    line.insert(
        "wall_ms".into(),
        (now_ms.saturating_sub(gone.born_ms).max(0) as u64).into(),
    );
    line.insert("cancelled_by".into(), by.into());
    audit
        .append("execution_end", line)
        .map_err(|e| CancelError::EndLine {
            execution: airlock_catalog::visible::visible(&gone.execution),
            error: e.to_string(),
        })?;
    Ok(gone)
}
