//! A running durable execution's records when the store fails under
//! them: a first record the store timed out on, whether it landed or
//! not, never leaves a change unrecorded nor an execution that cannot
//! park. The store here is the real SQLite one, wrapped so its next
//! record fails in the way a timed-out database does: after writing, or
//! before. And a follow-up that comes after an execution's lifetime
//! ends it without running any of it.

use std::sync::{
    atomic::{AtomicU8, Ordering},
    Arc,
};

use airlock::{
    checkpoints::{Checkpoints, JOURNAL_UNAVAILABLE},
    durable::{Durable, FollowError, ParkError, Parked},
};
use airlock_gateway::{
    config::ApprovalConfig,
    parked::{ParkCaps, ParkRefusal, ParkedInfo, ParkedRow, ParkedStore, ParkedUnavailable, Take},
    state::{OpenError, State, Stores},
    Gateway, GatewayConfig,
};
use airlock_sandbox::{Entry, Journal, JournalTap};

/// How the next record fails.
const WORKS: u8 = 0;
const LANDS_THEN_FAILS: u8 = 1;
const FAILS: u8 = 2;

struct Flaky {
    inner: Arc<dyn ParkedStore>,
    next: AtomicU8,
}

impl ParkedStore for Flaky {
    fn park(
        &self,
        row: &ParkedRow,
        holder: Option<&str>,
        caps: &ParkCaps,
        now_ms: i64,
    ) -> Result<Result<(), ParkRefusal>, ParkedUnavailable> {
        self.inner.park(row, holder, caps, now_ms)
    }
    fn checkpoint(
        &self,
        row: &ParkedRow,
        holder: &str,
        new: bool,
        lease_until_ms: i64,
        caps: &ParkCaps,
        now_ms: i64,
    ) -> Result<Result<(), ParkRefusal>, ParkedUnavailable> {
        let timed_out = || Err(ParkedUnavailable("timed out".into()));
        match self.next.swap(WORKS, Ordering::SeqCst) {
            FAILS => timed_out(),
            LANDS_THEN_FAILS => {
                self.inner
                    .checkpoint(row, holder, new, lease_until_ms, caps, now_ms)?
                    .unwrap();
                timed_out()
            }
            _ => self
                .inner
                .checkpoint(row, holder, new, lease_until_ms, caps, now_ms),
        }
    }
    fn ready(&self, execution: &str) -> Result<(), ParkedUnavailable> {
        self.inner.ready(execution)
    }
    fn take(
        &self,
        execution: &str,
        identity: &str,
        holder: &str,
        now_ms: i64,
        lease_until_ms: i64,
    ) -> Result<Take, ParkedUnavailable> {
        self.inner
            .take(execution, identity, holder, now_ms, lease_until_ms)
    }
    fn put_back(&self, execution: &str, holder: &str) -> Result<(), ParkedUnavailable> {
        self.inner.put_back(execution, holder)
    }
    fn let_go(&self, execution: &str, holder: &str) -> Result<(), ParkedUnavailable> {
        self.inner.let_go(execution, holder)
    }
    fn ended(&self, execution: &str, holder: &str) -> Result<(), ParkedUnavailable> {
        self.inner.ended(execution, holder)
    }
    fn expired(
        &self,
        born_before_ms: i64,
        now_ms: i64,
    ) -> Result<Vec<ParkedInfo>, ParkedUnavailable> {
        self.inner.expired(born_before_ms, now_ms)
    }
    fn get(
        &self,
        execution: &str,
        identity: &str,
        now_ms: i64,
    ) -> Result<Option<ParkedRow>, ParkedUnavailable> {
        self.inner.get(execution, identity, now_ms)
    }
    fn prompted(
        &self,
        execution: &str,
        identity: &str,
        asked: u32,
        declined: bool,
    ) -> Result<(), ParkedUnavailable> {
        self.inner.prompted(execution, identity, asked, declined)
    }
    fn list(
        &self,
        identity: Option<&str>,
        now_ms: i64,
        limit: u32,
    ) -> Result<Vec<ParkedInfo>, ParkedUnavailable> {
        self.inner.list(identity, now_ms, limit)
    }
    fn count(&self) -> Result<u64, ParkedUnavailable> {
        self.inner.count()
    }
    fn cancel(
        &self,
        execution: &str,
        now_ms: i64,
    ) -> Result<Option<ParkedInfo>, ParkedUnavailable> {
        self.inner.cancel(execution, now_ms)
    }
}

/// A state directory whose parked store fails as `Flaky` is told.
struct FlakyPlace {
    place: airlock_state::Place,
    flaky: std::sync::Mutex<Option<Arc<Flaky>>>,
}

impl Stores for FlakyPlace {
    fn open(&self, approval: &ApprovalConfig) -> Result<State, OpenError> {
        let mut state = self.place.open(approval)?;
        let flaky = Arc::new(Flaky {
            inner: state.parked.clone(),
            next: AtomicU8::new(WORKS),
        });
        *self.flaky.lock().unwrap() = Some(flaky.clone());
        state.parked = flaky;
        Ok(state)
    }
}

struct World {
    durable: Arc<Durable>,
    flaky: Arc<Flaky>,
    _dir: tempfile::TempDir,
}

fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let place = FlakyPlace {
        place: airlock_state::Place::in_dir(dir.path()),
        flaky: Default::default(),
    };
    let (gateway, _) = Gateway::new(GatewayConfig::default(), Vec::new(), &place).unwrap();
    let flaky = place.flaky.lock().unwrap().clone().unwrap();
    let durable = Arc::new(Durable::new(
        Arc::new(gateway),
        &airlock_sandbox::Limits::default(),
        std::time::Duration::from_secs(10),
    ));
    World {
        durable,
        flaky,
        _dir: dir,
    }
}

fn base() -> Parked {
    Parked {
        identity: "alice".into(),
        script: "await tools.vm_shutdown({node: 'pve1', vmid: 101})".into(),
        journal: Journal::new(),
        waiting: Vec::new(),
        calls: 0,
        born_ms: airlock::durable::born_now(),
        prompts: Default::default(),
        idle: 0,
        sends: Default::default(),
    }
}

/// The journal as call `id` leaves.
fn leaving(id: u32) -> JournalTap {
    JournalTap::fixed(Journal {
        script: String::new(),
        entries: (1..=id)
            .map(|i| Entry::Call {
                id: i,
                tool: "vm_shutdown".into(),
                args: format!("{i:032x}"),
            })
            .collect(),
    })
}

fn rows(w: &World) -> Vec<ParkedInfo> {
    w.flaky.list(Some("alice"), 0, 100).unwrap()
}

/// The first record times out after it landed: the change is not sent,
/// and the next change's record replaces that row under the same lease
/// (one row, never two), naming only what may have gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_record_that_landed_unseen_is_replaced_by_the_next() {
    let w = world();
    let c = Checkpoints::new(w.durable.clone(), "x1-1", base(), None);
    w.flaky.next.store(LANDS_THEN_FAILS, Ordering::SeqCst);
    let refused = c.before_send(1, &leaving(1), "vm_shutdown").unwrap_err();
    assert_eq!(refused.code, JOURNAL_UNAVAILABLE);
    assert!(refused
        .message
        .contains("Nothing of it reached the backend"));
    assert_eq!(rows(&w).len(), 1, "it landed");
    c.before_send(2, &leaving(2), "vm_shutdown").unwrap();
    assert!(!c.unanswered(1), "the first was not sent");
    assert!(c.unanswered(2));
    let listed = rows(&w);
    assert_eq!(listed.len(), 1, "replaced, not added: {listed:?}");
    assert!(listed[0].held);
    assert_eq!(listed[0].calls, 2);
    let (holder, _) = c.finish();
    w.durable.ended("x1-1", &holder.unwrap());
    assert!(rows(&w).is_empty(), "ended under the same lease");
}

/// The first record times out without landing, and nothing else is
/// recorded: a park finds no row under the lease, and adds one, so the
/// execution can wait (instead of ending as if another had taken it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execution_whose_only_record_never_landed_still_parks() {
    let w = world();
    let c = Checkpoints::new(w.durable.clone(), "x1-2", base(), None);
    w.flaky.next.store(FAILS, Ordering::SeqCst);
    assert!(c.before_send(1, &leaving(1), "vm_shutdown").is_err());
    assert!(rows(&w).is_empty());
    assert!(c.row_uncertain());
    let (holder, sends) = c.finish();
    let parked = Parked { sends, ..base() };
    assert_eq!(
        w.durable.park("x1-2", &parked, holder.as_deref()),
        Err(ParkError::LeaseLost),
        "no row under that lease"
    );
    w.durable.park("x1-2", &parked, None).unwrap();
    assert_eq!(rows(&w).len(), 1);
}

/// A first record a cap refuses leaves nothing in the state: the
/// execution runs on unjournaled (nothing of it can be replayed, so
/// nothing of it can be sent twice), and nothing is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_record_a_cap_refuses_leaves_the_run_unjournaled() {
    let w = world();
    // Alice's places are all taken.
    for n in 0..airlock::durable::PARKED_PER_IDENTITY {
        w.durable.park(&format!("full-{n}"), &base(), None).unwrap();
    }
    let c = Checkpoints::new(w.durable.clone(), "x1-3", base(), None);
    c.before_send(1, &leaving(1), "vm_shutdown").unwrap();
    c.before_send(2, &leaving(2), "vm_shutdown").unwrap();
    assert_eq!(c.finish().0, None, "no row, no lease");
    assert_eq!(rows(&w).len(), airlock::durable::PARKED_PER_IDENTITY);
}

/// A follow-up that comes after the execution's lifetime (counted from its
/// first start, waiting included), before the periodic sweep ended it:
/// nothing of it runs, its row goes, and its end is in the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_past_the_lifetime_ends_the_execution_and_runs_nothing() {
    let w = world();
    let lifetime = airlock_sandbox::Limits::default().lifetime_ms as i64;
    let old = Parked {
        born_ms: airlock::durable::born_now() - lifetime - 1000,
        calls: 3,
        ..base()
    };
    w.durable.park("x1-9", &old, None).unwrap();
    w.durable.ready("x1-9");
    let young = Parked {
        born_ms: airlock::durable::born_now() - lifetime + 60_000,
        ..base()
    };
    w.durable.park("x1-10", &young, None).unwrap();
    w.durable.ready("x1-10");
    let Err(e) = w.durable.take("x1-9", "alice") else {
        panic!("an execution past its lifetime was taken")
    };
    assert_eq!(e, FollowError::Expired("x1-9".into(), lifetime as u64));
    assert!(e.to_string().contains("`lifetime_ms`"), "{e}");
    let left: Vec<String> = rows(&w).into_iter().map(|r| r.execution).collect();
    assert_eq!(
        left,
        vec!["x1-10".to_string()],
        "only the young one waits on"
    );
    assert!(w.durable.take("x1-10", "alice").is_ok());
    let ends: Vec<serde_json::Value> = std::fs::read_to_string(w._dir.path().join("audit.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|l| l["event"] == "execution_end")
        .collect();
    assert_eq!(ends.len(), 1, "{ends:?}");
    assert_eq!(ends[0]["execution"], "x1-9");
    assert_eq!(ends[0]["outcome"], "LifetimeExceeded");
    assert_eq!(ends[0]["tool_calls"], 3);
}
