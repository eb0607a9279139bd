//! The Proxmox client and backend against hostile servers on loopback
//! (tests/hostile): answers larger than the cap, answers within it of
//! tiny values that would cost a gigabyte parsed, a length that announces
//! gigabytes, a schema that never ends, a "UPID" of a megabyte, TLS and
//! name failures whose library texts name the host, and secrets PVE
//! returns in fields not named like secrets.

use std::{collections::BTreeMap, path::Path};

use airlock_catalog::{redact::REDACTED, ToolSpec};
use airlock_edge::tls::{parse_fingerprint, Trust};
use airlock_gateway::{Backend, Caller};
use airlock_proxmox::{
    apidata::Method,
    backend::{CatalogKind, ProxmoxBackend, ProxmoxConfig, TargetConfig},
    client::{ApiToken, PveClient, PveError, Request, Timeouts},
};
use airlock_sim::hostile::{Answer, Server};
use serde_json::{json, Value};

const SECRET: &str = "0b9c6a5e-1f1e-4c2a-9a0e-8f1c2d3e4f50";

fn token_line() -> String {
    format!("alice@pve!airlock={SECRET}")
}

fn token() -> ApiToken {
    ApiToken::parse(&token_line()).unwrap()
}

fn no_retries() -> Timeouts {
    Timeouts {
        get_retries: 0,
        ..Timeouts::default()
    }
}

fn pinned(server: &Server, url: &str) -> PveClient {
    let pin = parse_fingerprint(&server.fingerprint).unwrap();
    PveClient::new(url, &Trust::Pin(pin), no_retries()).unwrap()
}

fn get(path: &str) -> Request {
    Request {
        method: Method::Get,
        path: path.into(),
        params: vec![],
    }
}

/// A `[proxmox]` section with one target `lab` at `server`, alice's token.
fn config(server: &Server, dir: &Path, catalog: CatalogKind) -> ProxmoxConfig {
    let file = dir.join("alice.token");
    airlock_edge::credential_file::write(&file, &token_line()).unwrap();
    let mut targets = BTreeMap::new();
    targets.insert(
        "lab".to_string(),
        TargetConfig {
            url: server.url(),
            fingerprint: Some(server.fingerprint.clone()),
            tokens: [("alice".to_string(), file)].into_iter().collect(),
            ..TargetConfig::default()
        },
    );
    ProxmoxConfig {
        catalog,
        targets,
        ..ProxmoxConfig::default()
    }
}

/// What loopback sockets can hold between the two ends (the largest
/// receive and send buffers the kernel grows them to), plus a MiB for the
/// HTTP and TLS libraries' own buffers: the most a server can have written
/// that the client never read.
/// The backend's tool of that name.
fn tool_named(backend: &ProxmoxBackend, name: &str) -> ToolSpec {
    backend
        .tools()
        .into_iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no tool {name}"))
}

fn in_flight_slack() -> u64 {
    let max_of = |file: &str| {
        std::fs::read_to_string(file)
            .ok()
            .and_then(|t| t.split_whitespace().last()?.parse::<u64>().ok())
            .unwrap_or(32 << 20)
    };
    max_of("/proc/sys/net/ipv4/tcp_rmem") + max_of("/proc/sys/net/ipv4/tcp_wmem") + (1 << 20)
}

#[tokio::test]
async fn an_answer_larger_than_the_cap_is_refused_and_no_longer_read() {
    let cap: u64 = 1 << 20;
    let slack = in_flight_slack();
    // Far more than the cap and everything in flight together.
    let total = cap + slack + (64 << 20);
    let mut server = Server::tls(&["localhost"], move |_| Answer::Endless { total }).await;
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(&server, dir.path(), CatalogKind::Curated);
    c.max_response_bytes = cap;
    let backend = ProxmoxBackend::new(&c).await.unwrap();
    let tool = tool_named(&backend, "vm_list");
    let err = backend
        .call(&Caller::new("alice"), &tool, json!({"node": "pve1"}))
        .await
        .unwrap_err();
    assert_eq!(err.code, "response_too_large", "{err:?}");
    assert!(
        err.message.contains("proxmox.max_response_bytes") && err.message.contains("1048576"),
        "the error names the limit and its value: {}",
        err.message
    );
    assert!(!err.message.contains(SECRET));
    // Each attempt (a read is retried on connection failures, not on this)
    // ends with the client closing the connection long before the end.
    let written = server.next_ended().await;
    eprintln!(
        "cap {cap} B: the server wrote {written} B of a {total} B body before the client closed (in-flight allowance {slack} B)"
    );
    assert!(
        written < cap + slack,
        "the host stopped reading at the cap: {written} B written"
    );
}

/// `{"data":[{"":0},{"":0},…]}` of about `bytes` bytes: tiny values that
/// each cost the parser hundreds of bytes.
fn tiny_values(bytes: usize) -> String {
    let n = (bytes - 12) / 7;
    format!("{{\"data\":[{}{{\"\":0}}]}}", "{\"\":0},".repeat(n - 1))
}

#[tokio::test]
async fn an_answer_of_tiny_values_within_the_byte_cap_is_refused_unparsed() {
    // The review's reply: just under the default 16 MiB, 2.4 million
    // small objects, which parsed into more than a gigabyte.
    let body = tiny_values((16 << 20) - 64);
    assert!(body.len() as u64 <= 16 << 20);
    let sent = body.clone();
    let server = Server::tls(&["localhost"], move |_| Answer::Json {
        status: 200,
        body: sent.clone(),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let backend = ProxmoxBackend::new(&config(&server, dir.path(), CatalogKind::Curated))
        .await
        .unwrap();
    let tool = tool_named(&backend, "vm_list");
    let alice = Caller::new("alice");
    let err = backend
        .call(&alice, &tool, json!({"node": "pve1"}))
        .await
        .unwrap_err();
    assert_eq!(err.code, "response_too_large", "{err:?}");
    for says in [
        "1048576 JSON values",
        "proxmox.max_response_bytes = 16777216",
        "was not parsed",
        "narrow the request",
    ] {
        assert!(err.message.contains(says), "{says}: {}", err.message);
    }

    // A smaller cap scales the limit with it.
    let small = tiny_values(1 << 20);
    let server = Server::tls(&["localhost"], move |_| Answer::Json {
        status: 200,
        body: small.clone(),
    })
    .await;
    let client = pinned(&server, &server.url()).with_max_response_bytes(1 << 20);
    let err = client
        .call(&token(), &get("/nodes/pve1/qemu"))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        PveError::TooManyValues {
            limit: 65536,
            cap: 1 << 20,
            setting: "max_response_bytes"
        }
    );
    assert_eq!(err.code(), "response_too_large");
    // An error answer of tiny values is not parsed either: the status
    // speaks for it.
    let errors = tiny_values(1 << 20).replacen("\"data\"", "\"errors\"", 1);
    let server = Server::tls(&["localhost"], move |_| Answer::Json {
        status: 500,
        body: errors.clone(),
    })
    .await;
    let client = pinned(&server, &server.url()).with_max_response_bytes(1 << 20);
    let err = client.call(&token(), &get("/nodes")).await.unwrap_err();
    assert_eq!(err.code(), "backend_error", "{err}");
}

#[tokio::test]
async fn a_large_ordinary_answer_is_still_read() {
    // A whole-cluster resource list of 5,000 guests with PVE's fields:
    // 1.7 MB (over 1 MiB: parsed on a blocking thread), 230,000 values
    // of the 1,048,576 the default cap allows.
    let guests: Vec<Value> = (0..5000)
        .map(|i| {
            json!({
                "id": format!("qemu/{}", 100 + i), "type": "qemu", "vmid": 100 + i,
                "node": format!("pve{}", i % 16), "name": format!("guest-{i}"),
                "status": "running", "template": 0, "tags": "prod;web",
                "maxcpu": 4, "cpu": 0.0123, "maxmem": 8589934592u64, "mem": 4294967296u64,
                "maxdisk": 34359738368u64, "disk": 0, "uptime": 86400 + i,
                "netin": 123456789, "netout": 98765432, "diskread": 1234567, "diskwrite": 7654321,
                "hastate": "started", "pool": "web"
            })
        })
        .collect();
    let body = json!({ "data": guests }).to_string();
    assert!(body.len() > 1 << 20, "{} bytes", body.len());
    let server = Server::tls(&["localhost"], move |_| Answer::Json {
        status: 200,
        body: body.clone(),
    })
    .await;
    let client = pinned(&server, &server.url());
    let data = client
        .call(&token(), &get("/cluster/resources"))
        .await
        .unwrap();
    assert_eq!(data, json!(guests));
}

#[tokio::test]
async fn a_declared_length_above_the_cap_is_refused_before_reading() {
    let mut server = Server::tls(&["localhost"], |_| Answer::Declares { length: 100 << 30 }).await;
    let client = pinned(&server, &server.url()).with_max_response_bytes(1 << 20);
    let err = client.call(&token(), &get("/nodes")).await.unwrap_err();
    assert_eq!(
        err,
        PveError::TooLarge {
            limit: 1 << 20,
            setting: "max_response_bytes"
        }
    );
    assert_eq!(err.code(), "response_too_large");
    // The client hung up without waiting for the 100 GiB.
    assert_eq!(server.next_ended().await, 0);
}

#[tokio::test]
async fn an_endless_api_schema_stops_the_start_at_its_own_cap() {
    let cap: u64 = 2 << 20;
    let slack = in_flight_slack();
    let total = cap + slack + (64 << 20);
    let mut server = Server::tls(&["localhost"], move |r| {
        assert_eq!(r.path, "/pve-docs/api-viewer/apidata.js");
        Answer::Endless { total }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(&server, dir.path(), CatalogKind::Full);
    c.max_schema_bytes = cap;
    let err = ProxmoxBackend::new(&c).await.err().unwrap().to_string();
    assert!(
        err.contains("fetching the API schema")
            && err.contains("proxmox.max_schema_bytes")
            && err.contains(&cap.to_string()),
        "{err}"
    );
    assert!(!err.contains(SECRET) && !err.contains("127.0.0.1"), "{err}");
    let written = server.next_ended().await;
    eprintln!("schema cap {cap} B: the server wrote {written} B of {total} B");
    assert!(written < cap + slack, "{written} B written");
}

#[tokio::test]
async fn an_api_schema_of_tiny_values_is_refused_unparsed() {
    let cap: u64 = 1 << 20;
    let schema = format!(
        "const apiSchema = [{}[]];",
        "[[],[],[],[],[],[],[],[],[],[]],".repeat(30_000)
    );
    assert!(schema.len() as u64 <= cap);
    let server = Server::tls(&["localhost"], move |_| Answer::Json {
        status: 200,
        body: schema.clone(),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(&server, dir.path(), CatalogKind::Full);
    c.max_schema_bytes = cap;
    let err = ProxmoxBackend::new(&c).await.err().unwrap().to_string();
    assert!(
        err.contains("the API schema holds more than 65536 JSON values")
            && err.contains("proxmox.max_schema_bytes = 1048576"),
        "{err}"
    );
}

#[tokio::test]
async fn caps_below_a_kilobyte_are_a_configuration_error() {
    let server = Server::tls(&["localhost"], |_| Answer::data(json!([]))).await;
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(&server, dir.path(), CatalogKind::Curated);
    c.max_response_bytes = 0;
    let err = ProxmoxBackend::new(&c).await.err().unwrap().to_string();
    assert!(err.contains("max_response_bytes = 0"), "{err}");
}

#[tokio::test]
async fn a_huge_or_malformed_upid_is_never_a_request_id() {
    let huge = format!("UPID:pve1:{}", "A".repeat(1 << 20));
    let almost = format!(
        "UPID:pve1:000A1B2C:0F3E4D5A:6751A0B2:qmstart:101:{}:",
        "u".repeat(600)
    );
    let good = "UPID:pve1:000A1B2C:0F3E4D5A:6751A0B2:qmstart:103:alice@pve!airlock:";
    let answers = [huge.clone(), almost.clone(), good.to_string()];
    let next = std::sync::atomic::AtomicUsize::new(0);
    let server = Server::tls(&["localhost"], move |r| {
        assert_eq!(r.method, "POST");
        let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Answer::data(json!(answers[i]))
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let backend = ProxmoxBackend::new(&config(&server, dir.path(), CatalogKind::Curated))
        .await
        .unwrap();
    let start = tool_named(&backend, "vm_start");
    let alice = Caller::new("alice");
    let call = || backend.call(&alice, &start, json!({"node": "pve1", "vmid": 103}));
    let r = call().await.unwrap();
    assert_eq!(r.value, json!(huge), "the answer itself is passed on");
    assert_eq!(r.request_id, None, "a megabyte is no task id");
    let r = call().await.unwrap();
    assert_eq!(r.request_id, None, "longer than 512 bytes");
    let r = call().await.unwrap();
    assert_eq!(r.request_id.as_deref(), Some(good));
}

#[tokio::test]
async fn long_error_texts_from_the_cluster_are_cut() {
    let reason = "x".repeat(1 << 20);
    let errors: serde_json::Map<String, Value> = (0..5000)
        .map(|i| (format!("p{i}"), json!("y".repeat(1000))))
        .collect();
    let server = Server::tls(&["localhost"], move |r| {
        let body = if r.method == "POST" {
            json!({"errors": errors, "data": null})
        } else {
            json!({"message": reason, "data": null})
        };
        Answer::Json {
            status: if r.method == "POST" { 400 } else { 500 },
            body: body.to_string(),
        }
    })
    .await;
    let client = pinned(&server, &server.url());
    let read = client.call(&token(), &get("/nodes")).await.unwrap_err();
    assert!(
        read.to_string().len() < 1000,
        "{} bytes",
        read.to_string().len()
    );
    let post = Request {
        method: Method::Post,
        path: "/nodes/pve1/qemu".into(),
        params: vec![],
    };
    let bad = client.call(&token(), &post).await.unwrap_err();
    assert_eq!(bad.code(), "invalid_arguments");
    let text = bad.to_string();
    assert!(text.len() < 20 * 320 + 200, "{} bytes", text.len());
    assert!(
        text.ends_with("and 4980 more"),
        "{}",
        &text[text.len() - 40..]
    );
}

/// The host name of the URL the client was given appears in no error.
fn assert_no_host(err: &PveError, host: &str) {
    let text = err.to_string();
    assert!(
        !text.to_lowercase().contains(&host.to_lowercase()),
        "the error names the host {host}: {text}"
    );
}

#[tokio::test]
async fn tls_failures_are_described_without_the_host_name() {
    // A certificate for another name, trusted as a CA: rustls says
    // "certificate not valid for name \"localhost\" …".
    let server = Server::tls(&["pve-other.example"], |_| Answer::data(json!([]))).await;
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &server.certificate_pem).unwrap();
    let url = format!("https://localhost:{}", server.addr.port());
    let client = PveClient::new(&url, &Trust::CaBundle(ca), no_retries()).unwrap();
    let err = client.call(&token(), &get("/nodes")).await.unwrap_err();
    assert_eq!(err.code(), "unreachable");
    assert!(
        err.to_string().contains("not valid for the host name"),
        "{err}"
    );
    assert_no_host(&err, "localhost");
    assert_no_host(&err, "pve-other.example");

    // A certificate from no CA in the bundle (both are rcgen's
    // self-signed certificates with the same subject, so webpki finds an
    // issuer by name and then a signature that does not verify).
    let other = Server::tls(&["localhost"], |_| Answer::data(json!([]))).await;
    let url = format!("https://localhost:{}", other.addr.port());
    let client = PveClient::new(
        &url,
        &Trust::CaBundle(dir.path().join("ca.pem")),
        no_retries(),
    )
    .unwrap();
    let err = client.call(&token(), &get("/nodes")).await.unwrap_err();
    assert!(
        err.to_string().contains("TLS: the certificate's signature"),
        "{err}"
    );
    assert_no_host(&err, "localhost");

    // A wrong pin: the fingerprint the server showed, not its name.
    let client = PveClient::new(&url, &Trust::Pin([7; 32]), no_retries()).unwrap();
    let err = client.call(&token(), &get("/nodes")).await.unwrap_err();
    assert!(
        err.to_string().contains(&format!(
            "fingerprint {} does not match the configured pin",
            other.fingerprint
        )),
        "{err}"
    );
    assert_no_host(&err, "localhost");
}

#[tokio::test]
async fn a_host_name_that_does_not_resolve_is_said_so_without_the_name() {
    let client = PveClient::new(
        "https://nonexistent.invalid:8006",
        &Trust::Pin([7; 32]),
        no_retries(),
    )
    .unwrap();
    let err = client.call(&token(), &get("/nodes")).await.unwrap_err();
    assert_eq!(err.code(), "unreachable", "{err:?}");
    assert_no_host(&err, "nonexistent");
    assert!(!err.to_string().contains("8006"), "{err}");
    // The backend names the target by its configured name instead.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("alice.token");
    airlock_edge::credential_file::write(&file, &token_line()).unwrap();
    let mut targets = BTreeMap::new();
    targets.insert(
        "lab".to_string(),
        TargetConfig {
            url: "https://nonexistent.invalid:8006".into(),
            fingerprint: Some("AB".repeat(32)),
            tokens: [("alice".to_string(), file)].into_iter().collect(),
            connect_timeout_secs: Some(5),
            ..TargetConfig::default()
        },
    );
    let backend = ProxmoxBackend::new(&ProxmoxConfig {
        targets,
        ..ProxmoxConfig::default()
    })
    .await
    .unwrap();
    let tool = tool_named(&backend, "node_list");
    let err = backend
        .call(&Caller::new("alice"), &tool, json!({}))
        .await
        .unwrap_err();
    assert_eq!(err.code, "unreachable");
    assert!(
        err.message.contains("Proxmox target `lab`"),
        "{}",
        err.message
    );
    assert!(!err.message.contains("nonexistent"), "{}", err.message);
    eprintln!("unresolvable host: {}", err.message);
}

/// A full catalog from a two-operation schema file, against `server`.
async fn acme_backend(server: &Server, dir: &Path) -> ProxmoxBackend {
    let schema = json!([{
        "path": "/cluster/acme/plugins", "text": "plugins",
        "info": {"GET": {"name": "index", "description": "ACME plugin index.", "parameters": {"additionalProperties": 0, "properties": {}}}},
        "children": [{
            "path": "/cluster/acme/plugins/{id}", "text": "{id}",
            "info": {"GET": {"name": "get_plugin_config", "description": "Get ACME plugin configuration.", "parameters": {"additionalProperties": 0, "properties": {"id": {"type": "string", "description": "Unique identifier for ACME plugin instance."}}}}}
        }]
    }]);
    let file = dir.join("apidata.json");
    std::fs::write(&file, schema.to_string()).unwrap();
    let mut c = config(server, dir, CatalogKind::Full);
    c.schema_file = Some(file);
    ProxmoxBackend::new(&c).await.unwrap()
}

#[tokio::test]
async fn acme_dns_credentials_never_leave_the_backend() {
    let dns_secret = "CF_Token=Zx9-cloudflare-api-token\nCF_Account_ID=7";
    let plugin =
        json!({"plugin": "cf", "type": "dns", "api": "cf", "data": dns_secret, "digest": "abc"});
    let answer = plugin.clone();
    let server = Server::tls(&["localhost"], move |r| {
        if r.path.ends_with("/plugins") {
            Answer::data(json!([answer.clone()]))
        } else {
            Answer::data(answer.clone())
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let backend = acme_backend(&server, dir.path()).await;
    let tools = backend.tools();
    let alice = Caller::new("alice");
    for (path, args) in [
        ("GET /cluster/acme/plugins", json!({})),
        ("GET /cluster/acme/plugins/{id}", json!({"id": "cf"})),
    ] {
        let tool = tools
            .iter()
            .find(|t| t.description.ends_with(path))
            .unwrap();
        let r = backend.call(&alice, tool, args).await.unwrap();
        let text = r.value.to_string();
        assert!(!text.contains("Zx9"), "{path}: {text}");
        assert!(
            text.contains(REDACTED) && text.contains("\"api\":\"cf\""),
            "{text}"
        );
    }
}
