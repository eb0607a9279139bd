//! Durable executions of `airlock serve --http` beyond one request: a
//! server killed with SIGKILL while an execution waits, or while it is
//! being resumed, then started again on the same state; a row altered in
//! the store; an operator cancelling; tasks longer than the wall-time
//! limit. The simulated cluster runs in this test's process, so its own
//! request log says what reached it and how often.

mod common;

use std::{ffi::OsString, process::Command, time::Duration};

use airlock_gateway::parked::Take;
use common::Server;
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_airlock");

/// The issue's two-step change, each step waited for.
const SNAPSHOT_THEN_SHUTDOWN: &str = r#"const node = "pve1", vmid = 101;
const snap = await tools.wait_task({node, upid: await tools.vm_snapshot_create({node, vmid, snapname: "before_shutdown"})});
const down = await tools.wait_task({node, upid: await tools.vm_shutdown({node, vmid, timeout: 5})});
({snapshot: snap.exitstatus, shutdown: down.exitstatus})"#;

/// One deployment on one machine: the simulator, the configuration and
/// its state directory, alice's key.
struct World {
    sim: airlock_sim::Simulator,
    dir: tempfile::TempDir,
    config: std::path::PathBuf,
    alice: String,
}

impl World {
    async fn new(task_delay: Duration) -> World {
        World::with(task_delay, "").await
    }

    async fn with(task_delay: Duration, extra_toml: &str) -> World {
        let (sim, dir, config) = common::configured(task_delay, extra_toml).await;
        let alice = common::enroll(&dir.path().join(common::ENROLLMENT), "alice");
        World {
            sim,
            dir,
            config,
            alice,
        }
    }

    /// A server on this deployment's state (a start, or a restart).
    async fn serve(&self) -> Server {
        self.serve_with(&[]).await
    }

    async fn serve_with(&self, extra: &[&str]) -> Server {
        let mut args: Vec<OsString> = vec!["--config".into(), self.config.clone().into()];
        args.extend(["serve", "--http", "127.0.0.1:0", "--enrollment"].map(OsString::from));
        args.push(self.dir.path().join(common::ENROLLMENT).into());
        args.extend(extra.iter().map(OsString::from));
        tokio::task::spawn_blocking(move || Server::spawn(tempfile::tempdir().unwrap(), &args))
            .await
            .unwrap()
    }

    /// `airlock approvals approve ID --by olga`, as an operator would.
    fn approve(&self, request: &str) {
        let out = Command::new(BIN)
            .arg("--config")
            .arg(&self.config)
            .args(["approvals", "approve", request, "--by", "olga"])
            .env_remove("AIRLOCK_CONFIG")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }

    /// The parked executions' store, as another process opens it.
    fn parked(&self) -> std::sync::Arc<dyn airlock_gateway::parked::ParkedStore> {
        airlock_state::Place::in_dir(self.dir.path())
            .open(&Default::default())
            .unwrap()
            .parked
    }

    /// How often the cluster was asked to make each change.
    async fn sent(&self) -> (usize, usize) {
        let requests = self.sim.requests().await;
        let count = |what: &str| {
            requests
                .iter()
                .filter(|(method, path, _)| method == "POST" && path.contains(what))
                .count()
        };
        (count("/snapshot"), count("/status/shutdown"))
    }

    /// Waits (30 s at most) until the cluster has been asked for `n`
    /// snapshots: its request log is all a client outside it can watch.
    async fn snapshots_reached(&self, n: usize) {
        for _ in 0..600 {
            if self.sent().await.0 >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The shutdowns the cluster was asked for, by guest.
    async fn shutdowns(&self) -> Vec<String> {
        let mut sent: Vec<String> = self
            .sim
            .requests()
            .await
            .into_iter()
            .filter(|(method, path, _)| method == "POST" && path.contains("/status/shutdown"))
            .map(|(_, path, _)| path)
            .collect();
        sent.sort();
        sent
    }

    fn audit(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.path().join("audit.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Execution `id` started once and ended once, and the chain
    /// verifies (each change sent once included).
    fn ran_once(&self, id: &Value) {
        let lines = self.audit();
        assert_eq!(count(&lines, "execution_start", id), 1);
        assert_eq!(count(&lines, "execution_end", id), 1);
        self.verify();
    }

    fn verify(&self) {
        let out = Command::new(BIN)
            .arg("--config")
            .arg(&self.config)
            .args(["audit", "verify"])
            .env_remove("AIRLOCK_CONFIG")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }
}

/// `execute` with `args`, as alice, through a client of its own.
async fn execute(server: &Server, key: &str, args: Value) -> Value {
    let client = server.connect(key).await;
    let r = common::call(&client, "execute", args).await;
    let _ = client.cancel().await;
    let mut answer = r.structured_content.unwrap_or(Value::Null);
    answer["is_error"] = json!(r.is_error == Some(true));
    answer
}

fn waits_for<'a>(answer: &'a Value, tool: &str) -> &'a str {
    assert_eq!(answer["status"], "waiting", "{answer}");
    assert_eq!(answer["waiting"][0]["tool"], tool, "{answer}");
    answer["waiting"][0]["request_id"].as_str().unwrap()
}

fn kill(mut server: Server) {
    server.child.kill().unwrap();
    server.child.wait().unwrap();
}

fn count(lines: &[Value], event: &str, execution: &Value) -> usize {
    lines
        .iter()
        .filter(|l| l["event"] == event && &l["execution"] == execution)
        .count()
}

/// Killed while the execution waits for its first decision, then
/// started again: the execution goes on from the new process, as one,
/// each change sent once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_execution_outlives_a_kill_of_its_server() {
    let w = World::new(Duration::from_millis(20)).await;
    let first = w.serve().await;
    let parked = execute(&first, &w.alice, json!({"script": SNAPSHOT_THEN_SHUTDOWN})).await;
    let request = waits_for(&parked, "vm_snapshot_create").to_string();
    let id = parked["execution"].clone();
    kill(first);

    w.approve(&request);
    let second = w.serve().await;
    let follow = json!({"execution": id});
    let next = execute(&second, &w.alice, follow.clone()).await;
    let request = waits_for(&next, "vm_shutdown").to_string();
    assert_eq!(next["execution"], id, "the same execution: {next}");
    w.approve(&request);
    let done = execute(&second, &w.alice, follow).await;
    assert_eq!(
        done["result"],
        json!({"snapshot": "OK", "shutdown": "OK"}),
        "{done}"
    );
    assert_eq!(
        w.sent().await,
        (1, 1),
        "each change reached the cluster once"
    );
    let lines = w.audit();
    assert_eq!(
        [
            count(&lines, "execution_start", &id),
            count(&lines, "execution_parked", &id),
            count(&lines, "execution_resumed", &id),
            count(&lines, "execution_end", &id),
        ],
        [1, 2, 2, 1]
    );
    w.verify();
    assert!(
        w.parked().list(None, 0, 10).unwrap().is_empty(),
        "its row is gone"
    );
}

/// Killed while resuming, after the approved snapshot was sent and
/// answered, while the script waits for its task: the next process to
/// take the execution (once the dead one's lease has run out) finds the
/// snapshot's answer in the execution's record and hands it over instead
/// of sending the snapshot again; the task is waited for again (a read),
/// and the execution goes on to its next change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_a_dead_process_sent_and_recorded_is_not_sent_again() {
    // Tasks take long enough for the kill to land while one runs.
    let w = World::new(Duration::from_secs(600)).await;
    let first = w.serve().await;
    let parked = execute(&first, &w.alice, json!({"script": SNAPSHOT_THEN_SHUTDOWN})).await;
    let request = waits_for(&parked, "vm_snapshot_create").to_string();
    let id = parked["execution"].clone();
    w.approve(&request);
    // The task's first status read comes once the snapshot's answer is
    // recorded: the kill lands while the resumed script waits for it.
    let held = w.sim.hold("GET");
    let resuming = execute_in_background(&first, &w.alice, json!({"execution": id}));
    held.arrived(1).await;
    assert_eq!(
        w.sent().await.0,
        1,
        "the resumed execution sent the snapshot"
    );
    kill(first);
    resuming.abort();
    drop(held);

    // Its lease runs out (the store is asked as if its time had passed).
    let store = w.parked();
    let exec = id.as_str().unwrap();
    assert_eq!(
        store.take(exec, "alice", "a-later-clock", 0, 1).unwrap(),
        Take::Busy,
        "held by the dead process until its lease ends"
    );
    let Take::Taken { orphan: true, .. } = store
        .take(exec, "alice", "a-later-clock", i64::MAX / 2, 0)
        .unwrap()
    else {
        panic!("past its lease, an orphan")
    };
    // The snapshot's task ends meanwhile.
    w.sim.with_cluster(|c| c.finish_all()).await;
    let second = w.serve().await;
    let after = execute(&second, &w.alice, json!({"execution": id})).await;
    assert_eq!(after["execution"], id, "{after}");
    waits_for(&after, "vm_shutdown");
    assert_eq!(w.sent().await, (1, 0), "the snapshot was not sent again");
    w.verify();
}

/// A row rewritten in the store (its journal changed, its seal kept) is
/// refused before anything of it runs, and its execution ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execution_altered_in_the_store_does_not_run_again() {
    let w = World::new(Duration::from_millis(20)).await;
    let server = w.serve().await;
    let parked = execute(&server, &w.alice, json!({"script": SNAPSHOT_THEN_SHUTDOWN})).await;
    let request = waits_for(&parked, "vm_snapshot_create").to_string();
    let id = parked["execution"].clone();
    let exec = id.as_str().unwrap();
    // Someone with write access to the store (not to the approval
    // secret): takes the row, changes a byte of its body, parks it again.
    // The body shows nothing of the script or the results it holds.
    let store = w.parked();
    let Take::Taken { mut row, .. } = store.take(exec, "alice", "mallory", 0, 1).unwrap() else {
        panic!("taken")
    };
    assert!(
        !row.body.contains("before_shutdown") && !row.body.contains("vm_snapshot"),
        "{}",
        row.body
    );
    let mut body = row.body.into_bytes();
    let middle = body.len() / 2;
    body[middle] = if body[middle] == b'A' { b'B' } else { b'A' };
    row.body = String::from_utf8(body).unwrap();
    let caps = airlock_gateway::parked::ParkCaps {
        per_identity: 10,
        total: 10,
        bytes_per_identity: 1 << 30,
        bytes_total: 1 << 30,
    };
    store
        .park(&row, Some("mallory"), &caps, 2)
        .unwrap()
        .unwrap();
    store.ready(exec).unwrap();
    w.approve(&request);
    let after = execute(&server, &w.alice, json!({"execution": id})).await;
    assert_eq!(after["error"]["kind"], "JournalTampered", "{after}");
    assert_eq!(w.sent().await, (0, 0), "nothing of it ran");
    let again = execute(&server, &w.alice, json!({"execution": id})).await;
    assert_eq!(again["error"]["kind"], "UnknownExecution", "ended: {again}");
    let lines = w.audit();
    let end: Vec<&Value> = lines
        .iter()
        .filter(|l| l["event"] == "execution_end" && l["execution"] == id)
        .collect();
    assert_eq!(end.len(), 1);
    assert_eq!(end[0]["outcome"], "JournalTampered");
    w.verify();
}

/// An operator lists the waiting executions and cancels one: it never
/// goes on, its follow-up reads as unknown, and the chain ends it once,
/// naming who cancelled it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_lists_and_cancels_a_waiting_execution() {
    let w = World::new(Duration::from_millis(20)).await;
    let server = w.serve().await;
    let parked = execute(&server, &w.alice, json!({"script": SNAPSHOT_THEN_SHUTDOWN})).await;
    let request = waits_for(&parked, "vm_snapshot_create").to_string();
    let id = parked["execution"].clone();
    let airlock = |args: &[&str]| {
        Command::new(BIN)
            .arg("--config")
            .arg(&w.config)
            .args(args)
            .env_remove("AIRLOCK_CONFIG")
            .output()
            .unwrap()
    };
    let listed = airlock(&["executions", "list", "--json"]);
    assert!(listed.status.success(), "{listed:?}");
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed[0]["execution"], id, "{listed}");
    assert_eq!(listed[0]["identity"], "alice");
    assert_eq!(listed[0]["waiting"], json!([request]));
    assert_eq!(listed[0]["held"], false);
    let text = airlock(&["executions", "list", "--identity", "alice"]);
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(
        text.contains(&request) && text.contains("waiting for"),
        "{text}"
    );

    let shown = airlock(&["executions", "show", id.as_str().unwrap(), "--json"]);
    assert!(shown.status.success(), "{shown:?}");
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(
        (&shown["execution"], &shown["identity"], &shown["state"]),
        (&id, &json!("alice"), &json!("waiting"))
    );
    assert_eq!(shown["waiting"], json!([request]), "{shown}");

    let cancelled = airlock(&["executions", "cancel", id.as_str().unwrap(), "--by", "olga"]);
    assert!(cancelled.status.success(), "{cancelled:?}");
    let again = airlock(&["executions", "cancel", id.as_str().unwrap(), "--by", "olga"]);
    assert_eq!(again.status.code(), Some(1), "{again:?}");
    let gone = airlock(&["executions", "show", id.as_str().unwrap()]);
    assert_eq!(gone.status.code(), Some(1), "{gone:?}");
    w.approve(&request);
    let after = execute(&server, &w.alice, json!({"execution": id})).await;
    assert_eq!(after["error"]["kind"], "UnknownExecution", "{after}");
    assert_eq!(w.sent().await, (0, 0), "nothing was sent");
    let lines = w.audit();
    common::cancelled_once_by(&lines, &id, "olga");
    w.verify();
}

/// A process that took the execution and died before sending anything:
/// its record shows nothing sent, so the approved call it waited for goes
/// (once), and the change after it asks for its approval as any would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphan_sends_what_its_record_shows_was_never_sent() {
    let w = World::new(Duration::from_millis(20)).await;
    let server = w.serve().await;
    let parked = execute(&server, &w.alice, json!({"script": SNAPSHOT_THEN_SHUTDOWN})).await;
    let request = waits_for(&parked, "vm_snapshot_create").to_string();
    let id = parked["execution"].clone();
    w.approve(&request);
    // Taken by a process whose lease has run out, and which sent nothing.
    let Take::Taken { orphan: false, .. } = w
        .parked()
        .take(id.as_str().unwrap(), "alice", "died-at-once", 0, 1)
        .unwrap()
    else {
        panic!("taken")
    };
    let after = execute(&server, &w.alice, json!({"execution": id})).await;
    waits_for(&after, "vm_shutdown");
    assert_eq!(
        w.sent().await,
        (1, 0),
        "the snapshot once, the shutdown not before its approval"
    );
    w.verify();
}

/// `execute` with `args` as `key`, in the background: its answer, once
/// it comes (a client whose server was killed waits on: abort it).
fn execute_in_background(
    server: &Server,
    key: &str,
    args: Value,
) -> tokio::task::JoinHandle<Option<Value>> {
    let (url, key) = (server.url.clone(), key.to_string());
    tokio::spawn(async move {
        let config =
            rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                url,
            )
            .auth_header(key);
        let client = rmcp::ServiceExt::serve(
            (),
            rmcp::transport::StreamableHttpClientTransport::from_config(config),
        )
        .await
        .ok()?;
        let r = client
            .call_tool(
                rmcp::model::CallToolRequestParams::new("execute")
                    .with_arguments(args.as_object().unwrap().clone()),
            )
            .await
            .ok()?;
        let mut answer = r.structured_content.unwrap_or(Value::Null);
        answer["is_error"] = json!(r.is_error == Some(true));
        Some(answer)
    })
}

/// The one execution of alice's the state holds, once its process died
/// and its lease ran out (the store is asked as if that time had passed).
fn orphaned(w: &World) -> Value {
    let store = w.parked();
    let rows = store.list(Some("alice"), 0, 10).unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(rows[0].held, "held by the process that ran it");
    let id = rows[0].execution.clone();
    let Take::Taken { orphan: true, .. } = store
        .take(&id, "alice", "a-later-clock", i64::MAX / 2, 0)
        .unwrap()
    else {
        panic!("past its lease, an orphan")
    };
    json!(id)
}

/// The script of the kills below: no approvals, one change waited for,
/// then another.
const NO_APPROVALS: &str = "[approval]\ntiers = []\n";

/// Killed with the snapshot at the cluster's door (sent, its answer not
/// back): the execution, never answered, is in the state all the same,
/// and its record says the snapshot may have gone. Taken up after the
/// restart, it ends `outcome_unknown` naming the snapshot, which reached
/// the cluster once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_with_a_change_in_flight_it_is_never_sent_again() {
    let w = World::with(Duration::from_millis(20), NO_APPROVALS).await;
    let first = w.serve().await;
    let held = w.sim.hold("POST");
    let running =
        execute_in_background(&first, &w.alice, json!({"script": SNAPSHOT_THEN_SHUTDOWN}));
    held.arrived(1).await;
    kill(first);
    // Its client got no answer (rmcp's client keeps trying to reach the
    // dead server).
    assert!(!running.is_finished());
    running.abort();
    // The request that arrived is carried out, as pveproxy does.
    drop(held);
    w.snapshots_reached(1).await;
    assert_eq!(w.sent().await, (1, 0), "the snapshot landed once");
    let id = orphaned(&w);
    let second = w.serve().await;
    let after = execute(&second, &w.alice, json!({"execution": id})).await;
    assert_eq!(after["is_error"], true, "{after}");
    let error = after["error"].to_string();
    assert!(
        error.contains("outcome_unknown") && error.contains("vm_snapshot_create"),
        "{after}"
    );
    assert_eq!(w.sent().await, (1, 0), "the snapshot was not sent again");
    w.ran_once(&id);
    assert!(w.parked().list(None, 0, 10).unwrap().is_empty());
}

/// Killed after the snapshot was answered, while the script waits for
/// its task (no change in flight): taken up after the restart, the
/// execution gets the snapshot's answer from its record, waits for the
/// task again and goes on to the shutdown — one execution, each change
/// sent once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_a_change_was_answered_it_goes_on_without_sending_it_again() {
    let w = World::with(Duration::from_millis(20), NO_APPROVALS).await;
    let first = w.serve().await;
    let held = w.sim.hold("GET");
    let running =
        execute_in_background(&first, &w.alice, json!({"script": SNAPSHOT_THEN_SHUTDOWN}));
    // The task's first status read: the snapshot was answered.
    held.arrived(1).await;
    assert_eq!(w.sent().await, (1, 0));
    kill(first);
    assert!(!running.is_finished(), "its client got no answer");
    running.abort();
    drop(held);
    let id = orphaned(&w);
    let second = w.serve().await;
    // The agent, whose execute never answered, finds it among its own.
    let client = second.connect(&w.alice).await;
    let mine = client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            "airlock://executions",
        ))
        .await
        .unwrap();
    let text = serde_json::to_value(&mine.contents[0]).unwrap()["text"]
        .as_str()
        .unwrap()
        .to_string();
    let mine: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        mine["executions"][0]["follow"],
        json!({"execution": id}),
        "{mine}"
    );
    let _ = client.cancel().await;
    let done = execute(&second, &w.alice, json!({"execution": id})).await;
    assert_eq!(
        done["result"],
        json!({"snapshot": "OK", "shutdown": "OK"}),
        "{done}"
    );
    assert_eq!(
        w.sent().await,
        (1, 1),
        "each change reached the cluster once"
    );
    w.ran_once(&id);
    assert!(w.parked().list(None, 0, 10).unwrap().is_empty());
}

/// SIGTERM while the execution waits for a long task: half the shutdown
/// grace on, its `execute` answers that it waits (the server is
/// stopping) instead of being cancelled; the server stops; started again,
/// the same execution goes on from where it was, each change sent once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_parks_a_running_execution_and_the_restart_goes_on_with_it() {
    let w = World::with(Duration::from_secs(600), NO_APPROVALS).await;
    let mut first = w
        .serve_with(&["--shutdown-grace", "4s", "--answer-within-ms", "120000"])
        .await;
    let running =
        execute_in_background(&first, &w.alice, json!({"script": SNAPSHOT_THEN_SHUTDOWN}));
    w.snapshots_reached(1).await;
    assert_eq!(w.sent().await, (1, 0), "the snapshot's task runs");
    let pid = first.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let answer = running.await.unwrap().expect("answered before it stopped");
    assert_eq!(answer["status"], "waiting", "{answer}");
    assert_eq!(answer["waiting"][0]["tool"], "wait_task", "{answer}");
    assert!(answer.to_string().contains("stopping"), "{answer}");
    let id = answer["execution"].clone();
    let status = tokio::task::spawn_blocking(move || first.child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "{status:?}");
    w.sim.with_cluster(|c| c.finish_all()).await;
    let second = w.serve_with(&["--answer-within-ms", "300"]).await;
    let follow = json!({"execution": id});
    let next = execute(&second, &w.alice, follow.clone()).await;
    assert_eq!(next["execution"], id, "{next}");
    assert_eq!(
        next["waiting"][0]["tool"], "wait_task",
        "the shutdown's task: {next}"
    );
    w.sim.with_cluster(|c| c.finish_all()).await;
    let done = execute(&second, &w.alice, follow).await;
    assert_eq!(
        done["result"],
        json!({"snapshot": "OK", "shutdown": "OK"}),
        "{done}"
    );
    assert_eq!(
        w.sent().await,
        (1, 1),
        "each change reached the cluster once"
    );
    w.ran_once(&id);
}

/// SIGTERM while the script computes past the shutdown grace, with no
/// call to park at: the server lets go of it, and started again, the same
/// execution goes on at once (not when its lease would have run out),
/// from its last change, which is not sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_go_of_a_computing_execution_and_the_restart_goes_on_at_once() {
    const SNAPSHOT_THEN_COMPUTE: &str = r#"const node = "pve1", vmid = 101;
const upid = await tools.vm_snapshot_create({node, vmid, snapname: "before_work"});
const until = Date.now() + 5000;
let ticks = 0;
while (Date.now() < until) { await new Promise((r) => setTimeout(r, 100)); ticks += 1; }
({upid: typeof upid, ticked: ticks > 0})"#;
    let w = World::with(Duration::from_millis(20), NO_APPROVALS).await;
    let mut first = w.serve_with(&["--shutdown-grace", "2s"]).await;
    let held = w.sim.hold("POST");
    let running = execute_in_background(&first, &w.alice, json!({"script": SNAPSHOT_THEN_COMPUTE}));
    held.arrived(1).await;
    let pid = first.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    // The change in flight is answered and recorded; the script then
    // computes for longer than the whole grace.
    drop(held);
    let status = tokio::task::spawn_blocking(move || first.child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "{status:?}");
    running.abort();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let rows = w.parked().list(Some("alice"), now, 10).unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(!rows[0].held, "let go of, not held until its lease ends");
    let id = json!(rows[0].execution);
    let second = w.serve().await;
    let done = execute(&second, &w.alice, json!({"execution": id})).await;
    assert_eq!(
        done["result"],
        json!({"upid": "string", "ticked": true}),
        "{done}"
    );
    assert_eq!(
        w.sent().await,
        (1, 0),
        "the snapshot reached the cluster once"
    );
    let lines = w.audit();
    assert_eq!(count(&lines, "execution_start", &id), 1);
    assert_eq!(count(&lines, "execution_parked", &id), 1, "let go of");
    assert_eq!(count(&lines, "execution_end", &id), 1);
    w.verify();
    assert!(w.parked().list(None, 0, 10).unwrap().is_empty());
}

/// A Prometheus gauge's value in a scrape of `url`.
async fn gauge(url: &str, name: &str) -> f64 {
    let text = reqwest::get(url).await.unwrap().text().await.unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

/// A drain: three guests shut down one after another, each task taking
/// longer than an `execute` may hold its answer and than one call may
/// take, all of them together far longer than the wall-time limit. Every answer comes while a task
/// still runs, saying what the execution waits for; while it waits it
/// holds no sandbox instance; following it finishes the drain as one
/// execution, each shutdown sent once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_of_tasks_longer_than_the_wall_time_completes_as_one_execution() {
    const DRAIN: &str = r#"const node = "pve1";
const running = (await tools.vm_list({node})).filter(v => v.status === "running").map(v => v.vmid).slice(0, 3);
const done = [];
for (const vmid of running) {
  const task = await tools.wait_task({node, upid: await tools.vm_shutdown({node, vmid, timeout: 5})});
  done.push([vmid, task.exitstatus]);
}
done"#;
    let task = Duration::from_millis(1500);
    let w = World::with(task, "[approval]\ntiers = []\n").await;
    let server = w
        .serve_with(&[
            "--wall-time-ms",
            "1000",
            // Each task outlasts one call's limit too: it is waited for
            // across answers, never by one call.
            "--call-timeout-ms",
            "1000",
            "--answer-within-ms",
            "300",
            "--metrics",
            "127.0.0.1:0",
        ])
        .await;
    let metrics = server
        .said("metrics at ")
        .expect("the server names its metrics address")
        .split("metrics at ")
        .nth(1)
        .unwrap()
        .trim()
        .to_string();
    let started = std::time::Instant::now();
    let mut answer = execute(&server, &w.alice, json!({"script": DRAIN})).await;
    let id = answer["execution"].clone();
    assert_eq!(answer["status"], "waiting", "{answer}");
    assert_eq!(answer["waiting"][0]["tool"], "wait_task", "{answer}");
    assert_eq!(answer["waiting"][0]["request_id"], Value::Null, "{answer}");
    assert_eq!(gauge(&metrics, "airlock_executions_parked").await, 1.0);
    assert_eq!(
        gauge(&metrics, "airlock_executions_in_sandbox").await,
        0.0,
        "waiting, it holds no instance"
    );
    let mut follows = 0;
    while answer["status"] == "waiting" && follows < 200 {
        answer = execute(&server, &w.alice, json!({"execution": id})).await;
        assert_eq!(answer["execution"], id, "{answer}");
        follows += 1;
    }
    let done = answer["result"]
        .as_array()
        .unwrap_or_else(|| panic!("{answer}"));
    assert_eq!(done.len(), 3, "{answer}");
    assert!(done.iter().all(|d| d[1] == "OK"), "{answer}");
    assert!(
        started.elapsed() > 3 * task,
        "three tasks one after another outlast the 1 s wall time"
    );
    assert!(
        follows >= 3,
        "each task was waited for across answers: {follows}"
    );
    let shutdowns = w.shutdowns().await;
    assert_eq!(shutdowns.len(), 3, "{shutdowns:?}");
    shutdowns
        .windows(2)
        .for_each(|p| assert_ne!(p[0], p[1], "once each"));
    let lines = w.audit();
    assert_eq!(count(&lines, "execution_start", &id), 1);
    assert_eq!(count(&lines, "execution_end", &id), 1);
    assert!(count(&lines, "execution_parked", &id) >= 3);
    w.verify();
}

/// A script that fills its journal (clock readings, 5 MB) and then makes
/// change after change makes its server write the whole journal down
/// twice per change: past `durable.record_bytes` its next change is not
/// sent (`journal_unavailable`, the limit named) and the script can catch
/// that. The host wrote at most the limit, and the store's files stay the
/// size of one record, not of all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_of_a_run_are_bounded_and_the_change_past_the_bound_is_not_sent() {
    const FILL_THEN_CHANGE: &str = r#"const node = "pve1", vmid = 101;
let t = 0;
for (let i = 0; i < 100000; i++) t += Date.now() % 2;
let made = 0, stopped = null;
for (let i = 0; i < 60 && !stopped; i++) {
  try { await tools.vm_snapshot_create({node, vmid, snapname: "s" + i}); made++; }
  catch (e) { stopped = {code: e.code, message: e.message}; }
}
({made, stopped})"#;
    let w = World::with(Duration::from_millis(20), NO_APPROVALS).await;
    let server = w.serve().await;
    let answer = execute(&server, &w.alice, json!({"script": FILL_THEN_CHANGE})).await;
    let made = answer["result"]["made"]
        .as_u64()
        .unwrap_or_else(|| panic!("{answer}"));
    let stopped = &answer["result"]["stopped"];
    assert_eq!(stopped["code"], "journal_unavailable", "{answer}");
    assert!(
        stopped["message"]
            .as_str()
            .unwrap()
            .contains("durable.record_bytes"),
        "{answer}"
    );
    assert!((5..60).contains(&made), "{made} changes before the bound");
    assert_eq!(
        w.sent().await.0 as u64,
        made,
        "the change past the bound was not sent"
    );
    let files: u64 = std::fs::read_dir(w.dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("executions.db"))
        .map(|e| e.metadata().unwrap().len())
        .sum();
    eprintln!("record bound: {made} changes made, the store's files {files} bytes");
    assert!(
        files < 48 * 1024 * 1024,
        "{files} bytes of store for a run that wrote up to 128 MiB of records"
    );
    assert!(
        w.parked().list(None, 0, 10).unwrap().is_empty(),
        "ended, its row gone"
    );
    w.verify();
}

/// `airlock exec --detach`: the script runs until it waits for a
/// decision, its execution is kept in the deployment's state, and the
/// command prints what an agent's `execute` would have answered and
/// ends. The identity's agent follows it on a server, to its end, each
/// change sent once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_exec_is_followed_to_its_end_from_an_agent() {
    let w = World::new(Duration::from_millis(20)).await;
    let out = common::run_with_stdin(
        Command::new(BIN)
            .arg("--config")
            .arg(&w.config)
            .args(["exec", "--detach", "--json", "--identity", "alice", "-"])
            .env_remove("AIRLOCK_CONFIG"),
        SNAPSHOT_THEN_SHUTDOWN,
    );
    assert!(out.status.success(), "{out:?}");
    let detached: Value = serde_json::from_slice(&out.stdout).unwrap();
    let request = waits_for(&detached, "vm_snapshot_create").to_string();
    let id = detached["execution"].clone();
    assert_eq!(detached["follow"], json!({"execution": id}));
    assert_eq!(w.sent().await, (0, 0), "nothing sent yet");
    let rows = w.parked().list(Some("alice"), 0, 10).unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(json!(rows[0].execution), id);
    assert_eq!(rows[0].waiting, vec![request.clone()]);

    w.approve(&request);
    let server = w.serve().await;
    let follow = json!({"execution": id});
    let next = execute(&server, &w.alice, follow.clone()).await;
    let request = waits_for(&next, "vm_shutdown").to_string();
    // An operator waits for it: not within no time, and then to its end.
    let executions = |args: &[&str]| {
        let mut cmd = Command::new(BIN);
        cmd.arg("--config")
            .arg(&w.config)
            .arg("executions")
            .args(args)
            .env_remove("AIRLOCK_CONFIG");
        cmd
    };
    let id_text = id.as_str().unwrap();
    let soon = executions(&["wait", id_text, "--timeout-secs", "0"])
        .output()
        .unwrap();
    assert_eq!(soon.status.code(), Some(3), "{soon:?}");
    assert!(
        String::from_utf8_lossy(&soon.stderr).contains(&request),
        "says what it waits for: {soon:?}"
    );
    let waiting = common::Reaped::new(
        executions(&["wait", id_text, "--json"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    w.approve(&request);
    let done = execute(&server, &w.alice, follow).await;
    assert_eq!(
        done["result"],
        json!({"snapshot": "OK", "shutdown": "OK"}),
        "{done}"
    );
    let waited = tokio::task::spawn_blocking(move || waiting.output())
        .await
        .unwrap();
    assert!(waited.status.success(), "{waited:?}");
    let end: Value = serde_json::from_slice(&waited.stdout).unwrap();
    assert_eq!(end["outcome"], "ok", "{end}");
    assert_eq!(end["execution"], id, "{end}");
    assert_eq!(w.sent().await, (1, 1), "each change once");
    w.ran_once(&id);
    assert!(w.parked().list(None, 0, 10).unwrap().is_empty());
}

/// A read that never ends (a task stuck for good) and an agent that
/// follows for ever: each follow-up replays, reads again and parks again
/// without a new answer, and the 721st ends the execution `stalled`,
/// naming the call, instead of parking and resuming without end. The
/// change before it was made once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_that_never_ends_stalls_the_execution_after_720_idle_parks() {
    const STUCK: &str = r#"const node = "pve1", vmid = 101;
await tools.wait_task({node, upid: await tools.vm_snapshot_create({node, vmid, snapname: "stuck"})});"#;
    // 721 executes and reads, each at once: no rate stands in the way.
    let w = World::with(
        Duration::from_secs(3600),
        &format!("{NO_APPROVALS}[rate]\ncalls_per_minute = 0\n"),
    )
    .await;
    let server = w
        .serve_with(&["--answer-within-ms", "5", "--requests-per-minute", "0"])
        .await;
    let client = server.connect(&w.alice).await;
    let first = common::call(&client, "execute", json!({"script": STUCK})).await;
    let first = first.structured_content.unwrap();
    assert_eq!(first["status"], "waiting", "{first}");
    let follow = first["follow"].clone();
    let mut parks = 1;
    let last = loop {
        let r = common::call(&client, "execute", follow.clone()).await;
        let answer = r.structured_content.unwrap();
        if answer["status"] != "waiting" {
            break answer;
        }
        parks += 1;
        assert!(parks <= 800, "still parking after {parks} follow-ups");
    };
    assert_eq!(
        parks,
        airlock::durable::MAX_IDLE_PARKS + 1,
        "the first park, then 720 without a new answer: {last}"
    );
    let text = last.to_string();
    assert!(
        text.contains("stalled") && text.contains("wait_task"),
        "{last}"
    );
    assert_eq!(w.sent().await, (1, 0), "the snapshot was made once");
    let _ = client.cancel().await;
    let lines = w.audit();
    let id = first["execution"].clone();
    assert_eq!(count(&lines, "execution_end", &id), 1);
    w.verify();
    assert!(w.parked().list(None, 0, 10).unwrap().is_empty());
}

/// One 2026-07-28 request as stateless clients send it (no session; the
/// revision, the client and its capabilities — the tasks extension — in
/// `_meta`, the routing headers beside) to the server at `base`, and the
/// JSON-RPC answer to it.
async fn stateless(base: &str, key: &str, id: u64, method: &str, mut params: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "airlock-test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {
            "extensions": {"io.modelcontextprotocol/tasks": {}}
        },
    });
    let name = params
        .get("taskId")
        .or(params.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let text = reqwest::Client::new()
        .post(format!("{base}/mcp"))
        .bearer_auth(key)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .header("mcp-name", name)
        .timeout(Duration::from_secs(60))
        .body(body.to_string())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .chain(std::iter::once(text.as_str()))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|m| m["id"] == id)
        .unwrap_or_else(|| panic!("no answer to {method}: {text}"))
}

/// `execute` as a task whose poll is running it (its read held at the
/// cluster's door) is cancelled by `tasks/cancel` from another request:
/// the poll answers `cancelled` at once, the read in flight dropped; a
/// poll after it says `cancelled` too; one end line, the change before
/// it made once, nothing left in the state. Another identity polling or
/// cancelling it is told there is no such task of theirs, before and
/// while it runs, without keeping the cancel from the run; a second poll
/// of its own meanwhile says it works on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_cancelled_while_a_poll_runs_it_ends_at_once() {
    const STUCK: &str = r#"const node = "pve1", vmid = 101;
await tools.wait_task({node, upid: await tools.vm_snapshot_create({node, vmid, snapname: "cancelled"})});"#;
    let w = World::with(Duration::from_secs(3600), NO_APPROVALS).await;
    let olga = common::enroll(&w.dir.path().join(common::ENROLLMENT), "olga");
    let server = w.serve_with(&["--answer-within-ms", "300"]).await;
    let base = server.base();
    let created = stateless(
        &base,
        &w.alice,
        1,
        "tools/call",
        json!({"name": "execute", "arguments": {"script": STUCK}}),
    )
    .await;
    let task = &created["result"];
    assert_eq!(
        (&task["resultType"], &task["status"]),
        (&json!("task"), &json!("working")),
        "{created}"
    );
    let id = task["taskId"].as_str().unwrap().to_string();
    for (n, method) in [(10, "tasks/get"), (11, "tasks/cancel")] {
        let theirs = stateless(&base, &olga, n, method, json!({"taskId": id})).await;
        assert_eq!(theirs["error"]["code"], -32602, "{method}: {theirs}");
        assert!(
            theirs["error"]["message"]
                .as_str()
                .unwrap()
                .contains("of yours"),
            "{theirs}"
        );
    }
    let held = w.sim.hold("GET");
    let polling = tokio::spawn({
        let (base, key, body) = (base.clone(), w.alice.clone(), json!({"taskId": id}));
        async move { stateless(&base, &key, 2, "tasks/get", body).await }
    });
    // The poll went on with it, by replay: its read of the task is at
    // the cluster's door.
    held.arrived(1).await;
    assert!(!polling.is_finished());
    let theirs = stateless(&base, &olga, 12, "tasks/get", json!({"taskId": id})).await;
    assert_eq!(theirs["error"]["code"], -32602, "{theirs}");
    let second = stateless(&base, &w.alice, 13, "tasks/get", json!({"taskId": id})).await;
    assert_eq!(second["result"]["status"], "working", "{second}");
    let cancel = stateless(&base, &w.alice, 3, "tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(
        cancel["result"],
        json!({"resultType": "complete"}),
        "{cancel}"
    );
    let polled = polling.await.unwrap();
    assert_eq!(polled["result"]["status"], "cancelled", "{polled}");
    drop(held);
    let again = stateless(&base, &w.alice, 4, "tasks/get", json!({"taskId": id})).await;
    assert_eq!(again["result"]["status"], "cancelled", "{again}");
    assert_eq!(w.sent().await.0, 1, "the snapshot was made once");
    let lines = w.audit();
    let id = json!(id);
    assert_eq!(count(&lines, "execution_end", &id), 1);
    let end = lines
        .iter()
        .find(|l| l["event"] == "execution_end" && l["execution"] == id)
        .unwrap();
    assert_eq!(end["outcome"], "Cancelled", "{end}");
    w.verify();
    assert!(w.parked().list(None, 0, 10).unwrap().is_empty());
}
