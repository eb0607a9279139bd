//! One test suite for every state backend: each test below runs once on
//! this machine's files (SQLite and JSONL) and once on a real PostgreSQL
//! server started for this test binary (a database per test). "Two
//! replicas" are two `State`s opened on the same configuration, which is
//! what two processes sharing a state directory or a database have.

use std::{
    sync::{Arc, Barrier, OnceLock},
    time::{Duration, Instant},
};

use airlock_catalog::spec::Tier;
use airlock_gateway::{
    approval::{ApprovalError, ApprovalStore, Asked, Check, Request, Status},
    audit::{self, AuditError, MAX_LINE_BYTES},
    config::ApprovalConfig,
    decision::Decider,
    keys::{self, KeyError, KeyStore},
    plan::{list_hash, table, PlanError, PlannedChange, PLAN_TOOL},
    state::State,
    GatewayConfig,
};
use airlock_state::{local::EnrollmentFile, Place, PostgresConfig, StateError};
use airlock_testkit::TempPostgres;
use serde_json::{json, Map, Value};

const T0: i64 = 1_000_000;
const TTL_MS: i64 = 10 * 60 * 1000;

/// `check` with a call spelled out: the tool's key is `b:` + its name.
trait Ask {
    fn ask(
        &self,
        identity: &str,
        tool: &str,
        args_hash: &str,
        summary: &str,
        now_ms: i64,
    ) -> Result<Check, ApprovalError>;
}

impl<S: ApprovalStore + ?Sized> Ask for S {
    fn ask(
        &self,
        identity: &str,
        tool: &str,
        args_hash: &str,
        summary: &str,
        now_ms: i64,
    ) -> Result<Check, ApprovalError> {
        let key = format!("b:{tool}");
        let asked = Asked {
            identity,
            tool,
            tool_key: &key,
            args_hash,
            summary,
            detail: None,
        };
        self.check(&asked, now_ms)
    }
}

/// One PostgreSQL server for the whole binary; its watchdog stops it when
/// the process ends.
fn server() -> &'static TempPostgres {
    static SERVER: OnceLock<TempPostgres> = OnceLock::new();
    SERVER.get_or_init(|| TempPostgres::start().expect("PostgreSQL for the state tests"))
}

/// Where one test's state lives.
enum Fixture {
    Files(tempfile::TempDir),
    Postgres { db: String },
}

impl Fixture {
    fn files() -> Self {
        Fixture::Files(tempfile::tempdir().unwrap())
    }

    fn postgres(test: &str) -> Self {
        let db = format!("t_{test}");
        server().create_database(&db).unwrap();
        Fixture::Postgres { db }
    }

    fn place(&self) -> Place {
        match self {
            Fixture::Files(dir) => Place::in_dir(dir.path()),
            Fixture::Postgres { db } => {
                let pg = server();
                let mut p = PostgresConfig::new(pg.url(db));
                p.password_file = Some(pg.password_file().to_path_buf());
                p.timeout = Duration::from_secs(2);
                Place::Postgres(p)
            }
        }
    }

    fn open(&self) -> State {
        self.place().open(&ApprovalConfig::default()).unwrap()
    }

    /// The stores with at most `max_open` requests waiting per identity.
    fn open_capped(&self, max_open: u32) -> State {
        let approval = ApprovalConfig {
            max_open_per_identity: max_open,
            ..ApprovalConfig::default()
        };
        self.place().open(&approval).unwrap()
    }

    /// Where this kind keeps bearer keys: the enrollment file `serve
    /// --http` is given on one machine, the database in a deployment.
    fn keys(&self) -> Arc<dyn KeyStore> {
        match self {
            Fixture::Files(dir) => Arc::new(EnrollmentFile::new(dir.path().join("clients.toml"))),
            Fixture::Postgres { .. } => self.open().keys.expect("PostgreSQL keeps keys"),
        }
    }

    /// Replaces line `seq` of the chain with `text`, as someone with
    /// write access to the store could.
    fn rewrite_line(&self, seq: u64, text: &str) {
        match self {
            Fixture::Files(dir) => {
                let path = dir.path().join("audit.jsonl");
                let old = std::fs::read_to_string(&path).unwrap();
                let new: Vec<String> = old
                    .lines()
                    .enumerate()
                    .map(|(i, l)| {
                        if i as u64 + 1 == seq {
                            text.to_string()
                        } else {
                            l.to_string()
                        }
                    })
                    .collect();
                std::fs::write(&path, new.join("\n") + "\n").unwrap();
            }
            Fixture::Postgres { db } => {
                let quoted = text.replace('\'', "''");
                server()
                    .psql(
                        db,
                        &format!("UPDATE airlock_audit SET line = '{quoted}' WHERE seq = {seq}"),
                    )
                    .unwrap();
            }
        }
    }

    /// Marks the store as written by a newer Airlock's schema.
    fn mark_as_newer_schema(&self) {
        match self {
            Fixture::Files(dir) => {
                let conn = rusqlite::Connection::open(dir.path().join("approvals.db")).unwrap();
                conn.pragma_update(None, "user_version", 99).unwrap();
            }
            Fixture::Postgres { db } => {
                server()
                    .psql(
                        db,
                        "INSERT INTO airlock_schema (version, description) VALUES (99, 'future')",
                    )
                    .unwrap();
            }
        }
    }
}

/// Runs `body` on both backends, as two `#[test]`s.
macro_rules! both {
    ($name:ident, $body:expr) => {
        mod $name {
            use super::*;
            #[test]
            fn sqlite() {
                ($body)(Fixture::files());
            }
            #[test]
            fn postgres() {
                ($body)(Fixture::postgres(stringify!($name)));
            }
        }
    };
}

fn required(c: Check) -> Request {
    match c {
        Check::Required(r) => r,
        other => panic!("expected a request, got {other:?}"),
    }
}

fn fields(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

both!(an_approval_is_single_use, |f: Fixture| {
    let s = f.open().approvals;
    let r = required(s.ask("alice", "vm_stop", "h1", "node=pve1", T0).unwrap());
    assert_eq!(r.status, Status::Pending);
    assert_eq!(r.expires_ms, T0 + TTL_MS);
    // Asking again finds the same request.
    let again = required(
        s.ask("alice", "vm_stop", "h1", "node=pve1", T0 + 1)
            .unwrap(),
    );
    assert_eq!(again.id, r.id);
    let approved = s.approve(&r.id, &Decider::cli("op"), T0 + 2).unwrap();
    assert_eq!(approved.status, Status::Approved);
    assert_eq!(approved.decided_by.as_deref(), Some("op"));
    assert_eq!(
        s.ask("alice", "vm_stop", "h1", "", T0 + 3).unwrap(),
        Check::Proceed {
            request_id: r.id.clone(),
            decided_by: Some("op".into()),
            decided_via: Some("cli".into()),
            own: false,
        }
    );
    // Replay: used up, so a new request.
    let replay = required(s.ask("alice", "vm_stop", "h1", "", T0 + 4).unwrap());
    assert_ne!(replay.id, r.id);
    assert_eq!(s.get(&r.id).unwrap().status, Status::Used);
    assert!(matches!(
        s.approve(&r.id, &Decider::cli("op"), T0 + 5),
        Err(ApprovalError::NotPending { .. })
    ));
    assert!(matches!(
        s.approve("ap-0000000000000000", &Decider::cli("op"), T0 + 5),
        Err(ApprovalError::NotFound(_))
    ));
});

both!(
    an_approval_is_bound_to_identity_tool_and_arguments,
    |f: Fixture| {
        let s = f.open().approvals;
        let r = required(s.ask("alice", "vm_stop", "h1", "", T0).unwrap());
        s.approve(&r.id, &Decider::cli("op"), T0 + 1).unwrap();
        for (who, tool, hash) in [
            ("bob", "vm_stop", "h1"),
            ("alice", "vm_delete", "h1"),
            ("alice", "vm_stop", "h2"),
        ] {
            assert!(
                matches!(
                    s.ask(who, tool, hash, "", T0 + 2).unwrap(),
                    Check::Required(_)
                ),
                "{who} {tool} {hash}"
            );
        }
        assert!(matches!(
            s.ask("alice", "vm_stop", "h1", "", T0 + 3).unwrap(),
            Check::Proceed { .. }
        ));
    }
);

both!(a_decision_keeps_its_reason, |f: Fixture| {
    let s = f.open().approvals;
    let r = required(s.ask("olga", "vm_stop", "h1", "", T0).unwrap());
    let rita = Decider::cli("rita")
        .with_reason("outside the change window — «retry» on Monday")
        .unwrap();
    let denied = s.deny(&r.id, &rita, T0 + 1).unwrap();
    assert_eq!(
        denied.reason.as_deref(),
        Some("outside the change window — «retry» on Monday")
    );
    assert_eq!(s.get(&r.id).unwrap(), denied, "read back as written");
    // Without one, none is kept.
    let r2 = required(s.ask("olga", "vm_stop", "h2", "", T0).unwrap());
    let approved = s.approve(&r2.id, &Decider::cli("rita"), T0 + 1).unwrap();
    assert_eq!(approved.reason, None);
});

both!(
    nobody_approves_their_own_request_on_any_store,
    |f: Fixture| {
        let s = f.open().approvals;
        let r = required(s.ask("olga", "vm_stop", "h1", "", T0).unwrap());
        // The requester, by any channel, cannot approve; may refuse.
        for own in [Decider::cli("olga"), Decider::client("olga", false)] {
            assert_eq!(
                s.approve(&r.id, &own, T0 + 1),
                Err(ApprovalError::OwnRequest {
                    id: r.id.clone(),
                    identity: "olga".into()
                })
            );
        }
        assert_eq!(s.get(&r.id).unwrap().status, Status::Pending);
        // Allowed to approve her own, she can, and the row says how.
        let own = s
            .approve(&r.id, &Decider::client("olga", true), T0 + 2)
            .unwrap();
        assert_eq!(
            (
                own.decided_by.as_deref(),
                own.decided_via.as_deref(),
                own.decided_by_requester()
            ),
            (Some("olga"), Some("client"), true)
        );
        assert_eq!(
            s.ask("olga", "vm_stop", "h1", "", T0 + 3).unwrap(),
            Check::Proceed {
                request_id: r.id.clone(),
                decided_by: Some("olga".into()),
                decided_via: Some("client".into()),
                own: true,
            }
        );
        // A request bound to one key is not another tool's, whatever its name.
        let filed = required(s.ask("olga", "vm_stop", "h2", "", T0).unwrap());
        s.approve(&filed.id, &Decider::cli("rita"), T0 + 1).unwrap();
        let other_key = Asked {
            identity: "olga",
            tool: "vm_stop",
            tool_key: "b:another_operation",
            args_hash: "h2",
            summary: "",
            detail: None,
        };
        assert!(matches!(
            s.check(&other_key, T0 + 2).unwrap(),
            Check::Required(_)
        ));
        // Withdrawing one's own request is allowed.
        let mine = required(s.ask("olga", "vm_stop", "h3", "", T0).unwrap());
        assert_eq!(
            s.deny(&mine.id, &Decider::client("olga", false), T0 + 1)
                .unwrap()
                .status,
            Status::Denied
        );
        // One key for the hashes secrets are shown by, the same on every
        // replica and after a restart.
        let key = s.summary_key().unwrap();
        assert_eq!(f.open().approvals.summary_key().unwrap(), key);
        assert_ne!(key, [0u8; 32]);
    }
);

both!(requests_and_approvals_expire, |f: Fixture| {
    let s = f.open().approvals;
    let r = required(s.ask("alice", "vm_stop", "h1", "", T0).unwrap());
    assert!(matches!(
        s.approve(&r.id, &Decider::cli("op"), T0 + TTL_MS),
        Err(ApprovalError::Expired(_))
    ));
    let r = required(s.ask("alice", "vm_stop", "h1", "", T0 + TTL_MS).unwrap());
    s.approve(&r.id, &Decider::cli("op"), T0 + TTL_MS + 1)
        .unwrap();
    // Granted approvals live one TTL from the decision, then are gone.
    let late = T0 + 2 * TTL_MS + 1;
    assert!(matches!(
        s.ask("alice", "vm_stop", "h1", "", late).unwrap(),
        Check::Required(_)
    ));
    // The open list shows only what can still be decided or used; the
    // first request, expired a whole TTL ago, was purged on the way.
    let open: Vec<String> = s
        .list(late, false)
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(open.len(), 1, "{open:?}");
    let all = s.list(late, true).unwrap();
    assert_eq!(all.len(), 2, "{all:?}");
    assert!(all.iter().all(|r| r.created_ms > T0));
});

both!(a_denial_sticks_until_it_expires, |f: Fixture| {
    let s = f.open().approvals;
    let r = required(s.ask("alice", "vm_stop", "h1", "", T0).unwrap());
    let denied = s.deny(&r.id, &Decider::cli("op"), T0 + 1).unwrap();
    assert_eq!(denied.status, Status::Denied);
    match s.ask("alice", "vm_stop", "h1", "", T0 + 2).unwrap() {
        Check::Denied(d) => assert_eq!(d.id, r.id),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        s.ask("alice", "vm_stop", "h1", "", T0 + 1 + TTL_MS)
            .unwrap(),
        Check::Required(_)
    ));
});

both!(
    an_identity_has_at_most_max_open_requests_waiting,
    |f: Fixture| {
        let s = f.open_capped(3).approvals;
        for i in 0..3 {
            required(s.ask("alice", "vm_stop", &format!("h{i}"), "", T0).unwrap());
        }
        assert_eq!(
            s.ask("alice", "vm_stop", "h9", "", T0).unwrap(),
            Check::TooManyOpen { limit: 3 }
        );
        assert_eq!(s.rows().unwrap(), 3, "the refused one was not filed");
        // Another identity has its own allowance; deciding one frees a place.
        required(s.ask("bob", "vm_stop", "h9", "", T0).unwrap());
        let first = s
            .list(T0, false)
            .unwrap()
            .into_iter()
            .find(|r| r.identity == "alice")
            .unwrap();
        s.deny(&first.id, &Decider::cli("op"), T0 + 1).unwrap();
        required(s.ask("alice", "vm_stop", "h9", "", T0 + 2).unwrap());
    }
);

both!(expired_rows_are_purged, |f: Fixture| {
    let s = f.open().approvals;
    for i in 0..5 {
        required(s.ask("alice", "vm_stop", &format!("h{i}"), "", T0).unwrap());
    }
    assert_eq!(
        s.purge(T0 + TTL_MS).unwrap(),
        0,
        "expired, but not yet a TTL ago"
    );
    assert_eq!(s.purge(T0 + 2 * TTL_MS + 1).unwrap(), 5);
    assert_eq!(s.rows().unwrap(), 0);
});

both!(state_outlives_the_process_that_wrote_it, |f: Fixture| {
    // Opening purges by the wall clock, so this request is made now.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let r = {
        let first = f.open();
        first
            .audit
            .append("start", fields(json!({"n": 1})))
            .unwrap();
        required(
            first
                .approvals
                .ask("alice", "vm_stop", "h1", "s", now)
                .unwrap(),
        )
    };
    let second = f.open();
    assert_eq!(second.approvals.get(&r.id).unwrap(), r);
    let head = second
        .audit
        .append("again", fields(json!({"n": 2})))
        .unwrap();
    assert_eq!(head.seq, 2);
    assert!(second.audit.verify().unwrap().ok());
});

both!(
    two_replicas_racing_for_one_approval_use_it_once,
    |f: Fixture| {
        let replicas: Vec<State> = (0..2).map(|_| f.open()).collect();
        for round in 0..10 {
            let hash = format!("h{round}");
            let r = required(
                replicas[0]
                    .approvals
                    .ask("alice", "vm_stop", &hash, "", T0)
                    .unwrap(),
            );
            // Decided through the other replica.
            replicas[1]
                .approvals
                .approve(&r.id, &Decider::cli("op"), T0 + 1)
                .unwrap();
            let start = Arc::new(Barrier::new(4));
            let winners: usize = std::thread::scope(|scope| {
                let handles: Vec<_> = (0..4)
                    .map(|i| {
                        let s = replicas[i % 2].approvals.clone();
                        let (start, hash) = (start.clone(), hash.clone());
                        scope.spawn(move || {
                            start.wait();
                            s.ask("alice", "vm_stop", &hash, "", T0 + 2).unwrap()
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap())
                    .filter(|c| matches!(c, Check::Proceed { .. }))
                    .count()
            });
            assert_eq!(winners, 1, "round {round}");
            assert_eq!(
                replicas[1].approvals.get(&r.id).unwrap().status,
                Status::Used
            );
            // The losers found no approval and share one new request.
            let open = replicas[0].approvals.list(T0 + 3, false).unwrap();
            assert_eq!(open.iter().filter(|o| o.args_hash == hash).count(), 1);
        }
    }
);

both!(approve_and_deny_at_once_decide_once, |f: Fixture| {
    let replicas: Vec<State> = (0..2).map(|_| f.open()).collect();
    let r = required(
        replicas[0]
            .approvals
            .ask("alice", "vm_stop", "h1", "", T0)
            .unwrap(),
    );
    let start = Arc::new(Barrier::new(2));
    let results: Vec<Result<Request, ApprovalError>> = std::thread::scope(|scope| {
        let a = {
            let (s, start, id) = (replicas[0].approvals.clone(), start.clone(), r.id.clone());
            scope.spawn(move || {
                start.wait();
                s.approve(&id, &Decider::cli("op-a"), T0 + 1)
            })
        };
        let d = {
            let (s, start, id) = (replicas[1].approvals.clone(), start.clone(), r.id.clone());
            scope.spawn(move || {
                start.wait();
                s.deny(&id, &Decider::cli("op-b"), T0 + 1)
            })
        };
        vec![a.join().unwrap(), d.join().unwrap()]
    });
    assert_eq!(
        results.iter().filter(|r| r.is_ok()).count(),
        1,
        "{results:?}"
    );
    let loser = results.iter().find_map(|r| r.as_ref().err()).unwrap();
    assert!(matches!(loser, ApprovalError::NotPending { .. }), "{loser}");
    let decided = replicas[0].approvals.get(&r.id).unwrap();
    let winner = results.iter().find_map(|r| r.as_ref().ok()).unwrap();
    assert_eq!(&decided, winner);
});

both!(
    the_audit_chain_verifies_and_exports_as_jsonl,
    |f: Fixture| {
        let s = f.open();
        let mut heads = Vec::new();
        for i in 0..5 {
            heads.push(
                s.audit
                    .append("call", fields(json!({"i": i, "tool": "vm_list"})))
                    .unwrap(),
            );
        }
        assert_eq!(
            heads.iter().map(|h| h.seq).collect::<Vec<_>>(),
            [1, 2, 3, 4, 5]
        );
        let v = s.audit.verify().unwrap();
        assert!(v.ok(), "{v:?}");
        assert_eq!((v.good_lines, &v.head), (5, heads.last().unwrap()));
        // What export writes is what the offline check reads.
        let mut out = Vec::new();
        let bytes = s.audit.export(&mut out).unwrap();
        assert_eq!(bytes as usize, out.len());
        let offline = audit::verify_lines(&out[..]).unwrap();
        assert_eq!(offline, v);
        let first: Value =
            serde_json::from_slice(out.split(|b| *b == b'\n').next().unwrap()).unwrap();
        assert_eq!(
            (first["event"].as_str(), first["i"].as_i64()),
            (Some("call"), Some(0))
        );
        assert_eq!(first["prev"], audit::GENESIS);
    }
);

both!(an_edited_line_is_found, |f: Fixture| {
    let s = f.open();
    for i in 0..4 {
        s.audit.append("call", fields(json!({"i": i}))).unwrap();
    }
    let mut out = Vec::new();
    s.audit.export(&mut out).unwrap();
    let third = String::from_utf8(out)
        .unwrap()
        .lines()
        .nth(2)
        .unwrap()
        .to_string();
    f.rewrite_line(3, &third.replace("\"i\":2", "\"i\":7"));
    let v = s.audit.verify().unwrap();
    assert_eq!(v.good_lines, 2);
    assert_eq!(v.problem.as_ref().map(|p| p.0), Some(3), "{v:?}");
    assert!(v.problem.unwrap().1.contains("edited"));
});

both!(
    concurrent_appends_from_two_replicas_make_one_chain,
    |f: Fixture| {
        let replicas: Vec<State> = (0..2).map(|_| f.open()).collect();
        const THREADS: usize = 4;
        const EACH: usize = 25;
        let start = Arc::new(Barrier::new(THREADS));
        std::thread::scope(|scope| {
            for t in 0..THREADS {
                let (audit, start) = (replicas[t % 2].audit.clone(), start.clone());
                scope.spawn(move || {
                    start.wait();
                    for i in 0..EACH {
                        audit
                            .append("call", fields(json!({"t": t, "i": i})))
                            .unwrap();
                    }
                });
            }
        });
        let v = replicas[1].audit.verify().unwrap();
        assert!(v.ok(), "{v:?}");
        assert_eq!(v.good_lines, (THREADS * EACH) as u64);
        // Every append is there exactly once.
        let mut out = Vec::new();
        replicas[0].audit.export(&mut out).unwrap();
        let mut seen: Vec<(i64, i64)> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                (v["t"].as_i64().unwrap(), v["i"].as_i64().unwrap())
            })
            .collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), THREADS * EACH);
    }
);

both!(
    a_line_over_the_bound_is_refused_and_nothing_is_written,
    |f: Fixture| {
        let s = f.open();
        s.audit.append("call", fields(json!({"i": 0}))).unwrap();
        let huge = "x".repeat(MAX_LINE_BYTES);
        match s.audit.append("call", fields(json!({"note": huge}))) {
            Err(AuditError::LineTooLong { limit, .. }) => assert_eq!(limit, MAX_LINE_BYTES),
            other => panic!("{other:?}"),
        }
        let v = s.audit.verify().unwrap();
        assert!(v.ok() && v.good_lines == 1, "{v:?}");
        assert_eq!(
            s.audit.append("call", fields(json!({"i": 1}))).unwrap().seq,
            2
        );
    }
);

both!(
    a_rate_bucket_refills_with_time_and_not_backwards,
    |f: Fixture| {
        let rate = f.open().rate;
        for _ in 0..3 {
            assert!(rate.take("alice", 3, T0).unwrap());
        }
        assert!(!rate.take("alice", 3, T0).unwrap(), "empty");
        assert!(rate.take("bob", 3, T0).unwrap(), "a bucket per identity");
        // 20 s is one token at 3 a minute.
        assert!(rate.take("alice", 3, T0 + 20_000).unwrap());
        assert!(!rate.take("alice", 3, T0 + 20_000).unwrap());
        // A clock set back refills nothing, and does not move the bucket back.
        assert!(!rate.take("alice", 3, T0 - 3_600_000).unwrap());
        assert!(!rate.take("alice", 3, T0 + 20_000).unwrap());
        assert!(rate.take("alice", 3, T0 + 40_000).unwrap());
        // Never more than a minute's worth after a long pause.
        let later = T0 + 3_600_000;
        let taken = (0..10)
            .filter(|_| rate.take("alice", 3, later).unwrap())
            .count();
        assert_eq!(taken, 3);
    }
);

/// Identities from an OpenID provider are many: the rows of 100,000 that
/// called once are gone a minute later, and a bucket so forgotten gives
/// what the old one would have.
#[test]
fn rate_rows_of_identities_gone_quiet_are_deleted() {
    let f = Fixture::postgres("rate_rows_purged");
    let Fixture::Postgres { db } = &f else {
        unreachable!()
    };
    let rate = f.open().rate;
    assert!(rate.take("first", 3, T0).unwrap());
    server()
        .psql(
            db,
            &format!(
                "INSERT INTO airlock_rate (identity, tokens, at_ms, took) \
                 SELECT 'user-' || i, 2, {T0} + i / 10, true FROM generate_series(1, 100000) i"
            ),
        )
        .unwrap();
    let rows = || {
        server()
            .psql(db, "SELECT count(*) FROM airlock_rate")
            .unwrap()
            .trim()
            .parse::<u64>()
            .unwrap()
    };
    assert_eq!(rows(), 100_001);
    // Within the minute nothing goes: those buckets still matter.
    for _ in 0..2 {
        assert!(rate.take("alice", 3, T0 + 30_000).unwrap());
    }
    assert_eq!(rows(), 100_002);
    // Two minutes past the last of them (a margin for replicas' clocks),
    // purges of at most 50,000 rows a minute clear them out.
    let mut later = T0 + 10_000 + 120_000;
    let mut purges = 0;
    while rows() > 1 {
        later += 60_000;
        assert!(rate.take("bob", 3, later).unwrap());
        purges += 1;
        assert!(purges <= 3, "{} rows left", rows());
    }
    assert_eq!(purges, 3, "100,002 old rows, 50,000 a purge");
    // alice's bucket, forgotten, is full: three tokens, no more.
    let taken = (0..5)
        .filter(|_| rate.take("alice", 3, later).unwrap())
        .count();
    assert_eq!(taken, 3);
}

both!(a_store_from_a_newer_airlock_is_refused, |f: Fixture| {
    drop(f.open());
    f.mark_as_newer_schema();
    let e = f
        .place()
        .open(&ApprovalConfig::default())
        .err()
        .expect("refused");
    let text = e.to_string();
    assert!(text.contains("99") && text.contains("newer"), "{text}");
});

both!(an_enrolled_key_is_kept_as_its_hash_only, |f: Fixture| {
    let store = f.keys();
    let a = keys::enroll(&*store, "alice").unwrap();
    let b = keys::enroll(&*store, "bob@example.org").unwrap();
    assert!(a.starts_with("alk_") && a.len() == 68 && a != b);
    let mut all = f.keys().all().unwrap();
    all.sort_by(|x, y| x.1.cmp(&y.1));
    assert_eq!(
        all,
        [
            (keys::hash(&a), "alice".to_string()),
            (keys::hash(&b), "bob@example.org".to_string())
        ]
    );
    // An identity that could break out of the file or a log line.
    assert!(matches!(
        keys::enroll(&*store, "evil\"]\n[x"),
        Err(KeyError::BadIdentity(_))
    ));
    assert_eq!(store.all().unwrap().len(), 2);
    // The key itself is stored nowhere.
    let stored = match &f {
        Fixture::Files(dir) => std::fs::read_to_string(dir.path().join("clients.toml")).unwrap(),
        Fixture::Postgres { db } => server()
            .psql(db, "SELECT key_sha256 || identity FROM airlock_keys")
            .unwrap(),
    };
    assert!(!stored.contains(&a[4..]) && stored.contains(&hex::encode(keys::hash(&a))));

    // Revoking an identity removes all its keys and only them.
    let a2 = keys::enroll(&*store, "alice").unwrap();
    assert_eq!(store.revoke("alice").unwrap(), 2);
    assert_eq!(store.revoke("alice").unwrap(), 0);
    let left = store.all().unwrap();
    assert_eq!(left, [(keys::hash(&b), "bob@example.org".to_string())]);
    assert!(!left.iter().any(|(h, _)| *h == keys::hash(&a2)));
});

/// A plan of one `vm_stop` per argument hash, numbered from 1.
fn plan_of(hashes: &[&str]) -> Vec<PlannedChange> {
    hashes
        .iter()
        .enumerate()
        .map(|(i, h)| PlannedChange {
            n: i as u32 + 1,
            tool: "vm_stop".into(),
            tier: Tier::Operate,
            args_hash: h.to_string(),
            summary: format!("node=pve1, vmid={}", 100 + i),
            target: format!("node=pve1 vmid={}", 100 + i),
            needs_approval: true,
            waits_on: None,
            detail: None,
            key: String::new(),
        })
        .collect()
}

const PLAN: &str = "pl-00000000000000a1";

/// Sets `column` of row `id` to `value`, as someone with write access to
/// the store could.
fn edit_approval(f: &Fixture, id: &str, column: &str, value: &str) {
    match f {
        Fixture::Files(dir) => {
            let conn = rusqlite::Connection::open(dir.path().join("approvals.db")).unwrap();
            let n = conn
                .execute(
                    &format!("UPDATE approvals SET {column} = ?1 WHERE id = ?2"),
                    rusqlite::params![value, id],
                )
                .unwrap();
            assert_eq!(n, 1);
        }
        Fixture::Postgres { db } => {
            let quoted = value.replace('\'', "''");
            server()
                .psql(
                    db,
                    &format!(
                        "UPDATE airlock_approvals SET {column} = '{quoted}' WHERE id = '{id}'"
                    ),
                )
                .unwrap();
        }
    }
}

both!(a_plan_is_filed_approved_and_taken_once, |f: Fixture| {
    let s = f.open().approvals;
    let plan = plan_of(&["h1", "h2"]);
    let r = required(s.file_plan(PLAN, "alice", &plan, T0).unwrap());
    assert_eq!(
        (r.id.as_str(), r.identity.as_str(), r.tool.as_str()),
        (PLAN, "alice", PLAN_TOOL)
    );
    assert_eq!((r.status, r.expires_ms), (Status::Pending, T0 + TTL_MS));
    assert_eq!(r.args_hash, list_hash(&plan));
    assert_eq!(r.summary, table(&plan));
    assert_eq!(r.changes.as_deref(), Some(&plan[..]));
    assert_eq!(s.get(PLAN).unwrap(), r);
    assert!(matches!(
        s.take_plan(PLAN, "alice", T0 + 1),
        Err(PlanError::NotApproved {
            status: "pending",
            ..
        })
    ));
    s.approve(PLAN, &Decider::cli("op"), T0 + 2).unwrap();
    assert_eq!(
        s.take_plan(PLAN, "bob", T0 + 3),
        Err(PlanError::OtherIdentity(PLAN.into()))
    );
    let taken = s.take_plan(PLAN, "alice", T0 + 3).unwrap();
    assert_eq!(taken.status, Status::Used);
    assert_eq!(taken.decided_by.as_deref(), Some("op"));
    assert_eq!(taken.changes.as_deref(), Some(&plan[..]));
    assert_eq!(s.get(PLAN).unwrap().status, Status::Used);
    assert_eq!(
        s.take_plan("pl-00000000000000ff", "alice", T0 + 3),
        Err(PlanError::NotFound("pl-00000000000000ff".into()))
    );
});

both!(a_plan_is_taken_at_most_once, |f: Fixture| {
    // Both open before the plan is filed: opening purges by the wall clock.
    let (s, replica) = (f.open().approvals, f.open().approvals);
    required(s.file_plan(PLAN, "alice", &plan_of(&["h1"]), T0).unwrap());
    s.approve(PLAN, &Decider::cli("op"), T0 + 1).unwrap();
    s.take_plan(PLAN, "alice", T0 + 2).unwrap();
    assert_eq!(
        s.take_plan(PLAN, "alice", T0 + 3),
        Err(PlanError::Used(PLAN.into()))
    );
    // Another replica sees it used too.
    assert_eq!(
        replica.take_plan(PLAN, "alice", T0 + 4),
        Err(PlanError::Used(PLAN.into()))
    );
    // A used plan cannot be decided again.
    assert!(matches!(
        s.approve(PLAN, &Decider::cli("op"), T0 + 5),
        Err(ApprovalError::NotPending { .. })
    ));
});

both!(an_expired_or_edited_plan_is_not_taken, |f: Fixture| {
    let s = f.open().approvals;
    let ids = [
        "pl-00000000000000b1",
        "pl-00000000000000b2",
        "pl-00000000000000b3",
    ];
    for id in ids {
        required(
            s.file_plan(id, "alice", &plan_of(&["h1", "h2"]), T0)
                .unwrap(),
        );
        s.approve(id, &Decider::cli("op"), T0 + 1).unwrap();
    }
    // Approved at T0 + 1, usable for one TTL from then.
    assert_eq!(
        s.take_plan(ids[0], "alice", T0 + 1 + TTL_MS),
        Err(PlanError::Expired(ids[0].into()))
    );
    let mut swapped = plan_of(&["h1", "h2"]);
    swapped[0].args_hash = "h9".into();
    edit_approval(
        &f,
        ids[1],
        "plan",
        &serde_json::to_string(&swapped).unwrap(),
    );
    edit_approval(&f, ids[2], "summary", "  1. vm_start [operate] node=pve1\n");
    for id in &ids[1..] {
        assert_eq!(
            s.take_plan(id, "alice", T0 + 2),
            Err(PlanError::Tampered(id.to_string()))
        );
        assert_eq!(s.get(id).unwrap().status, Status::Approved, "not used up");
    }
});

both!(
    two_replicas_racing_to_take_one_plan_take_it_once,
    |f: Fixture| {
        let replicas: Vec<State> = (0..2).map(|_| f.open()).collect();
        for round in 0..10 {
            let id = format!("pl-00000000000000{round:02x}");
            required(
                replicas[0]
                    .approvals
                    .file_plan(&id, "alice", &plan_of(&["h1"]), T0)
                    .unwrap(),
            );
            replicas[1]
                .approvals
                .approve(&id, &Decider::cli("op"), T0 + 1)
                .unwrap();
            let start = Arc::new(Barrier::new(4));
            let results: Vec<Result<Request, PlanError>> = std::thread::scope(|scope| {
                let handles: Vec<_> = (0..4)
                    .map(|i| {
                        let s = replicas[i % 2].approvals.clone();
                        let (start, id) = (start.clone(), id.clone());
                        scope.spawn(move || {
                            start.wait();
                            s.take_plan(&id, "alice", T0 + 2)
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            assert_eq!(
                results.iter().filter(|r| r.is_ok()).count(),
                1,
                "round {round}: {results:?}"
            );
            for lost in results.iter().filter_map(|r| r.as_ref().err()) {
                assert_eq!(lost, &PlanError::Used(id.clone()), "round {round}");
            }
        }
    }
);

both!(a_plan_counts_against_max_open, |f: Fixture| {
    let s = f.open_capped(3).approvals;
    for i in 0..3 {
        required(s.ask("alice", "vm_stop", &format!("h{i}"), "", T0).unwrap());
    }
    assert_eq!(
        s.file_plan(PLAN, "alice", &plan_of(&["h1"]), T0).unwrap(),
        Check::TooManyOpen { limit: 3 }
    );
    assert_eq!(s.rows().unwrap(), 3, "the refused plan was not filed");
    assert!(matches!(s.get(PLAN), Err(ApprovalError::NotFound(_))));
    // Another identity's plan is filed; a decision frees a place, which
    // the plan then takes from single calls.
    required(
        s.file_plan("pl-00000000000000c1", "bob", &plan_of(&["h1"]), T0)
            .unwrap(),
    );
    let first = s
        .list(T0, false)
        .unwrap()
        .into_iter()
        .find(|r| r.identity == "alice")
        .unwrap();
    s.deny(&first.id, &Decider::cli("op"), T0 + 1).unwrap();
    required(
        s.file_plan(PLAN, "alice", &plan_of(&["h1"]), T0 + 2)
            .unwrap(),
    );
    assert_eq!(
        s.ask("alice", "vm_stop", "h9", "", T0 + 3).unwrap(),
        Check::TooManyOpen { limit: 3 }
    );
});

both!(the_list_shows_a_plan_with_its_changes, |f: Fixture| {
    let s = f.open().approvals;
    let plan = plan_of(&["h1", "h2", "h3"]);
    required(s.file_plan(PLAN, "alice", &plan, T0).unwrap());
    let single = required(
        s.ask("alice", "vm_stop", "h1", "node=pve1", T0 + 1)
            .unwrap(),
    );
    let open = s.list(T0 + 2, false).unwrap();
    assert_eq!(open.len(), 2, "{open:?}");
    let row = open.iter().find(|r| r.id == PLAN).unwrap();
    assert_eq!(row.tool, PLAN_TOOL);
    assert_eq!(row.changes.as_deref(), Some(&plan[..]));
    assert_eq!(row.summary, table(&plan));
    let other = open.iter().find(|r| r.id == single.id).unwrap();
    assert_eq!(other.changes, None);
    // Once used it leaves the open list, and keeps its changes.
    s.approve(PLAN, &Decider::cli("op"), T0 + 3).unwrap();
    s.take_plan(PLAN, "alice", T0 + 4).unwrap();
    let open = s.list(T0 + 5, false).unwrap();
    assert!(open.iter().all(|r| r.id != PLAN), "{open:?}");
    let all = s.list(T0 + 5, true).unwrap();
    let row = all.iter().find(|r| r.id == PLAN).unwrap();
    assert_eq!(
        (row.status, row.changes.as_deref()),
        (Status::Used, Some(&plan[..]))
    );
});

// What only a shared database does.

#[test]
fn postgres_replicas_share_one_rate_bucket() {
    let f = Fixture::postgres("shared_bucket");
    let (a, b) = (f.open().rate, f.open().rate);
    let taken = (0..10)
        .filter(|i| {
            if i % 2 == 0 { &a } else { &b }
                .take("alice", 4, T0)
                .unwrap()
        })
        .count();
    assert_eq!(taken, 4, "4 a minute for the deployment, not per replica");
}

#[test]
fn postgres_down_refuses_within_the_bound_and_recovers() {
    // A server of its own: this test stops it.
    let pg = TempPostgres::start().unwrap();
    pg.create_database("t_down").unwrap();
    let mut p = PostgresConfig::new(pg.url("t_down"));
    p.password_file = Some(pg.password_file().to_path_buf());
    p.timeout = Duration::from_millis(500);
    let place = Place::Postgres(p);
    let defaults = ApprovalConfig::default();
    let s = place.open(&defaults).unwrap();
    s.audit.append("call", fields(json!({"i": 0}))).unwrap();
    let r = required(s.approvals.ask("alice", "vm_stop", "h", "", T0).unwrap());

    pg.stop_now().unwrap();
    let started = Instant::now();
    let audit = s.audit.append("call", fields(json!({"i": 1})));
    let approval = s.approvals.ask("alice", "vm_stop", "h", "", T0 + 1);
    let rate = s.rate.take("alice", 10, T0);
    let took = started.elapsed();
    assert!(matches!(&audit, Err(e) if e.unreachable()), "{audit:?}");
    assert!(
        matches!(approval, Err(ApprovalError::Storage(_))),
        "{approval:?}"
    );
    assert!(rate.is_err(), "{rate:?}");
    // Three refusals, each bounded by three times the 500 ms timeout.
    assert!(took < Duration::from_millis(4500), "{took:?}");
    let text = format!("{:?} {:?}", audit.unwrap_err(), approval.unwrap_err());
    assert!(!text.contains(pg.password()), "{text}");
    assert!(text.contains(&format!("127.0.0.1:{}", pg.port())), "{text}");
    // A new replica refuses to start, naming [state].
    let e = place.open(&defaults).err().expect("no database, no start");
    assert!(e.to_string().contains("[state]"), "{e}");

    // While it is down, calls after the first failure are refused at
    // once, not after a timeout each.
    let started = Instant::now();
    for _ in 0..20 {
        assert!(s.audit.append("call", fields(json!({"i": 9}))).is_err());
    }
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );

    pg.restart().unwrap();
    // Service resumes by itself once the rest after the last failure ends.
    let deadline = Instant::now() + Duration::from_secs(10);
    let head = loop {
        match s.audit.append("call", fields(json!({"i": 2}))) {
            Ok(h) => break h,
            Err(e) if e.unreachable() && Instant::now() < deadline => std::thread::yield_now(),
            Err(e) => panic!("still refused after the database came back: {e}"),
        }
    };
    assert_eq!(head.seq, 2);
    assert_eq!(s.approvals.get(&r.id).unwrap().status, Status::Pending);
    assert!(s.audit.verify().unwrap().ok());
}

#[test]
fn a_password_file_others_can_read_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let pg = server();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pw");
    std::fs::write(&file, format!("{}\n", pg.password())).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut p = PostgresConfig::new(pg.url("postgres"));
    p.password_file = Some(file.clone());
    let place = Place::Postgres(p);
    let approval = ApprovalConfig::default();
    let e = place.open(&approval).err().expect("refused");
    assert!(e.to_string().contains("chmod 600"), "{e}");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    place.open(&approval).unwrap();
}

#[test]
fn postgres_errors_never_show_the_password() {
    let pg = server();
    // A wrong password, in the URL as AIRLOCK_STATE_URL would carry it.
    let url = pg
        .url_with_password("postgres")
        .replace(pg.password(), "hunter2-wrong");
    let mut p = PostgresConfig::new(url);
    p.timeout = Duration::from_secs(2);
    assert!(!format!("{p:?}").contains("hunter2"));
    assert!(!p.describe().contains("hunter2"));
    let e = match Place::Postgres(p).open(&ApprovalConfig::default()) {
        Err(e @ StateError::Postgres(_)) => e,
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("a wrong password connected"),
    };
    let text = e.to_string();
    assert!(text.contains("password authentication failed"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
}

/// One identity opening sessions past its share forgets its own oldest
/// rows, never another identity's (the table's overall cap would have
/// pushed out everyone else's).
#[test]
fn one_identity_s_sessions_trim_only_its_own() {
    use airlock_gateway::state::MAX_SESSIONS_PER_IDENTITY;
    let f = Fixture::postgres("sessions_per_identity");
    let Fixture::Postgres { db } = &f else {
        unreachable!()
    };
    let sessions = f.open().sessions.expect("PostgreSQL keeps sessions");
    sessions.put("olga-1", "{}").unwrap();
    sessions.bind("olga-1", "olga").unwrap();
    // Mallory's rows, as many as her share, written at once; her next
    // session trims her oldest.
    server()
        .psql(
            db,
            &format!(
                "INSERT INTO airlock_sessions (id, record, stored_ms, identity) \
                 SELECT 'mallory-' || i, '{{}}', i, 'mallory' FROM generate_series(1, {MAX_SESSIONS_PER_IDENTITY}) i"
            ),
        )
        .unwrap();
    sessions.put("mallory-new", "{}").unwrap();
    sessions.bind("mallory-new", "mallory").unwrap();
    let count = |sql: &str| {
        server()
            .psql(db, sql)
            .unwrap()
            .trim()
            .parse::<usize>()
            .unwrap()
    };
    assert_eq!(
        count("SELECT count(*) FROM airlock_sessions WHERE identity = 'mallory'"),
        MAX_SESSIONS_PER_IDENTITY
    );
    assert_eq!(
        sessions.owner("mallory-1").unwrap(),
        None,
        "her oldest went"
    );
    assert_eq!(
        sessions.owner("mallory-new").unwrap().as_deref(),
        Some("mallory")
    );
    assert_eq!(sessions.owner("olga-1").unwrap().as_deref(), Some("olga"));
}

both!(
    an_identity_holds_at_most_its_execution_places,
    |f: Fixture| {
        let (a, b) = (f.open().shares, f.open().shares);
        // Two replicas of one deployment (on one machine, one process's map
        // opened twice: each counts its own).
        assert!(a.take("rita", "x1", 2, T0, T0 + 1_000).unwrap());
        assert!(a.take("rita", "x2", 2, T0, T0 + 1_000).unwrap());
        assert!(!a.take("rita", "x3", 2, T0, T0 + 1_000).unwrap());
        assert!(
            a.take("olga", "x4", 2, T0, T0 + 1_000).unwrap(),
            "per identity"
        );
        a.give_back("rita", "x1").unwrap();
        assert!(a.take("rita", "x3", 2, T0, T0 + 1_000).unwrap());
        if matches!(f, Fixture::Postgres { .. }) {
            // Every replica counts the same places.
            assert!(!b.take("rita", "x5", 2, T0, T0 + 1_000).unwrap());
            // A replica that died holds its places only until their time.
            assert!(b.take("rita", "x5", 2, T0 + 1_001, T0 + 2_000).unwrap());
        } else {
            assert!(b.take("rita", "x5", 2, T0, T0 + 1_000).unwrap());
        }
    }
);

/// Through the gateway: an execution takes a place when it starts and
/// gives it back when it ends; past the share nothing is audited or run.
#[test]
fn executions_past_the_deployment_share_are_refused_by_name() {
    let f = Fixture::postgres("execution_places");
    let replica = || {
        let mut c = GatewayConfig::default();
        c.rate.executions_per_identity = 1;
        airlock_gateway::Gateway::new(c, vec![], &f.place())
            .unwrap()
            .0
    };
    let (one, two) = (replica(), replica());
    let rita = airlock_gateway::Caller::new("rita");
    let started = one.execution_started(&rita, "1").unwrap();
    let e = two.execution_started(&rita, "1").unwrap_err();
    assert!(
        matches!(
            e,
            airlock_gateway::gateway::StartError::Busy { limit: 1, .. }
        ),
        "{e}"
    );
    let text = e.to_string();
    assert!(
        text.contains("rate.executions_per_identity") && text.contains("rita"),
        "{text}"
    );
    assert!(two
        .execution_started(&airlock_gateway::Caller::new("olga"), "1")
        .is_ok());
    one.execution_finished(&started, "ok", 0, Duration::ZERO)
        .unwrap();
    assert!(
        two.execution_started(&rita, "1").is_ok(),
        "the place came back"
    );
}

/// Console sign-ins in PostgreSQL: one replica's is every replica's, it
/// ends at its time or when deleted, one identity keeps at most its
/// newest 20, and a record too large is refused.
#[test]
fn console_sign_ins_are_shared_bounded_and_end() {
    use airlock_gateway::state::MAX_CONSOLE_SESSIONS_PER_IDENTITY;
    let f = Fixture::postgres("console_sessions");
    let (one, two) = (f.open(), f.open());
    let (a, b) = (one.console.unwrap(), two.console.unwrap());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let rita = [1u8; 32];
    a.put(&rita, "rita", "{\"who\":\"rita\"}", now + 60_000)
        .unwrap();
    assert_eq!(
        b.get(&rita, now).unwrap().as_deref(),
        Some("{\"who\":\"rita\"}"),
        "seen on the other replica"
    );
    assert_eq!(
        b.get(&rita, now + 60_000).unwrap(),
        None,
        "ended at its time"
    );
    assert_eq!(b.get(&[2u8; 32], now).unwrap(), None, "unknown");
    let many = MAX_CONSOLE_SESSIONS_PER_IDENTITY as u8 + 5;
    for i in 0..many {
        a.put(&[100 + i; 32], "x", "x", now + 100_000 + i as i64)
            .unwrap();
    }
    let kept: Vec<u8> = (0..many)
        .filter(|i| b.get(&[100 + i; 32], now).unwrap().is_some())
        .collect();
    assert_eq!(kept, (5..many).collect::<Vec<_>>(), "x's newest 20 stay");
    assert!(
        b.get(&rita, now).unwrap().is_some(),
        "rita's is not x's to trim"
    );
    b.delete(&rita).unwrap();
    assert_eq!(a.get(&rita, now).unwrap(), None, "signed out everywhere");
    let e = a
        .put(&[3u8; 32], "x", &"y".repeat(2000), now + 1)
        .unwrap_err();
    assert!(e.to_string().contains("1024"), "{e}");
    // One machine's files keep none: the console keeps them in memory.
    assert!(Fixture::files().open().console.is_none());
}

/// A runbook file, `n` making it a different version.
fn runbook_file(n: u32) -> String {
    format!(
        "name = \"restart_web\"\ndescription = \"Restart the web VMs.\"\ntiers = [\"read\", \"operate\"]\nmax_changes = 2\n\n[[calls]]\ntool = \"vm_reboot\"\n\n[script]\nsource = '''\nawait tools.vm_reboot({{node: \"pve1\", vmid: 100}}); {n}\n'''\n"
    )
}

both!(
    runbook_versions_are_approved_once_by_another_person,
    |f: Fixture| {
        use airlock_runbooks::runbook::StoreError;
        let s = f.open();
        let rb = &s.runbooks;
        let (v1, new) = rb
            .add("restart_web", &runbook_file(1), "alice", 1_000)
            .unwrap();
        assert!(new);
        assert_eq!(v1.status(), "unapproved");
        assert_eq!(
            v1.version,
            airlock_runbooks::runbook::version_of(&runbook_file(1))
        );
        // Four eyes: the author cannot approve; a prefix, however long,
        // is not what a person approves.
        assert!(matches!(
            rb.approve("restart_web", &v1.version, "alice", 2_000),
            Err(StoreError::OwnVersion { .. })
        ));
        assert_eq!(
            rb.approve("restart_web", &v1.version[..12], "bob", 2_000),
            Err(StoreError::WholeVersion)
        );
        let approved = rb
            .approve("restart_web", &v1.version, "bob", 2_000)
            .unwrap();
        assert_eq!(approved.approved_by.as_deref(), Some("bob"));
        // An edit is a new version, current and unapproved.
        let (v2, new) = rb
            .add("restart_web", &runbook_file(2), "alice", 3_000)
            .unwrap();
        assert!(new);
        assert_ne!(v2.version, v1.version);
        let current = rb.current().unwrap();
        assert_eq!(current.len(), 1);
        assert_eq!(current[0].version, v2.version);
        assert_eq!(current[0].approved_by, None);
        // Adding the approved bytes again makes them current, approval kept;
        // a second store (another replica) sees the same.
        let (again, new) = rb
            .add("restart_web", &runbook_file(1), "carol", 4_000)
            .unwrap();
        assert!(!new);
        assert_eq!(again.approved_by.as_deref(), Some("bob"));
        let other = f.open();
        let current = other.runbooks.current().unwrap();
        assert_eq!(current[0].version, v1.version);
        assert_eq!(other.runbooks.versions("restart_web").unwrap().len(), 2);
        // Retired: nothing current, and its versions cannot be approved.
        assert_eq!(rb.retire("restart_web", 5_000).unwrap(), 2);
        assert!(rb.current().unwrap().is_empty());
        assert!(matches!(
            rb.approve("restart_web", &v2.version, "bob", 6_000),
            Err(StoreError::Retired { .. })
        ));
        // Retiring revoked the approval: one person adding the file again
        // brings the version back unapproved.
        let (back, _) = rb
            .add("restart_web", &runbook_file(1), "mallory", 7_000)
            .unwrap();
        assert_eq!(back.approved_by, None);
        assert_eq!(rb.current().unwrap()[0].approved_by, None);
        assert!(matches!(
            rb.retire("no_such", 6_000),
            Err(StoreError::UnknownName(_))
        ));
    }
);

fn parked_row(execution: &str, identity: &str, bytes: i64) -> airlock_gateway::parked::ParkedRow {
    airlock_gateway::parked::ParkedRow {
        execution: execution.into(),
        identity: identity.into(),
        born_ms: T0,
        bytes,
        waiting: vec!["a1".into(), "a2".into()],
        body: format!("sealed body of {execution}"),
        asked: 0,
        declined: false,
        calls: 3,
    }
}

const CAPS: airlock_gateway::parked::ParkCaps = airlock_gateway::parked::ParkCaps {
    per_identity: 2,
    total: 3,
    bytes_per_identity: 1_000,
    bytes_total: 1_500,
};

both!(
    a_parked_execution_is_taken_by_one_replica_and_outlives_its_process,
    |f: Fixture| {
        use airlock_gateway::parked::{ParkRefusal, Take};
        let a = f.open().parked;
        let row = parked_row("r1-x1", "alice", 100);
        assert_eq!(a.park(&row, None, &CAPS, T0).unwrap(), Ok(()));
        // Not followed before its parked line is written.
        assert_eq!(
            a.take("r1-x1", "alice", "r1", T0, T0 + 100).unwrap(),
            Take::Busy
        );
        a.ready("r1-x1").unwrap();
        // Another identity's row reads as none.
        assert_eq!(
            a.take("r1-x1", "bob", "r1", T0, T0 + 100).unwrap(),
            Take::Unknown
        );
        assert_eq!(a.get("r1-x1", "bob", T0).unwrap(), None);
        // Another process (a restart, or a replica sharing the database)
        // finds it, with its body and what it waits for.
        drop(a);
        let (a, b) = (f.open().parked, f.open().parked);
        assert_eq!(a.get("r1-x1", "alice", T0).unwrap().unwrap().body, row.body);
        let start = Arc::new(Barrier::new(2));
        let takers: Vec<_> = [("r1", a.clone()), ("r2", b.clone())]
            .into_iter()
            .map(|(holder, s)| {
                let start = start.clone();
                std::thread::spawn(move || {
                    start.wait();
                    s.take("r1-x1", "alice", holder, T0, T0 + 100).unwrap()
                })
            })
            .collect();
        let taken: Vec<Take> = takers.into_iter().map(|t| t.join().unwrap()).collect();
        let won: Vec<&Take> = taken
            .iter()
            .filter(|t| matches!(t, Take::Taken { .. }))
            .collect();
        assert_eq!(won.len(), 1, "one replica resumes it: {taken:?}");
        assert!(taken.contains(&Take::Busy));
        let Take::Taken { row: got, orphan } = won[0] else {
            unreachable!()
        };
        assert_eq!(got, &row);
        assert!(!orphan);
        let holder = if matches!(taken[0], Take::Taken { .. }) {
            "r1"
        } else {
            "r2"
        };
        let other = if holder == "r1" { "r2" } else { "r1" };
        // Held: not listed as followable, not cancelled, not expired.
        assert_eq!(a.get("r1-x1", "alice", T0 + 50).unwrap(), None);
        assert_eq!(a.cancel("r1-x1", T0 + 50).unwrap(), None);
        assert!(a.expired(T0 + 1, T0 + 50).unwrap().is_empty());
        let listed = a.list(None, T0 + 50, 10).unwrap();
        assert_eq!(listed.len(), 1);
        assert!(listed[0].held, "listed as held by a follow-up");
        // Parked again by its holder: replaced, lease released; by a
        // process that does not hold it: refused, nothing overwritten.
        let mut again = row.clone();
        again.waiting = vec!["a3".into()];
        again.body = "second park".into();
        assert_eq!(
            b.park(&again, Some(other), &CAPS, T0 + 60).unwrap(),
            Err(ParkRefusal::LeaseLost)
        );
        assert_eq!(
            b.park(&again, Some(holder), &CAPS, T0 + 60).unwrap(),
            Ok(())
        );
        b.ready("r1-x1").unwrap();
        let listed = a.list(Some("alice"), T0 + 60, 10).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].waiting, vec!["a3".to_string()]);
        assert_eq!(listed[0].parked_ms, T0 + 60);
        assert!(!listed[0].held);
        // Ended by whoever holds it: gone everywhere.
        let Take::Taken { .. } = a.take("r1-x1", "alice", "r1", T0 + 70, T0 + 170).unwrap() else {
            panic!("taken")
        };
        b.ended("r1-x1", "r2").unwrap();
        assert!(
            !a.list(None, T0 + 70, 10).unwrap().is_empty(),
            "r2 does not hold it"
        );
        b.ended("r1-x1", "r1").unwrap();
        assert!(a.list(None, T0 + 70, 10).unwrap().is_empty());
    }
);

both!(
    a_holder_that_died_leaves_an_orphan_the_next_taker_is_told_of,
    |f: Fixture| {
        use airlock_gateway::parked::Take;
        let s = f.open().parked;
        s.park(&parked_row("x1", "alice", 10), None, &CAPS, T0)
            .unwrap()
            .unwrap();
        s.ready("x1").unwrap();
        let Take::Taken { orphan: false, .. } =
            s.take("x1", "alice", "dead", T0, T0 + 100).unwrap()
        else {
            panic!("taken")
        };
        // Within the lease nobody else takes it.
        assert_eq!(
            s.take("x1", "alice", "r2", T0 + 100, T0 + 200).unwrap(),
            Take::Busy
        );
        // Past it, the next taker is told its holder died mid-resume, and
        // it stays an orphan through a put-back, until it parks again.
        let Take::Taken { orphan: true, .. } =
            s.take("x1", "alice", "r2", T0 + 101, T0 + 200).unwrap()
        else {
            panic!("an orphan")
        };
        s.put_back("x1", "r2").unwrap();
        let Take::Taken { orphan: true, .. } =
            s.take("x1", "alice", "r3", T0 + 102, T0 + 200).unwrap()
        else {
            panic!("still an orphan")
        };
        s.park(&parked_row("x1", "alice", 10), Some("r3"), &CAPS, T0 + 103)
            .unwrap()
            .unwrap();
        // The dead holder waking late ends nothing of the row r3 parked.
        s.ended("x1", "dead").unwrap();
        assert_eq!(s.count().unwrap(), 1, "still parked");
        s.ready("x1").unwrap();
        let Take::Taken { orphan: false, .. } =
            s.take("x1", "alice", "r3", T0 + 104, T0 + 200).unwrap()
        else {
            panic!("parked again, no longer an orphan")
        };
        // A lease that ran out does not keep it from its lifetime's end.
        let gone = s.expired(T0 + 1, T0 + 201).unwrap();
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].execution, "x1");
        assert_eq!(gone[0].calls, 3, "for its end line");
        assert_eq!(
            s.take("x1", "alice", "r3", T0 + 202, T0 + 300).unwrap(),
            Take::Unknown
        );
    }
);

both!(
    a_running_execution_its_holder_lets_go_of_is_an_orphan_at_once,
    |f: Fixture| {
        use airlock_gateway::parked::{ParkRefusal, Take};
        let (a, b) = (f.open().parked, f.open().parked);
        let mut row = parked_row("w1", "alice", 10);
        row.waiting.clear();
        a.checkpoint(&row, "h1", true, T0 + 1000, &CAPS, T0)
            .unwrap()
            .unwrap();
        // Only its holder lets go of it.
        b.let_go("w1", "r2").unwrap();
        assert_eq!(
            b.take("w1", "alice", "r2", T0 + 10, T0 + 200).unwrap(),
            Take::Busy,
            "another process's let-go changes nothing"
        );
        a.let_go("w1", "h1").unwrap();
        assert!(!b.list(None, T0 + 10, 10).unwrap()[0].held);
        // The holder that let go writes nothing more on it: no record
        // extends its lease again, no end removes it.
        assert_eq!(
            a.checkpoint(&row, "h1", false, T0 + 1000, &CAPS, T0 + 5)
                .unwrap(),
            Err(ParkRefusal::LeaseLost)
        );
        a.ended("w1", "h1").unwrap();
        assert_eq!(b.count().unwrap(), 1, "not removed by its old holder");
        // Long before its lease would have ended, the next taker has it,
        // told its holder may have sent what its record names.
        let Take::Taken { orphan: true, .. } =
            b.take("w1", "alice", "r2", T0 + 10, T0 + 200).unwrap()
        else {
            panic!("an orphan at once")
        };
        // Nor once another holds it.
        assert_eq!(
            a.checkpoint(&row, "h1", false, T0 + 1000, &CAPS, T0 + 20)
                .unwrap(),
            Err(ParkRefusal::LeaseLost)
        );
    }
);

both!(
    a_running_execution_journaled_by_its_holder_is_an_orphan_once_it_dies,
    |f: Fixture| {
        use airlock_gateway::parked::{ParkRefusal, Take};
        let (a, b) = (f.open().parked, f.open().parked);
        let mut row = parked_row("w1", "alice", 10);
        row.waiting.clear();
        // Its first journal: held from the start, within the caps.
        a.checkpoint(&row, "h1", true, T0 + 100, &CAPS, T0)
            .unwrap()
            .unwrap();
        let listed = b.list(None, T0 + 50, 10).unwrap();
        assert_eq!(listed.len(), 1);
        assert!(listed[0].held, "running, held by its process");
        assert!(listed[0].waiting.is_empty());
        assert_eq!(
            b.take("w1", "alice", "r2", T0 + 50, T0 + 200).unwrap(),
            Take::Busy,
            "nobody takes a running execution"
        );
        assert_eq!(b.cancel("w1", T0 + 50).unwrap(), None);
        // Each later journal replaces it and extends the lease.
        row.body = "sealed body, one more answer".into();
        row.calls = 4;
        a.checkpoint(&row, "h1", false, T0 + 300, &CAPS, T0 + 90)
            .unwrap()
            .unwrap();
        assert_eq!(
            b.take("w1", "alice", "r2", T0 + 200, T0 + 400).unwrap(),
            Take::Busy,
            "the lease was extended"
        );
        assert_eq!(
            b.list(None, T0 + 200, 10).unwrap()[0].parked_ms,
            T0 + 90,
            "last written"
        );
        // Another holder's journal never lands on it.
        assert_eq!(
            b.checkpoint(&row, "r2", false, T0 + 400, &CAPS, T0 + 200)
                .unwrap(),
            Err(ParkRefusal::LeaseLost)
        );
        // Its process dies: past the lease, the last journal is an
        // orphan's.
        let Take::Taken {
            row: taken,
            orphan: true,
        } = b.take("w1", "alice", "r2", T0 + 301, T0 + 400).unwrap()
        else {
            panic!("an orphan")
        };
        assert_eq!(taken.body, "sealed body, one more answer");
        assert_eq!(taken.calls, 4);
        // The dead holder, waking late, writes nothing more.
        assert_eq!(
            a.checkpoint(&row, "h1", false, T0 + 500, &CAPS, T0 + 302)
                .unwrap(),
            Err(ParkRefusal::LeaseLost)
        );
        // A new one counts against the caps as a parked one does.
        a.park(&parked_row("w2", "alice", 10), None, &CAPS, T0)
            .unwrap()
            .unwrap();
        assert_eq!(
            a.checkpoint(
                &parked_row("w3", "alice", 10),
                "h3",
                true,
                T0 + 100,
                &CAPS,
                T0
            )
            .unwrap(),
            Err(ParkRefusal::PerIdentity)
        );
    }
);

both!(
    parking_is_capped_across_the_deployment_with_the_cap_named,
    |f: Fixture| {
        use airlock_gateway::parked::ParkRefusal;
        let (a, b) = (f.open().parked, f.open().parked);
        a.park(&parked_row("a1", "alice", 400), None, &CAPS, T0)
            .unwrap()
            .unwrap();
        b.park(&parked_row("a2", "alice", 400), None, &CAPS, T0)
            .unwrap()
            .unwrap();
        assert_eq!(
            a.park(&parked_row("a3", "alice", 1), None, &CAPS, T0)
                .unwrap(),
            Err(ParkRefusal::PerIdentity)
        );
        assert_eq!(
            b.park(&parked_row("b1", "bob", 701), None, &CAPS, T0)
                .unwrap(),
            Err(ParkRefusal::BytesTotal)
        );
        assert_eq!(
            b.park(&parked_row("b1", "bob", 1_001), None, &CAPS, T0)
                .unwrap(),
            Err(ParkRefusal::BytesPerIdentity)
        );
        b.park(&parked_row("b1", "bob", 10), None, &CAPS, T0)
            .unwrap()
            .unwrap();
        assert_eq!(
            a.park(&parked_row("c1", "carol", 1), None, &CAPS, T0)
                .unwrap(),
            Err(ParkRefusal::Total)
        );
        // A cancelled one frees its place; questions put are counted.
        assert_eq!(
            a.cancel("b1", T0).unwrap(),
            None,
            "not before its parked line is written"
        );
        a.ready("b1").unwrap();
        assert_eq!(a.cancel("b1", T0).unwrap().unwrap().identity, "bob");
        a.park(&parked_row("c1", "carol", 1), None, &CAPS, T0)
            .unwrap()
            .unwrap();
        a.ready("c1").unwrap();
        b.prompted("c1", "carol", 1, false).unwrap();
        b.prompted("c1", "carol", 1, true).unwrap();
        b.prompted("c1", "mallory", 5, true).unwrap();
        assert_eq!(b.count().unwrap(), 3);
        let c1 = a.get("c1", "carol", T0).unwrap().unwrap();
        assert_eq!((c1.asked, c1.declined), (2, true));
    }
);
