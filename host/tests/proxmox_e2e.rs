//! A whole deployment in one process: the simulated cluster over HTTPS,
//! the Proxmox backend with a pinned certificate and a token per identity,
//! the gateway with approvals and audit, and scripts in the sandbox.

use std::{sync::Arc, time::Duration};

use airlock::{demo, wiring, wiring::ScriptTools};
use airlock_gateway::{audit, decision::Decider, Caller};
use airlock_sandbox::{ExecError, Limits, Sandbox, SandboxConfig};
use airlock_sim::pve::cluster::Power;
use serde_json::json;

const STOP_ALL: &str = include_str!("../../examples/stop-node-vms.js");

struct Deployment {
    sim: airlock_sim::Simulator,
    secrets: Vec<String>,
    gateway: Arc<airlock_gateway::Gateway>,
    sandbox: Sandbox,
    _state: tempfile::TempDir,
}

impl Deployment {
    async fn new() -> Self {
        let (sim, config) = demo::start(Duration::from_millis(20), 0).await.unwrap();
        let state = tempfile::tempdir().unwrap();
        let proxmox = demo::proxmox_section(&sim, &config, &state.path().join("tokens")).unwrap();
        let file = demo::config_file(proxmox, state.path());
        let gateway = wiring::gateway(&file).await.unwrap();
        let sandbox = Sandbox::new(SandboxConfig::default()).await.unwrap();
        let secrets = config.tokens.iter().map(|t| t.secret.clone()).collect();
        Self {
            sim,
            secrets,
            gateway,
            sandbox,
            _state: state,
        }
    }

    async fn run(&self, identity: &str, script: &str) -> airlock_sandbox::Outcome {
        let tools = ScriptTools {
            gateway: self.gateway.clone(),
            caller: Caller::new(identity),
            runbooks: None,
            budget: None,
            durable: false,
        };
        self.sandbox
            .execute(script, &Limits::default(), &tools)
            .await
    }

    async fn writes(&self) -> usize {
        self.sim
            .requests()
            .await
            .iter()
            .filter(|(m, _, _)| m != "GET")
            .count()
    }

    async fn running_on(&self, node: &str) -> Vec<u32> {
        self.sim
            .with_cluster(|c| {
                c.guests
                    .values()
                    .filter(|g| g.node == node && g.power == Power::Running)
                    .map(|g| g.vmid)
                    .collect()
            })
            .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_every_vm_on_a_node_after_approval() {
    let d = Deployment::new().await;
    let before = d.running_on("pve1").await;
    assert_eq!(before, [100, 101, 102, 200]);

    // First run: every shutdown waits for approval; nothing is written.
    let first = d.run("alice", STOP_ALL).await;
    assert!(
        matches!(first.result, Err(ExecError::ApprovalRequired { .. })),
        "{:?}",
        first.result
    );
    assert_eq!(d.writes().await, 0);
    let now = d.gateway.now_ms();
    let pending = d.gateway.approvals().list(now, false).unwrap();
    assert_eq!(pending.len(), 3, "one request per VM: {pending:?}");
    for r in &pending {
        assert_eq!(r.tool, "vm_shutdown");
        d.gateway
            .approvals()
            .approve(&r.id, &Decider::cli("operator"), now)
            .unwrap();
    }

    // Second run: the same calls, approved, run in parallel; the script
    // waits for the tasks.
    let second = d.run("alice", STOP_ALL).await;
    let value = second.result.as_ref().unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(
        value,
        &json!([
            {"vmid": 100, "name": "web-1", "result": "OK"},
            {"vmid": 101, "name": "web-2", "result": "OK"},
            {"vmid": 102, "name": "db-1", "result": "OK"},
        ])
    );
    assert!(
        second.stats.peak_calls_in_flight >= 3,
        "the shutdowns ran together"
    );
    assert_eq!(
        d.running_on("pve1").await,
        [200],
        "only the container still runs"
    );
    assert_eq!(d.writes().await, 3);
    assert!(audit::verify(d.gateway.audit_path().unwrap()).unwrap().ok());
    // No token secret in the audit log or in anything the scripts got back.
    let log = std::fs::read_to_string(d.gateway.audit_path().unwrap()).unwrap();
    let outputs = format!(
        "{}{}",
        serde_json::to_string(&first).unwrap(),
        serde_json::to_string(&second).unwrap()
    );
    for secret in &d.secrets {
        assert!(!log.contains(secret.as_str()) && !outputs.contains(secret.as_str()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_identity_is_denied_before_anything_reaches_the_cluster() {
    let d = Deployment::new().await;
    let outcome = d.run("rita", &STOP_ALL.replace("pve1", "pve2")).await;
    assert!(
        matches!(&outcome.result, Err(ExecError::PolicyDenied { tool, .. }) if tool == "vm_shutdown"),
        "{:?}",
        outcome.result
    );
    assert_eq!(
        d.writes().await,
        0,
        "no write request reached the simulator"
    );
    assert_eq!(d.running_on("pve2").await, [104, 105, 201]);
    let log = std::fs::read_to_string(d.gateway.audit_path().unwrap()).unwrap();
    assert!(log.contains("\"decision\":\"denied\""));
    assert!(audit::verify(d.gateway.audit_path().unwrap()).unwrap().ok());
}
