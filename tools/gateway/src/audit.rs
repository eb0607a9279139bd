//! The audit trail: one JSON line per event, hash-chained.
//!
//! Each line carries `seq`, `ts`, the event's fields, `prev` (the previous
//! line's hash, 64 zeros for the first) and `hash`, the SHA-256 of the
//! line's canonical JSON without `hash`. Editing, deleting, inserting or
//! reordering a line breaks the chain at that line, which
//! [`verify`] reports. Lines never hold argument values or secrets: only
//! argument keys and a hash.
//!
//! This module holds the chain's rules — how a line is sealed ([`seal`]),
//! how a chain is checked ([`Verifier`]) — and the trait every store
//! appends through ([`AuditStore`]). The stores (one machine's JSONL file,
//! a PostgreSQL table) live in the `airlock-state` crate.
//!
//! A line is valid only if its bytes are exactly what the writer makes of
//! its record (`serde_json` with keys in insertion order, no spaces, the
//! shortest escapes): a duplicated key, an escaped letter or a space is
//! an edit, even where the parsed JSON would hash the same. Every line is
//! at most [`MAX_LINE_BYTES`]; callers bound what they put in one.

use std::{
    fs::File,
    io::{BufRead, BufReader, Write},
    path::Path,
    time::SystemTime,
};

use serde::Serialize;
use serde_json::{Map, Value};

use airlock_catalog::digest::{canonical_json, sha256_hex};
use airlock_edge::private_files::StateDirError;

pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The longest line the writer writes, newline included. A line that
/// would be longer is refused (and with it the call it records): a bug or
/// an unbounded field must not let one call fill the disk.
pub const MAX_LINE_BYTES: usize = 4096;

/// Change plans `verify` follows at once.
pub const MAX_TRACKED_PLANS: usize = crate::audit_plans::MAX_TRACKED;

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("cannot write the audit log {path}: {message}")]
    Write { path: String, message: String },
    #[error("cannot read the audit log {path}: {message}")]
    Read { path: String, message: String },
    #[error(transparent)]
    StateDir(#[from] StateDirError),
    #[error("the audit log {path} is locked by another process for more than {} s; find the process holding it (fuser {path}) and stop it", .waited.as_secs_f64())]
    Locked {
        path: String,
        waited: std::time::Duration,
    },
    #[error("the audit store {location} is unavailable: {message}")]
    Store { location: String, message: String },
    /// The store did not answer in time: the line may have been written
    /// after its writer stopped waiting (a database that froze commits
    /// later), or not at all.
    #[error("the audit store {location} did not answer in time, so the line may or may not have been written: {message}")]
    Unsettled { location: String, message: String },
    #[error("an audit line of {bytes} bytes is longer than the {limit} bytes a line may take; nothing was written")]
    LineTooLong { bytes: usize, limit: usize },
}

impl AuditError {
    /// Whether the store may have kept the line although the append
    /// failed.
    pub fn may_have_written(&self) -> bool {
        matches!(self, AuditError::Unsettled { .. })
    }

    /// Whether the store could not be reached (or did not answer): worth
    /// retrying, unlike a line that is too long.
    pub fn unreachable(&self) -> bool {
        matches!(
            self,
            AuditError::Store { .. } | AuditError::Unsettled { .. }
        )
    }
}

/// Where the chain stands: the last line's number and hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Head {
    pub seq: u64,
    pub hash: String,
}

/// Where the chain is kept: a JSONL file one machine's processes share,
/// or a PostgreSQL table every replica appends to (both in
/// `airlock-state`). Both write the bytes [`seal`] makes.
pub trait AuditStore: Send + Sync {
    /// Appends one event (a JSON object of its fields) and returns the new
    /// head. An error means nothing usable was written.
    fn append(&self, event: &str, fields: Map<String, Value>) -> Result<Head, AuditError>;

    /// Checks the whole chain, as [`verify`] checks a file.
    fn verify(&self) -> Result<Verdict, AuditError>;

    /// Writes the whole chain as JSONL (what `airlock audit verify FILE`
    /// checks offline) and returns the bytes written.
    fn export(&self, out: &mut dyn Write) -> Result<u64, AuditError>;

    /// Where the chain is, for messages (never a password).
    fn location(&self) -> String;

    /// The file, when the chain is one.
    fn file(&self) -> Option<&Path> {
        None
    }

    /// Whether the store answers now, asked cheaply (a load balancer's
    /// health check asks it every few seconds). No default: a wrapper
    /// that forgot to forward it would always say yes.
    fn reachable(&self) -> Result<(), AuditError>;
}

/// The line that follows `head`: `event` and its `fields` (any of the
/// chain's own keys among them are dropped), stamped with the next `seq`,
/// the time, `prev` and its `hash`; newline-terminated, at most
/// [`MAX_LINE_BYTES`]. Every store writes exactly these bytes, so one
/// [`verify_lines`] checks a file and an export from a database alike.
pub fn seal(
    head: &Head,
    event: &str,
    fields: Map<String, Value>,
) -> Result<(Head, Vec<u8>), AuditError> {
    let mut record = Map::new();
    record.insert("seq".into(), Value::from(head.seq + 1));
    record.insert(
        "ts".into(),
        Value::String(humantime::format_rfc3339_millis(SystemTime::now()).to_string()),
    );
    record.insert("event".into(), Value::String(event.into()));
    for (k, v) in fields {
        if !matches!(k.as_str(), "seq" | "ts" | "event" | "prev" | "hash") {
            record.insert(k, v);
        }
    }
    record.insert("prev".into(), Value::String(head.hash.clone()));
    let hash = sha256_hex(canonical_json(&Value::Object(record.clone())).as_bytes());
    record.insert("hash".into(), Value::String(hash.clone()));
    let mut line = serde_json::to_vec(&Value::Object(record)).expect("JSON serializes");
    line.push(b'\n');
    if line.len() > MAX_LINE_BYTES {
        return Err(AuditError::LineTooLong {
            bytes: line.len(),
            limit: MAX_LINE_BYTES,
        });
    }
    Ok((
        Head {
            seq: head.seq + 1,
            hash,
        },
        line,
    ))
}

/// The result of checking a whole file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// Lines that verified, in order, before any problem.
    pub good_lines: u64,
    pub head: Head,
    /// The first broken line (1-based) and what is wrong with it.
    pub problem: Option<(u64, String)>,
    /// Executions, among the lines that verified, with a start and no
    /// end, in the order they started: still running, or their process
    /// stopped without writing it (killed). Not a break in the chain.
    pub unfinished: Vec<Unfinished>,
    /// Change plans whose lines were not checked against each other
    /// because too many were open at once (`audit_plans`).
    pub plans_unchecked: u64,
    /// Calls made under runbook runs, for checking against the versions'
    /// files (`audit_runbooks::check_claims`).
    pub runbook_claims: Vec<airlock_runbooks::audit_runbooks::Claim>,
    /// Runbook calls past `audit_runbooks::MAX_CLAIMS`, not kept.
    pub runbooks_unchecked: u64,
    /// Lines where one person approved what they asked, wrote or ran
    /// under another spelling of their name (`audit_people`): line, why.
    pub four_eyes: Vec<(u64, String)>,
    /// Such lines past `audit_people::MAX_FINDINGS`, not kept.
    pub four_eyes_more: u64,
    /// Lines where an execution sent one of its changes a second time
    /// (`audit_sends`): line, why.
    pub sent_twice: Vec<(u64, String)>,
    /// Such lines past `audit_sends::MAX_FINDINGS`, not kept.
    pub sent_twice_more: u64,
    /// Changes not checked (past `audit_sends::MAX_CALLS` open at once).
    pub sends_unchecked: u64,
}

/// An execution whose start line has no end line (yet).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Unfinished {
    pub execution: String,
    /// Its start line's `ts` (RFC 3339), as written.
    pub started: String,
    pub identity: Option<String>,
    /// When it last parked to wait for decisions (`ts`), if it has not
    /// resumed since: it is waiting, not lost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parked: Option<String>,
}

impl Verdict {
    pub fn ok(&self) -> bool {
        self.problem.is_none()
    }
}

/// Checks every line's bytes, hash and link. Stops at the first problem.
pub fn verify(path: &Path) -> Result<Verdict, AuditError> {
    let read_err = |e: std::io::Error| AuditError::Read {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let file = File::open(path).map_err(read_err)?;
    verify_lines(BufReader::new(file)).map_err(read_err)
}

/// [`verify`] over any reader: the file's bytes are whatever a disk, an
/// editor or an attacker left there, so every line is checked and nothing
/// in it can make the check panic (the fuzzer holds it to that).
pub fn verify_lines(mut reader: impl BufRead) -> std::io::Result<Verdict> {
    let mut verifier = Verifier::default();
    let mut buf = Vec::new();
    loop {
        buf.clear();
        if reader.read_until(b'\n', &mut buf)? == 0 {
            break;
        }
        if !verifier.line(&buf) {
            break;
        }
    }
    Ok(verifier.verdict())
}

/// The chain checked one line at a time, wherever the lines come from (a
/// file, or a database page by page). Stops at the first problem.
pub struct Verifier {
    head: Head,
    lines: u64,
    problem: Option<(u64, String)>,
    /// Executions started and not (yet) ended, by id, with the line
    /// that started them (for the order).
    open: std::collections::HashMap<String, (u64, Unfinished)>,
    /// Change plans' lines, checked against each other.
    plans: crate::audit_plans::PlanLedger,
    /// Runbook runs' calls, for checking against their files.
    runbooks: airlock_runbooks::audit_runbooks::RunbookLedger,
    /// Four eyes kept in every spelling of a name.
    people: crate::audit_people::PeopleLedger,
    /// Each change of an execution sent once.
    sends: crate::audit_sends::SendsLedger,
}

impl Default for Verifier {
    fn default() -> Self {
        Self {
            head: Head {
                seq: 0,
                hash: GENESIS.into(),
            },
            lines: 0,
            problem: None,
            open: Default::default(),
            plans: Default::default(),
            runbooks: Default::default(),
            people: Default::default(),
            sends: Default::default(),
        }
    }
}

impl Verifier {
    /// Checks the next line (its bytes with the newline); `false` once a
    /// problem was found, after which lines are ignored.
    pub fn line(&mut self, buf: &[u8]) -> bool {
        if self.problem.is_some() {
            return false;
        }
        self.lines += 1;
        match self.check(buf) {
            Ok((head, record)) => {
                if let Err(why) = self.plans.note(&record) {
                    self.problem = Some((self.lines, why));
                    return false;
                }
                self.head = head;
                self.runbooks.note(self.lines, &record);
                self.people.note(self.lines, &record);
                self.sends.note(self.lines, &record);
                self.track(&record);
                true
            }
            Err(why) => {
                self.problem = Some((self.lines, why));
                false
            }
        }
    }

    pub fn verdict(self) -> Verdict {
        let good_lines = match self.problem {
            Some(_) => self.lines - 1,
            None => self.lines,
        };
        let mut unfinished: Vec<(u64, Unfinished)> = self.open.into_values().collect();
        unfinished.sort_by_key(|(at, _)| *at);
        let (runbook_claims, runbooks_unchecked) = self.runbooks.finish();
        let (four_eyes, four_eyes_more) = self.people.finish();
        let (sent_twice, sent_twice_more, sends_unchecked) = self.sends.finish();
        Verdict {
            good_lines,
            head: self.head,
            problem: self.problem,
            unfinished: unfinished.into_iter().map(|(_, u)| u).collect(),
            plans_unchecked: self.plans.unchecked(),
            runbook_claims,
            runbooks_unchecked,
            four_eyes,
            four_eyes_more,
            sent_twice,
            sent_twice_more,
            sends_unchecked,
        }
    }

    /// Notes an execution's start, parking, resuming or end.
    fn track(&mut self, record: &Map<String, Value>) {
        let Some(id) = record.get("execution").and_then(Value::as_str) else {
            return;
        };
        match record.get("event").and_then(Value::as_str) {
            Some("execution_start") => {
                let text = |k: &str| record.get(k).and_then(Value::as_str).map(str::to_string);
                let started = Unfinished {
                    execution: id.to_string(),
                    started: text("ts").unwrap_or_default(),
                    identity: text("identity"),
                    parked: None,
                };
                self.open.insert(id.to_string(), (self.lines, started));
            }
            Some("execution_end") => {
                self.open.remove(id);
            }
            Some(event @ ("execution_parked" | "execution_resumed")) => {
                if let Some((_, open)) = self.open.get_mut(id) {
                    open.parked = (event == "execution_parked")
                        .then(|| record.get("ts").and_then(Value::as_str))
                        .flatten()
                        .map(str::to_string);
                }
            }
            _ => {}
        }
    }

    /// The head after `buf` and its record, or what is wrong with it.
    fn check(&self, buf: &[u8]) -> Result<(Head, Map<String, Value>), String> {
        let head = &self.head;
        if !buf.ends_with(b"\n") {
            return Err("the line is incomplete (the file was cut short or a write failed)".into());
        }
        let bytes = &buf[..buf.len() - 1];
        let Ok(Value::Object(mut record)) = serde_json::from_slice::<Value>(bytes) else {
            return Err("the line is not a JSON object (edited or corrupted)".into());
        };
        // The hash covers the record's meaning; this covers its bytes.
        if serde_json::to_vec(&record).ok().as_deref() != Some(bytes) {
            return Err(
                "the line is not byte for byte as Airlock writes it (a duplicated key, an escaped character, a space or another number form was edited in)".into(),
            );
        }
        let Some(Value::String(hash)) = record.remove("hash") else {
            return Err("the line has no hash".into());
        };
        if sha256_hex(canonical_json(&Value::Object(record.clone())).as_bytes()) != hash {
            return Err("the line was edited: its hash does not match its content".into());
        }
        let seq = record.get("seq").and_then(Value::as_u64);
        let prev = record.get("prev").and_then(Value::as_str);
        if prev != Some(head.hash.as_str()) {
            return Err(format!(
                "the line does not follow line {}: its prev hash differs (a line was deleted, inserted or reordered)",
                self.lines - 1
            ));
        }
        if seq != Some(head.seq + 1) {
            return Err(format!(
                "sequence number {seq:?} does not follow {}",
                head.seq
            ));
        }
        Ok((
            Head {
                seq: head.seq + 1,
                hash,
            },
            record,
        ))
    }
}
