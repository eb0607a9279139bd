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
//! exclusive file lock and continues from the file's real last line.

use std::{
    fs::{File, OpenOptions},
    io::{BufRead, BufReader, Read, Seek, SeekFrom, Write},
    path::{Path, PathBuf},
    sync::Mutex,
    time::SystemTime,
};

use serde::Serialize;
use serde_json::{Map, Value};

use crate::digest::{canonical_json, sha256_hex};

pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("cannot write the audit log {path}: {message}")]
    Write { path: String, message: String },
    #[error("cannot read the audit log {path}: {message}")]
    Read { path: String, message: String },
}

/// Where the chain stands: the last line's number and hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Head {
    pub seq: u64,
    pub hash: String,
}

pub struct AuditLog {
    path: PathBuf,
    /// Head and file length after our last append; when the file has the
    /// same length, no other process has written since.
    cached: Mutex<Option<(Head, u64)>>,
}

impl AuditLog {
    /// Opens (creating if needed) the log at `path` and checks it can be
    /// written, so a misconfiguration fails at startup.
    pub fn open(path: &Path) -> Result<Self, AuditError> {
        let write_err = |e: std::io::Error| AuditError::Write {
            path: path.display().to_string(),
            message: e.to_string(),
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(write_err)?;
        }
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(write_err)?;
        Ok(Self {
            path: path.to_path_buf(),
            cached: Mutex::new(None),
        })
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
        file.lock().map_err(err)?;
        let len = file.metadata().map_err(err)?.len();
        let head = match cached.as_ref() {
            Some((head, at)) if *at == len => head.clone(),
            _ => last_head(&mut file).map_err(err)?,
        };
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
        record.insert("prev".into(), Value::String(head.hash));
        let hash = sha256_hex(canonical_json(&Value::Object(record.clone())).as_bytes());
        record.insert("hash".into(), Value::String(hash.clone()));
        let mut line = serde_json::to_vec(&Value::Object(record)).expect("JSON serializes");
        line.push(b'\n');
        let written = file.write_all(&line).and_then(|_| file.flush());
        if let Err(e) = written {
            // Leave no half line behind for the next writer to chain onto.
            let _ = file.set_len(len);
            let _ = file.unlock();
            *cached = None;
            return Err(err(e));
        }
        let _ = file.unlock();
        let new_head = Head {
            seq: head.seq + 1,
            hash,
        };
        *cached = Some((new_head.clone(), len + line.len() as u64));
        Ok(new_head)
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
}

impl Verdict {
    pub fn ok(&self) -> bool {
        self.problem.is_none()
    }
}

/// Checks every line's hash and link. Stops at the first problem.
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
    let mut head = Head {
        seq: 0,
        hash: GENESIS.into(),
    };
    let mut n = 0u64;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        if reader.read_until(b'\n', &mut buf)? == 0 {
            break;
        }
        n += 1;
        let fail = |why: String| Verdict {
            good_lines: n - 1,
            head: head.clone(),
            problem: Some((n, why)),
        };
        if !buf.ends_with(b"\n") {
            return Ok(fail(
                "the line is incomplete (the file was cut short or a write failed)".into(),
            ));
        }
        let Ok(Value::Object(mut record)) = serde_json::from_slice::<Value>(&buf) else {
            return Ok(fail(
                "the line is not a JSON object (edited or corrupted)".into(),
            ));
        };
        let Some(Value::String(hash)) = record.remove("hash") else {
            return Ok(fail("the line has no hash".into()));
        };
        if sha256_hex(canonical_json(&Value::Object(record.clone())).as_bytes()) != hash {
            return Ok(fail(
                "the line was edited: its hash does not match its content".into(),
            ));
        }
        let seq = record.get("seq").and_then(Value::as_u64);
        let prev = record.get("prev").and_then(Value::as_str);
        if prev != Some(head.hash.as_str()) {
            return Ok(fail(format!(
                "the line does not follow line {}: its prev hash differs (a line was deleted, inserted or reordered)",
                n - 1
            )));
        }
        if seq != Some(head.seq + 1) {
            return Ok(fail(format!(
                "sequence number {seq:?} does not follow {}",
                head.seq
            )));
        }
        head = Head {
            seq: head.seq + 1,
            hash,
        };
    }
    Ok(Verdict {
        good_lines: n,
        head,
        problem: None,
    })
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
    fn an_unwritable_log_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap(); // now a directory: cannot be opened for append
        assert!(log.append("call", Map::new()).is_err());
    }
}
