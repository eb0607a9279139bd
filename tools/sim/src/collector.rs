//! A simulated QuoxCORE collector on loopback, for the demo and the tests:
//! the four endpoints with a small fleet (fleet status, docker status, an
//! ssh exec that waits for the collector's own approval), two resources
//! (one live) and an incident prompt. It checks the service key, counts
//! what it is asked, and can be told to misbehave.

use std::{
    convert::Infallible,
    net::SocketAddr,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{body::Incoming, server::conn::http1, service::service_fn, Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::{net::TcpListener, sync::oneshot};

/// How the simulator answers, for fault tests.
#[derive(Clone, Debug, PartialEq)]
pub enum Behaviour {
    Normal,
    /// Every request gets this HTTP status and an error body.
    Status(u16),
    /// A 200 whose body is not JSON.
    Malformed,
    /// A 200 with a JSON body of about this many bytes.
    Oversized(usize),
    /// Wait this long before answering.
    Slow(Duration),
}

#[derive(Default)]
struct Counters {
    lists: AtomicU64,
    executes: AtomicU64,
    rejected_keys: AtomicU64,
    health_reads: AtomicU64,
}

struct Shared {
    key: String,
    behaviour: Mutex<Behaviour>,
    counters: Counters,
    /// Every execute body received, for tests to inspect.
    executed: Mutex<Vec<Value>>,
    /// Tools installed after start (a plugin added on the collector).
    installed: Mutex<Vec<Value>>,
}

pub struct CollectorSim {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
}

impl Drop for CollectorSim {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

impl CollectorSim {
    /// Listens on 127.0.0.1:`port` (0 for any free port).
    pub async fn start(port: u16, key: &str) -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", port)).await?;
        Ok(Self::serve(listener, key))
    }

    /// Serves on an already bound listener (a test can reserve the port
    /// before the simulator exists).
    pub fn serve(listener: TcpListener, key: &str) -> Self {
        let addr = listener.local_addr().expect("a bound listener");
        let shared = Arc::new(Shared {
            key: key.to_string(),
            behaviour: Mutex::new(Behaviour::Normal),
            counters: Counters::default(),
            executed: Mutex::default(),
            installed: Mutex::default(),
        });
        let (stop, mut stopped) = oneshot::channel::<()>();
        let s = shared.clone();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = tokio::select! {
                    _ = &mut stopped => return,
                    a = listener.accept() => match a { Ok(a) => a, Err(_) => continue },
                };
                let s = s.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| answer(req, s.clone()));
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), service)
                        .await;
                });
            }
        });
        Self {
            addr,
            shared,
            stop: Some(stop),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn set_behaviour(&self, b: Behaviour) {
        *self.shared.behaviour.lock().unwrap() = b;
    }

    /// Execute requests that reached it (whatever their outcome).
    pub fn executes(&self) -> u64 {
        self.shared.counters.executes.load(Ordering::SeqCst)
    }

    /// List requests (tools, resources, prompts) that reached it.
    pub fn lists(&self) -> u64 {
        self.shared.counters.lists.load(Ordering::SeqCst)
    }

    pub fn rejected_keys(&self) -> u64 {
        self.shared.counters.rejected_keys.load(Ordering::SeqCst)
    }

    pub fn executed(&self) -> Vec<Value> {
        self.shared.executed.lock().unwrap().clone()
    }

    /// Installs a tool, as a collector plugin would: listed from the next
    /// `tools/list` on, after the built-in ones. `tool` is a list entry
    /// (`name`, `description`, `input_schema`); calling it answers
    /// `{"success": true, "tool": NAME, "input": …}`.
    pub fn install_tool(&self, tool: Value) {
        self.shared.installed.lock().unwrap().push(tool);
    }
}

fn reply(status: u16, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or_default();
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        "application/json".parse().expect("static"),
    );
    r
}

async fn answer(
    req: Request<Incoming>,
    shared: Arc<Shared>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let method = req.method().clone();
    let key_ok = req
        .headers()
        .get("x-service-key")
        .is_some_and(|k| k.as_bytes() == shared.key.as_bytes());
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    if path == "/api/v1/tools/execute" {
        shared.counters.executes.fetch_add(1, Ordering::SeqCst);
    } else {
        shared.counters.lists.fetch_add(1, Ordering::SeqCst);
    }
    if !key_ok {
        shared.counters.rejected_keys.fetch_add(1, Ordering::SeqCst);
        return Ok(reply(
            401,
            json!({"error": "invalid service key"}).to_string(),
        ));
    }
    let behaviour = shared.behaviour.lock().unwrap().clone();
    match behaviour {
        Behaviour::Normal => {}
        Behaviour::Status(s) => {
            return Ok(reply(
                s,
                json!({"error": "collector is having a bad day"}).to_string(),
            ))
        }
        Behaviour::Malformed => return Ok(reply(200, "{\"tools\": [oops")),
        Behaviour::Oversized(n) => {
            return Ok(reply(200, json!({"padding": "x".repeat(n)}).to_string()))
        }
        Behaviour::Slow(d) => tokio::time::sleep(d).await,
    }
    // As the collector routes them: execute is a POST, the lists are GETs.
    let wanted = if path == "/api/v1/tools/execute" {
        hyper::Method::POST
    } else {
        hyper::Method::GET
    };
    if method != wanted && path.starts_with("/api/v1/") {
        return Ok(reply(
            405,
            json!({"error": format!("method {method} not allowed on {path}; use {wanted}")})
                .to_string(),
        ));
    }
    let v = match path.as_str() {
        "/api/v1/tools/list" => {
            let agent = form_urlencoded::parse(query.as_bytes())
                .find(|(k, _)| k == "agent_id")
                .map(|(_, v)| v.into_owned());
            match agent {
                Some(a) => tools(&a, &shared.installed.lock().unwrap()),
                None => {
                    return Ok(reply(
                        400,
                        json!({"error": "agent_id is required"}).to_string(),
                    ))
                }
            }
        }
        "/api/v1/tools/execute" => {
            let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            if let Err(problem) = check_execute(&request) {
                return Ok(reply(400, json!({"error": problem}).to_string()));
            }
            shared.executed.lock().unwrap().push(request.clone());
            execute(&request, &shared.installed.lock().unwrap())
        }
        "/api/v1/resources/list" => {
            let n = shared.counters.health_reads.fetch_add(1, Ordering::SeqCst) + 1;
            resources(n)
        }
        "/api/v1/prompts/list" => prompts(),
        _ => return Ok(reply(404, json!({"error": "not found"}).to_string())),
    };
    Ok(reply(200, v.to_string()))
}

/// The execute body as the collector requires it: a JSON object with a
/// `tool_name`, an `input` object and an `agent_id` (strings).
fn check_execute(request: &Value) -> Result<(), String> {
    let Some(body) = request.as_object() else {
        return Err("the body must be a JSON object".into());
    };
    for field in ["tool_name", "agent_id"] {
        if !body.get(field).is_some_and(Value::is_string) {
            return Err(format!("{field} is required (a string)"));
        }
    }
    if !body.get("input").is_some_and(Value::is_object) {
        return Err("input is required (an object)".into());
    }
    Ok(())
}

const HOSTS: [(&str, &str, u32); 3] = [
    ("edge-1", "healthy", 4),
    ("edge-2", "healthy", 2),
    ("db-1", "degraded", 1),
];

fn tools(agent: &str, installed: &[Value]) -> Value {
    let mut list = json!([
        {"name": "fleet_status", "description": "Health of every host in the fleet: status and running containers.",
         "input_schema": {"type": "object", "properties": {}, "required": []}},
        {"name": "docker.status", "description": "Containers on one host, with state and image.",
         "input_schema": {"type": "object", "properties": {"host": {"type": "string", "description": "Host name, e.g. edge-1"},
             "all": {"type": "boolean", "default": false, "description": "Include stopped containers"}}, "required": ["host"]}},
        {"name": "ssh_exec", "description": "Run a shell command on a host over SSH. Needs the collector's approval.",
         "input_schema": {"type": "object", "properties": {
             "host": {"type": "string"}, "command": {"type": "string", "maxLength": 4096}}, "required": ["host", "command"]}}
    ]);
    let list = list.as_array_mut().expect("a list");
    list.extend(installed.iter().cloned());
    json!({"tools": list, "agent": agent, "count": list.len()})
}

fn execute(request: &Value, installed: &[Value]) -> Value {
    let input = &request["input"];
    match request["tool_name"].as_str() {
        Some("fleet_status") => json!({
            "success": true,
            "hosts": HOSTS.iter().map(|(h, s, c)| json!({"host": h, "status": s, "containers": c})).collect::<Vec<_>>(),
        }),
        Some("docker.status") => {
            let host = input["host"].as_str().unwrap_or("");
            match HOSTS.iter().find(|(h, _, _)| *h == host) {
                Some((h, _, n)) => json!({
                    "success": true,
                    "host": h,
                    "containers": (0..*n).map(|i| json!({"name": format!("svc-{i}"), "state": "running", "image": format!("registry.local/svc:{i}")})).collect::<Vec<_>>(),
                }),
                None => json!({"success": false, "error": format!("unknown host {host}")}),
            }
        }
        Some("ssh_exec") => {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            std::hash::Hash::hash(&input.to_string(), &mut h);
            let id = format!("qa-{:08x}", std::hash::Hasher::finish(&h) as u32);
            json!({
                "success": false,
                "pending": true,
                "approvalId": id,
                "instructions": format!("An operator must approve {id} in QuoxCORE before the command runs."),
            })
        }
        Some(name) if installed.iter().any(|t| t["name"] == name) => {
            json!({"success": true, "tool": name, "input": input})
        }
        _ => json!({"success": false, "error": "unknown tool"}),
    }
}

fn resources(reads: u64) -> Value {
    json!({"resources": [
        {"name": "inventory", "uri": "quox://fleet/inventory", "title": "Fleet inventory",
         "description": "Hosts and their roles.", "mimeType": "application/json",
         "content": json!({"hosts": HOSTS.iter().map(|(h, _, _)| h).collect::<Vec<_>>()}).to_string(), "live": false},
        {"name": "health", "uri": "quox://fleet/health", "title": "Fleet health (live)",
         "description": "Current health summary; re-read on access.", "mimeType": "text/plain",
         "content": format!("reading {reads}: 2 healthy, 1 degraded (db-1)"), "live": true}
    ], "count": 2})
}

fn prompts() -> Value {
    json!({"prompts": [{
        "name": "incident_triage",
        "title": "Triage an incident",
        "description": "Walk through an incident on one service.",
        "arguments": [
            {"name": "service", "description": "The affected service", "required": true},
            {"name": "severity", "description": "low, medium or high", "required": false},
            {"name": "notes", "description": "Anything already known", "required": false}
        ],
        "messages": [{"role": "user", "text":
            "Triage an incident on {{service}} (severity {{severity|medium}}).{{#notes}} Known so far: {{notes}}.{{/notes}}{{^notes}} Nothing is known yet.{{/notes}} Start with quox_fleet_status."}]
    }], "count": 1})
}
