//! One machine's audit chain, in a JSONL file several processes may
//! append to: each append takes an exclusive file lock and continues from
//! the file's real last line. The wait for that lock is bounded
//! ([`LOCK_WAIT`]): anyone who can read the file can also lock it, and
//! must not be able to hang every call.
//!
//! The file stays open between appends (opening and closing it was a
//! third of an append's time). Each append still asks the path which file
//! it names now, and opens it again when that is not the one held: a log
//! moved aside by rotation, or replaced, gets the next line in the new
//! file, as it did when every append opened the path. Each line is handed
//! to the kernel before the append returns, as before; neither way syncs
//! to disk.

use std::{
    fs::{File, OpenOptions, TryLockError},
    io::{Read, Seek, SeekFrom, Write},
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    sync::Mutex,
    time::{Duration, Instant},
};

use airlock_edge::private_files::{parent_of, private_dir, private_file};
use airlock_gateway::audit::{seal, verify, AuditError, AuditStore, Head, Verdict, GENESIS};
use serde_json::{Map, Value};

/// The longest an append waits for another process's lock on the file.
pub const LOCK_WAIT: Duration = Duration::from_secs(5);

/// One machine's chain, in a JSONL file.
pub struct AuditLog {
    path: PathBuf,
    writer: Mutex<Writer>,
    lock_wait: Duration,
}

#[derive(Default)]
struct Writer {
    /// The file open for appending, and its device and inode.
    file: Option<(File, (u64, u64))>,
    /// Head and file length after our last append; when the file has the
    /// same length, no other process has written since.
    cached: Option<(Head, u64)>,
}

/// Whether `path` still names the file held.
fn still_named(held: &Option<(File, (u64, u64))>, path: &Path) -> bool {
    let now = std::fs::metadata(path).map(|m| (m.dev(), m.ino()));
    matches!((held, &now), (Some((_, id)), Ok(now)) if id == now)
}

/// Opens the file `path` names now and holds it, forgetting the cached
/// head (which was the file held before, if any).
fn open_held(
    held: &mut Option<(File, (u64, u64))>,
    cached: &mut Option<(Head, u64)>,
    path: &Path,
) -> std::io::Result<()> {
    *held = None;
    *cached = None;
    let file = OpenOptions::new().read(true).append(true).open(path)?;
    let m = file.metadata()?;
    *held = Some((file, (m.dev(), m.ino())));
    Ok(())
}

/// The file's lock, released however the append ends: the file stays
/// open, so closing it no longer releases the lock.
struct Unlock<'a>(&'a File);

impl Drop for Unlock<'_> {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

/// How many times one append follows a log replaced while it waited for
/// the lock before giving up.
const FOLLOWS: u32 = 3;

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
            writer: Mutex::new(Writer::default()),
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
        let mut writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let Writer { file: held, cached } = &mut *writer;
        // The path is asked which file it names once the lock is taken (a
        // log rotated while we waited is followed), and not before: one
        // `stat` an append, where opening and closing the path were two
        // system calls more.
        let mut follows = 0;
        loop {
            if held.is_none() {
                open_held(held, cached, &self.path).map_err(err)?;
            }
            let file = &held.as_ref().expect("opened above").0;
            let locked = lock_within(file, self.lock_wait);
            if still_named(held, &self.path) {
                locked.map_err(|e| match e {
                    Some(e) => err(e),
                    None => AuditError::Locked {
                        path: self.path.display().to_string(),
                        waited: self.lock_wait,
                    },
                })?;
                break;
            }
            if locked.is_ok() {
                let _ = file.unlock();
            }
            *held = None;
            follows += 1;
            if follows == FOLLOWS {
                return Err(err(std::io::Error::other(format!(
                    "the file was replaced {FOLLOWS} times while this append waited for its lock; try again"
                ))));
            }
        }
        let file = &held.as_ref().expect("opened above").0;
        let _unlock = Unlock(file);
        let len = file.metadata().map_err(err)?.len();
        let head = match cached.as_ref() {
            Some((head, at)) if *at == len => head.clone(),
            _ => last_head(file).map_err(err)?,
        };
        let (new_head, line) = seal(&head, event, fields)?;
        let mut out = file;
        let written = out.write_all(&line).and_then(|_| out.flush());
        if let Err(e) = written {
            // Leave no half line behind for the next writer to chain onto.
            let _ = file.set_len(len);
            *cached = None;
            return Err(err(e));
        }
        *cached = Some((new_head.clone(), len + line.len() as u64));
        Ok(new_head)
    }
}

impl AuditStore for AuditLog {
    /// A file on this machine always answers: a full disk or a lock
    /// held too long shows at the next append instead.
    fn reachable(&self) -> Result<(), AuditError> {
        Ok(())
    }

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
fn last_head(mut file: &File) -> std::io::Result<Head> {
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
        Read::by_ref(&mut file).take(back).read_to_end(&mut buf)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_edge::private_files::StateDirError;
    use airlock_gateway::audit::{verify_lines, MAX_LINE_BYTES};
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

    /// The file stays open, but a log rotated aside (moved, a new one
    /// created in its place) gets the next line in the new file.
    #[test]
    fn a_rotated_log_is_followed_to_the_new_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path).unwrap();
        log.append("call", fields(json!({"n": 1}))).unwrap();
        log.append("call", fields(json!({"n": 2}))).unwrap();
        let aside = dir.path().join("audit.jsonl.1");
        std::fs::rename(&path, &aside).unwrap();
        private_file(&path).unwrap();
        log.append("call", fields(json!({"n": 3}))).unwrap();
        assert_eq!(lines(&aside).len(), 2, "the rotated file is left alone");
        let fresh = lines(&path);
        assert_eq!(fresh.len(), 1);
        assert!(fresh[0].contains("\"n\":3"), "{fresh:?}");
        assert!(
            verify(&path).unwrap().ok(),
            "the new file starts its own chain"
        );
        // Removed and not recreated: an error, not a write into the old file.
        std::fs::remove_file(&path).unwrap();
        assert!(log.append("call", Map::new()).is_err());
        assert_eq!(lines(&aside).len(), 2);
    }

    /// A failed append releases the lock although the file stays open:
    /// another writer is not kept waiting after the file is mended.
    #[test]
    fn a_failed_append_leaves_no_lock_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let a = AuditLog::open(&path).unwrap();
        a.append("call", fields(json!({"n": 1}))).unwrap();
        let good = std::fs::read(&path).unwrap();
        std::fs::write(&path, b"{\"not\": \"a chain line\"}\n").unwrap();
        assert!(
            a.append("call", Map::new()).is_err(),
            "the last line has no seq/hash"
        );
        std::fs::write(&path, &good).unwrap();
        let b = AuditLog::open(&path)
            .unwrap()
            .with_lock_wait(Duration::from_millis(100));
        b.append("call", fields(json!({"n": 2}))).unwrap();
        a.append("call", fields(json!({"n": 3}))).unwrap();
        let v = verify(&path).unwrap();
        assert!(v.ok(), "{v:?}");
        assert_eq!(v.good_lines, 3);
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
