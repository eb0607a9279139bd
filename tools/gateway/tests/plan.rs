//! Plan mode through the gateway: recording sends reads and nothing else,
//! one approval covers the filed plan, applying makes exactly its changes
//! once, and everything else (another identity's plan, an undecided,
//! denied, expired, used or edited one, a changed or extra call) is
//! refused before any backend. Every test counts what reached the backend
//! and ends with an audit log that verifies; the last ones forge lines
//! and expect `audit verify` to find them.

use std::{
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicI64, AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use airlock_catalog::{
    digest::sha256_json,
    spec::{Hints, Tier, ToolSpec},
};
use airlock_gateway::{
    approval::{Request, Status, DEFAULT_TTL_MS},
    audit,
    backend::{Backend, BackendError, Reply, TaskEnd},
    decision::Decider,
    gateway::PlanFiled,
    plan::{
        list_hash, table, PlanError, PlannedChange, Recorder, MAX_PLAN_CHANGES,
        MAX_PLAN_DETAIL_CHARS, MAX_PLAN_SUMMARY_CHARS, PLAN_TOOL,
    },
    plan_apply::{Applying, PlanRun},
    policy::{Grant, Mode, PolicyConfig},
    CallError, Caller, Gateway, GatewayConfig,
};
use airlock_state::{local::AuditLog, Place};
use async_trait::async_trait;
use serde_json::{json, Map, Value};

const T0: i64 = 1_000_000;

/// A backend that keeps every call it is sent: a read, a change that
/// answers a task id, and a read that waits for a task. Stopping guest
/// 999 fails at once; stopping guest 555 fails too, after waiting (at
/// most 300 ms) for another call to arrive while it is in flight; the
/// task of stopping guest 777 ends in failure.
#[derive(Default)]
struct Fleet {
    sent: Mutex<Vec<(String, Value)>>,
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
    arrived: tokio::sync::Notify,
}

impl Fleet {
    fn count(&self) -> usize {
        self.sent.lock().unwrap().len()
    }

    fn sent(&self) -> Vec<(String, Value)> {
        self.sent.lock().unwrap().clone()
    }
}

/// A tool whose every property but `comment` is required.
fn spec(name: &str, tier: Tier, props: Value, output: Option<Value>) -> ToolSpec {
    let required: Vec<&String> = props
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| *k != "comment")
        .collect();
    ToolSpec {
        name: name.into(),
        summary: format!("{name} summary"),
        description: String::new(),
        input_schema: json!({"type": "object", "properties": props, "required": required,
                             "additionalProperties": false}),
        output_schema: output,
        tier,
        hints: Hints::for_tier(tier),
        backend: "fleet".into(),
        path_params: vec!["node".into(), "vmid".into()],
        endpoint: None,
        keywords: String::new(),
        key: String::new(),
        aliases: Vec::new(),
    }
}

#[async_trait]
impl Backend for Fleet {
    fn id(&self) -> &str {
        "fleet"
    }

    fn tools(&self) -> Vec<ToolSpec> {
        let (node, vmid) = (json!({"type": "string"}), json!({"type": "integer"}));
        vec![
            spec(
                "guest_status",
                Tier::Read,
                json!({"node": node, "vmid": vmid}),
                None,
            ),
            spec(
                "guest_stop",
                Tier::Operate,
                json!({"node": node, "vmid": vmid, "comment": {"type": "string"}}),
                Some(json!({"type": "string"})),
            ),
            spec(
                "task_wait",
                Tier::Read,
                json!({"node": node, "upid": {"type": "string"}}),
                None,
            ),
        ]
    }

    fn reads_task(&self, tool: &ToolSpec) -> bool {
        tool.name == "task_wait"
    }

    fn task_end(&self, tool: &ToolSpec, value: &Value) -> Option<TaskEnd> {
        (tool.name == "task_wait").then(|| match value["exitstatus"].as_str() {
            Some("OK") => TaskEnd::Ok,
            Some(other) => TaskEnd::Failed(other.into()),
            None => TaskEnd::Running,
        })
    }

    async fn call(&self, _: &Caller, tool: &ToolSpec, args: Value) -> Result<Reply, BackendError> {
        self.sent
            .lock()
            .unwrap()
            .push((tool.name.clone(), args.clone()));
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_in_flight.fetch_max(now, Ordering::SeqCst);
        self.arrived.notify_waiters();
        let answer = self.answer(tool, &args).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        answer
    }
}

impl Fleet {
    async fn answer(&self, tool: &ToolSpec, args: &Value) -> Result<Reply, BackendError> {
        if args["vmid"] == 555 {
            // Another call arriving now would be one sent while this one
            // is in flight; with one step at a time, none does.
            let _ = tokio::time::timeout(Duration::from_millis(300), self.arrived.notified()).await;
            return Err(BackendError::new(
                "backend_error",
                "guest 555 does not exist",
            ));
        }
        if args["vmid"] == 999 {
            return Err(BackendError::new(
                "backend_error",
                "guest 999 cannot be stopped",
            ));
        }
        let value = match tool.name.as_str() {
            "guest_stop" => json!(format!(
                "UPID:{}:{}:stop",
                args["node"].as_str().unwrap(),
                args["vmid"]
            )),
            "task_wait" => {
                let upid = args["upid"].as_str().unwrap_or_default();
                let exit = if upid.contains(":777:") {
                    "backup failed: disk full"
                } else {
                    "OK"
                };
                json!({"status": "stopped", "exitstatus": exit, "upid": upid})
            }
            _ => json!({"status": "running"}),
        };
        Ok(Reply::new(value))
    }
}

struct Setup {
    gateway: Gateway,
    backend: Arc<Fleet>,
    clock: Arc<AtomicI64>,
    approvals_db: PathBuf,
    dir: tempfile::TempDir,
}

fn setup() -> Setup {
    setup_adjusted(|_| {})
}

/// alice and bob may operate; approval tiers are the default (operate,
/// admin); the clock is the test's.
fn setup_adjusted(adjust: impl FnOnce(&mut GatewayConfig)) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let mut config = GatewayConfig::default();
    let grant = Grant {
        mode: Mode::Operator,
        ..Grant::default()
    };
    config.policy = PolicyConfig {
        identities: [
            ("alice".to_string(), grant.clone()),
            ("bob".to_string(), grant),
        ]
        .into(),
        ..PolicyConfig::default()
    };
    adjust(&mut config);
    let approvals_db = dir.path().join("approvals.db");
    let backend = Arc::new(Fleet::default());
    let (gateway, _) = Gateway::new(
        config,
        vec![backend.clone() as Arc<dyn Backend>],
        &Place::in_dir(dir.path()),
    )
    .unwrap();
    let clock = Arc::new(AtomicI64::new(T0));
    let c = clock.clone();
    Setup {
        gateway: gateway.with_clock(move || c.load(Ordering::SeqCst)),
        backend,
        clock,
        approvals_db,
        dir,
    }
}

fn stop(vmid: i64) -> Value {
    json!({"node": "pve1", "vmid": vmid})
}

fn with_plan(who: &str, plan: PlanRun) -> Caller {
    Caller {
        plan: Some(plan),
        ..Caller::new(who)
    }
}

impl Setup {
    fn now(&self) -> i64 {
        self.clock.load(Ordering::SeqCst)
    }

    fn audit(&self) -> &Path {
        self.gateway.audit_path().unwrap()
    }

    /// Records `who` stopping each guest and files the plan.
    async fn plan(&self, who: &str, vmids: &[i64]) -> (String, Vec<PlannedChange>) {
        let recorder = Arc::new(Recorder::new().unwrap());
        let caller = with_plan(who, PlanRun::Record(recorder.clone()));
        for vmid in vmids {
            self.gateway
                .call(&caller, "guest_stop", stop(*vmid))
                .await
                .unwrap();
        }
        match self.gateway.file_plan(&caller, &recorder).unwrap() {
            PlanFiled::Filed(r) => (r.id, r.changes.unwrap()),
            other => panic!("not filed: {other:?}"),
        }
    }

    fn approve(&self, id: &str) -> Request {
        let r = self
            .gateway
            .approvals()
            .approve(id, &Decider::cli("op"), self.now())
            .unwrap();
        self.gateway.plan_decided(&r).unwrap();
        r
    }

    /// Opens `who`'s plan `id` for applying: not used until its first
    /// change is sent.
    fn open(&self, who: &str, id: &str) -> Result<Arc<Applying>, PlanError> {
        self.gateway.open_plan(&Caller::new(who), id)
    }

    /// The log verifies and no line passes the bound.
    fn sound(&self) {
        sound(self.audit());
    }

    fn lines(&self) -> Vec<Value> {
        lines(self.audit())
    }
}

fn sound(path: &Path) {
    let v = audit::verify(path).unwrap();
    assert!(v.ok(), "the audit log does not verify: {v:?}");
    for l in std::fs::read_to_string(path).unwrap().lines() {
        assert!(
            l.len() < audit::MAX_LINE_BYTES,
            "a line of {} bytes",
            l.len()
        );
    }
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn events<'a>(lines: &'a [Value], event: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| l["event"] == event).collect()
}

#[tokio::test]
async fn recording_sends_reads_and_writes_changes_down() {
    let s = setup();
    let recorder = Arc::new(Recorder::new().unwrap());
    let alice = with_plan("alice", PlanRun::Record(recorder.clone()));

    let status = s
        .gateway
        .call(&alice, "guest_status", stop(101))
        .await
        .unwrap();
    assert_eq!(status.value["status"], "running");
    assert_eq!(s.backend.count(), 1, "a read runs while recording");

    // Each stop, then the wait for its task: a step of the plan too.
    for (n, vmid) in [(1, 101), (3, 102)] {
        let planned = s
            .gateway
            .call(&alice, "guest_stop", stop(vmid))
            .await
            .unwrap();
        let token = planned
            .value
            .as_str()
            .expect("a string, as the tool's output");
        assert_eq!(token, format!("planned:{}.{n}", recorder.id));
        // Waiting for the planned task is answered by the plan, not sent.
        let waited = s
            .gateway
            .call(&alice, "task_wait", json!({"node": "pve1", "upid": token}))
            .await
            .unwrap();
        assert_eq!(waited.value["planned"], true, "{:?}", waited.value);
    }
    assert_eq!(
        s.backend.count(),
        1,
        "no change and no wait for one was sent"
    );

    // A read carrying someone else's value (or another plan's) is sent.
    for upid in ["UPID:pve1:0001:stop", "planned:pl-0000000000000000.1"] {
        s.gateway
            .call(&alice, "task_wait", json!({"node": "pve1", "upid": upid}))
            .await
            .unwrap();
    }
    assert_eq!(s.backend.count(), 3);
    assert!(s.backend.sent().iter().all(|(t, _)| t != "guest_stop"));

    let filed = match s.gateway.file_plan(&alice, &recorder).unwrap() {
        PlanFiled::Filed(r) => r,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (
            filed.id.as_str(),
            filed.identity.as_str(),
            filed.tool.as_str()
        ),
        (recorder.id.as_str(), "alice", PLAN_TOOL)
    );
    assert_eq!(filed.status, Status::Pending);
    let changes = filed.changes.clone().unwrap();
    let got: Vec<(u32, &str, &str, bool, Option<u32>)> = changes
        .iter()
        .map(|c| {
            (
                c.n,
                c.tool.as_str(),
                c.target.as_str(),
                c.needs_approval,
                c.waits_on,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (1, "guest_stop", "node=pve1 vmid=101", true, None),
            (2, "task_wait", "node=pve1", false, Some(1)),
            (3, "guest_stop", "node=pve1 vmid=102", true, None),
            (4, "task_wait", "node=pve1", false, Some(3)),
        ]
    );
    let (h1, h2) = (sha256_json(&stop(101)), sha256_json(&stop(102)));
    assert_eq!(
        (changes[0].args_hash.as_str(), changes[2].args_hash.as_str()),
        (h1.as_str(), h2.as_str())
    );
    assert!(changes.iter().all(|c| c.tier
        == if c.is_change() {
            Tier::Operate
        } else {
            Tier::Read
        }));
    assert_eq!(filed.args_hash, list_hash(&changes));
    assert_eq!(filed.summary, table(&changes));
    assert_eq!(s.gateway.approvals().get(&filed.id).unwrap(), *filed);
    assert_eq!(
        s.gateway.approvals().rows().unwrap(),
        1,
        "one request for the plan, none per change"
    );

    let lines = s.lines();
    let planned: Vec<(&Value, &Value)> = events(&lines, "call")
        .into_iter()
        .filter(|l| l["decision"] == "planned")
        .map(|l| (&l["tool"], &l["plan_change"]))
        .collect();
    assert_eq!(
        planned,
        [
            (&json!("guest_stop"), &json!(1)),
            (&json!("task_wait"), &json!(2)),
            (&json!("guest_stop"), &json!(3)),
            (&json!("task_wait"), &json!(4)),
        ]
    );
    let plan_line = events(&lines, "plan")[0];
    assert_eq!(plan_line["changes"], 4);
    assert_eq!(plan_line["changes_sha256"], filed.args_hash.as_str());
    assert_eq!(plan_line["status"], "pending");
    assert_eq!(s.backend.count(), 3);
    s.sound();
}

#[tokio::test]
async fn recording_keeps_policy_and_files_only_what_needs_a_decision() {
    // carol is not listed: read-only, so her change is refused, not planned.
    let s = setup();
    let recorder = Arc::new(Recorder::new().unwrap());
    let carol = with_plan("carol", PlanRun::Record(recorder.clone()));
    let e = s
        .gateway
        .call(&carol, "guest_stop", stop(101))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "policy_denied", "{e}");
    assert!(recorder.changes().is_empty());
    assert_eq!(
        s.gateway.file_plan(&carol, &recorder).unwrap(),
        PlanFiled::Empty
    );
    assert_eq!(s.gateway.approvals().rows().unwrap(), 0);
    assert_eq!(s.backend.count(), 0);
    s.sound();

    // Where operate needs no approval, the plan has nothing to decide.
    let s = setup_adjusted(|c| c.approval.tiers = vec![Tier::Admin]);
    let recorder = Arc::new(Recorder::new().unwrap());
    let alice = with_plan("alice", PlanRun::Record(recorder.clone()));
    s.gateway
        .call(&alice, "guest_stop", stop(101))
        .await
        .unwrap();
    match s.gateway.file_plan(&alice, &recorder).unwrap() {
        PlanFiled::NothingToApprove(c) => assert!(c.len() == 1 && !c[0].needs_approval),
        other => panic!("{other:?}"),
    }
    assert_eq!(s.gateway.approvals().rows().unwrap(), 0);
    assert_eq!(s.backend.count(), 0);
    s.sound();

    // Where reads need approval too, a read while recording is asked
    // for, as always, and not sent.
    let s = setup_adjusted(|c| c.approval.tiers = vec![Tier::Read, Tier::Operate]);
    let recorder = Arc::new(Recorder::new().unwrap());
    let alice = with_plan("alice", PlanRun::Record(recorder.clone()));
    let e = s
        .gateway
        .call(&alice, "guest_status", stop(101))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "approval_required", "{e}");
    assert!(recorder.changes().is_empty());
    assert_eq!(s.backend.count(), 0);
    s.sound();
}

#[tokio::test]
async fn an_approved_plan_applies_each_change_once_in_its_order() {
    let s = setup();
    let (id, changes) = s.plan("alice", &[101, 102, 103]).await;
    assert_eq!(s.backend.count(), 0);
    let approved = s.approve(&id);
    assert_eq!(approved.status, Status::Approved);

    let applying = s.open("alice", &id).unwrap();
    assert_eq!(applying.id, id);
    assert_eq!(applying.changes, changes);
    // Opened, not used: nothing is sent yet.
    assert_eq!(applying.approved_by(), None);
    assert_eq!(
        s.gateway.approvals().get(&id).unwrap().status,
        Status::Approved
    );

    let mut alice = with_plan("alice", PlanRun::Apply(applying.clone()));
    let execution = s.gateway.execution_started(&alice, "stop guests").unwrap();
    alice.execution = Some(execution.clone());
    // The reverse order is not what was approved: the last change first
    // is refused, and not sent.
    let e = s
        .gateway
        .call(&alice, "guest_stop", stop(103))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "approval_required", "{e}");
    assert!(e.to_string().contains("its next change is 1."), "{e}");
    assert_eq!(s.backend.count(), 0);
    for vmid in [101, 102, 103] {
        let upid = s
            .gateway
            .call(&alice, "guest_stop", stop(vmid))
            .await
            .unwrap()
            .value;
        // Taken from the store as its first change was sent.
        assert_eq!(s.gateway.approvals().get(&id).unwrap().status, Status::Used);
        assert_eq!(applying.approved_by().as_deref(), Some("op"));
        assert_eq!(upid, json!(format!("UPID:pve1:{vmid}:stop")));
        // A read while applying runs as usual.
        s.gateway
            .call(&alice, "task_wait", json!({"node": "pve1", "upid": upid}))
            .await
            .unwrap();
    }
    let stops: Vec<Value> = s
        .backend
        .sent()
        .into_iter()
        .filter(|(t, _)| t == "guest_stop")
        .map(|(_, a)| a)
        .collect();
    assert_eq!(stops, [stop(101), stop(102), stop(103)], "each once");
    assert_eq!(s.backend.count(), 6);
    assert!(applying.not_applied().is_empty());
    s.gateway.plan_finished(&alice, &applying);
    s.gateway
        .execution_finished(&execution, "ok", 6, Duration::ZERO)
        .unwrap();

    // No change was approved on its own: the one request besides the
    // plan is the refused out-of-order call's, still pending.
    let rows = s.gateway.approvals().list(s.now(), true).unwrap();
    let others: Vec<(&str, Status)> = rows
        .iter()
        .filter(|r| r.id != id)
        .map(|r| (r.tool.as_str(), r.status))
        .collect();
    assert_eq!(others, [("guest_stop", Status::Pending)], "{rows:?}");
    let lines = s.lines();
    let applied: Vec<(&Value, &Value)> = events(&lines, "call")
        .into_iter()
        .filter(|l| l["decision"] == "allowed" && l["plan"] == id.as_str())
        .map(|l| {
            assert_eq!(l["approved_by"], "op");
            (&l["plan_change"], &l["execution"])
        })
        .collect();
    let exec = json!(execution);
    assert_eq!(
        applied,
        [(&json!(1), &exec), (&json!(2), &exec), (&json!(3), &exec)]
    );
    let end = events(&lines, "plan_end")[0];
    assert_eq!(
        (&end["applied"], &end["not_applied"]),
        (&json!(3), &json!([]))
    );
    assert_eq!(events(&lines, "plan_decision")[0]["status"], "approved");
    assert_eq!(s.backend.count(), 6);
    s.sound();
}

#[tokio::test]
async fn a_plan_is_taken_only_by_its_owner_once_approved_and_in_time() {
    let s = setup();
    let (owned, _) = s.plan("alice", &[101]).await;
    let (pending, _) = s.plan("alice", &[102]).await;
    let (denied, _) = s.plan("alice", &[103]).await;
    let (late, _) = s.plan("alice", &[104]).await;
    s.approve(&owned);
    s.gateway
        .approvals()
        .deny(&denied, &Decider::cli("op"), s.now())
        .unwrap();

    let e = s.open("bob", &owned).unwrap_err();
    assert_eq!(
        (e.code(), e.clone()),
        (
            "plan_other_identity",
            PlanError::OtherIdentity(owned.clone())
        )
    );
    let e = s.open("alice", &pending).unwrap_err();
    assert!(
        matches!(
            &e,
            PlanError::NotApproved {
                status: "pending",
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.code(), "plan_not_approved");
    let e = s.open("alice", &denied).unwrap_err();
    assert!(
        matches!(
            &e,
            PlanError::NotApproved {
                status: "denied",
                ..
            }
        ),
        "{e:?}"
    );

    // An approved plan is no approval of its calls outside an apply.
    let plain = s
        .gateway
        .call(&Caller::new("alice"), "guest_stop", stop(101))
        .await
        .unwrap_err();
    assert_eq!(plain.code(), "approval_required", "{plain}");

    // bob's attempt left it for alice. Opening it uses nothing; its
    // first change sent takes it, once.
    s.open("alice", &owned).unwrap();
    let applying = s.open("alice", &owned).unwrap();
    let alice = with_plan("alice", PlanRun::Apply(applying.clone()));
    s.gateway
        .call(&alice, "guest_stop", stop(101))
        .await
        .unwrap();
    s.gateway.plan_finished(&alice, &applying);
    let e = s.open("alice", &owned).unwrap_err();
    assert_eq!(
        (e.code(), e.clone()),
        ("plan_used", PlanError::Used(owned.clone()))
    );

    // Approved, then not applied within the TTL.
    s.approve(&late);
    s.clock.fetch_add(DEFAULT_TTL_MS, Ordering::SeqCst);
    let e = s.open("alice", &late).unwrap_err();
    assert_eq!(
        (e.code(), e.clone()),
        ("plan_expired", PlanError::Expired(late.clone()))
    );
    assert_eq!(
        s.gateway.approvals().get(&late).unwrap().status,
        Status::Approved
    );

    let lines = s.lines();
    let refused: Vec<&str> = events(&lines, "plan_apply")
        .into_iter()
        .filter(|l| l["decision"] == "refused")
        .map(|l| l["reason"].as_str().unwrap())
        .collect();
    assert_eq!(
        refused,
        [
            "plan_other_identity",
            "plan_not_approved",
            "plan_not_approved",
            "plan_used",
            "plan_expired"
        ]
    );
    assert_eq!(s.backend.count(), 1, "the owner's one change");
    s.sound();
}

/// Rewrites one column of a plan's row in the SQLite store.
fn edit_row(db: &Path, id: &str, column: &str, value: &str) {
    let conn = rusqlite::Connection::open(db).unwrap();
    let n = conn
        .execute(
            &format!("UPDATE approvals SET {column} = ?1 WHERE id = ?2"),
            rusqlite::params![value, id],
        )
        .unwrap();
    assert_eq!(n, 1);
}

#[tokio::test]
async fn an_edited_plan_is_refused_as_tampered() {
    let s = setup();
    let mut edits: Vec<(String, &str, String)> = Vec::new();
    // Change 1 swapped for another guest's stop.
    let (id, mut changes) = s.plan("alice", &[101, 102]).await;
    changes[0].args_hash = sha256_json(&stop(666));
    edits.push((id, "plan", serde_json::to_string(&changes).unwrap()));
    // A change dropped.
    let (id, changes) = s.plan("alice", &[101, 102]).await;
    edits.push((id, "plan", serde_json::to_string(&changes[..1]).unwrap()));
    // What the person read, altered.
    let (id, _) = s.plan("alice", &[101]).await;
    edits.push((id, "summary", "  1. guest_status [read] node=pve1".into()));
    // Changes no longer readable.
    let (id, _) = s.plan("alice", &[101]).await;
    edits.push((id, "plan", "{not json".into()));
    for (id, column, value) in &edits {
        s.approve(id);
        edit_row(&s.approvals_db, id, column, value);
        let e = s.open("alice", id).unwrap_err();
        assert_eq!(
            (e.code(), e.clone()),
            ("plan_tampered", PlanError::Tampered(id.clone())),
            "{column}"
        );
        assert_eq!(
            s.gateway.approvals().get(id).unwrap().status,
            Status::Approved
        );
    }
    assert_eq!(s.backend.count(), 0);
    s.sound();
}

#[tokio::test]
async fn a_consistently_rewritten_plan_is_found_by_audit_verify() {
    // Someone who can write the store and rewrites a plan with its hash
    // and table to match: the store cannot tell, the audit chain can.
    let s = setup();
    let (id, mut changes) = s.plan("alice", &[101]).await;
    s.approve(&id);
    changes[0].args_hash = sha256_json(&stop(666));
    edit_row(
        &s.approvals_db,
        &id,
        "plan",
        &serde_json::to_string(&changes).unwrap(),
    );
    edit_row(&s.approvals_db, &id, "args_hash", &list_hash(&changes));
    edit_row(&s.approvals_db, &id, "summary", &table(&changes));
    let applying = s.open("alice", &id).unwrap();
    let alice = with_plan("alice", PlanRun::Apply(applying));
    s.gateway
        .call(&alice, "guest_stop", stop(666))
        .await
        .unwrap();
    assert_eq!(s.backend.count(), 1);
    let v = audit::verify(s.audit()).unwrap();
    let (_, why) = v.problem.expect("the rewritten change is found");
    assert!(why.contains(&format!("change 1 of plan {id}")), "{why}");
}

#[tokio::test]
async fn a_malformed_or_huge_plan_id_is_not_found_and_its_line_stays_small() {
    let s = setup();
    let (id, _) = s.plan("alice", &[101]).await;
    s.approve(&id);
    let single = match s
        .gateway
        .call(&Caller::new("alice"), "guest_stop", stop(102))
        .await
        .unwrap_err()
    {
        CallError::ApprovalRequired { request_id, .. } => request_id,
        other => panic!("{other}"),
    };
    let huge = format!("pl-{}", "a".repeat(1 << 20));
    let odd = [
        huge.as_str(),
        "",
        "pl-",
        "pl-0123456789abcdeg",
        "pl-0123456789abcdef0",
        "pl-0123456789abcdef",
        "../../approvals.db",
        "pl-0123456789abcd\n\u{202e}",
        &single,
        &id.to_uppercase(),
    ];
    for bad in odd {
        let e = s.open("alice", bad).unwrap_err();
        assert!(matches!(e, PlanError::NotFound(_)), "{e:?}");
        assert_eq!(e.code(), "plan_not_found");
        assert!(e.to_string().len() < 600, "{} bytes", e.to_string().len());
        let last = std::fs::read_to_string(s.audit()).unwrap();
        let last = last.lines().last().unwrap();
        assert!(
            last.len() < 1024,
            "a plan_apply line of {} bytes",
            last.len()
        );
        assert!(last.contains("\"plan_apply\"") && last.contains("plan_not_found"));
    }
    // None of that used the real plan up.
    s.open("alice", &id).unwrap();
    assert_eq!(s.backend.count(), 0);
    s.sound();
}

#[tokio::test]
async fn calls_outside_the_plan_need_their_own_approval() {
    let s = setup();
    let (id, changes) = s.plan("alice", &[101, 102]).await;
    s.approve(&id);
    let applying = s.open("alice", &id).unwrap();
    let alice = with_plan("alice", PlanRun::Apply(applying.clone()));

    let not_in_plan = |e: CallError| {
        assert_eq!(e.code(), "approval_required", "{e}");
        let text = e.to_string();
        assert!(
            text.contains(&format!("not the next change of plan {id}")),
            "{text}"
        );
    };
    // Arguments changed since the plan: another call.
    let changed = json!({"node": "pve1", "vmid": 101, "comment": "and more"});
    not_in_plan(
        s.gateway
            .call(&alice, "guest_stop", changed)
            .await
            .unwrap_err(),
    );
    not_in_plan(
        s.gateway
            .call(&alice, "guest_stop", stop(104))
            .await
            .unwrap_err(),
    );
    assert_eq!(s.backend.count(), 0);

    s.gateway
        .call(&alice, "guest_stop", stop(101))
        .await
        .unwrap();
    assert_eq!(s.backend.count(), 1);
    // More than planned: the change is used.
    not_in_plan(
        s.gateway
            .call(&alice, "guest_stop", stop(101))
            .await
            .unwrap_err(),
    );
    assert_eq!(s.backend.count(), 1);

    // Planned, never made.
    let left: Vec<&PlannedChange> = applying.not_applied();
    assert_eq!(left, [&changes[1]]);
    s.gateway.plan_finished(&alice, &applying);
    let lines = s.lines();
    let end = events(&lines, "plan_end")[0];
    assert_eq!(
        (&end["applied"], &end["not_applied"]),
        (&json!(1), &json!([2]))
    );
    // The refused calls' lines name the plan they were not in.
    let refused = events(&lines, "call")
        .into_iter()
        .filter(|l| l["decision"] == "approval_required")
        .inspect(|l| assert_eq!(l["plan"], id.as_str()))
        .count();
    assert_eq!(refused, 3);
    assert_eq!(s.backend.sent(), [("guest_stop".to_string(), stop(101))]);
    s.sound();
}

#[tokio::test]
async fn a_plan_holds_at_most_max_plan_changes() {
    let s = setup();
    let recorder = Arc::new(Recorder::new().unwrap());
    let alice = with_plan("alice", PlanRun::Record(recorder.clone()));
    for vmid in 0..MAX_PLAN_CHANGES as i64 {
        s.gateway
            .call(&alice, "guest_stop", stop(1000 + vmid))
            .await
            .unwrap();
    }
    let e = s
        .gateway
        .call(&alice, "guest_stop", stop(9999))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "plan_too_large", "{e}");
    assert!(matches!(
        &e,
        CallError::Plan {
            error: PlanError::TooManyChanges {
                limit: MAX_PLAN_CHANGES
            },
            ..
        }
    ));
    assert_eq!(recorder.changes().len(), MAX_PLAN_CHANGES);
    assert!(recorder
        .changes()
        .iter()
        .all(|c| c.args_hash != sha256_json(&stop(9999))));
    match s.gateway.file_plan(&alice, &recorder).unwrap() {
        PlanFiled::Filed(r) => assert_eq!(r.changes.unwrap().len(), MAX_PLAN_CHANGES),
        other => panic!("{other:?}"),
    }
    let lines = s.lines();
    let last_call = events(&lines, "call").pop().unwrap();
    assert_eq!(
        (
            &last_call["decision"],
            &last_call["reason"],
            &last_call["plan"]
        ),
        (
            &json!("plan_refused"),
            &json!("plan_too_large"),
            &Value::Null
        )
    );
    assert_eq!(s.backend.count(), 0);
    s.sound();
}

#[tokio::test]
async fn a_plan_holds_at_most_max_plan_summary_chars() {
    // Values shown whole in the list fill the summary budget; long ones
    // (summarised there) fill the budget of what is shown in full.
    for (chars, limit, most) in [
        (190, MAX_PLAN_SUMMARY_CHARS, 100),
        (20_000, MAX_PLAN_DETAIL_CHARS, 20),
    ] {
        let s = setup();
        let recorder = Arc::new(Recorder::new().unwrap());
        let alice = with_plan("alice", PlanRun::Record(recorder.clone()));
        let comment = "x".repeat(chars);
        let mut refused = None;
        for vmid in 0..most {
            let args = json!({"node": "pve1", "vmid": vmid, "comment": comment});
            if let Err(e) = s.gateway.call(&alice, "guest_stop", args).await {
                refused = Some((vmid, e));
                break;
            }
        }
        let (at, e) = refused.unwrap_or_else(|| panic!("refused before {most} changes"));
        assert_eq!(
            e,
            CallError::Plan {
                tool: "guest_stop".into(),
                error: PlanError::TooLong { limit }
            }
        );
        assert_eq!(e.code(), "plan_too_large");
        let kept = recorder.changes();
        assert_eq!(kept.len(), at as usize);
        let (shown, full): (usize, usize) = kept.iter().fold((0, 0), |(s, f), c| {
            (
                s + c.summary.chars().count() + c.target.chars().count(),
                f + c.detail.as_ref().map_or(0, |d| d.chars().count()),
            )
        });
        assert!(shown <= MAX_PLAN_SUMMARY_CHARS && full <= MAX_PLAN_DETAIL_CHARS);
        assert!(shown.max(full) + chars > limit, "{shown} {full}");
        assert_eq!(s.backend.count(), 0);
        s.sound();
    }
}

/// A chain with a plan of three changes recorded, filed, approved and
/// taken, change 1 applied: its log copied before the apply ended (`mid`) and
/// after (`done`).
struct Chain {
    s: Setup,
    id: String,
    changes: Vec<PlannedChange>,
    mid: PathBuf,
    done: PathBuf,
}

async fn chain() -> Chain {
    let s = setup();
    let (id, changes) = s.plan("alice", &[101, 102, 103]).await;
    s.approve(&id);
    let applying = s.open("alice", &id).unwrap();
    let alice = with_plan("alice", PlanRun::Apply(applying.clone()));
    s.gateway
        .call(&alice, "guest_stop", stop(101))
        .await
        .unwrap();
    let mid = s.dir.path().join("mid.jsonl");
    std::fs::copy(s.audit(), &mid).unwrap();
    s.gateway.plan_finished(&alice, &applying);
    let done = s.dir.path().join("done.jsonl");
    std::fs::copy(s.audit(), &done).unwrap();
    assert_eq!(s.backend.count(), 1);
    sound(&mid);
    sound(&done);
    Chain {
        s,
        id,
        changes,
        mid,
        done,
    }
}

impl Chain {
    /// `from` with `event` appended by hand (a valid link of the chain),
    /// as a new file.
    fn forged(&self, from: &Path, name: &str, event: &str, fields: Value) -> PathBuf {
        let path = self.s.dir.path().join(name);
        std::fs::copy(from, &path).unwrap();
        let fields: Map<String, Value> = fields.as_object().unwrap().clone();
        AuditLog::open(&path)
            .unwrap()
            .append(event, fields)
            .unwrap();
        path
    }

    /// An `allowed` call line under the plan.
    fn call_line(&self, change: u64, args: &Value) -> Value {
        json!({
            "call": "forged-1", "identity": "alice", "tool": "guest_stop", "tool_key": "fleet:guest_stop",
            "arg_keys": ["node", "vmid"], "args_sha256": sha256_json(args),
            "tier": "operate", "backend": "fleet", "decision": "allowed",
            "plan": self.id, "plan_change": change, "approved_by": "op",
        })
    }

    fn apply_line(&self) -> Value {
        json!({
            "plan": self.id, "identity": "alice", "decision": "applying",
            "changes_sha256": list_hash(&self.changes), "approved_by": "op",
        })
    }
}

fn problem(path: &Path) -> String {
    let v = audit::verify(path).unwrap();
    match v.problem {
        Some((_, why)) => why,
        None => panic!("the forged line verifies: {v:?}"),
    }
}

#[tokio::test]
async fn audit_verify_finds_calls_a_plan_does_not_hold() {
    let c = chain().await;
    // By hand, a link like any: a line that agrees with the plan verifies.
    let control = c.forged(&c.mid, "control.jsonl", "call", c.call_line(2, &stop(102)));
    sound(&control);

    let unheld = c.forged(&c.mid, "unheld.jsonl", "call", c.call_line(7, &stop(107)));
    let used = c.forged(&c.mid, "used.jsonl", "call", c.call_line(1, &stop(101)));
    let other = c.forged(&c.mid, "other.jsonl", "call", c.call_line(2, &stop(666)));
    let skipped = c.forged(&c.mid, "skip.jsonl", "call", c.call_line(3, &stop(103)));
    for (n, forged) in [(7, unheld), (1, used), (2, other), (3, skipped)] {
        let why = problem(&forged);
        assert!(
            why.contains(&format!("change {n} of plan {}", c.id)),
            "{why}"
        );
    }
    // A change recorded after the plan was filed.
    let mut late = c.call_line(4, &stop(104));
    late["decision"] = json!("planned");
    let why = problem(&c.forged(&c.mid, "late.jsonl", "call", late));
    assert!(
        why.contains(&c.id) && why.contains("after the plan was filed"),
        "{why}"
    );
    assert_eq!(c.s.backend.count(), 1);
    c.s.sound();
}

#[tokio::test]
async fn audit_verify_finds_a_plan_applied_twice() {
    let c = chain().await;
    for (from, name) in [(&c.mid, "twice-mid.jsonl"), (&c.done, "twice-done.jsonl")] {
        let why = problem(&c.forged(from, name, "plan_apply", c.apply_line()));
        assert!(
            why.contains(&c.id)
                && (why.contains("applied a second time") || why.contains("after it was closed")),
            "{why}"
        );
    }
    // A refusal to take it again is no apply.
    let mut refused = c.apply_line();
    refused["decision"] = json!("refused");
    sound(&c.forged(&c.done, "refused.jsonl", "plan_apply", refused));
    assert_eq!(c.s.backend.count(), 1);
    c.s.sound();
}

#[tokio::test]
async fn audit_verify_finds_a_call_under_a_plan_whose_apply_ended() {
    let c = chain().await;
    // Change 2 was reported not applied; a line claiming it ran after the
    // apply ended contradicts the log, as does a second run of change 1.
    for (n, args, name) in [
        (2, stop(102), "after-2.jsonl"),
        (1, stop(101), "after-1.jsonl"),
    ] {
        let why = problem(&c.forged(&c.done, name, "call", c.call_line(n, &args)));
        assert!(why.contains(&c.id), "{why}");
    }
}

#[tokio::test]
async fn audit_verify_finds_an_apply_of_a_denied_plan() {
    let c = chain().await;
    let (id, changes) = c.s.plan("alice", &[201]).await;
    let denied =
        c.s.gateway
            .approvals()
            .deny(&id, &Decider::cli("op"), c.s.now())
            .unwrap();
    c.s.gateway.plan_decided(&denied).unwrap();
    assert_eq!(
        c.s.open("alice", &id).unwrap_err().code(),
        "plan_not_approved"
    );
    sound(c.s.audit());
    let forged = c.s.dir.path().join("denied.jsonl");
    std::fs::copy(c.s.audit(), &forged).unwrap();
    let log = AuditLog::open(&forged).unwrap();
    let apply = json!({"plan": id, "identity": "alice", "decision": "applying",
                       "changes_sha256": list_hash(&changes)});
    log.append("plan_apply", apply.as_object().unwrap().clone())
        .unwrap();
    let mut call = c.call_line(1, &stop(201));
    call["plan"] = json!(id);
    log.append("call", call.as_object().unwrap().clone())
        .unwrap();
    let why = problem(&forged);
    assert!(why.contains(&id), "{why}");
}

/// A change that fails at the backend stops the plan: what was approved
/// after it (destroy after a backup) assumed it was made.
#[tokio::test]
async fn a_failed_change_stops_the_plan() {
    let s = setup();
    let (id, _) = s.plan("alice", &[999, 102]).await;
    s.approve(&id);
    let applying = s.open("alice", &id).unwrap();
    let alice = with_plan("alice", PlanRun::Apply(applying.clone()));
    let e = s
        .gateway
        .call(&alice, "guest_stop", stop(999))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "backend_error", "{e}");
    let e = s
        .gateway
        .call(&alice, "guest_stop", stop(102))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "plan_stopped", "{e}");
    assert!(e.to_string().contains("stopped at step 1"), "{e}");
    assert_eq!(s.backend.count(), 1, "only the failed change was sent");
    let left: Vec<u32> = applying.not_applied().iter().map(|c| c.n).collect();
    assert_eq!(left, [1, 2], "the failed change is not applied either");
    assert!(applying.applied().is_empty());
    s.gateway.plan_finished(&alice, &applying);
    let lines = s.lines();
    let end = events(&lines, "plan_end")[0];
    assert_eq!(
        (&end["applied"], &end["not_applied"], &end["stopped_at"]),
        (&json!(0), &json!([1, 2]), &json!(1))
    );
    s.sound();
}

/// `Promise.allSettled([stop(555), stop(101)])` applying an approved
/// plan: the two calls arrive together, but change 2 waits for change 1's
/// answer; change 1 fails, so change 2 is refused and never sent, and
/// only what succeeded counts as applied.
#[tokio::test]
async fn steps_sent_together_go_one_at_a_time_and_stop_at_a_failure() {
    let s = setup();
    let (id, _) = s.plan("alice", &[555, 101]).await;
    s.approve(&id);
    let applying = s.open("alice", &id).unwrap();
    let alice = with_plan("alice", PlanRun::Apply(applying.clone()));
    let (first, second) = tokio::join!(
        s.gateway.call(&alice, "guest_stop", stop(555)),
        s.gateway.call(&alice, "guest_stop", stop(101)),
    );
    assert_eq!(first.unwrap_err().code(), "backend_error");
    let e = second.unwrap_err();
    assert_eq!(e.code(), "plan_stopped", "{e}");
    assert_eq!(
        s.backend.sent(),
        [("guest_stop".to_string(), stop(555))],
        "change 2 was never sent"
    );
    assert_eq!(s.backend.most_in_flight.load(Ordering::SeqCst), 1);
    assert!(applying.applied().is_empty());
    s.gateway.plan_finished(&alice, &applying);
    let lines = s.lines();
    let end = events(&lines, "plan_end")[0];
    assert_eq!(
        (&end["applied"], &end["not_applied"], &end["stopped"]),
        (&json!(0), &json!([1, 2]), &json!("backend_error"))
    );
    // Change 2's refusal comes after change 1's result in the chain.
    let result_at = lines
        .iter()
        .position(|l| l["event"] == "call_result" && l["plan_change"] == 1)
        .unwrap();
    let refused_at = lines
        .iter()
        .position(|l| l["event"] == "call" && l["reason"] == "plan_stopped")
        .unwrap();
    assert!(result_at < refused_at);
    s.sound();

    // Without a failure, the two go through one after the other.
    let s = setup();
    let (id, _) = s.plan("alice", &[101, 102]).await;
    s.approve(&id);
    let applying = s.open("alice", &id).unwrap();
    let alice = with_plan("alice", PlanRun::Apply(applying.clone()));
    let (a, b) = tokio::join!(
        s.gateway.call(&alice, "guest_stop", stop(101)),
        s.gateway.call(&alice, "guest_stop", stop(102)),
    );
    a.unwrap();
    b.unwrap();
    assert_eq!(applying.applied().len(), 2);
    assert_eq!(s.backend.most_in_flight.load(Ordering::SeqCst), 1);
    s.gateway.plan_finished(&alice, &applying);
    s.sound();
}

/// A plan that waited on a task while recording ("back up, wait, then
/// destroy"): applying, the wait must come, and its task must end OK,
/// before the next change; a task that failed stops the plan.
#[tokio::test]
async fn a_recorded_wait_binds_the_task_outcome() {
    async fn record(s: &Setup) -> String {
        let recorder = Arc::new(Recorder::new().unwrap());
        let alice = with_plan("alice", PlanRun::Record(recorder.clone()));
        let upid = s
            .gateway
            .call(&alice, "guest_stop", stop(777))
            .await
            .unwrap()
            .value;
        s.gateway
            .call(&alice, "task_wait", json!({"node": "pve1", "upid": upid}))
            .await
            .unwrap();
        s.gateway
            .call(&alice, "guest_stop", stop(102))
            .await
            .unwrap();
        match s.gateway.file_plan(&alice, &recorder).unwrap() {
            PlanFiled::Filed(r) => {
                let steps: Vec<Option<u32>> =
                    r.changes.unwrap().iter().map(|c| c.waits_on).collect();
                assert_eq!(steps, [None, Some(1), None]);
                assert!(r.summary.contains("reads change 1's task"), "{}", r.summary);
                r.id
            }
            other => panic!("{other:?}"),
        }
    }

    // The task fails: the change after the wait is refused, unsent.
    let s = setup();
    let id = record(&s).await;
    s.approve(&id);
    let applying = s.open("alice", &id).unwrap();
    let alice = with_plan("alice", PlanRun::Apply(applying.clone()));
    let upid = s
        .gateway
        .call(&alice, "guest_stop", stop(777))
        .await
        .unwrap()
        .value;
    let waited = s
        .gateway
        .call(&alice, "task_wait", json!({"node": "pve1", "upid": upid}))
        .await
        .unwrap();
    assert_eq!(waited.value["exitstatus"], "backup failed: disk full");
    let e = s
        .gateway
        .call(&alice, "guest_stop", stop(102))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "plan_stopped", "{e}");
    assert!(e.to_string().contains("backup failed"), "{e}");
    assert_eq!(
        s.backend.count(),
        2,
        "the stop and the wait, not the second stop"
    );
    assert_eq!(applying.applied().len(), 1);
    s.gateway.plan_finished(&alice, &applying);
    let lines = s.lines();
    let task: Vec<&Value> = events(&lines, "call_result")
        .into_iter()
        .filter_map(|l| l.get("task"))
        .collect();
    assert_eq!(task, [&json!("failed")]);
    s.sound();

    // The wait left out: the change after it is not the plan's next step.
    let s = setup();
    let id = record(&s).await;
    s.approve(&id);
    let applying = s.open("alice", &id).unwrap();
    let alice = with_plan("alice", PlanRun::Apply(applying.clone()));
    s.gateway
        .call(&alice, "guest_stop", stop(777))
        .await
        .unwrap();
    let e = s
        .gateway
        .call(&alice, "guest_stop", stop(102))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "approval_required", "{e}");
    assert!(
        e.to_string().contains("its next change is 2. task_wait"),
        "{e}"
    );
    assert_eq!(s.backend.count(), 1);
    s.gateway.plan_finished(&alice, &applying);
    s.sound();
}

/// A plan is used up when its first change is sent, not when an
/// execution opens it: an execution that sends nothing leaves it
/// approved, and of two that open it, the first to send takes it.
#[tokio::test]
async fn a_plan_is_used_only_when_its_first_change_is_sent() {
    let s = setup();
    let (id, _) = s.plan("alice", &[101]).await;
    s.approve(&id);
    // An execution that opened it and sent nothing (it did not compile,
    // was refused, was cancelled): no line, still approved.
    let idle = s.open("alice", &id).unwrap();
    let idle_caller = with_plan("alice", PlanRun::Apply(idle.clone()));
    s.gateway.plan_finished(&idle_caller, &idle);
    assert!(!idle.taken());
    assert_eq!(
        s.gateway.approvals().get(&id).unwrap().status,
        Status::Approved
    );
    assert!(events(&s.lines(), "plan_end").is_empty());
    assert!(events(&s.lines(), "plan_apply").is_empty());

    let a = s.open("alice", &id).unwrap();
    let b = s.open("alice", &id).unwrap();
    let (alice_a, alice_b) = (
        with_plan("alice", PlanRun::Apply(a.clone())),
        with_plan("alice", PlanRun::Apply(b.clone())),
    );
    s.gateway
        .call(&alice_a, "guest_stop", stop(101))
        .await
        .unwrap();
    let e = s
        .gateway
        .call(&alice_b, "guest_stop", stop(101))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "plan_used", "{e}");
    assert_eq!(s.backend.count(), 1);
    assert!(a.taken() && !b.taken());
    s.gateway.plan_finished(&alice_a, &a);
    s.gateway.plan_finished(&alice_b, &b);
    let lines = s.lines();
    let applies: Vec<&Value> = events(&lines, "plan_apply")
        .into_iter()
        .map(|l| &l["decision"])
        .collect();
    assert_eq!(applies, [&json!("applying"), &json!("refused")]);
    assert_eq!(events(&lines, "plan_end").len(), 1);
    s.sound();
}

#[tokio::test]
async fn audit_verify_finds_a_step_out_of_turn_or_after_a_failure() {
    let c = chain().await;
    // Change 2 admitted, then change 3 before change 2's result.
    let early = c.forged(&c.mid, "early.jsonl", "call", c.call_line(2, &stop(102)));
    let mut three = c.call_line(3, &stop(103));
    three["call"] = json!("forged-2");
    let early = c.forged(&early, "early-3.jsonl", "call", three.clone());
    let why = problem(&early);
    assert!(
        why.contains("before the step before it had its result"),
        "{why}"
    );

    // Change 2 failed, then change 3.
    let failed = c.forged(&c.mid, "failed.jsonl", "call", c.call_line(2, &stop(102)));
    let failed = c.forged(
        &failed,
        "failed-result.jsonl",
        "call_result",
        json!({"call": "forged-1", "duration_ms": 1, "status": "backend_error"}),
    );
    sound(&failed);
    let failed = c.forged(&failed, "failed-3.jsonl", "call", three);
    let why = problem(&failed);
    assert!(why.contains("after a step of it failed"), "{why}");
    c.s.sound();
}

/// Only a read of a task is a step: another read of a planned value (a
/// guest's status given the planned task id) is answered by the plan and
/// not listed, so the approver is never told a check will be made that
/// is not; and a mark the script made up names no change.
#[tokio::test]
async fn only_reads_of_a_task_become_steps() {
    let s = setup();
    let recorder = Arc::new(Recorder::new().unwrap());
    let alice = with_plan("alice", PlanRun::Record(recorder.clone()));
    let upid = s
        .gateway
        .call(&alice, "guest_stop", stop(101))
        .await
        .unwrap()
        .value;
    let status = s
        .gateway
        .call(
            &alice,
            "guest_status",
            json!({"node": "pve1", "vmid": 101, "comment": upid}),
        )
        .await;
    assert!(
        status.is_err(),
        "guest_status takes no comment: validation first"
    );
    // A made-up mark (change 7 was never recorded) is an ordinary read.
    let made_up = json!({"node": "pve1", "upid": format!("{}.7", recorder.id)});
    s.gateway.call(&alice, "task_wait", made_up).await.unwrap();
    assert_eq!(s.backend.count(), 1, "the made-up mark was sent as a read");
    s.gateway
        .call(&alice, "task_wait", json!({"node": "pve1", "upid": upid}))
        .await
        .unwrap();
    let steps: Vec<Option<u32>> = recorder.changes().iter().map(|c| c.waits_on).collect();
    assert_eq!(steps, [None, Some(1)]);
    s.sound();
}

/// A first change cancelled while it waits for a backend slot was never
/// sent: the plan stays approved.
#[tokio::test]
async fn a_step_cancelled_before_its_slot_leaves_the_plan_approved() {
    let s = setup_adjusted(|c| c.rate.backend_concurrency = 1);
    let (id, _) = s.plan("alice", &[101]).await;
    s.approve(&id);
    let applying = s.open("alice", &id).unwrap();
    let applier = with_plan("alice", PlanRun::Apply(applying.clone()));
    // Another call holds the only slot (guest 555 answers after 300 ms).
    let reader = Caller::new("bob");
    let (held, cancelled) = tokio::join!(
        s.gateway.call(&reader, "guest_status", stop(555)),
        tokio::time::timeout(
            Duration::from_millis(50),
            s.gateway.call(&applier, "guest_stop", stop(101))
        ),
    );
    assert!(held.is_err(), "guest 555 answers with an error");
    assert!(
        cancelled.is_err(),
        "the step was cancelled waiting for its slot"
    );
    assert!(!applying.taken());
    assert_eq!(
        applying.stopped().map(|s| s.why),
        Some("cancelled before it was sent".to_string())
    );
    assert_eq!(
        s.gateway.approvals().get(&id).unwrap().status,
        Status::Approved
    );
    assert!(s.backend.sent().iter().all(|(t, _)| t != "guest_stop"));
    s.sound();
}

/// A single approved call is spent when admitted: cancelled while it
/// waits for a backend slot, it still leaves its `call` line (with who
/// approved it) and a `cancelled` result, so no spent approval goes
/// unrecorded.
#[tokio::test]
async fn an_approved_call_cancelled_before_its_slot_is_still_recorded() {
    let s = setup_adjusted(|c| c.rate.backend_concurrency = 1);
    let alice = Caller::new("alice");
    let id = match s
        .gateway
        .call(&alice, "guest_stop", stop(102))
        .await
        .unwrap_err()
    {
        CallError::ApprovalRequired { request_id, .. } => request_id,
        other => panic!("{other}"),
    };
    s.gateway
        .approvals()
        .approve(&id, &Decider::cli("op"), s.now())
        .unwrap();
    let reader = Caller::new("bob");
    let (held, cancelled) = tokio::join!(
        s.gateway.call(&reader, "guest_status", stop(555)),
        tokio::time::timeout(
            Duration::from_millis(50),
            s.gateway.call(&alice, "guest_stop", stop(102))
        ),
    );
    assert!(held.is_err(), "guest 555 answers with an error");
    assert!(
        cancelled.is_err(),
        "the call was cancelled waiting for its slot"
    );
    assert!(s.backend.sent().iter().all(|(t, _)| t != "guest_stop"));
    let lines = s.lines();
    let call = lines
        .iter()
        .find(|l| l["event"] == "call" && l["tool"] == "guest_stop" && l["decision"] == "allowed")
        .expect("the approved call's line");
    assert_eq!(call["approved_by"], "op", "{call}");
    let ended = lines
        .iter()
        .find(|l| l["event"] == "call_result" && l["call"] == call["call"])
        .expect("its result line");
    assert_eq!(ended["status"], "cancelled", "{ended}");
    assert_eq!(ended["sent"], false, "known not made: {ended}");
    s.sound();
}
