//! The built binary as an MCP server over streamable HTTP: keys, identities
//! per key, Host and Origin checks, the body cap, the rate limit, and
//! re-reading the enrollment file on SIGHUP.

mod common;

use std::process::Command;

use common::{call, enroll, text, Server};
use serde_json::{json, Value};

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}})
}

/// The seconds a refusal's `Retry-After` asks for.
fn retry_after(r: &reqwest::Response) -> u64 {
    r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// A raw POST to /mcp, as a browser or a confused client would send it.
async fn post(
    server: &Server,
    key: Option<&str>,
    headers: &[(&str, &str)],
    body: String,
) -> reqwest::Response {
    let mut req = reqwest::Client::new()
        .post(&server.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body);
    if let Some(key) = key {
        req = req.bearer_auth(key);
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_hosts_origins_and_bodies_are_checked_before_mcp() {
    let (server, alice, _) = Server::start(&[]);
    let health = reqwest::get(format!("{}/healthz", server.base()))
        .await
        .unwrap();
    assert_eq!(health.status(), 200, "health needs no key");

    let r = post(&server, None, &[], initialize().to_string()).await;
    assert_eq!(r.status(), 401);
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    assert!(r.text().await.unwrap().contains("airlock enroll"));
    let last = if alice.ends_with('0') { '1' } else { '0' };
    let wrong = format!("{}{last}", &alice[..alice.len() - 1]);
    let r = post(&server, Some(&wrong), &[], initialize().to_string()).await;
    assert_eq!(r.status(), 401, "a key one digit off is refused");

    let r = post(&server, Some(&alice), &[], initialize().to_string()).await;
    assert_eq!(r.status(), 200);
    let session = r.headers()["mcp-session-id"].to_str().unwrap().to_string();
    // Ending the session says so with 204, which clients take as done
    // (the Python SDK reports 202 as a failed termination).
    let ended = reqwest::Client::new()
        .delete(&server.url)
        .bearer_auth(&alice)
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(ended.status(), 204);
    let r = post(
        &server,
        Some(&alice),
        &[("mcp-session-id", session.as_str())],
        json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}).to_string(),
    )
    .await;
    assert_eq!(r.status(), 404, "the ended session is gone");

    let r = post(
        &server,
        Some(&alice),
        &[("host", "evil.example")],
        initialize().to_string(),
    )
    .await;
    assert_eq!(r.status(), 403, "a rebinding Host is refused");
    let r = post(
        &server,
        Some(&alice),
        &[("origin", "https://evil.example")],
        initialize().to_string(),
    )
    .await;
    assert_eq!(r.status(), 403, "a foreign browser Origin is refused");
    let own = server.base();
    let r = post(
        &server,
        Some(&alice),
        &[("origin", own.as_str())],
        initialize().to_string(),
    )
    .await;
    assert_eq!(r.status(), 200, "the server's own loopback origin is fine");

    let big = json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "x".repeat(2 << 20)}});
    let r = post(&server, Some(&alice), &[], big.to_string()).await;
    assert_eq!(r.status(), 413, "a body over --max-body-bytes is refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_key_acts_as_its_own_identity() {
    let (server, alice, rita) = Server::start(&[]);
    let script = "const r = await tools.vm_start({node: 'pve1', vmid: 103}).then(() => 'started', (e) => e.code + ': ' + e.message); r";

    let rita = server.connect(&rita).await;
    let r = call(&rita, "execute", json!({"script": script})).await;
    let result = &r.structured_content.as_ref().unwrap()["result"];
    let result = result.as_str().unwrap();
    assert!(result.starts_with("policy_denied: "), "{result}");
    assert!(result.contains("identity rita has mode ro"), "{result}");
    let r = call(
        &rita,
        "execute",
        json!({"script": "(await tools.node_list({})).length"}),
    )
    .await;
    assert_eq!(r.structured_content.unwrap()["result"], 3);
    let whoami = rita
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            "airlock://identity",
        ))
        .await
        .unwrap();
    let body = serde_json::to_value(&whoami.contents[0]).unwrap()["text"]
        .as_str()
        .unwrap()
        .to_string();
    let whoami: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(whoami["identity"], "rita");
    assert_eq!(whoami["mode"], "ro");
    assert_eq!(whoami["may_call_tiers"], json!(["read"]));

    // alice is read-write but the demo asks approval for mutations; a
    // client without elicitation is told what the execution waits for
    // and how to decide it, not a denial.
    let alice = server.connect(&alice).await;
    let r = call(&alice, "execute", json!({"script": script})).await;
    let answer = r.structured_content.clone().unwrap();
    assert_eq!(answer["status"], "waiting", "{}", text(&r));
    assert_eq!(answer["waiting"][0]["tool"], "vm_start");
    assert!(text(&r).contains("approvals approve ap-"), "{}", text(&r));
    // Only alice can follow it: to rita her execution's id reads as one
    // that does not exist.
    let theirs = answer["execution"].as_str().unwrap();
    let r = call(&rita, "execute", json!({"execution": theirs})).await;
    assert_eq!(r.is_error, Some(true));
    let error = &r.structured_content.as_ref().unwrap()["error"];
    assert_eq!(error["kind"], "UnknownExecution", "{error}");
    let r = call(&alice, "execute", json!({"execution": "made-up-x1"})).await;
    let unknown = &r.structured_content.as_ref().unwrap()["error"];
    assert_eq!(
        error["message"].as_str().unwrap().replace(theirs, "ID"),
        unknown["message"]
            .as_str()
            .unwrap()
            .replace("made-up-x1", "ID"),
    );
    // Following it while nothing is decided says it still waits (after
    // the bounded wait for a decision).
    rita.cancel().await.unwrap();
    alice.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_over_its_rate_is_told_to_slow_down() {
    let (server, alice, rita) = Server::start(&["--requests-per-minute", "3"]);
    for _ in 0..3 {
        let r = post(&server, Some(&alice), &[], initialize().to_string()).await;
        assert_eq!(r.status(), 200);
    }
    let r = post(&server, Some(&alice), &[], initialize().to_string()).await;
    assert_eq!(r.status(), 429);
    // 3 a minute: the next request is due in about 20 s, and it says so.
    let wait = retry_after(&r);
    assert!((19..=20).contains(&wait), "Retry-After {wait}");
    let r = post(&server, Some(&rita), &[], initialize().to_string()).await;
    assert_eq!(r.status(), 200, "the limit is per client");
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_rereads_the_enrollment_file() {
    let (server, alice, _) = Server::start(&[]);
    let olga = enroll(&server.enrollment, "olga");
    let r = post(&server, Some(&olga), &[], initialize().to_string()).await;
    assert_eq!(r.status(), 401, "not known until the file is re-read");

    // Revoke alice: keep only olga's entry.
    let text = std::fs::read_to_string(&server.enrollment).unwrap();
    let olga_entry = &text[text.rfind("[[client]]").unwrap()..];
    std::fs::write(&server.enrollment, olga_entry).unwrap();
    let pid = server.child.id().to_string();
    let status = Command::new("kill").args(["-HUP", &pid]).status().unwrap();
    assert!(status.success());
    server.wait_for("reloaded the enrolled keys");

    let r = post(&server, Some(&olga), &[], initialize().to_string()).await;
    assert_eq!(r.status(), 200);
    let r = post(&server, Some(&alice), &[], initialize().to_string()).await;
    assert_eq!(r.status(), 401, "a removed key stops working");
}

/// Twenty executions of rita's (read-only) that only await a timer, over
/// HTTP: she runs her share of the slots (half of them, by default) and
/// the rest of hers wait, so olga's execution runs beside them instead
/// of waiting for one to end (they sleep far past the queue's wait, so
/// waiting behind them would be a refusal).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_identity_s_sleepers_leave_the_others_their_slots() {
    let (_sim, dir, config) = common::configured(std::time::Duration::ZERO, "").await;
    let audit = dir.path().join("audit.jsonl");
    let enrollment = dir.path().join(common::ENROLLMENT);
    let rita = enroll(&enrollment, "rita");
    let olga = enroll(&enrollment, "olga");
    let mut args: Vec<std::ffi::OsString> = vec!["--config".into(), config.into()];
    args.extend(["serve", "--http", "127.0.0.1:0", "--enrollment"].map(Into::into));
    args.push(enrollment.into());
    let server = tokio::task::spawn_blocking(move || Server::spawn(dir, &args))
        .await
        .unwrap();

    let rita = std::sync::Arc::new(server.connect(&rita).await);
    let sleepers: Vec<_> = (0..20)
        .map(|_| {
            let rita = rita.clone();
            tokio::spawn(async move {
                call(
                    &rita,
                    "execute",
                    json!({"script": "await tools.node_list({}); await new Promise(r => setTimeout(r, 50000)); 'slept'"}),
                )
                .await
            })
        })
        .collect();
    // Every sleeper has started (its start is audited before it asks for
    // a slot), and those given a slot have made their call.
    let ritas = |event: &str| {
        std::fs::read_to_string(&audit)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|l| l["event"] == event && l["identity"] == "rita")
            .filter_map(|l| {
                l.get("call")
                    .or_else(|| l.get("execution"))
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    };
    while ritas("execution_start") < 20 || ritas("call") < 8 {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    let olga = server.connect(&olga).await;
    let r = call(
        &olga,
        "execute",
        json!({"script": "(await tools.node_list({})).length"}),
    )
    .await;
    assert_eq!(
        r.structured_content.as_ref().unwrap()["result"],
        3,
        "olga's execution ran: {}",
        text(&r)
    );
    assert_eq!(
        ritas("call"),
        8,
        "rita ran her share, 8 of the 16 slots, and no more"
    );
    assert!(
        sleepers.iter().all(|s| !s.is_finished()),
        "rita's sleepers are all still asleep or waiting"
    );
    for s in sleepers {
        s.abort();
    }
}

/// Requests without a valid credential are limited per client address
/// (here the one a trusted proxy forwards for): past the limit, 429
/// before any check, for that address only, and enrolled keys from it
/// are still let in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_authentications_are_limited_per_client_address() {
    let (server, alice, _) = Server::start(&[
        "--failed-auth-per-minute",
        "3",
        "--trusted-proxy",
        "127.0.0.1",
    ]);
    let from = |ip: &'static str| [("x-forwarded-for", ip)];
    let body = || initialize().to_string();
    for _ in 0..3 {
        let r = post(&server, Some("alk_wrong"), &from("198.51.100.7"), body()).await;
        assert_eq!(r.status(), 401);
    }
    let r = post(&server, Some("alk_wrong"), &from("198.51.100.7"), body()).await;
    assert_eq!(r.status(), 429);
    let wait = retry_after(&r);
    assert!((1..=20).contains(&wait), "Retry-After {wait}");
    let text = r.text().await.unwrap();
    assert!(text.contains("--failed-auth-per-minute 3"), "{text}");
    let r = post(&server, None, &from("198.51.100.7"), body()).await;
    assert_eq!(r.status(), 429, "no credential at all counts the same");
    let r = post(&server, Some("alk_wrong"), &from("198.51.100.8"), body()).await;
    assert_eq!(r.status(), 401, "another address has its own bucket");
    let r = post(&server, Some(&alice), &from("198.51.100.7"), body()).await;
    assert_eq!(r.status(), 200, "an enrolled key is let in all the same");
    // A client cannot escape its bucket by writing addresses of its own
    // into X-Forwarded-For: the proxy appends the address it saw, and
    // only the right-most entry no trusted proxy wrote counts.
    let r = post(
        &server,
        Some("alk_wrong"),
        &from("192.0.2.1, 198.51.100.7"),
        body(),
    )
    .await;
    assert_eq!(r.status(), 429, "the right-most untrusted entry counts");
}
