//! Replicas of `airlock serve --http` sharing one real PostgreSQL database
//! (`[state] backend = "postgres"`) in front of one simulated cluster.
//!
//! Two replicas, directly: a request filed through one is approved from
//! the command line and used once, through the other; the deployment has
//! one audit chain, which `airlock audit verify` checks in the database
//! and `airlock audit export` writes as a file the offline check accepts.
//!
//! Two replicas, a plan: recorded on one, approved from the command line
//! as a table, applied once on the other; its lines tied by the plan id.
//!
//! Two replicas trusting one real OpenID provider: its token works on
//! both, as the same identity, with the mode its group maps to; the
//! request it files on one is approved and used on the other.
//!
//! Three replicas behind a real nginx that hashes `Mcp-Session-Id`
//! (docs/DEPLOYMENT.md's configuration): several clients and identities
//! run scripts through it while one replica is killed (SIGKILL); their
//! sessions go on on the other replicas, the simulator answered exactly
//! the calls the audit let through, and the chain verifies.

mod common;

use std::{ffi::OsString, path::Path, process::Command, time::Duration};

use airlock::demo;
use airlock_gateway::audit;
use airlock_sim::Simulator;
use airlock_testkit::{TempNginx, TempPostgres};
use common::{call, ConsoleUser, Server};
use serde_json::{json, Value};

/// The deployment: the simulator, the database, a configuration file
/// every replica and operator command uses (keys are in the database).
struct Deployment {
    _sim: Simulator,
    pg: TempPostgres,
    /// The database's URL (its password is in `pg.password_file()`).
    url: String,
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
        "\n[identities.carol]\n\n[state]\nbackend = \"postgres\"\nurl = {url:?}\npassword_file = {:?}\n",
        pg.password_file().display().to_string()
    ));
    let config = dir.path().join("airlock.toml");
    std::fs::write(&config, toml).unwrap();
    Deployment {
        _sim: sim,
        pg,
        url,
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

    /// Two replicas, started side by side (each waits for its server to
    /// say it listens).
    fn two_replicas(&self) -> (Server, Server) {
        tokio::task::block_in_place(|| (self.replica(), self.replica()))
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

/// The approval request an execution waits for, and the execution.
fn waits_for(r: &rmcp::model::CallToolResult) -> (String, String) {
    let answer = r.structured_content.as_ref().unwrap();
    assert_eq!(answer["status"], "waiting", "{answer}");
    let text = |v: &Value| v.as_str().unwrap().to_string();
    (
        text(&answer["waiting"][0]["request_id"]),
        text(&answer["execution"]),
    )
}

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_filed_on_one_replica_is_approved_and_used_once_on_another() {
    let d = deployment().await;
    let alice = d.enroll("alice");
    let (a, b) = d.two_replicas();
    let on_a = a.connect(&alice).await;
    let on_b = b.connect(&alice).await;

    let (id, _) = waits_for(&call(&on_a, "execute", json!({"script": START})).await);

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

    // Used up for the whole deployment: on both replicas a new run waits
    // for a new request.
    for client in [&on_a, &on_b] {
        let (again, _) = waits_for(&call(client, "execute", json!({"script": START})).await);
        assert_ne!(again, id);
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
    assert_eq!(
        used[0]["approved_by"], "carol",
        "who approved, in the chain"
    );
    private(&file);

    // A key issued while the replicas run works on each once it has
    // re-read the keys (every few seconds; at once on SIGHUP).
    let olga = d.enroll("olga");
    for replica in [&a, &b] {
        reread_keys(replica);
        let client = replica.connect(&olga).await;
        let r = call(
            &client,
            "execute",
            json!({"script": "(await tools.node_list()).length"}),
        )
        .await;
        assert_eq!(value(&r), 3, "{r:?}");
    }
    // A session belongs to the key that opened it, on every replica.
    let http = reqwest::Client::new();
    let post = |url: &str, key: &str, session: Option<&str>, body: Value| {
        let mut r = http
            .post(url)
            .bearer_auth(key)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.to_string());
        if let Some(s) = session {
            r = r.header("mcp-session-id", s);
        }
        r.send()
    };
    let opened = post(&a.url, &alice, None, initialize()).await.unwrap();
    assert_eq!(opened.status(), 200);
    let session = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let status = post(&a.url, &alice, Some(&session), initialized)
        .await
        .unwrap()
        .status();
    assert_eq!(status, 202);
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    for replica in [&a, &b] {
        let status = post(&replica.url, &olga, Some(&session), list.clone())
            .await
            .unwrap()
            .status();
        assert_eq!(status, 403, "another key may not use alice's session");
    }
    let status = post(&b.url, &alice, Some(&session), list.clone())
        .await
        .unwrap()
        .status();
    assert_eq!(status, 200, "alice's session goes on on the other replica");
    // A session whose owner was never recorded (a row an older replica
    // wrote, a failed write) is continued by nobody, on any replica,
    // alice included: 404, which clients take as "open a new one".
    let opened = post(&a.url, &alice, None, initialize()).await.unwrap();
    let orphan = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    let nulled =
        d.pg.psql(
            "airlock",
            &format!(
                "UPDATE airlock_sessions SET identity = NULL WHERE id = '{orphan}' RETURNING id"
            ),
        )
        .unwrap();
    assert_eq!(nulled.trim(), orphan, "the session's row was stored");
    for key in [&olga, &alice] {
        let r = post(&b.url, key, Some(&orphan), list.clone())
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "no owner, no continuing");
        assert!(r.text().await.unwrap().contains("open a new session"));
    }

    // A revoked key stops working on every replica once it re-reads.
    let revoked = d.airlock(&["revoke", "olga"]);
    assert!(revoked.status.success(), "{revoked:?}");
    for replica in [&a, &b] {
        reread_keys(replica);
        let status = post(&replica.url, &olga, None, initialize())
            .await
            .unwrap()
            .status();
        assert_eq!(status, 401, "olga's key was revoked");
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

/// What `host/tests/oauth.rs` checks against one server holds for a
/// deployment: a token from the organisation's OpenID provider is good on
/// every replica (each fetches the provider's keys itself), and an
/// approval its holder needs crosses replicas as a key holder's does.
/// A person signed in to the console on one replica decides, on another,
/// a request an agent filed on the first; the agent's call then runs
/// once, and signing out on either ends the sign-in on both.
/// An execution parked on one replica goes on from another once its
/// replica is killed: the database holds it, not the process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_execution_parked_on_one_replica_goes_on_from_another() {
    let d = deployment().await;
    let alice = d.enroll("alice");
    let (mut a, b) = d.two_replicas();
    let on_a = a.connect(&alice).await;
    let (request, execution) = waits_for(&call(&on_a, "execute", json!({"script": START})).await);
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let approved = d.airlock(&["approvals", "approve", &request, "--by", "carol"]);
    assert!(approved.status.success(), "{approved:?}");
    let on_b = b.connect(&alice).await;
    let followed = call(&on_b, "execute", json!({"execution": execution})).await;
    let answer = followed.structured_content.clone().unwrap();
    assert_eq!(answer["execution"], execution.as_str(), "{answer}");
    let task = answer["result"].as_str().unwrap_or_default();
    assert!(
        task.starts_with("UPID:pve1:") && task.contains(":qmstart:103:"),
        "{answer}"
    );
    // Ended: nobody follows it again, on any replica.
    let again = call(&on_b, "execute", json!({"execution": execution})).await;
    assert_eq!(
        again.structured_content.unwrap()["error"]["kind"],
        "UnknownExecution"
    );
    let verified = d.airlock(&["audit", "verify"]);
    assert!(verified.status.success(), "{verified:?}");
}

/// The replica running a durable execution is killed with its change at
/// the cluster's door: the cluster carries the change out, and the
/// replica that takes the execution once the dead one's lease has run out
/// finds the change recorded as sent and unanswered, so the script is
/// told `outcome_unknown` instead of the change going a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_with_a_change_in_flight_leaves_it_to_another_that_does_not_send_it_again()
{
    let d = deployment().await;
    let alice = d.enroll("alice");
    let (mut a, b) = d.two_replicas();
    let on_a = a.connect(&alice).await;
    let (request, execution) = waits_for(&call(&on_a, "execute", json!({"script": START})).await);
    let approved = d.airlock(&["approvals", "approve", &request, "--by", "carol"]);
    assert!(approved.status.success(), "{approved:?}");
    let held = d._sim.hold("POST");
    let following = {
        let execution = execution.clone();
        tokio::spawn(async move { call(&on_a, "execute", json!({"execution": execution})).await })
    };
    held.arrived(1).await;
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    // Its client never hears; the cluster does what it was asked.
    following.abort();
    drop(held);
    let starts = || async {
        d._sim
            .requests()
            .await
            .iter()
            .filter(|(method, path, _)| method == "POST" && path.contains("/qemu/103/status/start"))
            .count()
    };
    // The dead replica's lease, as a clock past it sees it.
    let config = airlock_state::PostgresConfig {
        url: d.url.clone(),
        password_file: Some(d.pg.password_file().to_path_buf()),
        pool_size: 1,
        timeout: Duration::from_secs(10),
    };
    let id = execution.clone();
    let orphan = tokio::task::spawn_blocking(move || {
        let parked = airlock_state::Place::Postgres(config)
            .open(&Default::default())
            .unwrap()
            .parked;
        let taken = parked
            .take(&id, "alice", "a-later-clock", i64::MAX / 2, 0)
            .unwrap();
        matches!(
            taken,
            airlock_gateway::parked::Take::Taken { orphan: true, .. }
        )
    })
    .await
    .unwrap();
    assert!(orphan, "held by the dead replica until its lease ran out");

    let on_b = b.connect(&alice).await;
    let followed = call(&on_b, "execute", json!({"execution": execution})).await;
    let answer = value(&followed);
    assert_eq!(answer["code"], "outcome_unknown", "{followed:?}");
    // The released start is carried out on the simulator's own time: its
    // log is all a client outside it can watch.
    for _ in 0..600 {
        if starts().await > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(starts().await, 1, "the start reached the cluster once");
    let again = call(&on_b, "execute", json!({"execution": execution})).await;
    assert_eq!(
        again.structured_content.unwrap()["error"]["kind"],
        "UnknownExecution",
        "it ended"
    );
    let verified = d.airlock(&["audit", "verify"]);
    assert!(verified.status.success(), "{verified:?}");
    on_b.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_sign_in_on_one_replica_decides_on_another() {
    let d = deployment().await;
    let mut toml = std::fs::read_to_string(&d.config).unwrap();
    toml.push_str("\n[console]\napprovers = [\"rita\"]\n");
    std::fs::write(&d.config, toml).unwrap();
    let alice = d.enroll("alice");
    let out = d.airlock(&["enroll", "rita", "--console"]);
    assert!(out.status.success(), "{out:?}");
    let rita_key = stdout(&out).trim().to_string();
    let (a, b) = d.two_replicas();
    let on_a = a.connect(&alice).await;
    let (id, execution) = waits_for(&call(&on_a, "execute", json!({"script": START})).await);

    let mut rita = ConsoleUser::new(&a.base());
    assert_eq!(
        rita.sign_in(&rita_key).await.status(),
        reqwest::StatusCode::SEE_OTHER
    );
    rita.base = b.base();
    let (status, _) = rita.decide(&id, "approve", "on B").await;
    assert_eq!(status, reqwest::StatusCode::SEE_OTHER);
    // The agent follows its execution, which waited on A: it goes on.
    let ran = value(&call(&on_a, "execute", json!({"execution": execution})).await);
    assert!(
        ran.as_str().is_some_and(|t| t.contains(":qmstart:103:")),
        "{ran}"
    );
    let (again, _) = waits_for(&call(&on_a, "execute", json!({"script": START})).await);
    assert_ne!(again, id, "used once");

    let (_, page) = rita.get("/console").await;
    let (status, _) = rita
        .post("/console/logout", &[("csrf", &ConsoleUser::csrf(&page))])
        .await;
    assert_eq!(status, reqwest::StatusCode::SEE_OTHER);
    rita.base = a.base();
    assert_eq!(rita.get("/console").await.0, reqwest::StatusCode::SEE_OTHER);
    on_a.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openid_providers_token_works_on_every_replica() {
    use airlock_testkit::{OidcClient, TempOidcProvider};
    let Some(packages) = common::oidc_packages() else {
        return;
    };
    let provider = tokio::task::block_in_place(|| {
        TempOidcProvider::start(
            &packages,
            &[OidcClient::new("deploy-bot", "deploy-secret").with_groups(&["admins"])],
        )
    })
    .unwrap();
    let d = deployment().await;
    // The address clients use, through the proxy this test leaves out.
    let resource = "http://localhost:8080/mcp";
    let mut toml = std::fs::read_to_string(&d.config).unwrap();
    toml.push_str(&format!(
        "\n[oauth]\nresource = \"{resource}\"\nscopes = [\"mcp\"]\n\
         [[oauth.issuers]]\nissuer = \"{}\"\nalgorithms = [\"ES256\"]\n\
         groups = {{ admins = \"rw\" }}\n",
        provider.issuer()
    ));
    std::fs::write(&d.config, toml).unwrap();
    let (a, b) = d.two_replicas();
    let token = tokio::task::block_in_place(|| provider.token("deploy-bot", resource)).unwrap();
    let on_a = a.connect(&token).await;
    let on_b = b.connect(&token).await;

    let (id, _) = waits_for(&call(&on_a, "execute", json!({"script": START})).await);
    let listed = d.airlock(&["approvals", "list", "--json"]);
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed[0]["identity"], "sso:deploy-bot", "{listed}");
    let approved = d.airlock(&["approvals", "approve", &id, "--by", "carol"]);
    assert!(approved.status.success(), "{approved:?}");
    let second = value(&call(&on_b, "execute", json!({"script": START})).await);
    let task = second.as_str().unwrap_or_default();
    assert!(
        task.contains(":qmstart:103:"),
        "ran on the other replica: {second}"
    );
    let (again, _) = waits_for(&call(&on_a, "execute", json!({"script": START})).await);
    assert_ne!(again, id, "used once");
    let verified = d.airlock(&["audit", "verify"]);
    assert!(verified.status.success(), "{verified:?}");
}

/// Stops VM 100 and waits for the task: an approval-tier change for
/// alice, planned once and applied.
const STOP_100: &str =
    "const upid = await tools.vm_shutdown({node: 'pve1', vmid: 100, timeout: 30}); \
                        (await tools.wait_task({node: 'pve1', upid})).exitstatus";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_recorded_on_one_replica_is_approved_from_a_shell_and_applied_on_another() {
    let d = deployment().await;
    let alice = d.enroll("alice");
    let (a, b) = d.two_replicas();
    let on_a = a.connect(&alice).await;
    let on_b = b.connect(&alice).await;

    let planned = call(
        &on_a,
        "execute",
        json!({"script": STOP_100, "mode": "plan"}),
    )
    .await;
    let plan = planned.structured_content.as_ref().unwrap()["plan"].clone();
    assert_eq!(plan["status"], "pending", "{plan}");
    assert_eq!(value(&planned), "planned");
    let id = plan["id"].as_str().unwrap().to_string();

    // The operator reads the plan as a table and approves it whole.
    let listed = d.airlock(&["approvals", "list"]);
    let table = stdout(&listed);
    assert!(
        table.contains(&id) && table.contains("1. vm_shutdown [operate]"),
        "{table}"
    );
    let approved = d.airlock(&["approvals", "approve", &id, "--by", "carol"]);
    assert!(approved.status.success(), "{approved:?}");

    // Applied through the other replica; then used up on both.
    let applied = call(&on_b, "execute", json!({"script": STOP_100, "plan": id})).await;
    assert_eq!(value(&applied), "OK", "{applied:?}");
    for client in [&on_a, &on_b] {
        let again = call(client, "execute", json!({"script": STOP_100, "plan": id})).await;
        assert_eq!(again.is_error, Some(true));
        assert!(common::text(&again).contains("plan_used"), "{again:?}");
    }

    // One chain ties the plan together, and verifies.
    let verified = d.airlock(&["audit", "verify"]);
    assert!(verified.status.success(), "{verified:?}");
    let file = d.dir.path().join("export.jsonl");
    let exported = d.airlock(&["audit", "export", "--output", file.to_str().unwrap()]);
    assert!(exported.status.success(), "{exported:?}");
    assert!(audit::verify(&file).unwrap().ok());
    let lines: Vec<Value> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|l: &Value| l["plan"] == id.as_str())
        .collect();
    let events: Vec<String> = lines
        .iter()
        .map(|l| {
            format!(
                "{}/{}",
                l["event"].as_str().unwrap(),
                l["decision"].as_str().unwrap_or("")
            )
        })
        .collect();
    for e in [
        "call/planned",
        "plan/",
        "plan_decision/",
        "plan_apply/applying",
        "call/allowed",
        "plan_end/",
    ] {
        assert!(events.iter().any(|x| x == e), "{e}: {events:?}");
    }
    // The shutdown, then the wait for its task: the plan's two steps.
    let made: Vec<&Value> = lines
        .iter()
        .filter(|l| l["event"] == "call" && l["decision"] == "allowed")
        .collect();
    assert_eq!(made.len(), 2, "{made:?}");
    assert_eq!(
        (&made[0]["tool"], &made[1]["tool"], &made[1]["waits_on"]),
        (&json!("vm_shutdown"), &json!("wait_task"), &json!(1))
    );
    assert!(made.iter().all(|m| m["approved_by"] == "carol"));
    let decision = lines
        .iter()
        .find(|l| l["event"] == "plan_decision")
        .unwrap();
    assert_eq!(
        (&decision["channel"], &decision["own"]),
        (&json!("cli"), &json!(false))
    );
}

fn private(file: &Path) {
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(file).unwrap().mode() & 0o777, 0o600);
}

/// nginx in front of the replicas, as docs/DEPLOYMENT.md configures it: a
/// session's requests hash to one replica; requests without a session
/// (an `initialize`) spread by their request id.
const NGINX_HTTP: &str = "map $http_mcp_session_id $airlock_route {\n    \"\" $request_id;\n    default $http_mcp_session_id;\n}";
const NGINX_UPSTREAM: &str = "hash $airlock_route consistent;";

/// One client's script and the value it must return every time.
fn job(identity: &str) -> &'static str {
    match identity {
        "rita" => "(await tools.vm_list({node: 'pve1'})).length",
        "olga" => "(await tools.node_list()).map((n) => n.node).sort().join(',')",
        _ => "(await Promise.all([tools.node_list(), tools.vm_list({node: 'pve2'})])).length",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_behind_nginx_go_on_when_one_is_killed() {
    let d = deployment().await;
    let identities = ["alice", "olga", "rita"];
    let keys: Vec<(String, String)> = identities
        .iter()
        .map(|i| (i.to_string(), d.enroll(i)))
        .collect();
    let mut replicas: Vec<Server> = {
        let d = &d;
        tokio::task::block_in_place(|| (0..3).map(|_| d.replica()).collect())
    };
    let upstreams: Vec<String> = replicas
        .iter()
        .map(|r| r.base().trim_start_matches("http://").to_string())
        .collect();
    let nginx = TempNginx::start(&upstreams, NGINX_UPSTREAM, NGINX_HTTP).unwrap();
    let url = nginx.url("/mcp");

    // Where each session's requests went, by nginx's access log.
    let homes = |log: &str| -> std::collections::BTreeMap<String, String> {
        log.lines()
            .filter_map(|l| {
                let session = l.split(" session=").nth(1)?.split(' ').next()?;
                let upstream = l.split(" upstream=").nth(1)?.split(' ').next()?;
                (session != "-" && !session.is_empty())
                    .then(|| (session.to_string(), upstream.to_string()))
            })
            .collect()
    };

    // Two sessions per identity, through nginx, and more (a few at most)
    // while the hash has put them all on one replica.
    let mut clients = Vec::new();
    for (identity, key) in keys.iter().cycle() {
        let spread = homes(&nginx.access_log())
            .values()
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        if clients.len() >= 2 * keys.len() && spread >= 2 || clients.len() >= 8 * keys.len() {
            break;
        }
        let config =
            rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                url.as_str(),
            )
            .auth_header(key.clone());
        let transport = rmcp::transport::StreamableHttpClientTransport::from_config(config);
        let client = rmcp::ServiceExt::serve((), transport).await.unwrap();
        clients.push((identity.clone(), std::sync::Arc::new(client)));
    }

    // Before: every call answers, and the sessions live on more than one
    // replica.
    let mut expected = std::collections::HashMap::new();
    let mut took = Vec::new();
    for (identity, client) in &clients {
        for _ in 0..3 {
            let started = std::time::Instant::now();
            let r = run(client.clone(), identity.clone()).await.unwrap();
            took.push(started.elapsed());
            let v = value(&r);
            assert!(!v.is_null() && v.get("code").is_none(), "{identity}: {r:?}");
            let first = expected.entry(identity.clone()).or_insert(v.clone());
            assert_eq!(first, &v, "{identity}");
        }
    }
    let before = homes(&nginx.access_log());
    let used: std::collections::BTreeSet<&String> = before.values().collect();
    assert!(used.len() >= 2, "sessions on one replica only: {before:?}");

    // Kill the replica holding the most sessions, with every client
    // running a script.
    let victim = {
        let mut count = std::collections::HashMap::<&String, usize>::new();
        for up in before.values() {
            *count.entry(up).or_default() += 1;
        }
        let busiest = count.into_iter().max_by_key(|(_, n)| *n).unwrap().0.clone();
        upstreams.iter().position(|u| *u == busiest).unwrap()
    };
    let sessions_on_victim = before.values().filter(|u| **u == upstreams[victim]).count();
    // A client gives up on a request after its own timeout (the
    // TypeScript SDK's is 60 s): rmcp's never does when the stream
    // answering it is cut by the kill and its resumption on another
    // replica ends empty, so the test gives each call the timeout a
    // client would.
    let during: Vec<_> = clients
        .iter()
        .map(|(identity, client)| {
            let call = run(client.clone(), identity.clone());
            tokio::spawn(tokio::time::timeout(CLIENT_REQUEST_TIMEOUT, call))
        })
        .collect();
    replicas[victim].child.kill().unwrap();
    replicas[victim].child.wait().unwrap();
    let mut lost = 0;
    for handle in during {
        if !matches!(handle.await.unwrap(), Ok(Ok(_))) {
            lost += 1;
        }
    }
    assert!(
        lost <= sessions_on_victim,
        "{lost} calls lost, {sessions_on_victim} sessions were there"
    );

    took.sort();
    eprintln!(
        "replicas: {} sessions, {sessions_on_victim} on the killed replica, {lost} calls lost with it; \
         before the kill, one execute through nginx p50 {:?}, max {:?} ({} executes, one at a time)",
        before.len(),
        took[took.len() / 2],
        took[took.len() - 1],
        took.len()
    );

    // After: every client, its session included, goes on.
    for (identity, client) in &clients {
        for _ in 0..3 {
            let r = tokio::time::timeout(
                CLIENT_REQUEST_TIMEOUT,
                run(client.clone(), identity.clone()),
            )
            .await
            .unwrap_or_else(|_| panic!("{identity}: no answer within {CLIENT_REQUEST_TIMEOUT:?}"))
            .unwrap_or_else(|e| panic!("{identity}: {e}"));
            assert_eq!(&value(&r), &expected[identity], "{identity}: {r:?}");
        }
    }
    // The victim's sessions were picked up by the replicas left.
    let after = homes(&nginx.access_log());
    for (session, home) in &before {
        if *home == upstreams[victim] {
            assert_ne!(after[session], upstreams[victim], "{session}");
        }
    }
    drop(clients);
    replicas.retain_mut(|r| r.is_running());
    assert_eq!(replicas.len(), 2);

    // The chain verifies; every call the audit let through reached the
    // cluster (at most the killed replica's calls in flight are unknown).
    let verified = d.airlock(&["audit", "verify"]);
    assert!(verified.status.success(), "{verified:?}");
    let file = d.dir.path().join("deployment.jsonl");
    assert!(d
        .airlock(&["audit", "export", "-o", file.to_str().unwrap()])
        .status
        .success());
    let lines: Vec<Value> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let allowed: std::collections::BTreeSet<&str> = lines
        .iter()
        .filter(|l| l["event"] == "call" && l["decision"] == "allowed")
        .map(|l| l["call"].as_str().unwrap())
        .collect();
    let ended: std::collections::BTreeSet<&str> = lines
        .iter()
        .filter(|l| l["event"] == "call_result")
        .map(|l| l["call"].as_str().unwrap())
        .collect();
    let answered = d._sim.requests().await.len();
    assert!(
        ended.len() <= answered && answered <= allowed.len(),
        "simulator answered {answered}; audit: {} allowed, {} with a result",
        allowed.len(),
        ended.len()
    );
    // Calls without a result, and executions without an end, can only be
    // the killed replica's (ids start with the writing process's id).
    let events = |event: &str| -> std::collections::BTreeSet<&str> {
        lines
            .iter()
            .filter(|l| l["event"] == event)
            .map(|l| l["execution"].as_str().unwrap())
            .collect()
    };
    let open: Vec<&str> = events("execution_start")
        .difference(&events("execution_end"))
        .copied()
        .chain(allowed.difference(&ended).copied())
        .collect();
    let writers: std::collections::BTreeSet<&str> = open
        .iter()
        .map(|id| id.split('-').next().unwrap())
        .collect();
    assert!(
        writers.len() <= 1,
        "left open by several replicas: {open:?}"
    );
    let never_ended = events("execution_start")
        .difference(&events("execution_end"))
        .count();
    let note = stdout(&verified);
    assert_eq!(note.contains("no end line"), never_ended > 0, "{note}");

    // The operator ends them (every client is gone, so none is running):
    // each gets an end line with outcome unknown, and the chain verifies.
    let closed = d.airlock(&["audit", "close", "--older-than", "0s"]);
    assert!(closed.status.success(), "{closed:?}");
    assert!(
        stdout(&closed).starts_with(&format!("closed {never_ended} execution(s)")),
        "{closed:?}"
    );
    let verified = d.airlock(&["audit", "verify"]);
    assert!(verified.status.success(), "{verified:?}");
    assert!(!stdout(&verified).contains("no end line"), "{verified:?}");
    let again = d.airlock(&["audit", "close", "--older-than", "0s"]);
    assert!(
        stdout(&again).starts_with("closed 0 execution(s)"),
        "{again:?}"
    );
}

/// Has a replica re-read the keys now (SIGHUP) and waits until it has.
fn reread_keys(replica: &Server) {
    let hup = Command::new("kill")
        .args(["-HUP", &replica.child.id().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    replica.wait_for("reloaded the enrolled keys");
}

/// A raw `initialize` request.
fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}})
}

/// Runs the identity's script once in the client's session.
/// How long a client waits for a call before it gives up on it.
const CLIENT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

async fn run(
    client: std::sync::Arc<rmcp::service::RunningService<rmcp::RoleClient, ()>>,
    identity: String,
) -> Result<rmcp::model::CallToolResult, rmcp::ServiceError> {
    let args = json!({"script": job(&identity)});
    client
        .call_tool(
            rmcp::model::CallToolRequestParams::new("execute")
                .with_arguments(args.as_object().unwrap().clone()),
        )
        .await
}

/// `/healthz`'s status, within a second.
async fn health(base: &str) -> u16 {
    let answer = reqwest::Client::new()
        .get(format!("{base}/healthz"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .unwrap();
    answer.status().as_u16()
}

/// Asks `/healthz` until it answers `want`, for at most `within`.
async fn health_becomes(base: &str, want: u16, within: Duration) {
    let until = std::time::Instant::now() + within;
    loop {
        let got = health(base).await;
        if got == want {
            return;
        }
        assert!(
            std::time::Instant::now() < until,
            "/healthz still answered {got}, not {want}, after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Found by a database outage under load: executions refused while the
/// database was down came back as `InvalidRequest` (an agent reading the
/// kind is not told to retry), the replica logged only its pool's
/// warnings, and `/healthz` answered 200 throughout. Now: a retryable
/// `StateUnavailable` naming the store, one log line with counts, not
/// ready while the database is away, and ready again when it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_the_database_is_down_executions_are_refused_as_retryable_and_the_replica_is_not_ready(
) {
    let d = deployment().await;
    let alice = d.enroll("alice");
    let a = d.replica();
    let base = a.base();
    let on_a = a.connect(&alice).await;
    assert_eq!(health(&base).await, 200);
    let ran = call(&on_a, "execute", json!({"script": "1 + 1"})).await;
    assert_eq!(value(&ran), json!(2));

    d.pg.stop_now().unwrap();
    let refused = call(&on_a, "execute", json!({"script": "1 + 1"})).await;
    let error = &refused.structured_content.as_ref().unwrap()["error"];
    assert_eq!(error["kind"], "StateUnavailable", "{error}");
    assert_eq!(
        (&error["store"], &error["retryable"]),
        (&json!("audit"), &json!(true))
    );
    assert!(error["retry_after_ms"].as_u64().unwrap() > 0, "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("run it again"), "{message}");
    assert!(!message.contains(d.pg.password()), "{message}");
    // Many refusals, one line that counts them.
    for _ in 0..5 {
        let again = call(&on_a, "execute", json!({"script": "1 + 1"})).await;
        assert_eq!(
            again.structured_content.unwrap()["error"]["kind"],
            "StateUnavailable"
        );
    }
    let logged = tokio::task::block_in_place(|| {
        a.wait_for("executions refused: the audit store cannot be reached")
    });
    assert!(logged.contains("refused=1"), "{logged}");
    health_becomes(&base, 503, Duration::from_secs(10)).await;

    d.pg.restart().unwrap();
    health_becomes(&base, 200, Duration::from_secs(15)).await;
    let until = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let r = call(&on_a, "execute", json!({"script": "1 + 1"})).await;
        if r.structured_content.as_ref().unwrap()["result"] == json!(2) {
            break;
        }
        assert!(std::time::Instant::now() < until, "{r:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let verified = d.airlock(&["audit", "verify"]);
    assert!(verified.status.success(), "{verified:?}");
}

/// A raw MCP POST with a bearer key (and a session, if any).
async fn raw_post(url: &str, key: &str, session: Option<&str>, body: Value) -> reqwest::Response {
    let mut r = reqwest::Client::new()
        .post(url)
        .bearer_auth(key)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .timeout(Duration::from_secs(30))
        .body(body.to_string());
    if let Some(s) = session {
        r = r.header("mcp-session-id", s);
    }
    r.send().await.unwrap()
}

/// Found by a database outage: a session opened while the database was
/// down answered 200, its owner was never recorded, and every other
/// replica answered its requests 404 for good. Now it is refused (503,
/// `Retry-After`), and one opened once the database is back is served by
/// both replicas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_opened_while_the_database_is_down_is_refused_never_left_unshared() {
    let d = deployment().await;
    let alice = d.enroll("alice");
    let (a, b) = d.two_replicas();

    d.pg.stop_now().unwrap();
    let refused = raw_post(&a.url, &alice, None, initialize()).await;
    assert_eq!(refused.status(), 503);
    assert!(refused.headers().contains_key("retry-after"));
    assert!(!refused.headers().contains_key("mcp-session-id"));
    let said = refused.text().await.unwrap();
    assert!(said.contains("open the session again"), "{said}");
    assert!(!said.contains(d.pg.password()), "{said}");

    d.pg.restart().unwrap();
    let until = std::time::Instant::now() + Duration::from_secs(15);
    let session = loop {
        let opened = raw_post(&a.url, &alice, None, initialize()).await;
        if opened.status() == 200 {
            break opened.headers()["mcp-session-id"]
                .to_str()
                .unwrap()
                .to_string();
        }
        assert_eq!(opened.status(), 503);
        assert!(
            std::time::Instant::now() < until,
            "no session 15 s after the database came back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(
        raw_post(&a.url, &alice, Some(&session), initialized)
            .await
            .status(),
        202
    );
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    for replica in [&a, &b] {
        let listed = raw_post(&replica.url, &alice, Some(&session), list.clone()).await;
        let status = listed.status();
        assert_eq!(
            status,
            200,
            "{}: {}",
            replica.url,
            listed.text().await.unwrap()
        );
    }
}

/// Found by a database outage: executions running when the database
/// went away lost their end line and stayed "still running, or killed"
/// in `audit verify` until an operator closed them. Now the replica
/// writes the end when the database is back, marked as ended during the
/// outage, and `audit verify` reports nothing open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execution_cut_off_by_an_outage_has_its_end_written_when_the_database_is_back() {
    let d = deployment().await;
    let alice = d.enroll("alice");
    let (a, b) = d.two_replicas();
    let on_a = std::sync::Arc::new(a.connect(&alice).await);
    let client = on_a.clone();
    let running = tokio::spawn(async move {
        call(
            &client,
            "execute",
            json!({"script": "await new Promise((r) => setTimeout(r, 1500)); 'slept'"}),
        )
        .await
    });
    // Once its start is in the chain, the database goes away.
    let until = std::time::Instant::now() + Duration::from_secs(20);
    while d
        .pg
        .psql(
            "airlock",
            "SELECT count(*) FROM airlock_audit WHERE line LIKE '%\"execution_start\"%'",
        )
        .unwrap()
        .trim()
        == "0"
    {
        assert!(
            std::time::Instant::now() < until,
            "the execution never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    d.pg.stop_now().unwrap();
    let ran = running.await.unwrap();
    assert_eq!(value(&ran), json!("slept"), "{ran:?}");

    d.pg.restart().unwrap();
    // A's health check finds the database back and writes what it owes.
    health_becomes(&a.base(), 200, Duration::from_secs(15)).await;
    health_becomes(&b.base(), 200, Duration::from_secs(15)).await;
    // Written in the background once the health check found it back.
    let until = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let ended = d
            .pg
            .psql(
                "airlock",
                "SELECT count(*) FROM airlock_audit WHERE line LIKE '%\"execution_end\"%' AND line LIKE '%\"ended_during_outage\":true%'",
            )
            .unwrap();
        if ended.trim() == "1" {
            break;
        }
        assert_eq!(ended.trim(), "0", "one end, written once");
        assert!(
            std::time::Instant::now() < until,
            "the owed end was never written"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let verified = d.airlock(&["audit", "verify"]);
    let said = stdout(&verified);
    assert!(verified.status.success(), "{said}");
    assert!(!said.contains("have no end line"), "{said}");
}

/// A change the script tries and catches (olga's, an approval-tier call).
const SHUTDOWN: &str = r#"let said;
try { await tools.vm_shutdown({node: "pve1", vmid: 101, timeout: 5}); said = "made"; }
catch (e) { said = e.code + ": " + e.message; }
said"#;

impl Deployment {
    /// Olga may approve her own calls in her client (replicas started
    /// after this read it).
    fn olga_approves_her_own(&self) {
        common::approves_own(&self.config, "olga", "operator");
    }

    /// The deployment's audit chain, exported from the database.
    fn audit(&self) -> Vec<Value> {
        let file = self.dir.path().join("export.jsonl");
        let out = self.airlock(&["audit", "export", "--output", file.to_str().unwrap()]);
        assert!(out.status.success(), "{out:?}");
        std::fs::read_to_string(&file)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Shutdowns the cluster was asked for.
    async fn shutdowns(&self) -> usize {
        common::shutdowns(&self._sim).await
    }
}

/// The TypeScript SDK 2.x client on 2026-07-28, asked an approval through
/// one replica, answers through the other: an altered state decides
/// nothing; the state as sealed decides once and the execution goes on
/// there, its change sent once; the same answer again (replayed) decides
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_client_answers_on_another_replica_and_the_change_is_sent_once() {
    let d = deployment().await;
    d.olga_approves_her_own();
    let olga = d.enroll("olga");
    let (a, b) = d.two_replicas();
    let (on_a, on_b) = (format!("{}/mcp", a.base()), format!("{}/mcp", b.base()));
    let Some(r) = common::modern(&[&on_a, &olga, SHUTDOWN, "other", &on_b]) else {
        return;
    };
    assert_eq!(
        r["first"]["input_required"].as_array().unwrap().len(),
        1,
        "{r}"
    );
    for step in ["tampered", "replayed"] {
        assert_eq!(
            r[step]["result"]["error"]["kind"], "InvalidRequestState",
            "{step}: {r}"
        );
    }
    assert_eq!(r["answered"]["result"]["result"], "made", "{r}");
    assert_eq!(d.shutdowns().await, 1, "sent once");
    let lines = d.audit();
    let decided: Vec<&Value> = lines
        .iter()
        .filter(|l| l["event"] == "approval_decision")
        .collect();
    assert_eq!(decided.len(), 1, "{decided:?}");
    assert_eq!(decided[0]["channel"], "client");
    let verified = d.airlock(&["audit", "verify"]);
    assert!(verified.status.success(), "{verified:?}");
}

/// Two replicas behind nginx's default round-robin (no sticky routing: a
/// 2026-07-28 client has no session to stick to) serve the whole flow
/// of the TypeScript SDK 2.x client — search, get_schema, execute, the
/// approval asked and answered, the execution resumed — and `execute` as
/// a task through the tasks extension's official client; each change is
/// sent once, and both replicas took part.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_round_robin_serve_a_modern_client_end_to_end() {
    let d = deployment().await;
    d.olga_approves_her_own();
    let olga = d.enroll("olga");
    let (a, b) = d.two_replicas();
    let upstreams: Vec<String> = [&a, &b]
        .iter()
        .map(|r| r.base().trim_start_matches("http://").to_string())
        .collect();
    let nginx = TempNginx::start(&upstreams, "", "").unwrap();
    let url = nginx.url("/mcp");
    let Some(flow) = common::modern(&[&url, &olga, SHUTDOWN, "flow"]) else {
        return;
    };
    assert_eq!(flow["protocol"], "2026-07-28", "{flow}");
    assert_eq!(
        (&flow["searched"], &flow["schema"]),
        (&json!(true), &json!(true)),
        "{flow}"
    );
    assert_eq!(flow["final"]["result"]["result"], "made", "{flow}");
    assert_eq!(flow["asked"].as_array().unwrap().len(), 1, "{flow}");
    let other = SHUTDOWN.replace("vmid: 101", "vmid: 102");
    let task = common::modern(&[&url, &olga, &other, "task"]).unwrap();
    assert_eq!(
        (&task["kind"], &task["outcome"]),
        (&json!("task"), &json!("completed")),
        "{task}"
    );
    assert_eq!(task["final"]["result"], "made", "{task}");
    assert_eq!(d.shutdowns().await, 2, "each sent once");
    let served: std::collections::BTreeSet<String> = nginx
        .access_log()
        .lines()
        .filter_map(|l| Some(l.split(" upstream=").nth(1)?.split(' ').next()?.to_string()))
        .collect();
    assert_eq!(served.len(), 2, "both replicas answered: {served:?}");
    let lines = d.audit();
    assert_eq!(
        lines
            .iter()
            .filter(|l| l["event"] == "execution_end" && l["outcome"] == "ok")
            .count(),
        2
    );
}
