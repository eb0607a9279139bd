//! One journaled execution's recorder: it replays the journal it was given
//! to the guest, entry by entry, then records what crosses the boundary
//! after it. The imports (`imports.rs`) and the guest's clocks and
//! randomness (`wasi.rs`) share it.
//!
//! A replay sends nothing: calls the journal shows are matched, not made;
//! their answers come from the journal. The first thing the script asks
//! for that the journal does not hold, in kind or in content, stops the
//! execution (`ReplayDiverged`, naming the entry). The clocks and the
//! random source cannot fail the guest; they note the divergence, and the
//! next import ends the execution before anything leaves it.

use std::{
    convert::Infallible,
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime},
};

use wasmtime_wasi::{HostMonotonicClock, HostWallClock};

use crate::{
    journal::{Entry, Journal},
    limits::Limit,
    outcome::ExecError,
};

pub(crate) type Shared = Arc<Mutex<Recorder>>;

/// Why the recorder stopped the execution.
#[derive(Clone, Debug)]
enum Fault {
    Diverged { entry: usize, message: String },
    Full { used: u64 },
}

pub(crate) struct Recorder {
    journal: Journal,
    /// Entries `[0, replay_len)` came with the journal; later ones were
    /// recorded by this run.
    replay_len: usize,
    cursor: usize,
    /// Bytes already taken from the `Random` entry at `cursor`.
    random_taken: usize,
    bytes: u64,
    limit: u64,
    fault: Option<Fault>,
    went_live: bool,
    /// Added to the host's monotonic clock after a replay, so the guest's
    /// monotonic clock never goes back across a resume.
    mono_offset: u64,
    last_mono: u64,
    /// Where live random bytes come from: a generator seeded from the
    /// operating system once per execution.
    source: rand::rngs::StdRng,
}

/// The host's monotonic clock, in nanoseconds since the process first
/// read it.
fn host_mono_ns() -> u64 {
    static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

fn host_wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl Recorder {
    /// A recorder that replays `journal` for `script`, then records, up to
    /// `limit` bytes. Refuses a journal made by another script, or one
    /// already past the limit.
    pub fn new(journal: &mut Journal, script: &str, limit: u64) -> Result<Self, ExecError> {
        let digest = crate::journal::script_digest(script);
        if !journal.script.is_empty() && journal.script != digest {
            return Err(ExecError::ReplayDiverged {
                entry: 0,
                message: format!(
                    "the journal belongs to another script (SHA-256 {}…) than this one ({}…); a journal replays only the script that made it, so nothing was run or sent — send the original script, or start a new execution",
                    &journal.script[..journal.script.len().min(12)],
                    &digest[..12]
                ),
            });
        }
        let bytes = journal.bytes();
        if bytes > limit {
            return Err(ExecError::limit(Limit::JournalBytes, limit, bytes));
        }
        let replay_len = journal.entries.len();
        let mut journal = std::mem::take(journal);
        journal.script = digest;
        Ok(Self {
            journal,
            replay_len,
            cursor: 0,
            random_taken: 0,
            bytes,
            limit,
            fault: None,
            went_live: false,
            mono_offset: 0,
            last_mono: 0,
            source: rand::SeedableRng::from_rng(&mut rand::rng()),
        })
    }

    /// The journal as it stands (replayed entries, then recorded ones);
    /// the recorder keeps an empty one.
    pub fn take_journal(&mut self) -> Journal {
        std::mem::take(&mut self.journal)
    }

    /// A copy of the journal as it stands, unless the recorder stopped the
    /// execution.
    pub fn journal_now(&self) -> Option<Journal> {
        self.fault.is_none().then(|| self.journal.clone())
    }

    /// Entries this run replayed.
    pub fn replayed(&self) -> usize {
        self.cursor.min(self.replay_len)
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    fn replaying(&self) -> bool {
        self.cursor < self.replay_len
    }

    /// The error that ends the execution, once the recorder stopped it.
    pub fn error(&self) -> Option<ExecError> {
        self.fault.as_ref().map(|f| match f {
            Fault::Diverged { entry, message } => ExecError::ReplayDiverged {
                entry: *entry as u64,
                message: message.clone(),
            },
            Fault::Full { used } => ExecError::limit(Limit::JournalBytes, self.limit, *used),
        })
    }

    /// True once, at the first import after the replay ran out: the moment
    /// to start what the journal left pending.
    pub fn going_live(&mut self) -> bool {
        if self.fault.is_none() && !self.replaying() && !self.went_live {
            self.went_live = true;
            return true;
        }
        false
    }

    fn diverge(&mut self, asked: &str) {
        if self.fault.is_some() {
            return;
        }
        let had = match self.journal.entries.get(self.cursor) {
            Some(Entry::Random { .. }) if self.random_taken > 0 => "more random bytes".into(),
            Some(e) => e.describe(),
            None => "nothing more".into(),
        };
        self.fault = Some(Fault::Diverged {
            entry: self.cursor,
            message: format!(
                "replay diverged at journal entry {}: the journal has {had}, the script asked for {asked}; nothing was sent. The script now does something other than what it did when the journal was made (a script must not depend on anything but its tool results, timers, clocks and Math.random); start a new execution",
                self.cursor
            ),
        });
    }

    /// The entry at the cursor, if the replay is on it and nothing is
    /// half-taken.
    fn next(&self) -> Option<&Entry> {
        if !self.replaying() || self.random_taken > 0 {
            return None;
        }
        self.journal.entries.get(self.cursor)
    }

    fn record(&mut self, entry: Entry) -> bool {
        if self.fault.is_some() {
            return false;
        }
        let used = self.bytes + entry.cost();
        if used > self.limit {
            self.fault = Some(Fault::Full { used });
            return false;
        }
        self.bytes = used;
        self.journal.entries.push(entry);
        true
    }

    /// A call the script starts. `Ok(true)`: the journal holds it (send
    /// nothing); `Ok(false)`: recorded, send it; `Err`: stop.
    pub fn call(&mut self, id: u32, tool: &str, args: String) -> Result<bool, ()> {
        if self.fault.is_some() {
            return Err(());
        }
        let entry = Entry::Call {
            id,
            tool: tool.to_string(),
            args,
        };
        if self.replaying() {
            let next = self.next();
            if next == Some(&entry) {
                self.cursor += 1;
                return Ok(true);
            }
            let same_call =
                matches!(next, Some(Entry::Call { id: i, tool: t, .. }) if *i == id && t == tool);
            let asked = match same_call {
                true => format!("{} with other arguments", entry.describe()),
                false => entry.describe(),
            };
            self.diverge(&asked);
            return Err(());
        }
        if self.record(entry) {
            Ok(false)
        } else {
            Err(())
        }
    }

    /// A timer the script arms. `Ok(Some(at_ms))`: the journal holds it,
    /// armed then; `Ok(None)`: recorded, arm it; `Err`: stop.
    pub fn timer(&mut self, id: u32, delay_ms: u32) -> Result<Option<u64>, ()> {
        if self.fault.is_some() {
            return Err(());
        }
        if self.replaying() {
            return match self.next() {
                Some(&Entry::Timer {
                    id: i,
                    delay_ms: d,
                    at_ms,
                }) if i == id && d == delay_ms => {
                    self.cursor += 1;
                    Ok(Some(at_ms))
                }
                _ => {
                    self.diverge(&format!("timer #{id} of {delay_ms} ms"));
                    Err(())
                }
            };
        }
        let at_ms = host_wall_ns() / 1_000_000;
        if self.record(Entry::Timer {
            id,
            delay_ms,
            at_ms,
        }) {
            Ok(None)
        } else {
            Err(())
        }
    }

    /// What `wait` hands the guest next while replaying: `Ok(Some)` from
    /// the journal, `Ok(None)` when the replay is over (wait live).
    pub fn next_done(&mut self) -> Result<Option<(u32, u32, String)>, ()> {
        if self.fault.is_some() {
            return Err(());
        }
        if !self.replaying() {
            return Ok(None);
        }
        match self.next() {
            Some(Entry::Done {
                id,
                status,
                payload,
            }) => {
                let done = (*id, *status, payload.clone());
                self.cursor += 1;
                Ok(Some(done))
            }
            _ => {
                self.diverge("the next call or timer to end");
                Err(())
            }
        }
    }

    /// A replayed end the guest cannot take (its id is not pending): the
    /// journal and the script disagree.
    pub fn unexpected_done(&mut self, id: u32) {
        self.cursor -= 1;
        self.diverge(&format!(
            "something else (#{id} is not pending in this run)"
        ));
    }

    /// Records an end before the guest sees it; `false`: stop.
    pub fn done(&mut self, id: u32, status: u32, payload: &[u8]) -> bool {
        let payload = String::from_utf8_lossy(payload).into_owned();
        self.record(Entry::Done {
            id,
            status,
            payload,
        })
    }

    fn clock(&mut self, wall: bool) -> u64 {
        if self.replaying() {
            if let Some(&Entry::Clock { wall: w, ns }) = self.next() {
                if w == wall {
                    self.cursor += 1;
                    if !wall {
                        self.last_mono = ns;
                    }
                    return ns;
                }
            }
            self.diverge(if wall {
                "a wall-clock reading"
            } else {
                "a monotonic-clock reading"
            });
        }
        let ns = if wall {
            host_wall_ns()
        } else {
            let mut ns = host_mono_ns().saturating_add(self.mono_offset);
            if ns < self.last_mono {
                self.mono_offset += self.last_mono - ns;
                ns = self.last_mono;
            }
            self.last_mono = ns;
            ns
        };
        if self.fault.is_none() {
            self.record(Entry::Clock { wall, ns });
        }
        ns
    }

    fn random(&mut self, dst: &mut [u8]) {
        let mut filled = 0;
        while self.replaying() && filled < dst.len() && self.fault.is_none() {
            let Some(Entry::Random { hex }) = self.journal.entries.get(self.cursor) else {
                self.diverge("random bytes");
                break;
            };
            // Only the bytes taken are decoded: a 64 KiB draw is 16,384
            // reads of four bytes.
            let have = hex.len() / 2;
            let take = have
                .saturating_sub(self.random_taken)
                .min(dst.len() - filled);
            let from = &hex[self.random_taken * 2..(self.random_taken + take) * 2];
            if hex::decode_to_slice(from, &mut dst[filled..filled + take]).is_err() {
                self.diverge("random bytes (the journal's are not hex)");
                break;
            }
            filled += take;
            self.random_taken += take;
            if self.random_taken >= have {
                self.cursor += 1;
                self.random_taken = 0;
            }
        }
        if filled == dst.len() {
            return;
        }
        let rest = &mut dst[filled..];
        rand::Rng::fill_bytes(&mut self.source, rest);
        if self.fault.is_some() || self.replaying() {
            return;
        }
        // Draws one after another share an entry, among the entries this
        // run recorded (a stored journal's entries are never rewritten).
        let more = hex::encode(&*rest);
        if self.journal.entries.len() > self.replay_len {
            if let Some(Entry::Random { hex }) = self.journal.entries.last_mut() {
                let used = self.bytes + more.len() as u64;
                if used > self.limit {
                    self.fault = Some(Fault::Full { used });
                    return;
                }
                self.bytes = used;
                hex.push_str(&more);
                return;
            }
        }
        self.record(Entry::Random { hex: more });
    }
}

/// The guest's wall clock, through the recorder.
pub(crate) struct Wall(pub Shared);
/// The guest's monotonic clock, through the recorder.
pub(crate) struct Monotonic(pub Shared);
/// The guest's random source, through the recorder.
pub(crate) struct Random(pub Shared);

fn lock(s: &Shared) -> std::sync::MutexGuard<'_, Recorder> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

impl HostWallClock for Wall {
    fn resolution(&self) -> Duration {
        Duration::from_micros(1)
    }
    fn now(&self) -> Duration {
        Duration::from_nanos(lock(&self.0).clock(true))
    }
}

impl HostMonotonicClock for Monotonic {
    fn resolution(&self) -> u64 {
        1_000
    }
    fn now(&self) -> u64 {
        lock(&self.0).clock(false)
    }
}

impl rand::TryRng for Random {
    type Error = Infallible;
    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        let mut b = [0; 4];
        lock(&self.0).random(&mut b);
        Ok(u32::from_le_bytes(b))
    }
    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        let mut b = [0; 8];
        lock(&self.0).random(&mut b);
        Ok(u64::from_le_bytes(b))
    }
    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        lock(&self.0).random(dst);
        Ok(())
    }
}
