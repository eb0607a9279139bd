//! Two `airlock serve --http` replicas sharing one real PostgreSQL
//! database (`[state] backend = "postgres"`) in front of one simulated
//! cluster: a request filed through one replica is approved from the
//! command line and used once, through the other; the deployment has one
//! audit chain, which `airlock audit verify` checks in the database and
//! `airlock audit export` writes as a file the offline check accepts.

mod common;

use std::{ffi::OsString, path::Path, process::Command, time::Duration};

use airlock::demo;
use airlock_gateway::audit;
use airlock_sim::Simulator;
use airlock_testkit::TempPostgres;
use common::{call, Server};
use serde_json::{json, Value};

/// The deployment: the simulator, the database, a configuration file
/// every replica and operator command uses (keys are in the database).
struct Deployment {
    _sim: Simulator,
    pg: TempPostgres,
    dir: tempfile::TempDir,
    config: std::path::PathBuf,
}

async fn deployment() -> Deployment {
    let pg = TempPostgres::start().unwrap();
    let url = pg.create_database("airlock").unwrap();
    let (sim, sim_config) = demo::start(Duration::from_millis(5), 0).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let proxmox = demo::proxmox_section(&sim, &sim_config, &dir.path().join("tokens")).unwrap();
    let mut toml = demo::config_toml(&proxmox, &dir.path().join("unused-state"));
    toml.push_str(&format!(
        "\n[state]\nbackend = \"postgres\"\nurl = {url:?}\npassword_file = {:?}\n",
        pg.password_file().display().to_string()
    ));
    let config = dir.path().join("airlock.toml");
    std::fs::write(&config, toml).unwrap();
    Deployment {
        _sim: sim,
        pg,
        dir,
        config,
    }
}

impl Deployment {
    /// A replica: no enrollment file, so it takes the keys from the
    /// database.
    fn replica(&self) -> Server {
        let state = tempfile::tempdir().unwrap();
        let mut args: Vec<OsString> = vec!["--config".into(), self.config.clone().into()];
        args.extend(["serve", "--http", "127.0.0.1:0"].map(OsString::from));
        Server::spawn(state, &args)
    }

    /// `airlock enroll IDENTITY`, into the database.
    fn enroll(&self, identity: &str) -> String {
        let out = self.airlock(&["enroll", identity]);
        assert!(out.status.success(), "{out:?}");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains("postgresql://airlock@127.0.0.1:"), "{said}");
        stdout(&out).trim().to_string()
    }

    /// `airlock --config CONFIG ARGS`: an operator's command.
    fn airlock(&self, args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_airlock"))
            .arg("--config")
            .arg(&self.config)
            .args(args)
            .env_remove("AIRLOCK_CONFIG")
            .env_remove("AIRLOCK_STATE_URL")
            .output()
            .unwrap()
    }
}

/// Starts VM 103 (an approval-tier call for alice); the value is the
/// task id, or the refusal's code and request id.
const START: &str = "let r; try { r = await tools.vm_start({node: 'pve1', vmid: 103}) } \
                     catch (e) { r = {code: e.code, id: e.details && e.details.request_id} } r";

fn value(r: &rmcp::model::CallToolResult) -> Value {
    r.structured_content.as_ref().unwrap()["result"].clone()
}

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_filed_on_one_replica_is_approved_and_used_once_on_another() {
    let d = deployment().await;
    let alice = d.enroll("alice");
    let (a, b) = {
        let d = &d;
        tokio::task::block_in_place(|| (d.replica(), d.replica()))
    };
    let on_a = a.connect(&alice).await;
    let on_b = b.connect(&alice).await;

    let first = value(&call(&on_a, "execute", json!({"script": START})).await);
    assert_eq!(first["code"], "approval_required", "{first}");
    let id = first["id"].as_str().unwrap().to_string();

    // Replica B sees the same pending request.
    let listed = d.airlock(&["approvals", "list", "--json"]);
    assert!(listed.status.success(), "{listed:?}");
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed[0]["id"], id.as_str(), "{listed}");

    let approved = d.airlock(&["approvals", "approve", &id, "--by", "carol"]);
    assert!(approved.status.success(), "{approved:?}");

    // Through the other replica, the approved call runs.
    let second = value(&call(&on_b, "execute", json!({"script": START})).await);
    let task = second.as_str().unwrap_or_default();
    assert!(
        task.starts_with("UPID:pve1:") && task.contains(":qmstart:103:"),
        "{second}"
    );

    // Used up for the whole deployment: both replicas ask again.
    for client in [&on_a, &on_b] {
        let again = value(&call(client, "execute", json!({"script": START})).await);
        assert_eq!(again["code"], "approval_required", "{again}");
        assert_ne!(again["id"], id.as_str());
    }

    // One chain, written by both replicas, verified in the database...
    let verified = d.airlock(&["audit", "verify"]);
    assert!(verified.status.success(), "{verified:?}");
    let out = stdout(&verified);
    assert!(
        out.starts_with("ok: ") && out.contains("postgresql://airlock@127.0.0.1:"),
        "{out}"
    );
    assert!(!out.contains(d.pg.password()), "{out}");

    // ...and exported as JSONL the offline check accepts.
    let file = d.dir.path().join("export.jsonl");
    let exported = d.airlock(&["audit", "export", "--output", file.to_str().unwrap()]);
    assert!(exported.status.success(), "{exported:?}");
    let v = audit::verify(&file).unwrap();
    assert!(v.ok(), "{v:?}");
    let lines: Vec<Value> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(v.good_lines as usize, lines.len());
    let starts: Vec<&str> = lines
        .iter()
        .filter(|l| l["event"] == "execution_start")
        .map(|l| l["execution"].as_str().unwrap())
        .collect();
    assert_eq!(starts.len(), 4);
    let replicas: std::collections::BTreeSet<&str> = starts
        .iter()
        .map(|e| e.split('-').next().unwrap())
        .collect();
    assert_eq!(
        replicas.len(),
        2,
        "both replicas wrote to the chain: {starts:?}"
    );
    // The approved call, once, carrying the approval's id.
    let used: Vec<&Value> = lines
        .iter()
        .filter(|l| l["event"] == "call" && l["decision"] == "allowed")
        .collect();
    assert_eq!(used.len(), 1, "{used:?}");
    assert_eq!(used[0]["approval"], id.as_str());
    private(&file);

    // A key issued while the replicas run works on each once it has
    // re-read the keys (every few seconds; at once on SIGHUP).
    let olga = d.enroll("olga");
    for replica in [&a, &b] {
        let hup = Command::new("kill")
            .args(["-HUP", &replica.child.id().to_string()])
            .status()
            .unwrap();
        assert!(hup.success());
        replica.wait_for("reloaded the enrolled keys");
        let client = replica.connect(&olga).await;
        let r = call(
            &client,
            "execute",
            json!({"script": "(await tools.node_list()).length"}),
        )
        .await;
        assert_eq!(value(&r), 3, "{r:?}");
    }
    // A key no one issued gets nothing.
    let status = reqwest::Client::new()
        .post(&a.url)
        .bearer_auth("alk_0000000000000000000000000000000000000000000000000000000000000000")
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 401);
}

fn private(file: &Path) {
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(file).unwrap().mode() & 0o777, 0o600);
}
