//! The collector backend against the simulated collector over real HTTP:
//! discovery, calls through the gateway (validation, policy, approval,
//! audit), the collector's own approvals passed through, a wrong key, a
//! collector that comes up late, slow, failing, malformed and oversized
//! answers, resources, prompts, and the key in no output.

use std::{sync::Arc, time::Duration};

use airlock_catalog::Tier;
use airlock_collector::{Collector, CollectorConfig, CollectorError, PromptError, TierRule};
use airlock_gateway::{
    audit,
    decision::Decider,
    policy::{Grant, PolicyConfig},
    Backend, CallError, Caller, Gateway, GatewayConfig, Mode,
};
use airlock_sim::{
    collector::{Behaviour, CollectorSim},
    hostile::{Answer, Server},
};
use airlock_state::Place;
use serde_json::{json, Value};

const KEY: &str = "svc-key-7d1e5c-DO-NOT-LEAK";

fn config(url: &str) -> (CollectorConfig, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("quox.key");
    airlock_edge::credential_file::write(&key_file, &format!("{KEY}\n")).unwrap();
    let config = CollectorConfig {
        url: url.to_string(),
        service_key_file: Some(key_file),
        agent_id: Some("ops-agent".into()),
        session_id: Some("s-1".into()),
        timeout_secs: 2,
        tiers: vec![
            TierRule {
                pattern: "fleet_*".into(),
                tier: Tier::Read,
            },
            TierRule {
                pattern: "docker.*".into(),
                tier: Tier::Read,
            },
        ],
        ..CollectorConfig::default()
    };
    (config, dir)
}

struct Setup {
    sim: CollectorSim,
    collector: Arc<Collector>,
    gateway: Gateway,
    _dir: tempfile::TempDir,
    /// Every text the tests saw: errors, results, the audit log.
    seen: std::sync::Mutex<String>,
}

impl Setup {
    async fn new() -> Self {
        let sim = CollectorSim::start(0, KEY).await.unwrap();
        let (config, dir) = config(&sim.url());
        let collector = Arc::new(Collector::new(config).unwrap());
        collector.discover().await.unwrap();
        let gateway = gateway(collector.clone(), &dir);
        Setup {
            sim,
            collector,
            gateway,
            _dir: dir,
            seen: Default::default(),
        }
    }

    async fn call(&self, who: &str, tool: &str, args: Value) -> Result<Value, CallError> {
        let r = self
            .gateway
            .call(&Caller::new(who), tool, args)
            .await
            .map(|c| c.value);
        let text = match &r {
            Ok(v) => v.to_string(),
            Err(e) => format!("{e} {}", json!(e.details())),
        };
        self.seen.lock().unwrap().push_str(&text);
        r
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let v = audit::verify(self.gateway.audit_path().unwrap()).unwrap();
        assert!(v.ok(), "the audit log verifies: {v:?}");
        let log = std::fs::read_to_string(self.gateway.audit_path().unwrap()).unwrap();
        let seen = self.seen.lock().unwrap();
        assert!(!log.contains(KEY) && !seen.contains(KEY), "the key leaked");
        assert!(
            !seen.contains(&self.sim.url()) && !seen.contains("127.0.0.1"),
            "an error named the collector's address: {seen}"
        );
    }
}

fn gateway(collector: Arc<Collector>, dir: &tempfile::TempDir) -> Gateway {
    let config = GatewayConfig {
        policy: PolicyConfig {
            identities: [("viewer", Mode::Ro), ("ops", Mode::Rw)]
                .into_iter()
                .map(|(n, mode)| {
                    (
                        n.to_string(),
                        Grant {
                            mode,
                            ..Grant::default()
                        },
                    )
                })
                .collect(),
            ..PolicyConfig::default()
        },
        ..GatewayConfig::default()
    };
    Gateway::new(
        config,
        vec![collector as Arc<dyn Backend>],
        &Place::in_dir(dir.path()),
    )
    .unwrap()
    .0
}

#[tokio::test]
async fn discovered_tools_run_through_the_gateway() {
    let s = Setup::new().await;
    let catalog = s.gateway.catalog();
    let names: Vec<(&str, Tier)> = catalog
        .iter()
        .map(|e| (e.spec.name.as_str(), e.spec.tier))
        .collect();
    assert_eq!(
        names,
        [
            ("quox_fleet_status", Tier::Read),
            ("quox_docker_status", Tier::Read),
            ("quox_ssh_exec", Tier::Admin)
        ]
    );
    let hits = catalog.search(&airlock_catalog::search::Query {
        text: "docker containers on a host".into(),
        ..Default::default()
    });
    assert_eq!(hits.hits[0].name, "quox_docker_status");

    let fleet = s
        .call("viewer", "quox_fleet_status", json!({}))
        .await
        .unwrap();
    assert_eq!(fleet["hosts"].as_array().unwrap().len(), 3);
    let docker = s
        .call("viewer", "quox_docker_status", json!({"host": "edge-1"}))
        .await
        .unwrap();
    assert_eq!(docker["containers"].as_array().unwrap().len(), 4);
    let sent = s.sim.executed();
    assert_eq!(
        sent[1],
        json!({"tool_name": "docker.status", "input": {"host": "edge-1", "all": false}, "agent_id": "ops-agent",
            "session_id": format!("s-1-{}", &airlock_catalog::digest::sha256_hex(b"viewer")[..12]),
            "org_id": "airlock", "user_id": "viewer"}),
        "the collector gets its own tool name, the schema's defaults, the configured ids, and who is calling"
    );
    s.call("rita", "quox_fleet_status", json!({}))
        .await
        .unwrap();
    let sent = s.sim.executed();
    assert_eq!(sent[2]["user_id"], "rita");
    assert_eq!(
        sent[0]["session_id"], sent[1]["session_id"],
        "one per identity"
    );
    assert_ne!(
        sent[0]["session_id"], sent[2]["session_id"],
        "one per identity"
    );

    // Read-only identities cannot call an admin tool; nothing is sent.
    let e = s
        .call(
            "viewer",
            "quox_ssh_exec",
            json!({"host": "db-1", "command": "uptime"}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), "policy_denied");
    assert_eq!(s.sim.executes(), 3);
}

/// A failure the collector reports names what failed, not where: the
/// address it could not reach comes back as `[address]`.
#[tokio::test]
async fn collector_error_texts_lose_addresses() {
    let s = Setup::new().await;
    let r = s
        .call(
            "viewer",
            "quox_docker_status",
            json!({"host": "10.20.30.40:22"}),
        )
        .await
        .unwrap();
    assert_eq!(r["success"], false, "{r}");
    assert_eq!(r["error"], "unknown host [address]", "{r}");
}

#[tokio::test]
async fn invalid_input_never_reaches_the_collector() {
    let s = Setup::new().await;
    for args in [json!({}), json!({"host": 5}), json!([1])] {
        let e = s.call("viewer", "quox_docker_status", args.clone()).await;
        assert_eq!(e.unwrap_err().code(), "invalid_arguments", "{args}");
    }
    let long = "x".repeat(5000);
    let e = s
        .call(
            "ops",
            "quox_ssh_exec",
            json!({"host": "db-1", "command": long}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), "invalid_arguments");
    assert_eq!(s.sim.executes(), 0, "no invalid call reached the collector");
    let log = std::fs::read_to_string(s.gateway.audit_path().unwrap()).unwrap();
    assert_eq!(log.matches("\"reason\":\"invalid_arguments\"").count(), 4);
}

#[tokio::test]
async fn airlock_approval_then_the_collectors_own_pending_result() {
    let s = Setup::new().await;
    let args = json!({"host": "db-1", "command": "systemctl restart postgres"});
    let e = s
        .call("ops", "quox_ssh_exec", args.clone())
        .await
        .unwrap_err();
    let CallError::ApprovalRequired { request_id, .. } = &e else {
        panic!("{e}")
    };
    assert_eq!(s.sim.executes(), 0, "nothing sent before approval");
    s.gateway
        .approvals()
        .approve(request_id, &Decider::cli("carol"), s.gateway.now_ms())
        .unwrap();
    let r = s.call("ops", "quox_ssh_exec", args).await.unwrap();
    assert_eq!(r["pending"], true, "{r}");
    let id = r["approvalId"].as_str().unwrap().to_string();
    assert!(r["instructions"].as_str().unwrap().contains(&id));
    let log = std::fs::read_to_string(s.gateway.audit_path().unwrap()).unwrap();
    assert!(
        log.contains(&format!("\"backend_request_id\":\"{id}\"")),
        "the collector's approval id is in the audit"
    );
}

#[tokio::test]
async fn failures_are_clear_and_never_retried_once_sent() {
    let s = Setup::new().await;
    let cases = [
        (Behaviour::Status(500), "backend_error", "HTTP 500"),
        (Behaviour::Malformed, "bad_response", "not valid JSON"),
        (
            Behaviour::Oversized(5 << 20),
            "response_too_large",
            "collector.max_response_bytes",
        ),
        (
            Behaviour::Slow(Duration::from_secs(4)),
            "timeout",
            "did not answer within 2 s",
        ),
    ];
    for (behaviour, code, says) in cases {
        s.sim.set_behaviour(behaviour.clone());
        let before = s.sim.executes();
        let e = s
            .call("viewer", "quox_fleet_status", json!({}))
            .await
            .unwrap_err();
        let CallError::Backend {
            code: got, message, ..
        } = &e
        else {
            panic!("{e}")
        };
        assert_eq!(
            (got.as_str(), message.contains(says)),
            (code, true),
            "{behaviour:?}: {message}"
        );
        assert_eq!(
            s.sim.executes(),
            before + 1,
            "{behaviour:?}: sent once, not retried"
        );
    }
    s.sim.set_behaviour(Behaviour::Normal);
    let log = std::fs::read_to_string(s.gateway.audit_path().unwrap()).unwrap();
    for code in [
        "backend_error",
        "bad_response",
        "response_too_large",
        "timeout",
    ] {
        assert!(
            log.contains(&format!("\"status\":\"{code}\"")),
            "an audit line for the {code} call"
        );
    }
}

#[tokio::test]
async fn a_wrong_key_is_a_clear_error_without_the_key() {
    let sim = CollectorSim::start(0, "the-right-key").await.unwrap();
    let (config, _dir) = config(&sim.url());
    let collector = Collector::new(config).unwrap();
    let e = collector.discover().await.unwrap_err();
    assert_eq!(e, CollectorError::KeyRefused(401));
    let text = e.to_string();
    assert!(
        text.contains("service key") && text.contains("QUOX_SERVICE_KEY"),
        "{text}"
    );
    assert!(!text.contains(KEY) && !text.contains(&sim.url()), "{text}");
    assert!(sim.rejected_keys() >= 1);
    assert_eq!(collector.tool_count(), 0);
}

#[tokio::test]
async fn a_collector_that_comes_up_late_joins_the_catalog() {
    // A port with nothing listening on it yet.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let (mut config, dir) = config(&format!("http://{addr}"));
    config.refresh_secs = 3600;
    let collector = Arc::new(Collector::new(config).unwrap());
    let e = collector.discover().await.unwrap_err();
    assert_eq!(e, CollectorError::Unreachable { sent: false });
    assert_eq!(e.to_string(), "the collector is unreachable");

    let gateway = gateway(collector.clone(), &dir);
    assert_eq!(gateway.catalog().len(), 0);
    // Not "no tool named": the collector has not answered yet, and says why.
    let e = gateway
        .call(&Caller::new("viewer"), "quox_fleet_status", json!({}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "unavailable", "{e}");
    assert!(
        e.to_string()
            .contains("has not answered since Airlock started (the collector is unreachable)"),
        "{e}"
    );
    assert!(!e.to_string().contains(&addr.to_string()), "{e}");
    assert_eq!(gateway.unavailable_backends().len(), 1);
    // A name outside its namespace is still simply unknown.
    let e = gateway
        .call(&Caller::new("viewer"), "fleet_status", json!({}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "not_found");

    let mut changes = collector.watch();
    let _retrying = collector.keep_discovering();
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let sim = CollectorSim::serve(listener, KEY);
    tokio::time::timeout(Duration::from_secs(30), changes.wait_for(|g| *g > 0))
        .await
        .expect("discovered within the backoff")
        .unwrap();
    assert!(collector.is_up());
    assert!(gateway.unavailable_backends().is_empty());
    let r = gateway
        .call(&Caller::new("viewer"), "quox_fleet_status", json!({}))
        .await
        .unwrap();
    assert_eq!(r.value["success"], true);
    assert_eq!(sim.executes(), 1);
}

#[tokio::test]
async fn resources_are_listed_and_live_ones_cached() {
    let s = Setup::new().await;
    let listed: Vec<(String, bool)> = s
        .collector
        .resources()
        .into_iter()
        .map(|r| (r.uri, r.live))
        .collect();
    assert_eq!(
        listed,
        [
            ("quox://fleet/inventory".to_string(), false),
            ("quox://fleet/health".to_string(), true)
        ]
    );
    let inventory = s
        .collector
        .read_resource("quox://fleet/inventory")
        .await
        .unwrap();
    assert!(inventory.content.contains("edge-1"));
    let lists = s.sim.lists();
    let first = s
        .collector
        .read_resource("quox://fleet/health")
        .await
        .unwrap();
    assert_eq!(s.sim.lists(), lists + 1, "a live resource is fetched again");
    let second = s
        .collector
        .read_resource("quox://fleet/health")
        .await
        .unwrap();
    assert_eq!(s.sim.lists(), lists + 1, "then served from the 30 s cache");
    assert_eq!(first.content, second.content);
    let e = s.collector.read_resource("quox://nope").await.unwrap_err();
    assert_eq!(e.to_string(), "no resource quox://nope from the collector");
}

#[tokio::test]
async fn prompts_render_arguments_as_plain_text() {
    let s = Setup::new().await;
    let prompts = s.collector.prompts();
    assert_eq!(prompts[0].name, "incident_triage");
    assert!(prompts[0].arguments[0].required);
    let args = |v: Value| v.as_object().cloned().unwrap();
    let out = s
        .collector
        .render_prompt(
            "incident_triage",
            Some(&args(json!({"service": "billing"}))),
        )
        .unwrap();
    assert_eq!(
        out[0].1,
        "Triage an incident on billing (severity medium). Nothing is known yet. Start with quox_fleet_status.",
        "without notes, the inverted section shows"
    );
    // Template syntax in a value is text, not template.
    let out = s
        .collector
        .render_prompt(
            "incident_triage",
            Some(&args(
                json!({"service": "{{notes}}{{/notes}}", "notes": "{{#service}}x"}),
            )),
        )
        .unwrap();
    assert_eq!(
        out[0].1,
        "Triage an incident on {{notes}}{{/notes}} (severity medium). Known so far: {{#service}}x. Start with quox_fleet_status."
    );
    assert_eq!(
        s.collector
            .render_prompt("incident_triage", None)
            .unwrap_err(),
        PromptError::Missing {
            prompt: "incident_triage".into(),
            argument: "service".into()
        }
    );
    let e = s
        .collector
        .render_prompt(
            "incident_triage",
            Some(&args(json!({"service": "a", "owner": "b"}))),
        )
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("has no argument `owner` (it has: service, severity, notes)"),
        "{e}"
    );
}

#[test]
fn configuration_errors_name_the_setting() {
    let bad = |c: CollectorConfig| Collector::new(c).err().unwrap().to_string();
    let (mut c, _d) = config("ftp://x");
    assert!(bad(c.clone()).contains("collector.url must start with http://"));
    c.url = "http://127.0.0.1:1".into();
    c.agent_id = Some("bad id!".into());
    assert!(bad(c.clone()).contains("agent id \"bad id!\" must match"));
    c.agent_id = None;
    c.service_key_file = Some("/nonexistent/quox.key".into());
    assert!(
        bad(c.clone()).contains("collector.service_key_file: cannot read /nonexistent/quox.key")
    );
    // A key others can read is not used, and not shown.
    let exposed = _d.path().join("exposed.key");
    std::fs::write(&exposed, "the-collector-key").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&exposed, std::fs::Permissions::from_mode(0o644)).unwrap();
    c.service_key_file = Some(exposed.clone());
    let e = bad(c);
    assert!(
        e.contains("collector.service_key_file: ")
            && e.contains(&format!("chmod 600 {}", exposed.display()))
            && !e.contains("the-collector-key"),
        "{e}"
    );
}

#[test]
fn plain_http_is_refused_unless_the_collector_is_on_this_machine() {
    let (mut c, _d) = config("http://10.0.0.5:9848");
    for remote in [
        "http://10.0.0.5:9848",
        "http://collector.example:9848",
        "http://[2001:db8::1]:9848",
        "http://localhost.example:9848",
        "http://0.0.0.0:9848",
    ] {
        c.url = remote.into();
        let e = Collector::new(c.clone()).err().unwrap().to_string();
        assert!(
            e.contains("collector.url")
                && e.contains("https://")
                && e.contains("ca_file")
                && e.contains("fingerprint")
                && e.contains("loopback"),
            "{remote}: {e}"
        );
        assert!(!e.contains(KEY));
    }
    for local in [
        "http://127.0.0.1:9848",
        "http://127.8.9.10:9848",
        "http://localhost:9848",
        "http://LOCALHOST:9848/",
        "http://[::1]:9848",
    ] {
        c.url = local.into();
        assert!(Collector::new(c.clone()).is_ok(), "{local}");
    }
    c.url = "https://10.0.0.5:9848".into();
    c.fingerprint = Some("AB".repeat(32));
    assert!(Collector::new(c).is_ok(), "https with a pin is fine");
}

/// The collector's `approvalId` goes into the audit as the request id;
/// the collector chooses it, so one that is no id stays in the result.
#[tokio::test]
async fn an_approval_id_that_is_no_id_is_not_recorded_as_one() {
    let huge = "q".repeat(1 << 20);
    let answer_id = huge.clone();
    let server = Server::plain(move |r| {
        let body = if r.path.starts_with("/api/v1/tools/list") {
            json!({"tools": [{"name": "ssh_exec", "input_schema": {"type": "object", "properties": {}}}]})
        } else if r.path.starts_with("/api/v1/tools/execute") {
            json!({"success": false, "pending": true, "approvalId": answer_id})
        } else {
            json!({"resources": [], "prompts": []})
        };
        Answer::Json {
            status: 200,
            body: body.to_string(),
        }
    })
    .await;
    let (config, _dir) = config(&server.http_url());
    let collector = Collector::new(config).unwrap();
    collector.discover().await.unwrap();
    let tool = collector.tools().into_iter().next().unwrap();
    let r = collector
        .call(&Caller::new("ops"), &tool, json!({}))
        .await
        .unwrap();
    assert_eq!(
        r.value["approvalId"],
        json!(huge),
        "the answer is passed on"
    );
    assert_eq!(r.request_id, None, "a megabyte is no request id");
}

/// An answer within `collector.max_response_bytes` that would cost the
/// host hundreds of megabytes parsed (4 MiB of `{"":0}`) is refused
/// unparsed; an ordinary answer of thousands of records is read.
#[tokio::test]
async fn an_answer_of_tiny_values_within_the_byte_cap_is_refused_unparsed() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let tiny = {
        let n = ((4 << 20) - 64) / 7;
        format!(
            "{{\"success\":true,\"result\":[{}{{\"\":0}}]}}",
            "{\"\":0},".repeat(n - 1)
        )
    };
    assert!(tiny.len() <= 4 << 20);
    let ordinary = json!({"success": true, "result": (0..2000)
        .map(|i| json!({"host": format!("h{i}"), "status": "ok", "load": 0.5, "uptime": 86400, "tags": ["a", "b"]}))
        .collect::<Vec<_>>()})
    .to_string();
    let answer_ordinary = Arc::new(AtomicBool::new(false));
    let switch = answer_ordinary.clone();
    let server = Server::plain(move |r| {
        let body = if r.path.starts_with("/api/v1/tools/list") {
            json!({"tools": [{"name": "fleet_hosts", "input_schema": {"type": "object", "properties": {}}}]})
                .to_string()
        } else if r.path.starts_with("/api/v1/tools/execute") {
            if switch.load(Ordering::SeqCst) {
                ordinary.clone()
            } else {
                tiny.clone()
            }
        } else {
            json!({"resources": [], "prompts": []}).to_string()
        };
        Answer::Json { status: 200, body }
    })
    .await;
    let (config, _dir) = config(&server.http_url());
    let collector = Collector::new(config).unwrap();
    collector.discover().await.unwrap();
    let tool = collector.tools().into_iter().next().unwrap();
    let e = collector
        .call(&Caller::new("ops"), &tool, json!({}))
        .await
        .unwrap_err();
    assert_eq!(e.code, "response_too_large", "{e:?}");
    for says in [
        "262144 JSON values",
        "collector.max_response_bytes = 4194304",
        "not parsed",
    ] {
        assert!(e.message.contains(says), "{says}: {}", e.message);
    }
    answer_ordinary.store(true, Ordering::SeqCst);
    let r = collector
        .call(&Caller::new("ops"), &tool, json!({}))
        .await
        .unwrap();
    assert_eq!(r.value["result"].as_array().unwrap().len(), 2000);
}

/// One raw HTTP/1.1 request to the simulated collector; its status and body.
async fn raw(url: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nX-Service-Key: {KEY}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body)
}

/// The simulated collector routes as the collector does: execute only as a
/// POST with a whole body, the lists only as GETs, and its prompt list says
/// how many it holds.
#[tokio::test]
async fn the_simulated_collector_checks_methods_and_bodies() {
    let sim = CollectorSim::start(0, KEY).await.unwrap();
    let url = sim.url();
    let (status, _) = raw(&url, "GET", "/api/v1/tools/execute", "").await;
    assert_eq!(status, 405);
    let (status, _) = raw(&url, "POST", "/api/v1/tools/list?agent_id=a", "{}").await;
    assert_eq!(status, 405);
    for body in [
        json!([]),
        json!({"input": {}, "agent_id": "a"}),
        json!({"tool_name": "fleet_status", "agent_id": "a"}),
        json!({"tool_name": "fleet_status", "input": {}}),
        json!({"tool_name": "fleet_status", "input": [], "agent_id": "a"}),
    ] {
        let (status, answer) = raw(&url, "POST", "/api/v1/tools/execute", &body.to_string()).await;
        assert_eq!(status, 400, "{body}: {answer}");
    }
    assert!(sim.executed().is_empty(), "no malformed execute was run");
    let whole = json!({"tool_name": "fleet_status", "input": {}, "agent_id": "a"});
    let (status, _) = raw(&url, "POST", "/api/v1/tools/execute", &whole.to_string()).await;
    assert_eq!(status, 200);
    let (status, body) = raw(&url, "GET", "/api/v1/prompts/list", "").await;
    assert_eq!(status, 200);
    let listed: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        listed["count"].as_u64(),
        listed["prompts"].as_array().map(|p| p.len() as u64)
    );
}

/// A collector tool's name can move: `docker.status` is
/// `quox_docker_status` until the collector adds `docker_status`, which
/// takes that name and moves `docker.status` to `quox_docker_dot_status`.
/// Policy and approvals follow the tool (its key, `quox:docker.status`),
/// so the move widens nothing: a deny by the old name still denies it
/// (and the newcomer answering to that name too), an allow by a name two
/// tools now answer to allows neither, an approval granted before the
/// move runs only the tool it was granted for. The move is written to
/// the audit chain.
#[tokio::test]
async fn a_tool_whose_name_moves_keeps_its_policy_and_approvals() {
    let sim = CollectorSim::start(0, KEY).await.unwrap();
    let (config, dir) = config(&sim.url());
    let collector = Arc::new(Collector::new(config).unwrap());
    let install = |name: &str| {
        sim.install_tool(json!({"name": name, "description": format!("{name}, installed later."),
            "input_schema": {"type": "object", "properties": {"host": {"type": "string"}}, "required": ["host"]}}))
    };
    install("svc.restart");
    collector.discover().await.unwrap();
    let mut gateway_config = GatewayConfig::default();
    let grant = |deny: &[&str], allow: Option<&[&str]>| Grant {
        mode: Mode::Rw,
        deny: deny.iter().map(|s| s.to_string()).collect(),
        allow: allow.map(|a| a.iter().map(|s| s.to_string()).collect()),
        ..Grant::default()
    };
    gateway_config.policy = PolicyConfig {
        identities: [
            ("denied".to_string(), grant(&["quox_docker_status"], None)),
            (
                "by_name".to_string(),
                grant(&[], Some(&["quox_docker_status"])),
            ),
            (
                "by_key".to_string(),
                grant(&[], Some(&["quox:docker.status"])),
            ),
            ("ops".to_string(), grant(&[], None)),
        ]
        .into(),
        ..PolicyConfig::default()
    };
    let gateway = Gateway::new(
        gateway_config,
        vec![collector.clone() as Arc<dyn Backend>],
        &Place::in_dir(dir.path()),
    )
    .unwrap()
    .0;
    let call = |who: &'static str, tool: &'static str| {
        let gateway = &gateway;
        async move {
            gateway
                .call(&Caller::new(who), tool, json!({"host": "edge-1"}))
                .await
                .map(|c| c.value)
        }
    };
    let code = |r: Result<Value, CallError>| match r {
        Ok(_) => "ok".to_string(),
        Err(e) => e.code().to_string(),
    };

    assert_eq!(
        code(call("denied", "quox_docker_status").await),
        "policy_denied"
    );
    assert_eq!(code(call("by_name", "quox_docker_status").await), "ok");
    assert_eq!(code(call("by_key", "quox_docker_status").await), "ok");
    // An approval for svc.restart, granted under its first name.
    let request = match call("ops", "quox_svc_restart").await {
        Err(CallError::ApprovalRequired { request_id, .. }) => request_id,
        other => panic!("{other:?}"),
    };
    gateway
        .approvals()
        .approve(&request, &Decider::cli("operator"), gateway.now_ms())
        .unwrap();
    let before = sim.executes();

    // The collector adds the tools that move the names.
    install("docker_status");
    install("svc_restart");
    collector.discover().await.unwrap();
    let catalog = gateway.catalog();
    assert_eq!(
        catalog.get("quox_docker_dot_status").unwrap().spec.key,
        "quox:docker.status"
    );
    assert_eq!(
        catalog.get("quox_docker_status").unwrap().spec.key,
        "quox:docker_status"
    );
    assert_eq!(
        catalog.get("quox_svc_dot_restart").unwrap().spec.key,
        "quox:svc.restart"
    );

    // The deny follows docker.status, and covers the newcomer too.
    assert_eq!(
        code(call("denied", "quox_docker_dot_status").await),
        "policy_denied"
    );
    assert_eq!(
        code(call("denied", "quox_docker_status").await),
        "policy_denied"
    );
    // A name two tools answer to allows neither; a key allows its tool.
    assert_eq!(
        code(call("by_name", "quox_docker_status").await),
        "policy_denied"
    );
    assert_eq!(
        code(call("by_name", "quox_docker_dot_status").await),
        "policy_denied"
    );
    assert_eq!(code(call("by_key", "quox_docker_dot_status").await), "ok");
    assert_eq!(
        code(call("by_key", "quox_docker_status").await),
        "policy_denied"
    );
    // The approval is svc.restart's: the tool now called quox_svc_restart
    // needs its own, and the renamed one runs on the one granted.
    assert_eq!(
        code(call("ops", "quox_svc_restart").await),
        "approval_required"
    );
    assert_eq!(code(call("ops", "quox_svc_dot_restart").await), "ok");
    let sent: Vec<Value> = sim.executed()[before as usize..]
        .iter()
        .map(|e| e["tool_name"].clone())
        .collect();
    assert_eq!(sent, [json!("docker.status"), json!("svc.restart")]);

    let log = std::fs::read_to_string(gateway.audit_path().unwrap()).unwrap();
    let moved: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["event"] == "tool_renamed")
        .map(|l| json!([l["tool_key"], l["from"], l["to"]]))
        .collect();
    assert_eq!(
        moved,
        [
            json!([
                "quox:docker.status",
                ["quox_docker_status"],
                ["quox_docker_dot_status"]
            ]),
            json!([
                "quox:svc.restart",
                ["quox_svc_restart"],
                ["quox_svc_dot_restart"]
            ]),
        ]
    );
    assert!(audit::verify(gateway.audit_path().unwrap()).unwrap().ok());
}
