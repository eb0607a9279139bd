//! The gateway's pipeline end to end with a counting backend: what is
//! refused never reaches the backend, every decision follows the tier and
//! the mode, approvals are single-use and bound, and every test's audit
//! log verifies, with every line under `audit::MAX_LINE_BYTES`.

use std::{
    path::Path,
    sync::{
        atomic::{AtomicI64, Ordering},
        Arc, Mutex,
    },
};

use airlock_catalog::spec::{Hints, Tier, ToolSpec};
use airlock_gateway::{
    approval::Status,
    audit,
    backend::{Backend, BackendError, Reply},
    decision::Decider,
    gateway::StartError,
    policy::{Grant, Mode, PolicyConfig},
    CallError, Caller, Gateway, GatewayConfig,
};
use airlock_state::Place;
use async_trait::async_trait;
use serde_json::{json, Value};

/// Counts the calls that reach it and answers with what it was given (plus
/// a secret, to see redaction).
#[derive(Default)]
struct Counting {
    calls: Mutex<Vec<(String, Value)>>,
    /// Told when a call for node `hang` arrives; that call never answers.
    hung: tokio::sync::Notify,
}

impl Counting {
    fn count(&self) -> usize {
        self.calls.lock().unwrap().len()
    }
}

fn tool(name: &str, tier: Tier) -> ToolSpec {
    // `op_configure` takes any further arguments, as configuration
    // tools do: what an approver is shown of them is under test.
    let more = name != "op_configure";
    ToolSpec {
        name: name.into(),
        summary: format!("{name} summary"),
        description: String::new(),
        input_schema: json!({
            "type": "object",
            "properties": {"node": {"type": "string"}, "vmid": {"type": "integer", "minimum": 100}},
            "required": ["node"],
            "additionalProperties": !more
        }),
        output_schema: None,
        tier,
        hints: Hints::for_tier(tier),
        backend: "count".into(),
        path_params: vec!["node".into()],
        endpoint: None,
        keywords: String::new(),
        key: String::new(),
        aliases: Vec::new(),
    }
}

const TOOLS: &[(&str, Tier)] = &[
    ("read_status", Tier::Read),
    ("read_list", Tier::Read),
    ("op_start", Tier::Operate),
    ("op_stop", Tier::Operate),
    ("op_configure", Tier::Operate),
    ("admin_delete", Tier::Admin),
    ("forbidden_console", Tier::Forbidden),
];

#[async_trait]
impl Backend for Counting {
    fn id(&self) -> &str {
        "count"
    }

    fn tools(&self) -> Vec<ToolSpec> {
        TOOLS.iter().map(|(n, t)| tool(n, *t)).collect()
    }

    async fn call(
        &self,
        _caller: &Caller,
        tool: &ToolSpec,
        args: Value,
    ) -> Result<Reply, BackendError> {
        self.calls
            .lock()
            .unwrap()
            .push((tool.name.clone(), args.clone()));
        if args["node"] == "hang" {
            self.hung.notify_one();
            std::future::pending::<()>().await;
        }
        if args["node"] == "broken" {
            return Err(BackendError::new(
                "backend_error",
                "node broken is unreachable",
            ));
        }
        Ok(Reply {
            value: json!({"tool": tool.name, "args": args, "ticket": "PVE:secret-ticket"}),
            request_id: Some("UPID:test".into()),
        })
    }
}

struct Setup {
    gateway: Gateway,
    backend: Arc<Counting>,
    clock: Arc<AtomicI64>,
    dir: tempfile::TempDir,
}

impl Setup {
    fn audit(&self) -> &Path {
        self.gateway.audit_path().unwrap()
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        // Every test leaves an audit log that verifies, of small lines
        // (a chain in PostgreSQL is checked by its own test).
        if !std::thread::panicking() {
            if let Some(path) = self.gateway.audit_path() {
                audit_is_sound(path);
            }
        }
        let _ = &self.dir;
    }
}

/// The log verifies and no line is longer than the bound; returns the
/// longest line's length.
fn audit_is_sound(path: &Path) -> usize {
    let v = audit::verify(path).unwrap();
    assert!(v.ok(), "audit log does not verify: {v:?}");
    let text = std::fs::read(path).unwrap();
    let longest = text
        .split_inclusive(|b| *b == b'\n')
        .map(<[u8]>::len)
        .max()
        .unwrap_or(0);
    assert!(
        longest <= audit::MAX_LINE_BYTES,
        "an audit line of {longest} bytes"
    );
    longest
}

fn setup_with(policy: PolicyConfig, approval_tiers: Vec<Tier>) -> Setup {
    setup_adjusted(|config| {
        config.policy = policy;
        config.approval.tiers = approval_tiers;
    })
}

/// A gateway over the counting backend, with its state in a temporary
/// directory and `adjust` applied to the configuration.
fn setup_adjusted(adjust: impl FnOnce(&mut GatewayConfig)) -> Setup {
    setup_in(|dir| Place::in_dir(dir), adjust)
}

/// [`setup_adjusted`] with its state where `place` says, given the
/// temporary directory.
fn setup_in(
    place: impl FnOnce(&std::path::Path) -> Place,
    adjust: impl FnOnce(&mut GatewayConfig),
) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let mut config = GatewayConfig::default();
    adjust(&mut config);
    let place = place(dir.path());
    let backend = Arc::new(Counting::default());
    let clock = Arc::new(AtomicI64::new(1_000_000));
    let c = clock.clone();
    let (gateway, clashes) =
        Gateway::new(config, vec![backend.clone() as Arc<dyn Backend>], &place).unwrap();
    assert!(clashes.is_empty());
    let gateway = gateway.with_clock(move || c.load(Ordering::SeqCst));
    Setup {
        gateway,
        backend,
        clock,
        dir,
    }
}

fn policy(identities: &[(&str, Mode)]) -> PolicyConfig {
    PolicyConfig {
        identities: identities
            .iter()
            .map(|(n, m)| {
                (
                    n.to_string(),
                    Grant {
                        mode: *m,
                        ..Grant::default()
                    },
                )
            })
            .collect(),
        ..PolicyConfig::default()
    }
}

fn args() -> Value {
    json!({"node": "pve1", "vmid": 101})
}

#[tokio::test]
async fn every_tool_under_every_mode_follows_its_tier() {
    let s = setup_with(
        policy(&[
            ("ro", Mode::Ro),
            ("operator", Mode::Operator),
            ("rw", Mode::Rw),
        ]),
        vec![],
    );
    let mut expected_calls = 0;
    for (who, mode) in [
        ("ro", Mode::Ro),
        ("operator", Mode::Operator),
        ("rw", Mode::Rw),
        ("stranger", Mode::Ro),
    ] {
        for (name, tier) in TOOLS {
            let allowed = mode.grants(*tier);
            let r = s.gateway.call(&Caller::new(who), name, args()).await;
            match (&r, allowed) {
                (Ok(_), true) => expected_calls += 1,
                (Err(CallError::PolicyDenied { reason, .. }), false) => {
                    assert!(
                        reason.contains(tier.as_str()) || reason.contains("forbidden"),
                        "{reason}"
                    )
                }
                other => panic!("{who} calling {name} ({tier}): {other:?}"),
            }
        }
    }
    assert_eq!(
        s.backend.count(),
        expected_calls,
        "denied calls never reached the backend"
    );
}

#[tokio::test]
async fn unknown_invalid_and_denied_calls_never_reach_the_backend() {
    let s = setup_with(policy(&[("rw", Mode::Rw)]), vec![]);
    let rw = Caller::new("rw");
    let r = s.gateway.call(&rw, "read_stats", args()).await.unwrap_err();
    assert!(
        matches!(&r, CallError::UnknownTool { did_you_mean, .. } if did_you_mean[0] == "read_status"),
        "{r:?}"
    );
    assert_eq!(r.code(), "not_found");
    for bad in [
        json!({"vmid": 101}),
        json!({"node": "pve1", "vmid": "101"}),
        json!({"node": "pve1", "vmid": 5}),
        json!({"node": "pve1", "extra": true}),
        json!({"node": "../../etc/passwd"}),
        json!({"node": "pve1\r\nX-Injected: 1"}),
        json!("not an object"),
    ] {
        let r = s
            .gateway
            .call(&rw, "read_status", bad.clone())
            .await
            .unwrap_err();
        assert_eq!(r.code(), "invalid_arguments", "{bad}: {r:?}");
        assert!(r.to_string().contains("args"), "{r}");
    }
    let r = s
        .gateway
        .call(&rw, "forbidden_console", args())
        .await
        .unwrap_err();
    assert_eq!(r.code(), "policy_denied");
    assert_eq!(s.backend.count(), 0);
    // And each refusal is in the audit log with its decision, without values.
    let log = std::fs::read_to_string(s.audit()).unwrap();
    assert_eq!(log.matches("\"decision\":\"invalid\"").count(), 7);
    assert_eq!(log.matches("\"decision\":\"unknown_tool\"").count(), 1);
    assert!(
        !log.contains("etc/passwd") && !log.contains("X-Injected"),
        "argument values never reach the audit log"
    );
}

#[tokio::test]
async fn results_are_redacted_and_calls_audited_without_values() {
    let s = setup_with(policy(&[]), vec![]);
    let r = s
        .gateway
        .call(
            &Caller::new("anyone"),
            "read_status",
            json!({"node": "pve-secret-name"}),
        )
        .await
        .unwrap();
    assert_eq!(r.value["ticket"], "[redacted]");
    assert_eq!(r.redacted, 1);
    let log = std::fs::read_to_string(s.audit()).unwrap();
    assert!(!log.contains("pve-secret-name") && !log.contains("secret-ticket"));
    assert!(log.contains("\"arg_keys\":[\"node\"]"));
    assert!(log.contains("\"backend_request_id\":\"UPID:test\""));
    assert!(log.contains("\"redacted_fields\":1"));
}

#[tokio::test]
async fn backend_failures_keep_their_code() {
    let s = setup_with(policy(&[]), vec![]);
    let r = s
        .gateway
        .call(&Caller::new("x"), "read_status", json!({"node": "broken"}))
        .await
        .unwrap_err();
    assert_eq!(r.code(), "backend_error");
    assert!(r.to_string().contains("unreachable"));
    assert!(std::fs::read_to_string(s.audit())
        .unwrap()
        .contains("\"status\":\"backend_error\""));
}

fn request_id(e: &CallError) -> String {
    match e {
        CallError::ApprovalRequired { request_id, .. } => request_id.clone(),
        other => panic!("expected approval_required, got {other:?}"),
    }
}

#[tokio::test]
async fn approval_round_trip_is_single_use() {
    let s = setup_with(
        policy(&[("alice", Mode::Rw)]),
        vec![Tier::Operate, Tier::Admin],
    );
    let alice = Caller::new("alice");
    let e = s.gateway.call(&alice, "op_stop", args()).await.unwrap_err();
    assert_eq!(e.code(), "approval_required");
    let id = request_id(&e);
    assert!(
        e.to_string()
            .contains(&format!("airlock approvals approve {id}")),
        "{e}"
    );
    assert_eq!(e.details()["summary"], "node=pve1, vmid=101");
    assert_eq!(s.backend.count(), 0, "unapproved calls never run");
    // Reads need no approval.
    s.gateway.call(&alice, "read_status", args()).await.unwrap();

    s.gateway
        .approvals()
        .approve(&id, &Decider::cli("operator-1"), s.gateway.now_ms())
        .unwrap();
    s.gateway.call(&alice, "op_stop", args()).await.unwrap();
    assert_eq!(s.backend.count(), 2);
    // Replay: the same call again needs a new approval.
    let again = s.gateway.call(&alice, "op_stop", args()).await.unwrap_err();
    assert_ne!(request_id(&again), id);
    assert_eq!(s.backend.count(), 2);
    let log = std::fs::read_to_string(s.audit()).unwrap();
    assert!(log.contains(&format!("\"approval\":\"{id}\"")));
    // Who approved is in the chain, on the line of the call it let run.
    let used: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|l: &serde_json::Value| l["decision"] == "allowed" && l["approval"] == id.as_str())
        .collect();
    assert_eq!(used.len(), 1, "{log}");
    assert_eq!(used[0]["approved_by"], "operator-1");
}

#[tokio::test]
async fn approvals_are_bound_to_arguments_and_identity() {
    let s = setup_with(
        policy(&[("alice", Mode::Rw), ("bob", Mode::Rw)]),
        vec![Tier::Operate, Tier::Admin],
    );
    let (alice, bob) = (Caller::new("alice"), Caller::new("bob"));
    let id = request_id(
        &s.gateway
            .call(&alice, "admin_delete", args())
            .await
            .unwrap_err(),
    );
    s.gateway
        .approvals()
        .approve(&id, &Decider::cli("op"), s.gateway.now_ms())
        .unwrap();
    // Tampered arguments: another guest.
    let e = s
        .gateway
        .call(&alice, "admin_delete", json!({"node": "pve1", "vmid": 102}))
        .await
        .unwrap_err();
    assert_ne!(request_id(&e), id);
    // Same arguments, other identity.
    let e = s
        .gateway
        .call(&bob, "admin_delete", args())
        .await
        .unwrap_err();
    assert_ne!(request_id(&e), id);
    // Same arguments in another key order: the same call.
    s.gateway
        .call(&alice, "admin_delete", json!({"vmid": 101, "node": "pve1"}))
        .await
        .unwrap();
    assert_eq!(s.backend.count(), 1);
}

#[tokio::test]
async fn approvals_expire() {
    let s = setup_with(policy(&[("alice", Mode::Operator)]), vec![Tier::Operate]);
    let alice = Caller::new("alice");
    let id = request_id(
        &s.gateway
            .call(&alice, "op_start", args())
            .await
            .unwrap_err(),
    );
    s.gateway
        .approvals()
        .approve(&id, &Decider::cli("op"), s.gateway.now_ms())
        .unwrap();
    s.clock.fetch_add(11 * 60 * 1000, Ordering::SeqCst);
    let e = s
        .gateway
        .call(&alice, "op_start", args())
        .await
        .unwrap_err();
    assert_ne!(request_id(&e), id, "an expired approval does not count");
    assert_eq!(s.backend.count(), 0);
}

#[tokio::test]
async fn a_denied_request_is_reported_as_denied() {
    let s = setup_with(policy(&[("alice", Mode::Operator)]), vec![Tier::Operate]);
    let alice = Caller::new("alice");
    let id = request_id(
        &s.gateway
            .call(&alice, "op_start", args())
            .await
            .unwrap_err(),
    );
    let op = Decider::cli("op")
        .with_reason("not during the \"freeze\"\nask <ops>")
        .unwrap();
    s.gateway.decide(&id, &op, Status::Denied).unwrap();
    let e = s
        .gateway
        .call(&alice, "op_start", args())
        .await
        .unwrap_err();
    assert_eq!(e.code(), "approval_denied");
    let text = e.to_string();
    assert!(text.contains(&id), "{text}");
    // The agent is told who refused and why, the person's words escaped.
    assert!(
        text.contains(r#" by op: "not during the "freeze"\u{a}ask <ops>""#),
        "{text}"
    );
    // The decision's line carries the reason.
    let log = std::fs::read_to_string(s.audit()).unwrap();
    let decision = log
        .lines()
        .find(|l| l.contains("\"event\":\"approval_decision\""))
        .expect("a decision line");
    assert!(
        decision.contains(r#"not during the \"freeze\"\nask <ops>"#),
        "{decision}"
    );
}

#[tokio::test]
async fn read_only_switch_and_lists() {
    let mut p = policy(&[("root", Mode::Rw)]);
    p.read_only = true;
    let s = setup_with(p, vec![]);
    let root = Caller::new("root");
    assert!(s.gateway.call(&root, "read_list", args()).await.is_ok());
    let e = s.gateway.call(&root, "op_start", args()).await.unwrap_err();
    assert!(e.to_string().contains("read-only"));
    assert_eq!(s.backend.count(), 1);
}

#[tokio::test]
async fn an_unwritable_audit_log_refuses_calls() {
    let s = setup_with(policy(&[]), vec![]);
    s.gateway
        .call(&Caller::new("x"), "read_status", args())
        .await
        .unwrap();
    let saved = std::fs::read(s.audit()).unwrap();
    std::fs::remove_file(s.audit()).unwrap();
    std::fs::create_dir(s.audit()).unwrap();
    let e = s
        .gateway
        .call(&Caller::new("x"), "read_status", args())
        .await
        .unwrap_err();
    assert_eq!(e.code(), "audit_unavailable");
    assert_eq!(s.backend.count(), 1, "the refused call never ran");
    std::fs::remove_dir(s.audit()).unwrap();
    std::fs::write(s.audit(), saved).unwrap();
}

#[tokio::test]
async fn a_call_dropped_on_its_way_is_recorded_as_cancelled() {
    let s = setup_with(policy(&[]), vec![]);
    let caller = Caller::new("x");
    let call = s
        .gateway
        .call(&caller, "read_status", json!({"node": "hang"}));
    tokio::select! {
        _ = call => panic!("the hung call answered"),
        _ = s.backend.hung.notified() => {}
    }
    // The call's future is gone, as when the client disconnects or the
    // execution is cancelled while the backend works.
    let text = std::fs::read_to_string(s.audit()).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let [.., allowed, ended] = &lines[..] else {
        panic!("two lines expected: {text}")
    };
    assert_eq!(allowed["event"], "call", "{text}");
    assert_eq!(allowed["decision"], "allowed", "{text}");
    assert_eq!(ended["event"], "call_result", "{text}");
    assert_eq!(ended["status"], "cancelled", "{text}");
    assert_eq!(ended.get("sent"), None, "the backend had it: {text}");
    assert_eq!(ended["call"], allowed["call"]);
    assert_eq!(s.backend.count(), 1);
}

/// A tmpfs of a few KiB mounted for as long as it lives: a disk that
/// really fills up. Mounting needs root; `None` where it is not allowed.
struct SmallDisk(tempfile::TempDir);

impl SmallDisk {
    fn mount(kib: u32) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let ok = std::process::Command::new("mount")
            // mode: a tmpfs root is 1777 by default, which the gateway
            // (rightly) refuses as a state directory.
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={kib}k,mode=0700"),
                "tmpfs",
            ])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(SmallDisk(dir))
    }

    /// Writes a file until the disk refuses; returns its path.
    fn fill(&self) -> std::path::PathBuf {
        use std::io::Write;
        let path = self.0.path().join("filler");
        let mut f = std::fs::File::create(&path).unwrap();
        let chunk = [0u8; 4096];
        while f.write_all(&chunk).and_then(|_| f.sync_all()).is_ok() {}
        path
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.0.path())
            .status();
    }
}

#[tokio::test]
async fn a_full_disk_under_the_approval_store_refuses_calls_and_loses_nothing() {
    // Room for the three SQLite files beside each other (approvals,
    // runbooks, waiting executions) and their write-ahead logs.
    let Some(disk) = SmallDisk::mount(512) else {
        eprintln!("SKIPPED: mounting a small tmpfs needs root");
        return;
    };
    let s = setup_in(
        |dir| Place::Files {
            approvals_db: disk.0.path().join("approvals.db"),
            audit_file: dir.join("audit.jsonl"),
        },
        |config| {
            config.policy = policy(&[("alice", Mode::Rw)]);
            config.approval.tiers = vec![Tier::Operate, Tier::Admin];
        },
    );
    let alice = Caller::new("alice");
    let first = request_id(&s.gateway.call(&alice, "op_stop", args()).await.unwrap_err());

    let filler = disk.fill();
    let e = s
        .gateway
        .call(&alice, "op_start", args())
        .await
        .unwrap_err();
    assert_eq!(e.code(), "approval_unavailable", "{e}");
    assert!(e.to_string().contains("full"), "the error says why: {e}");
    assert_eq!(s.backend.count(), 0, "nothing ran without its approval");

    // Space again: the request filed before the disk filled is intact and
    // works; nothing was lost or half-written.
    std::fs::remove_file(filler).unwrap();
    s.gateway
        .approvals()
        .approve(&first, &Decider::cli("operator"), s.gateway.now_ms())
        .unwrap();
    s.gateway.call(&alice, "op_stop", args()).await.unwrap();
    assert_eq!(s.backend.count(), 1);
    let log = std::fs::read_to_string(s.audit()).unwrap();
    assert!(
        log.contains("approval_unavailable"),
        "the refusal is audited"
    );
}

#[tokio::test]
async fn a_full_disk_under_the_audit_log_refuses_calls_and_leaves_no_half_line() {
    let Some(disk) = SmallDisk::mount(64) else {
        eprintln!("SKIPPED: mounting a small tmpfs needs root");
        return;
    };
    let s = setup_in(
        |dir| Place::Files {
            approvals_db: dir.join("approvals.db"),
            audit_file: disk.0.path().join("audit.jsonl"),
        },
        |_| {},
    );
    let x = Caller::new("x");
    // tmpfs hands out whole pages: a full disk still takes bytes into the
    // log's last page. Grow the log until that page has less room than a
    // line needs, so the next line is written in part before the disk says
    // no — the case that could leave half a line.
    let page = 4096;
    let mut tries = 0;
    loop {
        s.gateway.call(&x, "read_status", args()).await.unwrap();
        let len = std::fs::metadata(s.audit()).unwrap().len();
        let room = page - len % page;
        if (1..=200).contains(&room) {
            break;
        }
        tries += 1;
        assert!(
            tries < 500,
            "the log's length never came close to a page end"
        );
    }
    let before = std::fs::read(s.audit()).unwrap();
    let calls = s.backend.count();

    let filler = disk.fill();
    let e = s.gateway.call(&x, "read_status", args()).await.unwrap_err();
    assert_eq!(e.code(), "audit_unavailable", "{e}");
    assert!(e.to_string().contains("No space left"), "{e}");
    assert_eq!(s.backend.count(), calls, "the unrecorded call never ran");
    let after = std::fs::read(s.audit()).unwrap();
    assert!(
        after == before,
        "the log changed by {} bytes: a half line was left behind",
        after.len() as i64 - before.len() as i64
    );

    std::fs::remove_file(filler).unwrap();
    s.gateway.call(&x, "read_status", args()).await.unwrap();
    assert_eq!(s.backend.count(), calls + 1);
    // Setup's drop verifies the chain.
}

#[tokio::test]
async fn the_rate_limit_is_per_identity() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = GatewayConfig::default();
    config.rate.calls_per_minute = 3;
    let backend = Arc::new(Counting::default());
    let (gateway, _) = Gateway::new(
        config,
        vec![backend.clone() as Arc<dyn Backend>],
        &Place::in_dir(dir.path()),
    )
    .unwrap();
    for _ in 0..3 {
        gateway
            .call(&Caller::new("a"), "read_status", args())
            .await
            .unwrap();
    }
    let e = gateway
        .call(&Caller::new("a"), "read_status", args())
        .await
        .unwrap_err();
    assert_eq!(e.code(), "rate_limited");
    gateway
        .call(&Caller::new("b"), "read_status", args())
        .await
        .unwrap();
    assert_eq!(backend.count(), 4);
    audit_is_sound(gateway.audit_path().unwrap());
}

#[tokio::test]
async fn policy_lists_naming_unknown_tools_fail_startup() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = GatewayConfig::default();
    config.policy.deny.insert("op_stpo".into());
    let err = Gateway::new(
        config,
        vec![Arc::new(Counting::default()) as Arc<dyn Backend>],
        &Place::in_dir(dir.path()),
    )
    .err()
    .unwrap();
    assert!(
        err.to_string().contains("op_stpo") && err.to_string().contains("op_stop"),
        "{err}"
    );
}

/// A script's calls carry their number into the audit: `audit verify`
/// finds a change one execution sent twice under one number, and not a
/// read sent again (as a replay after a crash does).
#[tokio::test]
async fn verify_finds_a_change_an_execution_sent_twice() {
    let s = setup_with(policy(&[("alice", Mode::Operator)]), vec![]);
    let id = s
        .gateway
        .execution_started(&Caller::new("alice"), "a script")
        .unwrap();
    let call = |n: u32| Caller {
        execution: Some(id.clone()),
        script_call: Some(n),
        ..Caller::new("alice")
    };
    let args = json!({"node": "pve1"});
    s.gateway
        .call(&call(1), "read_status", args.clone())
        .await
        .unwrap();
    s.gateway
        .call(&call(1), "read_status", args.clone())
        .await
        .unwrap();
    s.gateway
        .call(&call(2), "op_start", args.clone())
        .await
        .unwrap();
    let v = audit::verify(s.audit()).unwrap();
    assert!(v.ok() && v.sent_twice.is_empty(), "{v:?}");
    s.gateway.call(&call(2), "op_start", args).await.unwrap();
    let v = audit::verify(s.audit()).unwrap();
    assert!(v.ok(), "the chain itself holds");
    assert_eq!(v.sent_twice.len(), 1, "{v:?}");
    assert!(v.sent_twice[0].1.contains("#2 (op_start)"), "{v:?}");
    s.gateway
        .execution_finished(&id, "ok", 4, std::time::Duration::from_millis(5))
        .unwrap();
}

#[tokio::test]
async fn executions_are_audited() {
    let s = setup_with(policy(&[]), vec![]);
    let caller = Caller::new("x");
    let id = s
        .gateway
        .execution_started(&caller, "await tools.read_status({node: 'pve1'})")
        .unwrap();
    let c = Caller {
        identity: "x".into(),
        execution: Some(id.clone()),
        from_groups: None,
        mode: None,
        plan: None,
        approve_own: false,
        runbook: None,
        script_call: None,
    };
    s.gateway
        .call(&c, "read_status", json!({"node": "pve1"}))
        .await
        .unwrap();
    s.gateway
        .execution_finished(&id, "ok", 1, std::time::Duration::from_millis(5))
        .unwrap();
    let log = std::fs::read_to_string(s.audit()).unwrap();
    assert!(log.contains("\"event\":\"execution_start\"") && log.contains("\"script_sha256\""));
    assert!(log.contains("\"event\":\"execution_end\"") && log.contains("\"outcome\":\"ok\""));
    assert_eq!(log.matches(&format!("\"execution\":\"{id}\"")).count(), 3);
}

/// Arguments with 100,000 keys and one key of a megabyte.
fn huge_args() -> Value {
    let mut m = serde_json::Map::new();
    for i in 0..100_000 {
        m.insert(format!("k{i}"), json!(1));
    }
    m.insert("\u{1}".repeat(1 << 20), json!(1));
    m.insert("node".into(), json!("pve1"));
    Value::Object(m)
}

#[tokio::test]
async fn audit_lines_stay_small_whatever_the_arguments() {
    let s = setup_with(policy(&[("rw", Mode::Rw)]), vec![]);
    let rw = Caller::new("rw");
    // Refused (unknown keys), unknown tool, and allowed with all of them.
    let e = s
        .gateway
        .call(&rw, "read_status", huge_args())
        .await
        .unwrap_err();
    assert_eq!(e.code(), "invalid_arguments");
    let e = s
        .gateway
        .call(&rw, "no_such_tool", huge_args())
        .await
        .unwrap_err();
    assert_eq!(e.code(), "not_found");
    s.gateway
        .call(&rw, "op_configure", huge_args())
        .await
        .unwrap();
    let text = std::fs::read_to_string(s.audit()).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for line in lines.iter().filter(|l| l["event"] == "call") {
        assert_eq!(line["arg_keys_total"], 100_002, "{line}");
        let keys = line["arg_keys"].as_array().unwrap();
        assert!(!keys.is_empty() && keys.len() <= 32, "{}", keys.len());
        assert!(keys
            .iter()
            .all(|k| k.as_str().unwrap().chars().count() <= 64));
    }
    let longest = audit_is_sound(s.audit());
    eprintln!("longest audit line for 100,002 keys: {longest} bytes");
    assert!(longest < 4096);
}

/// A backend whose request ids are as long as it likes.
struct Chatty;

#[async_trait]
impl Backend for Chatty {
    fn id(&self) -> &str {
        "chatty"
    }

    fn tools(&self) -> Vec<ToolSpec> {
        let mut t = tool("read_chatty", Tier::Read);
        t.backend = "chatty".into();
        vec![t]
    }

    async fn call(&self, _: &Caller, _: &ToolSpec, _: Value) -> Result<Reply, BackendError> {
        Ok(Reply {
            value: json!({}),
            request_id: Some(format!("UPID:{}", "\u{7}".repeat(1 << 20))),
        })
    }
}

#[tokio::test]
async fn a_backend_request_id_is_cut_in_the_audit() {
    let dir = tempfile::tempdir().unwrap();
    let (gateway, _) = Gateway::new(
        GatewayConfig::default(),
        vec![Arc::new(Chatty) as Arc<dyn Backend>],
        &Place::in_dir(dir.path()),
    )
    .unwrap();
    gateway
        .call(&Caller::new("x"), "read_chatty", json!({"node": "pve1"}))
        .await
        .unwrap();
    let text = std::fs::read_to_string(gateway.audit_path().unwrap()).unwrap();
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    let id = last["backend_request_id"].as_str().unwrap();
    assert!(id.starts_with("UPID:") && id.len() <= 512, "{}", id.len());
    audit_is_sound(gateway.audit_path().unwrap());
}

#[tokio::test]
async fn refused_calls_are_rate_limited_before_any_host_work() {
    let s = setup_adjusted(|config| {
        config.policy = policy(&[("alice", Mode::Rw)]);
        config.approval.tiers = vec![Tier::Operate, Tier::Admin];
        config.rate.calls_per_minute = 5;
    });
    let mallory = Caller::new("mallory");
    let mut codes = Vec::new();
    for _ in 0..20 {
        let e = s
            .gateway
            .call(&mallory, "no_such_tool", args())
            .await
            .unwrap_err();
        codes.push(e.code().to_string());
    }
    assert_eq!(codes[..5], ["not_found"; 5]);
    assert_eq!(codes[5..], ["rate_limited"; 15]);
    let log = std::fs::read_to_string(s.audit()).unwrap();
    assert_eq!(
        log.matches("\"event\":\"call\"").count(),
        6,
        "every refusal has its line, but the rate-limited ones after the first are counted"
    );
    assert_eq!(log.matches("\"decision\":\"rate_limited\"").count(), 1);

    // Calls needing approval: requests are filed only for calls that got
    // a token.
    let alice = Caller::new("alice");
    let mut filed = 0;
    for vmid in 100..110 {
        let e = s
            .gateway
            .call(&alice, "op_stop", json!({"node": "pve1", "vmid": vmid}))
            .await
            .unwrap_err();
        match e.code() {
            "approval_required" => filed += 1,
            "rate_limited" => {}
            other => panic!("{other}: {e}"),
        }
    }
    assert_eq!(filed, 5);
    assert_eq!(s.gateway.approvals().rows().unwrap(), 5);
    // A minute later the bucket is full again; alice's next line carries
    // the four refusals after her first rate-limited one.
    s.clock.fetch_add(60_000, Ordering::SeqCst);
    let e = s
        .gateway
        .call(&alice, "op_stop", json!({"node": "pve1", "vmid": 200}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "approval_required");
    assert_eq!(s.backend.count(), 0);
    let log = std::fs::read_to_string(s.audit()).unwrap();
    let last: Value = serde_json::from_str(log.lines().last().unwrap()).unwrap();
    assert_eq!(
        (&last["identity"], &last["rate_limited_since"]),
        (&json!("alice"), &json!(4)),
        "{last}"
    );
}

/// The review's flood: a name of 128 control characters and 32 keys of
/// 64 control characters each, called 500 times by a rate-limited
/// identity. Each refusal wrote a line of 2.7 KB (40 executions grew the
/// log by 53.5 MB in 3.7 s); now the first refusal of a run writes one
/// and the identity's next line carries the count.
#[tokio::test]
async fn rate_limited_refusals_leave_one_line_and_a_count() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = GatewayConfig::default();
    config.rate.calls_per_minute = 5;
    let backend = Arc::new(Counting::default());
    let (gateway, _) = Gateway::new(
        config,
        vec![backend.clone() as Arc<dyn Backend>],
        &Place::in_dir(dir.path()),
    )
    .unwrap();
    let clock = Arc::new(AtomicI64::new(1_000_000));
    let c = clock.clone();
    let gateway = gateway.with_clock(move || c.load(Ordering::SeqCst));
    let audit_path = gateway.audit_path().unwrap().to_path_buf();
    let lines = || {
        std::fs::read_to_string(&audit_path)
            .unwrap()
            .lines()
            .count()
    };

    let name = "\u{1}".repeat(128);
    let mut wide = serde_json::Map::new();
    for i in 0..32u8 {
        wide.insert(format!("{}", char::from(i)).repeat(64), json!(1));
    }
    let wide = Value::Object(wide);
    let execution = gateway
        .execution_started(&Caller::new("mallory"), "for (;;) …")
        .unwrap();
    let mallory = Caller {
        identity: "mallory".into(),
        execution: Some(execution.clone()),
        from_groups: None,
        mode: None,
        plan: None,
        approve_own: false,
        runbook: None,
        script_call: None,
    };
    for _ in 0..5 {
        gateway.call(&mallory, "read_status", args()).await.unwrap();
    }
    let before = lines();
    for _ in 0..500 {
        let e = gateway
            .call(&mallory, &name, wide.clone())
            .await
            .unwrap_err();
        assert_eq!(e.code(), "rate_limited");
    }
    assert_eq!(
        lines(),
        before + 1,
        "one line for 500 rate-limited refusals"
    );
    gateway
        .execution_finished(
            &execution,
            "LimitExceeded",
            505,
            std::time::Duration::from_millis(9),
        )
        .unwrap();
    let text = std::fs::read_to_string(&audit_path).unwrap();
    let end: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(end["event"], "execution_end");
    assert_eq!(end["rate_limited_since"], 499, "{end}");
    assert!(end["rate_limited_first"].is_string() && end["rate_limited_last"].is_string());
    let refusal = text
        .lines()
        .find(|l| l.contains("\"decision\":\"rate_limited\""))
        .unwrap();
    eprintln!(
        "the written refusal: {} bytes; the log: {} lines, {} bytes for 505 calls",
        refusal.len(),
        text.lines().count(),
        text.len()
    );

    // A new run after the count was written: its first refusal has a
    // line again, and the next admitted call carries the rest.
    for _ in 0..10 {
        gateway
            .call(&mallory, "read_status", args())
            .await
            .unwrap_err();
    }
    clock.fetch_add(60_000, Ordering::SeqCst);
    gateway.call(&mallory, "read_status", args()).await.unwrap();
    let text = std::fs::read_to_string(&audit_path).unwrap();
    let admitted: Value = serde_json::from_str(
        text.lines()
            .rev()
            .find(|l| l.contains("\"event\":\"call\""))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(admitted["decision"], "allowed");
    assert_eq!(admitted["rate_limited_since"], 9, "{admitted}");
    assert_eq!(text.matches("\"decision\":\"rate_limited\"").count(), 2);

    // Refusals no line has carried when the gateway goes are written as
    // one event.
    for _ in 0..20 {
        let _ = gateway.call(&mallory, "read_status", args()).await;
    }
    drop(gateway);
    let text = std::fs::read_to_string(&audit_path).unwrap();
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(
        (
            &last["event"],
            &last["identity"],
            &last["rate_limited_since"]
        ),
        (&json!("rate_limited"), &json!("mallory"), &json!(15)),
        "{last}"
    );
    assert_eq!(text.lines().count(), 2 * 5 + 2 + 1 + 1 + 2 + 4 * 2 + 1 + 1);
    audit_is_sound(&audit_path);
    assert_eq!(backend.count(), 10);
}

#[tokio::test]
async fn a_huge_tool_name_is_refused_by_its_length_without_suggestions() {
    let s = setup_with(policy(&[]), vec![]);
    let x = Caller::new("x");
    // Close to a tool: a suggestion would be found if one were looked for.
    let huge = format!("read_status{}", " read status".repeat(180_000));
    assert!(huge.len() > 2_000_000);
    let e = s.gateway.call(&x, &huge, json!({})).await.unwrap_err();
    assert_eq!(e.code(), "not_found");
    let text = e.to_string();
    assert!(text.len() < 1024, "{} bytes", text.len());
    assert!(
        text.contains(&format!(
            "a tool name is at most 256 bytes; this one is {}",
            huge.len()
        )),
        "{text}"
    );
    assert_eq!(
        e.details()["did_you_mean"],
        json!([]),
        "suggest was not consulted"
    );
    assert!(e.details().to_string().len() < 1024);

    // The same name through get_schema.
    let answers = s.gateway.catalog().schemas(std::slice::from_ref(&huge));
    let answer = serde_json::to_string(&answers).unwrap();
    assert!(answer.len() < 1024, "{answer}");
    assert!(answer.contains("at most 256 bytes") && answer.contains("\"did_you_mean\":[]"));

    // At the bound a name is looked up and matched as usual; one byte
    // over it is not.
    let at = format!("read_statu{}", "s".repeat(246));
    assert_eq!(at.len(), 256);
    let e = s.gateway.call(&x, &at, json!({})).await.unwrap_err();
    assert!(matches!(e, CallError::UnknownTool { .. }), "{e}");
    assert!(
        e.to_string().contains("(256 bytes)"),
        "quoted, not echoed: {e}"
    );
    let over = format!("{at}s");
    assert!(matches!(
        s.gateway.call(&x, &over, json!({})).await.unwrap_err(),
        CallError::NameTooLong { bytes: 257, .. }
    ));
    assert_eq!(s.backend.count(), 0);
}

#[tokio::test]
async fn open_requests_per_identity_are_capped() {
    let s = setup_adjusted(|config| {
        config.policy = policy(&[("alice", Mode::Rw), ("bob", Mode::Rw)]);
        config.approval.tiers = vec![Tier::Operate];
        config.approval.max_open_per_identity = 3;
    });
    let alice = Caller::new("alice");
    let stop = |vmid: u32| json!({"node": "pve1", "vmid": vmid});
    let mut filed = Vec::new();
    for vmid in 101..104 {
        let e = s
            .gateway
            .call(&alice, "op_stop", stop(vmid))
            .await
            .unwrap_err();
        filed.push(request_id(&e));
    }
    let e = s
        .gateway
        .call(&alice, "op_stop", stop(104))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "approval_limit");
    let text = e.to_string();
    assert!(
        text.contains("approval.max_open_per_identity = 3")
            && text.contains("`airlock approvals list`"),
        "{text}"
    );
    assert_eq!(e.details()["max_open_per_identity"], 3);
    assert_eq!(
        s.gateway.approvals().rows().unwrap(),
        3,
        "nothing more filed"
    );
    // Asking about a request already waiting still works; bob has his own.
    assert_eq!(
        s.gateway
            .call(&alice, "op_stop", stop(101))
            .await
            .unwrap_err()
            .code(),
        "approval_required"
    );
    request_id(
        &s.gateway
            .call(&Caller::new("bob"), "op_stop", stop(104))
            .await
            .unwrap_err(),
    );
    // Deciding one makes room for the next.
    s.gateway
        .approvals()
        .deny(&filed[0], &Decider::cli("op"), s.gateway.now_ms())
        .unwrap();
    request_id(
        &s.gateway
            .call(&alice, "op_stop", stop(104))
            .await
            .unwrap_err(),
    );
    assert_eq!(s.backend.count(), 0);
}

#[tokio::test]
async fn expired_requests_do_not_pile_up() {
    let s = setup_with(policy(&[("alice", Mode::Rw)]), vec![Tier::Operate]);
    let alice = Caller::new("alice");
    let mut most = 0;
    for vmid in 100..400 {
        request_id(
            &s.gateway
                .call(&alice, "op_stop", json!({"node": "pve1", "vmid": vmid}))
                .await
                .unwrap_err(),
        );
        // Five minutes on: each request expires after two of these.
        s.clock.fetch_add(5 * 60 * 1000, Ordering::SeqCst);
        most = most.max(s.gateway.approvals().rows().unwrap());
    }
    assert!(most <= 5, "the approval table grew to {most} rows");
}

#[tokio::test]
async fn the_approver_sees_everything_escaped_and_masked_or_is_not_asked() {
    let s = setup_with(policy(&[("alice", Mode::Rw)]), vec![Tier::Operate]);
    let alice = Caller::new("alice");
    let mut a = json!({
        "node": "pve1",
        "description": "fine\u{1b}[2K\rDELETE ALL",
        "name": "web\u{202e}txt.exe",
        "config": {"password": "hunter2", "user": "root"},
    });
    for i in 0..100 {
        a[format!("k{i:03}")] = json!(i);
    }
    let e = s
        .gateway
        .call(&alice, "op_configure", a.clone())
        .await
        .unwrap_err();
    let summary = e.details()["summary"].as_str().unwrap().to_string();
    assert!(
        summary.starts_with(r#"config={password=set(7 chars, hmac:"#)
            && summary.contains(
                r#"), user="root"}, description="fine\u{1b}[2K\u{d}DELETE ALL", k000=0, k001=1, "#
            ),
        "{summary}"
    );
    assert!(
        summary.contains(r#"name="web\u{202e}txt.exe", node=pve1"#),
        "{summary}"
    );
    assert_eq!(
        summary.matches(", k0").count(),
        100,
        "all 100 keys: {summary}"
    );
    assert!(!summary.contains("hunter2"));
    assert!(!summary.chars().any(|c| c.is_control() || c == '\u{202e}'));
    // What `airlock approvals list` prints is the same text.
    let listed = s
        .gateway
        .approvals()
        .list(s.gateway.now_ms(), false)
        .unwrap();
    assert_eq!(listed[0].summary, summary);

    // A long value is summarised in the list and kept in full.
    a["description"] = json!(format!("{}END", "x".repeat(3000)));
    let e = s
        .gateway
        .call(&alice, "op_configure", a.clone())
        .await
        .unwrap_err();
    let id = e.details()["request_id"].as_str().unwrap().to_string();
    let filed = s.gateway.approvals().get(&id).unwrap();
    assert!(
        filed.summary.contains("(3003 chars, sha256:"),
        "{}",
        filed.summary
    );
    assert!(!filed.summary.contains("END"));
    assert!(filed.detail.as_deref().unwrap().contains("xxxEND, "));

    // Too much to show in full, or in a list: not asked at all.
    a["description"] = json!("x".repeat(70_000));
    let e = s
        .gateway
        .call(&alice, "op_configure", a.clone())
        .await
        .unwrap_err();
    assert_eq!(e.code(), "approval_too_large");
    assert!(e.to_string().contains("65536 characters"), "{e}");
    a["description"] = json!("short");
    for i in 100..400 {
        a[format!("k{i:03}")] = json!(i);
    }
    let e = s.gateway.call(&alice, "op_configure", a).await.unwrap_err();
    assert_eq!(e.code(), "approval_too_large");
    assert!(e.to_string().contains("2000 characters"), "{e}");
    assert_eq!(s.gateway.approvals().rows().unwrap(), 2);
    assert_eq!(s.backend.count(), 0);
}

#[tokio::test]
async fn approval_in_the_client_follows_tier_and_identity_settings() {
    let s = setup_adjusted(|config| {
        config.policy = policy(&[("alice", Mode::Rw), ("otto", Mode::Rw)]);
        config
            .policy
            .identities
            .get_mut("otto")
            .unwrap()
            .approve_in_client = false;
        config.approval.in_client = vec![Tier::Operate];
    });
    let g = &s.gateway;
    assert!(g.may_approve_in_client("alice", "op_stop"));
    assert!(
        !g.may_approve_in_client("alice", "admin_delete"),
        "admin is not in in_client"
    );
    assert!(
        !g.may_approve_in_client("otto", "op_stop"),
        "otto needs an operator"
    );
    assert!(
        g.may_approve_in_client("stranger", "op_stop"),
        "unlisted: as the tiers say"
    );
    assert!(!g.may_approve_in_client("alice", "no_such_tool"));
    assert!(!g.may_approve_in_client("alice", &"op_stop".repeat(100_000)));

    // The defaults: both tiers, every identity.
    let d = setup_with(
        policy(&[("alice", Mode::Rw)]),
        vec![Tier::Operate, Tier::Admin],
    );
    assert!(d.gateway.may_approve_in_client("alice", "admin_delete"));
}

#[tokio::test]
async fn a_state_directory_others_can_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let err = Gateway::new(
        GatewayConfig::default(),
        vec![Arc::new(Counting::default()) as Arc<dyn Backend>],
        &Place::in_dir(dir.path()),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        err.contains(&dir.path().display().to_string()) && err.contains("chmod 700"),
        "{err}"
    );
    assert!(!dir.path().join("approvals.db").exists());
}

/// `url` on `pg`, with a timeout short enough that an outage is noticed
/// within a test.
fn quick_postgres(pg: &airlock_testkit::TempPostgres, url: &str) -> Place {
    let mut p = airlock_state::PostgresConfig::new(url);
    p.password_file = Some(pg.password_file().to_path_buf());
    p.timeout = std::time::Duration::from_millis(500);
    Place::Postgres(p)
}

/// With the state in PostgreSQL, the database going away refuses every
/// call before the backend — at the rate limit (whose refusal cannot be
/// written either, so the audit is what the script is told of) or, with
/// no rate limit, at the audit line that would let it through — and calls
/// go through again once it is back: nothing runs unrecorded, and the
/// chain holds a line for every call that ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_database_that_goes_away_refuses_calls_before_the_backend() {
    let pg = airlock_testkit::TempPostgres::start().unwrap();
    let url = pg.create_database("gw").unwrap();
    let postgres = |_: &std::path::Path| quick_postgres(&pg, &url);
    let limited = setup_in(postgres, |_| {});
    let unlimited = setup_in(postgres, |c| c.rate.calls_per_minute = 0);
    let x = Caller::new("x");
    for s in [&limited, &unlimited] {
        s.gateway.call(&x, "read_status", args()).await.unwrap();
    }

    pg.stop_now().unwrap();
    for s in [&limited, &unlimited] {
        for _ in 0..3 {
            let e = s.gateway.call(&x, "read_status", args()).await.unwrap_err();
            assert_eq!(e.code(), "audit_unavailable", "{e}");
            assert_eq!(
                e.details(),
                json!({"retryable": true, "store": "audit", "retry_after_ms": 2000})
            );
            assert!(
                !e.to_string().contains("127.0.0.1"),
                "the script is not told where: {e}"
            );
        }
        assert_eq!(s.backend.count(), 1, "nothing ran while the state was away");
    }

    pg.restart().unwrap();
    for s in [&limited, &unlimited] {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while let Err(e) = s.gateway.call(&x, "read_status", args()).await {
            assert!(std::time::Instant::now() < deadline, "still refused: {e}");
            tokio::task::yield_now().await;
        }
        assert_eq!(s.backend.count(), 2);
    }
    // One chain for both gateways: every call that ran has its line and
    // its result.
    let mut out = Vec::new();
    limited.gateway.audit().export(&mut out).unwrap();
    let v = audit::verify_lines(&out[..]).unwrap();
    assert!(v.ok(), "{v:?}");
    let lines: Vec<Value> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let allowed = lines
        .iter()
        .filter(|l| l["event"] == "call" && l["decision"] == "allowed")
        .count();
    let results = lines.iter().filter(|l| l["event"] == "call_result").count();
    assert_eq!((allowed, results), (4, 4));
}

#[tokio::test]
async fn scripts_find_only_tools_their_mode_may_call_and_the_audit_says_so() {
    let s = setup_with(
        policy(&[("viewer", Mode::Ro), ("ops", Mode::Operator)]),
        vec![],
    );
    let names = |v: &Value| -> Vec<String> {
        v["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["name"].as_str().unwrap().to_string())
            .collect()
    };
    let query = json!({"query": "op start stop read summary", "limit": 20});
    let viewer = s
        .gateway
        .call(&Caller::new("viewer"), "catalog.search", query.clone())
        .await
        .unwrap()
        .value;
    let mut seen = names(&viewer);
    seen.sort();
    assert_eq!(seen, ["read_list", "read_status"], "{viewer}");
    let ops = s
        .gateway
        .call(&Caller::new("ops"), "catalog.search", query)
        .await
        .unwrap()
        .value;
    let seen = names(&ops);
    assert!(seen.contains(&"op_start".to_string()), "{ops}");
    assert!(
        !seen
            .iter()
            .any(|n| n == "admin_delete" || n == "forbidden_console"),
        "{ops}"
    );

    // A tool the mode may not call reads as one that does not exist.
    let described = s
        .gateway
        .call(
            &Caller::new("viewer"),
            "catalog.describe",
            json!({"names": ["read_status", "op_start", "no_such"]}),
        )
        .await
        .unwrap()
        .value;
    assert!(described[0]["typescript"]
        .as_str()
        .unwrap()
        .contains("read_status"));
    let hidden = described[1]["error"].as_str().unwrap();
    let unknown = described[2]["error"].as_str().unwrap();
    assert_eq!(
        hidden.replace("op_start", "X"),
        unknown.replace("no_such", "X")
    );

    let e = s
        .gateway
        .call(
            &Caller::new("viewer"),
            "catalog.search",
            json!({"query": 7, "limit": 99, "colour": "red"}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), "invalid_arguments");
    let problems = e.details()["problems"].to_string();
    for says in [
        "`query` must be a string",
        "`limit`",
        "unknown field `colour`",
    ] {
        assert!(problems.contains(says), "{problems}");
    }
    assert_eq!(s.backend.count(), 0, "nothing reached a backend");

    let log = std::fs::read_to_string(s.audit()).unwrap();
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let calls: Vec<&Value> = lines
        .iter()
        .filter(|l| {
            l["event"] == "call"
                && l["tool"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("catalog."))
        })
        .collect();
    assert_eq!(calls.len(), 4, "{log}");
    assert_eq!(calls[0]["backend"], "catalog");
    assert_eq!(calls[0]["decision"], "allowed");
    assert_eq!(calls[3]["decision"], "invalid");
    let results = lines.iter().filter(|l| l["event"] == "call_result").count();
    assert_eq!(results, 3, "one result per allowed call");
}

#[tokio::test]
async fn finding_tools_is_rate_limited_like_calling_them() {
    let s = setup_adjusted(|config| config.rate.calls_per_minute = 2);
    for _ in 0..2 {
        s.gateway
            .call(
                &Caller::new("a"),
                "catalog.search",
                json!({"query": "status"}),
            )
            .await
            .unwrap();
    }
    let e = s
        .gateway
        .call(
            &Caller::new("a"),
            "catalog.describe",
            json!({"names": ["read_status"]}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), "rate_limited");
}

#[tokio::test]
async fn scripts_do_not_find_what_their_deny_list_refuses() {
    let mut config = policy(&[("ops", Mode::Operator)]);
    config
        .identities
        .get_mut("ops")
        .unwrap()
        .deny
        .insert("op_start".into());
    let s = setup_with(config, vec![]);
    let found = s
        .gateway
        .call(
            &Caller::new("ops"),
            "catalog.search",
            json!({"query": "op start", "limit": 20}),
        )
        .await
        .unwrap()
        .value;
    let names: Vec<&str> = found["hits"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|h| h["name"].as_str())
        .collect();
    assert!(names.contains(&"op_stop"), "{found}");
    assert!(!names.contains(&"op_start"), "{found}");
    let described = s
        .gateway
        .call(
            &Caller::new("ops"),
            "catalog.describe",
            json!({"names": ["op_start", "op_start", "op_stop"]}),
        )
        .await
        .unwrap()
        .value;
    assert_eq!(
        described.as_array().unwrap().len(),
        2,
        "repeats are described once: {described}"
    );
    assert!(described[0]["error"].is_string(), "{described}");
    assert!(described[1]["typescript"].is_string(), "{described}");
    // However many problems, ten are named and the rest counted.
    let many: serde_json::Map<String, Value> =
        (0..500).map(|i| (format!("k{i}"), json!(1))).collect();
    let mut args = many;
    args.insert("query".into(), json!("x"));
    let e = s
        .gateway
        .call(&Caller::new("ops"), "catalog.search", Value::Object(args))
        .await
        .unwrap_err();
    let problems = e.details()["problems"].as_array().unwrap().clone();
    assert_eq!(problems.len(), 11, "{problems:?}");
    assert_eq!(problems[10], "… and 490 more");
    let e = s
        .gateway
        .call(
            &Caller::new("ops"),
            "catalog.search",
            json!({"query": "x", "tier": "forbidden"}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), "invalid_arguments");
}

/// 100,000 identities (as an OpenID provider brings them), each
/// rate-limited twice: the first refusal has its line, the second is
/// counted for the next. A minute on, the next newcomer's refusal sweeps
/// the quiet identities out, and their counts are written, not lost.
#[tokio::test]
async fn identity_state_stays_bounded_and_loses_no_count() {
    let s = setup_adjusted(|config| config.rate.calls_per_minute = 1);
    const N: usize = 100_000;
    for i in 0..N {
        let who = Caller::new(format!("user-{i}"));
        for _ in 0..3 {
            let _ = s.gateway.call(&who, "no_such_tool", args()).await;
        }
    }
    // Within the minute every count still waits for its identity's next
    // line (the map sweeps only what is a minute quiet).
    assert_eq!(s.gateway.identities_held(), N);
    s.clock.fetch_add(60_000, Ordering::SeqCst);
    let newcomer = Caller::new("newcomer");
    for _ in 0..2 {
        let _ = s.gateway.call(&newcomer, "no_such_tool", args()).await;
    }
    assert!(
        s.gateway.identities_held() <= 1,
        "{} identities still held",
        s.gateway.identities_held()
    );
    let log = std::fs::read_to_string(s.audit()).unwrap();
    let counted: Vec<Value> = log
        .lines()
        .filter(|l| l.contains("\"event\":\"rate_limited\""))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(counted.len(), N, "every quiet identity's count is written");
    assert!(counted.iter().all(|l| l["rate_limited_since"] == 1));
    audit_is_sound(s.gateway.audit_path().unwrap());
}

/// Found by a database outage: executions running when the database went
/// away lost their end line, and stayed "still running, or killed" in
/// `audit verify` until an operator closed them; a start that failed to
/// be written may still have been committed. Now both ends are owed and
/// written when the store is back, marked as ended during the outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ends_that_could_not_be_written_are_written_when_the_database_is_back() {
    let pg = airlock_testkit::TempPostgres::start().unwrap();
    let url = pg.create_database("gw").unwrap();
    let postgres = |_: &std::path::Path| quick_postgres(&pg, &url);
    let s = setup_in(postgres, |c| c.rate.calls_per_minute = 0);
    let x = Caller::new("x");
    let running = s.gateway.execution_started(&x, "1").unwrap();
    let others: Vec<String> = (0..20)
        .map(|_| s.gateway.execution_started(&x, "1").unwrap())
        .collect();

    pg.stop_now().unwrap();
    let took = std::time::Duration::from_millis(3);
    assert!(s
        .gateway
        .execution_finished(&running, "ok", 0, took)
        .is_err());
    for o in &others {
        assert!(s.gateway.execution_finished(o, "ok", 0, took).is_err());
    }
    // Refused at once (no connection): nothing was written, nothing owed.
    assert!(s.gateway.execution_started(&x, "2").is_err());
    assert_eq!(s.gateway.owed_ends(), 21);

    pg.restart().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let next = loop {
        match s.gateway.execution_started(&x, "3") {
            Ok(id) => break id,
            Err(e) => assert!(std::time::Instant::now() < deadline, "still refused: {e}"),
        }
        tokio::task::yield_now().await;
    };
    s.gateway.execution_finished(&next, "ok", 0, took).unwrap();
    // An execution's end writes a few of them, not the whole backlog.
    let per_request = airlock_gateway::gateway::owed_ends::ON_A_REQUEST;
    assert_eq!(s.gateway.owed_ends(), 21 - per_request);
    assert_eq!(s.gateway.write_owed_ends(500), 21 - per_request);
    assert_eq!(s.gateway.owed_ends(), 0);

    let mut out = Vec::new();
    s.gateway.audit().export(&mut out).unwrap();
    let v = audit::verify_lines(&out[..]).unwrap();
    assert!(v.ok(), "{v:?}");
    assert_eq!(
        v.unfinished,
        vec![],
        "every execution has its end: {}",
        String::from_utf8_lossy(&out)
    );
    let lines: Vec<Value> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let owed: Vec<&Value> = lines
        .iter()
        .filter(|l| l["ended_during_outage"] == true)
        .collect();
    assert_eq!(owed.len(), 21, "{owed:?}");
    assert_eq!(
        (&owed[0]["execution"], &owed[0]["outcome"]),
        (&json!(running), &json!("ok"))
    );
    assert!(owed[0]["ended"].is_string() && owed[0]["identity"] == "x");
}

/// An audit store that writes the next line and then says it did not
/// answer in time: a database that froze and committed the insert after
/// its writer gave up.
struct LateCommit {
    inner: Arc<dyn audit::AuditStore>,
    late: std::sync::atomic::AtomicBool,
}

impl audit::AuditStore for LateCommit {
    fn append(
        &self,
        event: &str,
        fields: serde_json::Map<String, Value>,
    ) -> Result<audit::Head, audit::AuditError> {
        let head = self.inner.append(event, fields)?;
        if self.late.swap(false, std::sync::atomic::Ordering::SeqCst) {
            return Err(audit::AuditError::Unsettled {
                location: "test".into(),
                message: "no answer within the backstop".into(),
            });
        }
        Ok(head)
    }
    fn verify(&self) -> Result<audit::Verdict, audit::AuditError> {
        self.inner.verify()
    }
    fn export(&self, out: &mut dyn std::io::Write) -> Result<u64, audit::AuditError> {
        self.inner.export(out)
    }
    fn location(&self) -> String {
        self.inner.location()
    }
    fn reachable(&self) -> Result<(), audit::AuditError> {
        self.inner.reachable()
    }
}

struct WithLateAudit(Place, Arc<LateCommit>);

impl airlock_gateway::state::Stores for WithLateAudit {
    fn open(
        &self,
        approval: &airlock_gateway::config::ApprovalConfig,
    ) -> Result<airlock_gateway::state::State, airlock_gateway::state::OpenError> {
        let mut s = airlock_gateway::state::Stores::open(&self.0, approval)?;
        s.audit = self.1.clone();
        Ok(s)
    }
}

/// Found by a database frozen under load: one `execution_start` was
/// committed after the client had been told nothing runs, so the chain
/// recorded an execution that never ran, open for good. Now a start
/// whose write may have landed is followed by an end that says it never
/// ran.
#[tokio::test]
async fn a_start_written_after_its_writer_gave_up_is_followed_by_an_end_that_says_it_never_ran() {
    let dir = tempfile::tempdir().unwrap();
    let place = Place::in_dir(dir.path());
    let inner = place.open(&Default::default()).unwrap().audit;
    let late = Arc::new(LateCommit {
        inner,
        late: std::sync::atomic::AtomicBool::new(true),
    });
    let (gateway, _) = Gateway::new(
        GatewayConfig::default(),
        vec![],
        &WithLateAudit(place, late.clone()),
    )
    .unwrap();
    let x = Caller::new("x");
    let refused = gateway.execution_started(&x, "1");
    assert!(
        matches!(refused, Err(StartError::Audit(ref e)) if e.may_have_written()),
        "{refused:?}"
    );
    assert_eq!(gateway.owed_ends(), 1);
    // The next line written brings the owed end with it.
    let next = gateway.execution_started(&x, "2").unwrap();
    gateway
        .execution_finished(&next, "ok", 0, std::time::Duration::ZERO)
        .unwrap();
    assert_eq!(gateway.owed_ends(), 0);
    let v = late.inner.verify().unwrap();
    assert!(v.ok() && v.unfinished.is_empty(), "{v:?}");
    let mut out = Vec::new();
    late.inner.export(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let never: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["never_ran"] == true)
        .collect();
    assert_eq!(never.len(), 1, "{text}");
    assert_eq!(never[0]["outcome"], "NotStarted");
}
