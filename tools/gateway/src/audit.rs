//! The audit trail: one JSON line per event, hash-chained.
//!
//! Each line carries `seq`, `ts`, the event's fields, `prev` (the previous
//! line's hash, 64 zeros for the first) and `hash`, the SHA-256 of the
//! line's canonical JSON without `hash`. Editing, deleting, inserting or
//! reordering a line breaks the chain at that line, which
//! [`verify`] reports. Lines never hold argument values or secrets: only
//! argument keys and a hash.
//!
//! Several processes may append to one file: each append takes an
//! exclusive file lock and continues from the file's real last line. The
//! wait for that lock is bounded ([`LOCK_WAIT`]): anyone who can read the
//! file can also lock it, and must not be able to hang every call.
//!
//! A line is valid only if its bytes are exactly what the writer makes of
//! its record (`serde_json` with keys in insertion order, no spaces, the
//! shortest escapes): a duplicated key, an escaped letter or a space is
//! an edit, even where the parsed JSON would hash the same. Every line is
//! at most [`MAX_LINE_BYTES`]; callers bound what they put in one.

use std::{
    fs::{File, OpenOptions, TryLockError},
    io::{BufRead, BufReader, Read, Seek, SeekFrom, Write},
    path::{Path, PathBuf},
    sync::Mutex,
    time::{Duration, Instant, SystemTime},
};

use serde::Serialize;
use serde_json::{Map, Value};

use crate::{
    digest::{canonical_json, sha256_hex},
    private_files::{parent_of, private_dir, private_file, StateDirError},
};

pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The longest line the writer writes, newline included. A line that
/// would be longer is refused (and with it the call it records): a bug or
/// an unbounded field must not let one call fill the disk.
pub const MAX_LINE_BYTES: usize = 4096;

/// Change plans `verify` follows at once.
pub const MAX_TRACKED_PLANS: usize = crate::audit_plans::MAX_TRACKED;

/// The longest an append waits for another process's lock on the file.
pub const LOCK_WAIT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("cannot write the audit log {path}: {message}")]
    Write { path: String, message: String },
    #[error("cannot read the audit log {path}: {message}")]
    Read { path: String, message: String },
    #[error(transparent)]
    StateDir(#[from] StateDirError),
    #[error("the audit log {path} is locked by another process for more than {} s; find the process holding it (fuser {path}) and stop it", .waited.as_secs_f64())]
    Locked { path: String, waited: Duration },
    #[error("the audit store {location} is unavailable: {message}")]
    Store { location: String, message: String },
    #[error("an audit line of {bytes} bytes is longer than the {limit} bytes a line may take; nothing was written")]
    LineTooLong { bytes: usize, limit: usize },
}

/// Where the chain stands: the last line's number and hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Head {
    pub seq: u64,
    pub hash: String,
}

/// Where the chain is kept: a JSONL file one machine's processes share
/// ([`AuditLog`]), or a PostgreSQL table every replica appends to
/// (`state::postgres`). Both write the bytes [`seal`] makes.
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
}

/// One machine's chain, in a JSONL file.
pub struct AuditLog {
    path: PathBuf,
    /// Head and file length after our last append; when the file has the
    /// same length, no other process has written since.
    cached: Mutex<Option<(Head, u64)>>,
    lock_wait: Duration,
}

impl AuditLog {
    /// Opens (creating if needed) the log at `path` and checks it can be
    /// written, so a misconfiguration fails at startup. Its directory is
    /// created 0700 or must be this user's alone (`private_files`); the
    /// file is created 0600.
    pub fn open(path: &Path) -> Result<Self, AuditError> {
        private_dir(parent_of(path))?;
        private_file(path)?;
        Ok(Self {
            path: path.to_path_buf(),
            cached: Mutex::new(None),
            lock_wait: LOCK_WAIT,
        })
    }

    /// Waits at most `wait` for another process's lock (tests use less
    /// than [`LOCK_WAIT`]).
    pub fn with_lock_wait(mut self, wait: Duration) -> Self {
        self.lock_wait = wait;
        self
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one event (a JSON object of its fields) and returns the new
    /// head. An error means nothing usable was written.
    pub fn append(&self, event: &str, fields: Map<String, Value>) -> Result<Head, AuditError> {
        let err = |e: std::io::Error| AuditError::Write {
            path: self.path.display().to_string(),
            message: e.to_string(),
        };
        let mut cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(&self.path)
            .map_err(err)?;
        lock_within(&file, self.lock_wait).map_err(|e| match e {
            Some(e) => err(e),
            None => AuditError::Locked {
                path: self.path.display().to_string(),
                waited: self.lock_wait,
            },
        })?;
        let len = file.metadata().map_err(err)?.len();
        let head = match cached.as_ref() {
            Some((head, at)) if *at == len => head.clone(),
            _ => last_head(&mut file).map_err(err)?,
        };
        let (new_head, line) = match seal(&head, event, fields) {
            Ok(sealed) => sealed,
            Err(e) => {
                let _ = file.unlock();
                return Err(e);
            }
        };
        let written = file.write_all(&line).and_then(|_| file.flush());
        if let Err(e) = written {
            // Leave no half line behind for the next writer to chain onto.
            let _ = file.set_len(len);
            let _ = file.unlock();
            *cached = None;
            return Err(err(e));
        }
        let _ = file.unlock();
        *cached = Some((new_head.clone(), len + line.len() as u64));
        Ok(new_head)
    }
}

impl AuditStore for AuditLog {
    fn append(&self, event: &str, fields: Map<String, Value>) -> Result<Head, AuditError> {
        AuditLog::append(self, event, fields)
    }

    fn verify(&self) -> Result<Verdict, AuditError> {
        verify(&self.path)
    }

    fn export(&self, out: &mut dyn Write) -> Result<u64, AuditError> {
        let read_err = |e: std::io::Error| AuditError::Read {
            path: self.path.display().to_string(),
            message: e.to_string(),
        };
        let mut file = File::open(&self.path).map_err(read_err)?;
        std::io::copy(&mut file, out).map_err(|e| AuditError::Write {
            path: "the export".into(),
            message: e.to_string(),
        })
    }

    fn location(&self) -> String {
        self.path.display().to_string()
    }

    fn file(&self) -> Option<&Path> {
        Some(&self.path)
    }
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

/// Takes the exclusive lock on `file`, trying again with a growing pause
/// for at most `wait`. `Err(None)`: still held by someone else.
fn lock_within(file: &File, wait: Duration) -> Result<(), Option<std::io::Error>> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(()),
            Err(TryLockError::Error(e)) => return Err(Some(e)),
            Err(TryLockError::WouldBlock) => {}
        }
        let left = wait.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Err(None);
        }
        std::thread::sleep(pause.min(left));
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// The head of a log file: its last complete line's `seq` and `hash`.
fn last_head(file: &mut File) -> std::io::Result<Head> {
    let len = file.seek(SeekFrom::End(0))?;
    if len == 0 {
        return Ok(Head {
            seq: 0,
            hash: GENESIS.into(),
        });
    }
    let mut back = 4096u64.min(len);
    loop {
        file.seek(SeekFrom::Start(len - back))?;
        let mut buf = Vec::with_capacity(back as usize);
        Read::by_ref(file).take(back).read_to_end(&mut buf)?;
        let text = String::from_utf8_lossy(&buf);
        let trimmed = text.trim_end_matches('\n');
        if let Some(i) = trimmed.rfind('\n').or((back == len).then_some(usize::MAX)) {
            let last = if i == usize::MAX {
                trimmed
            } else {
                &trimmed[i + 1..]
            };
            let v: Value = serde_json::from_str(last).map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("the last line is not JSON ({e}); run `airlock audit verify`"),
                )
            })?;
            let seq = v.get("seq").and_then(Value::as_u64);
            let hash = v.get("hash").and_then(Value::as_str);
            return match (seq, hash) {
                (Some(seq), Some(hash)) => Ok(Head {
                    seq,
                    hash: hash.into(),
                }),
                _ => Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "the last line has no seq/hash; run `airlock audit verify`",
                )),
            };
        }
        back = (back * 2).min(len);
    }
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
}

/// An execution whose start line has no end line (yet).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Unfinished {
    pub execution: String,
    /// Its start line's `ts` (RFC 3339), as written.
    pub started: String,
    pub identity: Option<String>,
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
        Verdict {
            good_lines,
            head: self.head,
            problem: self.problem,
            unfinished: unfinished.into_iter().map(|(_, u)| u).collect(),
            plans_unchecked: self.plans.unchecked(),
        }
    }

    /// Notes an execution's start or end.
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
                };
                self.open.insert(id.to_string(), (self.lines, started));
            }
            Some("execution_end") => {
                self.open.remove(id);
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn write_three(path: &Path) {
        let log = AuditLog::open(path).unwrap();
        for i in 0..3 {
            log.append(
                "call",
                fields(json!({"tool": format!("t{i}"), "status": "ok"})),
            )
            .unwrap();
        }
    }

    fn lines(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn executions_without_an_end_are_named_with_their_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path).unwrap();
        for (event, id) in [
            ("execution_start", "r1-x1"),
            ("execution_start", "r1-x2"),
            ("execution_end", "r1-x1"),
            ("execution_start", "r2-x1"),
        ] {
            log.append(
                event,
                fields(json!({"execution": id, "identity": "sso:ann"})),
            )
            .unwrap();
        }
        let v = verify(&path).unwrap();
        let open: Vec<&str> = v.unfinished.iter().map(|u| u.execution.as_str()).collect();
        assert_eq!(open, ["r1-x2", "r2-x1"], "in the order they started");
        assert_eq!(v.unfinished[0].identity.as_deref(), Some("sso:ann"));
        assert!(humantime::parse_rfc3339(&v.unfinished[0].started).is_ok());
        log.append("execution_end", fields(json!({"execution": "r1-x2"})))
            .unwrap();
        assert_eq!(verify(&path).unwrap().unfinished.len(), 1);
    }

    #[test]
    fn a_fresh_chain_verifies_and_continues_across_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("logs/audit.jsonl");
        write_three(&path);
        write_three(&path);
        let v = verify(&path).unwrap();
        assert!(v.ok(), "{v:?}");
        assert_eq!(v.good_lines, 6);
        assert_eq!(v.head.seq, 6);
    }

    #[test]
    fn edits_deletions_and_reorders_are_caught_at_the_right_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        write_three(&path);
        let original = lines(&path);
        let save = |ls: &[String]| {
            std::fs::write(
                &path,
                ls.iter().map(|l| format!("{l}\n")).collect::<String>(),
            )
            .unwrap()
        };

        let mut edited = original.clone();
        edited[1] = edited[1].replace("\"t1\"", "\"t9\"");
        save(&edited);
        assert_eq!(verify(&path).unwrap().problem.unwrap().0, 2);

        save(&[original[0].clone(), original[2].clone()]);
        let p = verify(&path).unwrap().problem.unwrap();
        assert_eq!(p.0, 2);
        assert!(p.1.contains("deleted"), "{}", p.1);

        save(&[
            original[1].clone(),
            original[0].clone(),
            original[2].clone(),
        ]);
        assert_eq!(verify(&path).unwrap().problem.unwrap().0, 1);

        std::fs::write(&path, format!("{}\n{}", original[0], &original[1][..20])).unwrap();
        let p = verify(&path).unwrap().problem.unwrap();
        assert_eq!(p.0, 2);
        assert!(p.1.contains("incomplete"));
    }

    #[test]
    fn a_line_of_broken_bytes_is_a_verdict_not_a_read_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        write_three(&path);
        let mut bytes = std::fs::read(&path).unwrap();
        let second = bytes.iter().position(|b| *b == b'\n').unwrap() + 1;
        bytes[second + 2] = 0xff; // not UTF-8 any more
        std::fs::write(&path, &bytes).unwrap();
        let v = verify(&path).unwrap();
        assert_eq!(v.good_lines, 1);
        assert_eq!(v.problem.unwrap().0, 2);
    }

    #[test]
    fn two_writers_share_one_chain() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let a = AuditLog::open(&path).unwrap();
        let b = AuditLog::open(&path).unwrap();
        for i in 0..5 {
            a.append("call", fields(json!({"i": i}))).unwrap();
            b.append("call", fields(json!({"i": i}))).unwrap();
        }
        let v = verify(&path).unwrap();
        assert!(v.ok(), "{v:?}");
        assert_eq!(v.good_lines, 10);
    }

    #[test]
    fn lines_not_byte_for_byte_as_written_are_caught_at_their_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        write_three(&path);
        let original = lines(&path);
        // Re-serialising a written line gives it back exactly.
        for l in &original {
            let v: Map<String, Value> = serde_json::from_str(l).unwrap();
            assert_eq!(serde_json::to_string(&v).unwrap(), *l);
        }
        let variants = [
            // A second `status` before the real one: a reader sees
            // "denied" first, the parser keeps the last value.
            original[1].replacen(
                "\"status\":\"ok\"",
                "\"status\":\"denied\",\"status\":\"ok\"",
                1,
            ),
            original[1].replacen("\"status\"", "\"st\\u0061tus\"", 1),
            original[1].replacen("{\"seq\"", "{ \"seq\"", 1),
        ];
        for edited in variants {
            assert_ne!(edited, original[1]);
            let mut ls = original.clone();
            ls[1] = edited.clone();
            std::fs::write(
                &path,
                ls.iter().map(|l| format!("{l}\n")).collect::<String>(),
            )
            .unwrap();
            let v = verify(&path).unwrap();
            let (line, why) = v.problem.expect("caught");
            assert_eq!(line, 2, "{edited}: {why}");
            assert!(why.contains("byte for byte"), "{why}");
            assert_eq!(v.good_lines, 1);
        }
    }

    /// The fuzz target's property, exhaustively over positions: no
    /// one-byte change to a real chain verifies.
    #[test]
    fn every_one_byte_change_is_caught() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        write_three(&path);
        let original = std::fs::read(&path).unwrap();
        for at in 0..original.len() {
            for byte in [original[at] ^ 1, b' ', b'\n', b'"', b'\\', b'0', b'a', 0xff] {
                if byte == original[at] {
                    continue;
                }
                let mut tampered = original.clone();
                tampered[at] = byte;
                let v = verify_lines(&tampered[..]).unwrap();
                assert!(!v.ok(), "byte {at} changed to {byte:#04x} still verifies");
            }
        }
    }

    #[test]
    fn files_and_directories_are_created_private() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("logs/deeper/audit.jsonl");
        let log = AuditLog::open(&path).unwrap();
        log.append("call", Map::new()).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        assert_eq!(mode(&dir.path().join("logs")), 0o700);
    }

    #[test]
    fn a_shared_or_linked_directory_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o775)).unwrap();
        let e = AuditLog::open(&shared.join("audit.jsonl")).err().unwrap();
        assert!(
            matches!(e, AuditError::StateDir(StateDirError::Writable { .. })),
            "{e}"
        );
        assert!(e.to_string().contains("chmod 700"), "{e}");
        assert!(
            !shared.join("audit.jsonl").exists(),
            "nothing created there"
        );

        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = AuditLog::open(&link.join("audit.jsonl")).err().unwrap();
        assert!(
            matches!(e, AuditError::StateDir(StateDirError::Symlink { .. })),
            "{e}"
        );
    }

    #[test]
    fn a_lock_held_elsewhere_fails_the_append_within_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path)
            .unwrap()
            .with_lock_wait(Duration::from_millis(200));
        log.append("call", Map::new()).unwrap();
        // Another open file description, as another process would have.
        let holder = File::open(&path).unwrap();
        holder.lock().unwrap();
        let before = std::fs::read(&path).unwrap();
        let e = log.append("call", Map::new()).unwrap_err();
        assert!(matches!(e, AuditError::Locked { .. }), "{e}");
        assert!(e.to_string().contains("locked by another process"), "{e}");
        assert_eq!(std::fs::read(&path).unwrap(), before);
        holder.unlock().unwrap();
        log.append("call", Map::new()).unwrap();
        assert!(verify(&path).unwrap().ok());
    }

    #[test]
    fn a_line_over_the_bound_is_refused_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path).unwrap();
        let e = log
            .append("call", fields(json!({"tool": "x".repeat(MAX_LINE_BYTES)})))
            .unwrap_err();
        assert!(matches!(e, AuditError::LineTooLong { .. }), "{e}");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
        log.append("call", fields(json!({"tool": "x"}))).unwrap();
        assert!(verify(&path).unwrap().ok());
    }

    #[test]
    fn an_unwritable_log_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap(); // now a directory: cannot be opened for append
        assert!(log.append("call", Map::new()).is_err());
    }
}
