//! Airlock's collector client against the QuoxCORE collector protocol as
//! QuoxMCP 1.2.0 (quoxai/quoxmcp) speaks it, from that client's side: a
//! reference collector written here from the protocol — not Airlock's
//! simulated collector — that records every request and checks it.
//!
//! The protocol, as QuoxMCP's client uses it:
//! - every request carries the service key in `X-Service-Key`;
//! - `GET /api/v1/tools/list?agent_id=ID` → `{tools: [{name, description,
//!   input_schema}], agent, count}`;
//! - `GET /api/v1/resources/list` → `{resources: [{name, uri, title,
//!   description, mimeType, content, live}], count}`; a live resource is
//!   read by listing again, and a failed read falls back to the content
//!   listed before;
//! - `GET /api/v1/prompts/list` → `{prompts: [{name, description,
//!   arguments: [{name, description, required}], messages: [{role,
//!   text}]}], count}`; templates know `{{x}}`, `{{x|default}}`,
//!   `{{#x}}…{{/x}}` (if set) and `{{^x}}…{{/x}}` (if not set), and an
//!   argument's value is never expanded as a template;
//! - `POST /api/v1/tools/execute`, JSON, `{tool_name, input, agent_id,
//!   session_id, org_id, user_id}` (`auth_token` optional) → the result
//!   object; a failure is an HTTP error whose text is shown without
//!   collector URLs, internal addresses or server paths.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use airlock_catalog::Tier;
use airlock_collector::{Collector, CollectorConfig, TierRule};
use airlock_gateway::{
    decision::Decider,
    policy::{Grant, PolicyConfig},
    Backend, CallError, Caller, Gateway, GatewayConfig, Mode,
};
use airlock_state::Place;
use axum::{
    body::Bytes,
    extract::{RawQuery, State},
    http::{HeaderMap, Method, StatusCode, Uri},
    response::{IntoResponse, Response},
};
use serde_json::{json, Value};

const KEY: &str = "quox-protocol-key-0c4e";

/// One request as the reference collector received it.
#[derive(Clone, Debug)]
struct Seen {
    method: Method,
    path: String,
    query: Option<String>,
    key: Option<String>,
    content_type: Option<String>,
    body: Value,
}

#[derive(Default)]
struct Reference {
    seen: Mutex<Vec<Seen>>,
    /// Answer 503 to everything (the collector is down).
    down: Mutex<bool>,
    /// Refuse the key (it was revoked).
    revoked: Mutex<bool>,
    /// A second resource, added while running.
    runbook: Mutex<bool>,
    /// Incremented per resource listing: the live resource's content.
    reads: Mutex<u32>,
}

impl Reference {
    fn tools() -> Value {
        json!([
            {"name": "fleet.status", "description": "Health of every host in the fleet",
             "input_schema": {"type": "object", "properties": {
                 "group": {"type": "string", "description": "Host group", "default": "all"},
                 "verbose": {"type": "boolean", "default": false}}}},
            {"name": "ssh_exec", "description": "Run a command on a host over SSH",
             "input_schema": {"type": "object", "required": ["host", "command"], "properties": {
                 "host": {"type": "string"}, "command": {"type": "string"}}}},
        ])
    }

    fn resources(&self) -> Value {
        let mut reads = self.reads.lock().unwrap();
        *reads += 1;
        let mut list = vec![
            json!({"name": "fleet-health", "uri": "quox://fleet/health", "title": "Fleet health",
                   "description": "Live health summary", "mimeType": "text/plain",
                   "content": format!("read {}: 3 hosts, 1 degraded", *reads), "live": true}),
        ];
        if *self.runbook.lock().unwrap() {
            list.push(
                json!({"name": "runbook", "uri": "quox://runbooks/disk-full",
                             "description": "What to do when a disk fills", "content": "1. df -h"}),
            );
        }
        json!({"resources": list, "count": list.len()})
    }

    fn prompts() -> Value {
        json!({"prompts": [{
            "name": "investigate",
            "description": "Investigate a host",
            "arguments": [
                {"name": "host", "description": "Host name", "required": true},
                {"name": "since", "description": "Start time", "required": false},
                {"name": "severity", "required": false}
            ],
            "messages": [{"role": "user", "text":
                "Investigate {{host}}.{{#since}} Since {{since}}.{{/since}}{{^since}} No start time given.{{/since}} Severity: {{severity|medium}}."}]
        }], "count": 1})
    }
}

async fn answer(
    State(r): State<Arc<Reference>>,
    method: Method,
    uri: Uri,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let header = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let seen = Seen {
        method: method.clone(),
        path: uri.path().to_string(),
        query,
        key: header("x-service-key"),
        content_type: header("content-type"),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    };
    r.seen.lock().unwrap().push(seen.clone());
    if *r.down.lock().unwrap() {
        return (StatusCode::SERVICE_UNAVAILABLE, "collector restarting").into_response();
    }
    if seen.key.as_deref() != Some(KEY) || *r.revoked.lock().unwrap() {
        return (StatusCode::UNAUTHORIZED, r#"{"error":"unauthorized"}"#).into_response();
    }
    let json = |v: Value| ([("content-type", "application/json")], v.to_string()).into_response();
    match (method.as_str(), seen.path.as_str()) {
        ("GET", "/api/v1/tools/list") => {
            let agent = seen
                .query
                .as_deref()
                .and_then(|q| q.strip_prefix("agent_id="))
                .unwrap_or_default()
                .to_string();
            let tools = Reference::tools();
            json(json!({"tools": tools, "agent": agent, "count": 2}))
        }
        ("GET", "/api/v1/resources/list") => json(r.resources()),
        ("GET", "/api/v1/prompts/list") => json(Reference::prompts()),
        ("POST", "/api/v1/tools/execute") => match seen.body["tool_name"].as_str() {
            Some("fleet.status") => json(json!({"success": true, "hosts": [
                {"host": "edge-1", "status": "healthy"}, {"host": "edge-2", "status": "degraded"}]})),
            _ => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "ssh to 10.20.30.40:22 failed: key /opt/quox/keys/id_ed25519 refused; \
                 relay http://192.168.88.126:9848 and http://localhost:9848 said /etc/quox/agent.yaml \
                 and /var/lib/quox/state are unreadable, see /home/quox/log",
            )
                .into_response(),
        },
        _ => (StatusCode::NOT_FOUND, "no such endpoint").into_response(),
    }
}

struct Setup {
    reference: Arc<Reference>,
    collector: Arc<Collector>,
    gateway: Gateway,
    _dir: tempfile::TempDir,
    _server: tokio::task::JoinHandle<()>,
}

impl Setup {
    async fn new() -> Self {
        let reference = Arc::new(Reference::default());
        let app = axum::Router::new()
            .fallback(answer)
            .with_state(reference.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        let dir = tempfile::tempdir().unwrap();
        let key_file = dir.path().join("quox.key");
        airlock_edge::credential_file::write(&key_file, KEY).unwrap();
        let config = CollectorConfig {
            url: format!("http://{addr}"),
            service_key_file: Some(key_file),
            agent_id: Some("airlock-ops".into()),
            session_id: Some("protocol".into()),
            org_id: Some("acme".into()),
            timeout_secs: 5,
            tiers: vec![TierRule {
                pattern: "fleet.*".into(),
                tier: Tier::Read,
            }],
            ..CollectorConfig::default()
        };
        let collector = Arc::new(Collector::new(config).unwrap());
        collector.discover().await.unwrap();
        let gateway_config = GatewayConfig {
            policy: PolicyConfig {
                identities: [(
                    "dana".to_string(),
                    Grant {
                        mode: Mode::Rw,
                        ..Grant::default()
                    },
                )]
                .into_iter()
                .collect(),
                ..PolicyConfig::default()
            },
            ..GatewayConfig::default()
        };
        let gateway = Gateway::new(
            gateway_config,
            vec![collector.clone() as Arc<dyn Backend>],
            &Place::in_dir(dir.path()),
        )
        .unwrap()
        .0;
        Setup {
            reference,
            collector,
            gateway,
            _dir: dir,
            _server: server,
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.reference.seen.lock().unwrap().clone()
    }
}

#[tokio::test]
async fn discovery_asks_the_three_lists_with_the_key() {
    let s = Setup::new().await;
    let mut asked: Vec<(String, String, Option<String>)> = s
        .seen()
        .iter()
        .map(|r| (r.method.to_string(), r.path.clone(), r.query.clone()))
        .collect();
    asked.sort();
    assert_eq!(
        asked,
        [
            ("GET".into(), "/api/v1/prompts/list".into(), None),
            ("GET".into(), "/api/v1/resources/list".into(), None),
            (
                "GET".into(),
                "/api/v1/tools/list".into(),
                Some("agent_id=airlock-ops".into())
            ),
        ]
    );
    assert!(s.seen().iter().all(|r| r.key.as_deref() == Some(KEY)));
    let catalog = s.gateway.catalog();
    assert!(catalog.contains("quox_fleet_status"));
    assert!(catalog.contains("quox_ssh_exec"));
}

#[tokio::test]
async fn execute_sends_quoxmcps_body_with_defaults_and_attribution() {
    let s = Setup::new().await;
    let before = s.seen().len();
    let out = s
        .gateway
        .call(&Caller::new("dana"), "quox_fleet_status", json!({}))
        .await
        .unwrap();
    assert_eq!(out.value["hosts"][1]["status"], "degraded");
    let sent: Vec<Seen> = s.seen()[before..].to_vec();
    assert_eq!(sent.len(), 1, "one request per call: {sent:?}");
    let r = &sent[0];
    assert_eq!(
        (r.method.as_str(), r.path.as_str()),
        ("POST", "/api/v1/tools/execute")
    );
    assert_eq!(r.key.as_deref(), Some(KEY));
    assert!(
        r.content_type
            .as_deref()
            .is_some_and(|c| c.starts_with("application/json")),
        "{:?}",
        r.content_type
    );
    let body = r.body.as_object().expect("a JSON object body");
    let allowed = [
        "tool_name",
        "input",
        "agent_id",
        "session_id",
        "org_id",
        "user_id",
        "auth_token",
    ];
    for k in body.keys() {
        assert!(
            allowed.contains(&k.as_str()),
            "`{k}` is not in QuoxMCP's execute body"
        );
    }
    assert_eq!(
        body["tool_name"], "fleet.status",
        "the collector's own name"
    );
    assert_eq!(
        body["input"],
        json!({"group": "all", "verbose": false}),
        "defaults filled"
    );
    assert_eq!(body["agent_id"], "airlock-ops");
    assert_eq!(body["org_id"], "acme");
    assert_eq!(body["user_id"], "dana");
    let session = body["session_id"].as_str().unwrap();
    assert!(session.starts_with("protocol-"), "{session}");
    assert!(
        !body.contains_key("auth_token"),
        "Airlock holds no user token to pass on"
    );
}

#[tokio::test]
async fn collector_errors_reach_the_caller_without_addresses_or_paths() {
    let s = Setup::new().await;
    let err = s
        .gateway
        .call(
            &Caller::new("dana"),
            "quox_ssh_exec",
            json!({"host": "edge-2", "command": "uptime"}),
        )
        .await;
    // ssh_exec is admin-tier by default: it needs approval first.
    let text = match err {
        Err(CallError::ApprovalRequired { request_id, .. }) => {
            s.gateway
                .approvals()
                .approve(&request_id, &Decider::cli("tester"), s.gateway.now_ms())
                .unwrap();
            match s
                .gateway
                .call(
                    &Caller::new("dana"),
                    "quox_ssh_exec",
                    json!({"host": "edge-2", "command": "uptime"}),
                )
                .await
            {
                Ok(v) => panic!("a failure answers as one: {:?}", v.value),
                Err(e) => format!("{e} {}", json!(e.details())),
            }
        }
        other => panic!("approval first: {other:?}"),
    };
    assert!(text.contains("500"), "the status is kept: {text}");
    for secret in [
        "10.20.30.40",
        "192.168.88.126",
        "localhost:9848",
        "/opt/quox",
        "/etc/quox",
        "/var/lib/quox",
        "/home/quox",
    ] {
        assert!(
            !text.contains(secret),
            "`{secret}` reached the caller: {text}"
        );
    }
}

#[tokio::test]
async fn prompt_templates_render_as_quoxmcp_renders_them() {
    let s = Setup::new().await;
    let render = |args: Value| {
        let Value::Object(args) = args else {
            unreachable!()
        };
        s.collector
            .render_prompt("investigate", Some(&args))
            .unwrap()
            .into_iter()
            .map(|(role, text)| format!("{role}: {text}"))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        render(json!({"host": "edge-1"})),
        ["user: Investigate edge-1. No start time given. Severity: medium."]
    );
    assert_eq!(
        render(json!({"host": "edge-1", "since": "09:00", "severity": "high"})),
        ["user: Investigate edge-1. Since 09:00. Severity: high."]
    );
    // A value is text, never a template: `{{severity}}` stays as written.
    let [line] = &render(json!({"host": "{{severity}}", "severity": "high"}))[..] else {
        panic!("one message")
    };
    assert!(
        line.starts_with("user: Investigate {{severity}}.")
            || line.starts_with("user: Investigate \\{\\{severity\\}\\}."),
        "{line}"
    );
}

#[tokio::test]
async fn a_live_resource_falls_back_to_the_listed_content_when_the_collector_is_down() {
    let s = Setup::new().await;
    let listed = s
        .collector
        .resources()
        .into_iter()
        .find(|r| r.uri == "quox://fleet/health")
        .unwrap();
    assert!(listed.live);
    *s.reference.down.lock().unwrap() = true;
    let before = s.seen().len();
    let read = s
        .collector
        .read_resource("quox://fleet/health")
        .await
        .unwrap();
    assert_eq!(
        read.content, listed.content,
        "the content listed at discovery"
    );
    assert_eq!(s.seen().len(), before + 1, "the live read was tried once");
    // The outage is remembered: reads meanwhile do not each wait on it.
    for _ in 0..5 {
        let again = s
            .collector
            .read_resource("quox://fleet/health")
            .await
            .unwrap();
        assert_eq!(again.content, listed.content);
    }
    assert_eq!(s.seen().len(), before + 1, "no new request within 30 s");
}

#[tokio::test]
async fn a_live_resource_is_not_served_stale_when_the_key_is_refused() {
    let s = Setup::new().await;
    *s.reference.revoked.lock().unwrap() = true;
    let e = s
        .collector
        .read_resource("quox://fleet/health")
        .await
        .unwrap_err();
    assert!(e.to_string().contains("refused the service key"), "{e}");
}

#[tokio::test]
async fn a_changed_resource_list_is_noticed_and_new_live_content_is_not() {
    let s = Setup::new().await;
    let mut lists = s.collector.watch_lists();
    lists.mark_unchanged();
    // Only the live resource's content differs: no list change.
    s.collector.discover().await.unwrap();
    assert!(!lists.has_changed().unwrap());
    *s.reference.runbook.lock().unwrap() = true;
    s.collector.discover().await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), lists.changed())
        .await
        .expect("a list change is announced")
        .unwrap();
    assert!(s
        .collector
        .resources()
        .iter()
        .any(|r| r.uri == "quox://runbooks/disk-full"));
}
