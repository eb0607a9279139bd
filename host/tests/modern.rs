//! The 2026-07-28 revision through the clients people use on it: the
//! official TypeScript SDK 2.x client (`@modelcontextprotocol/client`),
//! pinned to the revision, and the official tasks extension client
//! (`@modelcontextprotocol/ext-tasks`), against `airlock serve --http` on a
//! simulated cluster in this process. Olga may approve her own calls in
//! her client; alice may not (four eyes).
//!
//! Replicas (the answer on another replica, round-robin behind nginx)
//! are in `replicas.rs`; the Python SDK's client in `durable.rs`.

mod common;

use std::{ffi::OsString, path::PathBuf, process::Command, time::Duration};

use common::{modern, Server};
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_airlock");

/// A change the script tries and catches.
const SHUTDOWN: &str = r#"let said;
try { await tools.vm_shutdown({node: "pve1", vmid: 101, timeout: 5}); said = "made"; }
catch (e) { said = e.code + ": " + e.message; }
said"#;

struct World {
    sim: airlock_sim::Simulator,
    _dir: tempfile::TempDir,
    config: PathBuf,
    server: Server,
    olga: String,
    alice: String,
}

impl World {
    /// The simulated cluster, olga allowed to approve her own calls,
    /// `extra_toml` appended; a server on it with olga and alice enrolled.
    async fn new(extra_toml: &str) -> World {
        let (sim, dir, config) = common::configured(Duration::from_millis(5), extra_toml).await;
        common::approves_own(&config, "olga", "operator");
        let enrollment = dir.path().join(common::ENROLLMENT);
        let (olga, alice) = (
            common::enroll(&enrollment, "olga"),
            common::enroll(&enrollment, "alice"),
        );
        let mut args: Vec<OsString> = vec!["--config".into(), config.clone().into()];
        args.extend(["serve", "--http", "127.0.0.1:0", "--enrollment"].map(OsString::from));
        args.push(enrollment.into());
        let server =
            tokio::task::block_in_place(|| Server::spawn(tempfile::tempdir().unwrap(), &args));
        World {
            sim,
            _dir: dir,
            config,
            server,
            olga,
            alice,
        }
    }

    fn url(&self) -> String {
        format!("{}/mcp", self.server.base())
    }

    fn audit(&self) -> Vec<Value> {
        let text =
            std::fs::read_to_string(self.config.parent().unwrap().join("audit.jsonl")).unwrap();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Shutdowns the cluster was asked for.
    async fn shutdowns(&self) -> usize {
        common::shutdowns(&self.sim).await
    }

    /// The pending approval requests, as an operator lists them.
    fn pending(&self) -> Vec<Value> {
        let out = Command::new(BIN)
            .arg("--config")
            .arg(&self.config)
            .args(["approvals", "list", "--json"])
            .env_remove("AIRLOCK_CONFIG")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice::<Value>(&out.stdout)
            .unwrap()
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

fn count(lines: &[Value], f: impl Fn(&Value) -> bool) -> usize {
    lines.iter().filter(|l| f(l)).count()
}

/// A sealed state lives as long as the request it asks
/// (`approval.ttl_secs`): answered after that, it is refused, saying so,
/// and decides nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_request_state_decides_nothing() {
    let w = World::new("\n[approval]\nttl_secs = 2\n").await;
    let url = w.url();
    let Some(asked) = modern(&[&url, &w.olga, SHUTDOWN, "foreign"]) else {
        return;
    };
    assert_eq!(
        asked["first"]["input_required"].as_array().unwrap().len(),
        1,
        "{asked}"
    );
    // The request expires: the operator's list stops showing it.
    let mut waited = 0;
    while !w.pending().is_empty() {
        waited += 1;
        assert!(waited < 300, "the request never expired");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let given = json!({"script": SHUTDOWN, "state": asked["state"], "answers": asked["answers"]});
    let r = modern(&[&url, &w.olga, &given.to_string(), "answer"]).unwrap();
    let error = &r["answered"]["result"]["error"];
    assert_eq!(error["kind"], "InvalidRequestState", "{r}");
    assert!(
        error["message"].as_str().unwrap().contains("expired"),
        "{r}"
    );
    let lines = w.audit();
    assert_eq!(count(&lines, |l| l["event"] == "approval_decision"), 0);
    assert_eq!(w.shutdowns().await, 0, "nothing sent");
}

/// Another identity's state, though sealed by this deployment, is
/// refused and decides nothing; the request still waits for its owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_identitys_request_state_decides_nothing() {
    let w = World::new("").await;
    let url = w.url();
    let Some(asked) = modern(&[&url, &w.olga, SHUTDOWN, "foreign"]) else {
        return;
    };
    let given = json!({"script": SHUTDOWN, "state": asked["state"], "answers": asked["answers"]});
    let r = modern(&[&url, &w.alice, &given.to_string(), "answer"]).unwrap();
    assert_eq!(
        r["answered"]["result"]["error"]["kind"], "InvalidRequestState",
        "{r}"
    );
    assert_eq!(count(&w.audit(), |l| l["event"] == "approval_decision"), 0);
    let pending = w.pending();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0]["identity"], "olga", "{pending:?}");
    assert_eq!(w.shutdowns().await, 0, "nothing sent");
}

/// `execute` as a task through the tasks extension's official client:
/// the task asks its approval (`input_required`), the client's answer
/// (`tasks/update`) decides it, and the poll after it completes the
/// execution; the change is sent once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_asks_and_completes_through_the_tasks_extension_client() {
    let w = World::new("").await;
    let Some(r) = modern(&[&w.url(), &w.olga, SHUTDOWN, "task"]) else {
        return;
    };
    assert_eq!(r["kind"], "task", "{r}");
    assert_eq!(r["outcome"], "completed", "{r}");
    assert_eq!(r["final"]["result"], "made", "{r}");
    assert!(
        r["statuses"]
            .as_array()
            .unwrap()
            .contains(&json!("input_required")),
        "{r}"
    );
    assert_eq!(r["asked"].as_array().unwrap().len(), 1, "{r}");
    let lines = w.audit();
    let decisions: Vec<&Value> = lines
        .iter()
        .filter(|l| l["event"] == "approval_decision")
        .collect();
    assert_eq!(decisions.len(), 1);
    assert_eq!(
        (&decisions[0]["channel"], &decisions[0]["own"]),
        (&json!("client"), &json!(true))
    );
    assert_eq!(w.shutdowns().await, 1, "sent once");
    assert_eq!(
        count(&lines, |l| l["event"] == "execution_end"
            && l["outcome"] == "ok"),
        1
    );
}

/// A task cancelled through the tasks extension's official client ends
/// at once (its end line names who cancelled it); its change, waiting
/// for someone else's approval, is never sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_is_cancelled_through_the_tasks_extension_client() {
    let w = World::new("").await;
    let Some(r) = modern(&[&w.url(), &w.alice, SHUTDOWN, "task-cancel"]) else {
        return;
    };
    assert_eq!(r["kind"], "task", "{r}");
    assert_eq!(r["outcome"], "cancelled", "{r}");
    assert_eq!(r["asked"], json!([]), "alice may not approve her own: {r}");
    let lines = w.audit();
    let ends: Vec<&Value> = lines
        .iter()
        .filter(|l| l["event"] == "execution_end")
        .collect();
    assert_eq!(ends.len(), 1, "{ends:?}");
    assert_eq!(
        (&ends[0]["outcome"], &ends[0]["cancelled_by"]),
        (&json!("Cancelled"), &json!("alice"))
    );
    assert_eq!(w.shutdowns().await, 0, "nothing sent");
}
