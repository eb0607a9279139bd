//! The Proxmox client and backend against the simulated cluster over real
//! HTTPS: certificate pinning and CA bundles, auth and permission errors,
//! PVE's error answers, timeouts, parameter encoding, tasks, and the full
//! catalog generated from the simulator's own schema.

use std::{collections::BTreeMap, path::Path, sync::Arc, time::Duration};

use airlock_edge::tls::{parse_fingerprint, Trust};
use airlock_gateway::{Backend, Caller, Gateway, GatewayConfig};
use airlock_proxmox::{
    apidata::Method,
    backend::{CatalogKind, ProxmoxBackend, ProxmoxConfig, TargetConfig},
    client::{ApiToken, PveClient, PveError, Request, Timeouts},
    curated,
};
use airlock_sim::{Role, SimConfig, Simulator};
use airlock_state::Place;
use serde_json::{json, Value};

async fn sim() -> (Simulator, SimConfig) {
    let mut config = SimConfig::with_default_tokens(Duration::from_millis(30));
    // What the simulator implements, in the API viewer's format, for the
    // full-catalog generator to read back as from a real cluster.
    config.api_viewer = Some(airlock_proxmox::viewer::apidata_js());
    (Simulator::start(&config).await.unwrap(), config)
}

fn token(config: &SimConfig, role: Role) -> ApiToken {
    ApiToken::parse(&config.token(role).unwrap().line()).unwrap()
}

fn pinned(sim: &Simulator) -> PveClient {
    let pin = parse_fingerprint(sim.fingerprint()).unwrap();
    PveClient::new(&sim.url(), &Trust::Pin(pin), Timeouts::default()).unwrap()
}

fn get(path: &str) -> Request {
    Request {
        method: Method::Get,
        path: path.into(),
        params: vec![],
    }
}

#[tokio::test]
async fn pinned_certificate_works_and_a_wrong_pin_sends_nothing() {
    let (sim, config) = sim().await;
    let nodes = pinned(&sim)
        .call(&token(&config, Role::Reader), &get("/nodes"))
        .await
        .unwrap();
    assert_eq!(nodes.as_array().unwrap().len(), 3);

    let wrong = PveClient::new(
        &sim.url(),
        &Trust::Pin([7; 32]),
        Timeouts {
            get_retries: 0,
            ..Timeouts::default()
        },
    )
    .unwrap();
    let before = sim.requests().await.len();
    let err = wrong
        .call(&token(&config, Role::Admin), &get("/nodes"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, PveError::Connect(m) if m.contains("does not match the configured pin")),
        "{err:?}"
    );
    assert_eq!(
        sim.requests().await.len(),
        before,
        "not one request reached the server"
    );
    assert!(
        !err.to_string().contains("127.0.0.1"),
        "no address in the error: {err}"
    );
}

#[tokio::test]
async fn a_ca_bundle_works_too() {
    let (sim, config) = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, sim.certificate_pem()).unwrap();
    let url = sim.url().replace("127.0.0.1", "localhost");
    let client = PveClient::new(&url, &Trust::CaBundle(ca), Timeouts::default()).unwrap();
    let v = client
        .call(&token(&config, Role::Reader), &get("/version"))
        .await
        .unwrap();
    assert_eq!(v["release"], "9.1");
    // A bundle that did not sign it is refused.
    let other = dir.path().join("other.pem");
    let foreign = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    std::fs::write(&other, foreign.cert.pem()).unwrap();
    let client = PveClient::new(
        &url,
        &Trust::CaBundle(other),
        Timeouts {
            get_retries: 0,
            ..Timeouts::default()
        },
    )
    .unwrap();
    assert!(matches!(
        client
            .call(&token(&config, Role::Reader), &get("/version"))
            .await,
        Err(PveError::Connect(_))
    ));
}

#[tokio::test]
async fn auth_permission_and_server_errors_are_mapped() {
    let (sim, config) = sim().await;
    let client = pinned(&sim);
    let bad = ApiToken::parse("airlock@pve!reader=00000000-0000-0000-0000-000000000000").unwrap();
    assert_eq!(
        client.call(&bad, &get("/nodes")).await.unwrap_err(),
        PveError::Unauthorized
    );

    let start = Request {
        method: Method::Post,
        path: "/nodes/pve1/qemu/103/status/start".into(),
        params: vec![],
    };
    let err = client
        .call(&token(&config, Role::Reader), &start)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, PveError::Forbidden(m) if m.contains("VM.PowerMgmt")),
        "{err:?}"
    );
    assert_eq!(err.code(), "permission_denied");

    let err = client
        .call(
            &token(&config, Role::Admin),
            &get("/nodes/pve1/qemu/999/status/current"),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, PveError::Server { status: 500, message } if message.contains("999")),
        "{err:?}"
    );

    let create = Request {
        method: Method::Post,
        path: "/nodes/pve1/qemu".into(),
        params: vec![],
    };
    let err = client
        .call(&token(&config, Role::Admin), &create)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, PveError::BadParameters(m) if m.contains("vmid")),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_server_that_never_answers_times_out_and_only_reads_are_retried() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    // Accepts connections and then says nothing, not even a TLS hello.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            held.push(s);
        }
    });
    let timeouts = Timeouts {
        connect: Duration::from_millis(200),
        request: Duration::from_millis(300),
        get_retries: 1,
    };
    let client =
        PveClient::new(&format!("https://{addr}"), &Trust::Pin([0; 32]), timeouts).unwrap();
    let token = ApiToken::parse("a@pve!b=c").unwrap();
    let err = client.call(&token, &get("/nodes")).await.unwrap_err();
    assert_eq!(err.code(), "timeout", "{err:?}");
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "a read is tried again once"
    );
    let stop = Request {
        method: Method::Post,
        path: "/nodes/pve1/qemu/100/status/stop".into(),
        params: vec![],
    };
    assert_eq!(
        client.call(&token, &stop).await.unwrap_err().code(),
        "timeout"
    );
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        3,
        "a write is never repeated"
    );
}

#[tokio::test]
async fn a_server_that_resets_connections_is_an_error_and_writes_are_not_repeated() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    // Accepts each connection and resets it at once (RST, no TLS hello).
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            let _ = s.set_zero_linger();
            drop(s);
        }
    });
    let timeouts = Timeouts {
        connect: Duration::from_millis(500),
        request: Duration::from_secs(5),
        get_retries: 1,
    };
    let client =
        PveClient::new(&format!("https://{addr}"), &Trust::Pin([0; 32]), timeouts).unwrap();
    let token = ApiToken::parse("a@pve!b=c").unwrap();
    let read = client.call(&token, &get("/nodes")).await.unwrap_err();
    assert_eq!(read.code(), "unreachable", "{read:?}");
    assert!(!read.to_string().contains("b=c"), "{read}");
    let reads = accepted.load(Ordering::SeqCst);
    assert_eq!(reads, 2, "a read is tried again once: {read:?}");
    let stop = Request {
        method: Method::Post,
        path: "/nodes/pve1/qemu/100/status/stop".into(),
        params: vec![],
    };
    let write = client.call(&token, &stop).await.unwrap_err();
    assert_eq!(write.code(), read.code(), "{write:?}");
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        3,
        "a write is never repeated"
    );
}

#[tokio::test]
async fn an_unreachable_node_is_reported_as_such() {
    let (sim, config) = sim().await;
    sim.with_cluster(|c| c.nodes[2].online = false).await;
    let err = pinned(&sim)
        .call(&token(&config, Role::Reader), &get("/nodes/pve3/qemu"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "unreachable", "{err:?}");
    assert!(err.to_string().contains("pve3"), "{err}");
}

#[tokio::test]
async fn parameters_are_encoded_as_pve_expects() {
    let (sim, config) = sim().await;
    let client = pinned(&sim);
    let admin = token(&config, Role::Admin);
    let migrate = Request {
        method: Method::Post,
        path: "/nodes/pve1/qemu/100/migrate".into(),
        params: vec![
            ("target".into(), "pve2".into()),
            ("online".into(), "1".into()),
        ],
    };
    let upid = client.call(&admin, &migrate).await.unwrap();
    assert!(upid.as_str().unwrap().starts_with("UPID:pve1:"), "{upid}");
    let seen = sim.requests().await;
    assert!(
        seen.iter().any(
            |(m, p, _)| m == "POST" && p == "/nodes/pve1/qemu/100/migrate?online=1&target=pve2"
        ),
        "{seen:?}"
    );
    // GET parameters travel in the query string.
    client
        .call(
            &admin,
            &Request {
                method: Method::Get,
                path: "/nodes/pve1/tasks".into(),
                params: vec![
                    ("vmid".into(), "100".into()),
                    ("source".into(), "all".into()),
                ],
            },
        )
        .await
        .unwrap();
    assert!(sim
        .requests()
        .await
        .iter()
        .any(|(_, p, _)| p == "/nodes/pve1/tasks?source=all&vmid=100"));
}

fn write_tokens(
    dir: &Path,
    config: &SimConfig,
) -> std::collections::HashMap<String, std::path::PathBuf> {
    let mut map = std::collections::HashMap::new();
    for (identity, role) in [
        ("alice", Role::Admin),
        ("olga", Role::Operator),
        ("rita", Role::Reader),
    ] {
        let path = dir.join(format!("{identity}.token"));
        airlock_edge::credential_file::write(&path, &config.token(role).unwrap().line()).unwrap();
        map.insert(identity.to_string(), path);
    }
    map
}

fn proxmox_config(
    sim: &Simulator,
    config: &SimConfig,
    dir: &Path,
    catalog: CatalogKind,
) -> ProxmoxConfig {
    let mut targets = BTreeMap::new();
    targets.insert(
        "lab".to_string(),
        TargetConfig {
            url: sim.url(),
            fingerprint: Some(sim.fingerprint().to_string()),
            tokens: write_tokens(dir, config),
            ..TargetConfig::default()
        },
    );
    ProxmoxConfig {
        catalog,
        targets,
        ..ProxmoxConfig::default()
    }
}

#[tokio::test]
async fn the_backend_runs_tools_and_waits_for_tasks() {
    let (sim, config) = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let backend = ProxmoxBackend::new(&proxmox_config(
        &sim,
        &config,
        dir.path(),
        CatalogKind::Curated,
    ))
    .await
    .unwrap()
    .with_poll(Duration::from_millis(10), Duration::from_millis(50));
    assert_eq!(backend.tools().len(), curated::count());
    let tool = |n: &str| backend.tools().into_iter().find(|t| t.name == n).unwrap();
    let alice = Caller::new("alice");
    let r = backend
        .call(
            &alice,
            &tool("vm_start"),
            json!({"node": "pve1", "vmid": 103}),
        )
        .await
        .unwrap();
    let upid = r.value.as_str().unwrap().to_string();
    assert_eq!(r.request_id.as_deref(), Some(upid.as_str()));
    let done = backend
        .call(
            &alice,
            &tool("wait_task"),
            json!({"node": "pve1", "upid": upid}),
        )
        .await
        .unwrap();
    assert_eq!(done.value["exitstatus"], "OK", "{done:?}");
    assert_eq!(done.value["ok"], true);
    assert!(done.value["log"]
        .as_array()
        .unwrap()
        .iter()
        .any(|l| l == "TASK OK"));
    let status = backend
        .call(
            &alice,
            &tool("vm_status"),
            json!({"node": "pve1", "vmid": 103}),
        )
        .await
        .unwrap();
    assert_eq!(status.value["status"], "running");
    // Starting it again fails in the task, as PVE does.
    let again = backend
        .call(
            &alice,
            &tool("vm_start"),
            json!({"node": "pve1", "vmid": 103}),
        )
        .await
        .unwrap();
    let done = backend
        .call(
            &alice,
            &tool("wait_task"),
            json!({"node": "pve1", "upid": again.value}),
        )
        .await
        .unwrap();
    assert_eq!(done.value["exitstatus"], "VM 103 already running");
    assert_eq!(done.value["ok"], false);
    // Per-identity tokens: the reader's token is refused a write by PVE.
    let err = backend
        .call(
            &Caller::new("rita"),
            &tool("vm_stop"),
            json!({"node": "pve1", "vmid": 103}),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, "permission_denied");
    // An identity without a token gets a clear error and sends nothing.
    let before = sim.requests().await.len();
    let err = backend
        .call(
            &Caller::new("mallory"),
            &tool("vm_list"),
            json!({"node": "pve1"}),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, "unauthorized");
    assert!(
        err.message.contains("mallory")
            && !err
                .message
                .contains(&config.token(Role::Admin).unwrap().secret)
    );
    assert_eq!(sim.requests().await.len(), before);
    // An unknown target is named.
    let err = backend
        .call(
            &alice,
            &tool("vm_list"),
            json!({"node": "pve1", "target": "prod"}),
        )
        .await
        .unwrap_err();
    assert!(err.message.contains("prod") && err.message.contains("lab"));
}

#[tokio::test]
async fn the_full_catalog_is_generated_from_the_simulators_schema() {
    let (sim, config) = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let backend = ProxmoxBackend::new(&proxmox_config(
        &sim,
        &config,
        dir.path(),
        CatalogKind::Full,
    ))
    .await
    .unwrap();
    let tools = backend.tools();
    let distinct: std::collections::HashSet<(Method, String)> = curated::tools(
        &airlock_proxmox::tiers::TierRules::defaults(),
        &Default::default(),
        "pve",
    )
    .into_iter()
    .map(|(_, r)| (r.method, r.path))
    .collect();
    assert_eq!(tools.len(), distinct.len());
    // The generated tools go through the gateway like any other.
    let dir2 = tempfile::tempdir().unwrap();
    let (gateway, _) = Gateway::new(
        GatewayConfig::default(),
        vec![Arc::new(backend) as Arc<dyn Backend>],
        &Place::in_dir(dir2.path()),
    )
    .unwrap();
    let list = tools
        .iter()
        .find(|t| t.description.ends_with("GET /nodes/{node}/qemu"))
        .unwrap();
    let r = gateway
        .call(&Caller::new("alice"), &list.name, json!({"node": "pve2"}))
        .await
        .unwrap();
    let names: Vec<&str> = r
        .value
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"db-2"), "{names:?}");
}

#[tokio::test]
async fn the_simulator_keeps_real_state() {
    let (sim, config) = sim().await;
    let client = pinned(&sim);
    let admin = token(&config, Role::Admin);
    let post = |path: &str, params: &[(&str, &str)]| Request {
        method: Method::Post,
        path: path.into(),
        params: params
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    };
    client
        .call(
            &admin,
            &post(
                "/nodes/pve1/qemu/100/snapshot",
                &[("snapname", "before-upgrade")],
            ),
        )
        .await
        .unwrap();
    client
        .call(
            &admin,
            &post(
                "/nodes/pve1/qemu/9000/clone",
                &[("newid", "150"), ("name", "from-template")],
            ),
        )
        .await
        .unwrap();
    client
        .call(
            &admin,
            &post(
                "/nodes/pve2/vzdump",
                &[("vmid", "104"), ("storage", "local")],
            ),
        )
        .await
        .unwrap();
    sim.with_cluster(|c| c.finish_all()).await;
    let snaps = client
        .call(&admin, &get("/nodes/pve1/qemu/100/snapshot"))
        .await
        .unwrap();
    assert_eq!(snaps[0]["name"], "before-upgrade");
    let clone = client
        .call(&admin, &get("/nodes/pve1/qemu/150/config"))
        .await
        .unwrap();
    assert_eq!(clone["name"], "from-template");
    assert!(clone.get("template").is_none());
    let backups = client
        .call(
            &admin,
            &Request {
                method: Method::Get,
                path: "/nodes/pve2/storage/local/content".into(),
                params: vec![
                    ("content".into(), "backup".into()),
                    ("vmid".into(), "104".into()),
                ],
            },
        )
        .await
        .unwrap();
    assert_eq!(backups.as_array().unwrap().len(), 1);
    let running: Value = sim
        .with_cluster(|c| {
            json!(c
                .guests
                .values()
                .filter(|g| g.power == airlock_sim::pve::cluster::Power::Running)
                .count())
        })
        .await;
    assert_eq!(running, 10);
}

/// Identities without a token of their own (an OpenID provider's people)
/// act with the token of the least mode that does the call, never above
/// the mode the gateway allowed; without an allowed mode, with none.
#[tokio::test]
async fn tokens_by_mode_pick_the_least_mode_that_does_the_call() {
    use airlock_gateway::Mode;
    let (sim, config) = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let mut proxmox = proxmox_config(&sim, &config, dir.path(), CatalogKind::Curated);
    let mut by_mode = std::collections::HashMap::new();
    for (mode, role) in [(Mode::Ro, Role::Reader), (Mode::Rw, Role::Admin)] {
        let path = dir.path().join(format!("mode-{mode}.token"));
        airlock_edge::credential_file::write(&path, &config.token(role).unwrap().line()).unwrap();
        by_mode.insert(mode, path);
    }
    proxmox.targets.get_mut("lab").unwrap().tokens_by_mode = by_mode;
    let backend = ProxmoxBackend::new(&proxmox).await.unwrap();
    let tool = |n: &str| backend.tools().into_iter().find(|t| t.name == n).unwrap();
    let caller = |mode| Caller {
        mode,
        ..Caller::new("sso:dana")
    };
    let token_of = |role| config.token(role).unwrap().id.clone();
    let last_token = || async { sim.requests().await.last().unwrap().2.clone() };

    // An rw caller's read goes with the ro token; its write with rw's.
    backend
        .call(
            &caller(Some(Mode::Rw)),
            &tool("vm_list"),
            json!({"node": "pve1"}),
        )
        .await
        .unwrap();
    assert_eq!(last_token().await, token_of(Role::Reader));
    backend
        .call(
            &caller(Some(Mode::Rw)),
            &tool("vm_start"),
            json!({"node": "pve1", "vmid": 103}),
        )
        .await
        .unwrap();
    assert_eq!(last_token().await, token_of(Role::Admin));
    // An operator's operate call: no operator token, and rw is above the
    // allowed mode, so nothing is sent.
    let before = sim.requests().await.len();
    let err = backend
        .call(
            &caller(Some(Mode::Operator)),
            &tool("vm_start"),
            json!({"node": "pve1", "vmid": 103}),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, "unauthorized");
    assert!(err.message.contains("tokens_by_mode"), "{}", err.message);
    let err = backend
        .call(&caller(None), &tool("vm_list"), json!({"node": "pve1"}))
        .await
        .unwrap_err();
    assert_eq!(err.code, "unauthorized");
    assert_eq!(
        sim.requests().await.len(),
        before,
        "nothing sent without a token"
    );
}

/// A misspelt tier override is refused at start-up with a suggestion,
/// as a misspelt policy entry is: silently ignored, it would leave the
/// tool at its default tier.
#[tokio::test]
async fn a_misspelt_tier_override_is_refused() {
    let (sim, config) = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let mut proxmox = proxmox_config(&sim, &config, dir.path(), CatalogKind::Curated);
    proxmox
        .tiers
        .insert("vm_strat".into(), airlock_catalog::Tier::Operate);
    let err = match ProxmoxBackend::new(&proxmox).await {
        Ok(_) => panic!("a tier override naming no tool was accepted"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("[proxmox.tiers] names `vm_strat`") && err.contains("did you mean `vm_start`"),
        "{err}"
    );
    proxmox.tiers.clear();
    proxmox
        .tiers
        .insert("vm_start".into(), airlock_catalog::Tier::Admin);
    let backend = ProxmoxBackend::new(&proxmox).await.unwrap();
    let start = backend
        .tools()
        .into_iter()
        .find(|t| t.name == "vm_start")
        .unwrap();
    assert_eq!(start.tier, airlock_catalog::Tier::Admin);
}
