//! Faults around a running execution, on a real `airlock serve`: a client
//! that goes away in the middle (HTTP and stdio), and SIGTERM while an
//! execution runs (it finishes within the grace period, else it is
//! cancelled). Each time the execution ends within a bound, its slot is
//! free again, and the audit log records how it ended and still verifies. (A client's disconnect is noticed when the transport
//! gives up on it: about 5 s on both transports.)

mod common;

use std::{process::Command, sync::mpsc, time::Duration};

use airlock_gateway::audit;
use common::{call, configured, serve_configured, text};
use serde_json::{json, Value};

/// How long the simulated cluster's tasks take here.
const TASK_DELAY: Duration = Duration::from_millis(20);

/// Makes one tool call the server logs at `info` (a node that does not
/// exist), then waits a minute on a timer: long enough that only a fault
/// can end it.
const LONG: &str = "try { await tools.node_status({node: 'nowhere'}) } catch (e) {} \
                    await new Promise((r) => setTimeout(r, 60000)); 'finished'";

fn audit_lines(path: &std::path::Path) -> Vec<Value> {
    let v = audit::verify(path).unwrap();
    assert!(v.ok(), "the audit log does not verify: {v:?}");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The script run across a SIGTERM: a call the server
/// logs (so the test knows it runs), then three seconds on a timer.
const ACROSS_SIGTERM: &str = "try { await tools.node_status({node: 'nowhere'}) } catch (e) {} \
                              await new Promise((r) => setTimeout(r, 3000)); 'finished'";

/// Waits for `child` to exit, failing the test if it takes longer than
/// `bound` after `cause`.
fn exit_within(
    mut child: std::process::Child,
    bound: Duration,
    cause: &str,
) -> std::process::ExitStatus {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    rx.recv_timeout(bound)
        .unwrap_or_else(|_| panic!("the server did not stop within {bound:?} of {cause}"))
        .unwrap()
}

/// Sends SIGTERM to the process `pid`.
fn terminate(pid: u32) {
    let pid = pid.to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
}

/// Sends SIGTERM to `server` once its execution has made its call.
fn terminate_when_running(server: &common::Server) {
    server.wait_for("tools.node_status →");
    terminate(server.child.id());
}

/// Every execution that started has ended, and every allowed call has a
/// result line.
fn everything_ended(lines: &[Value]) -> Vec<String> {
    let ids = |event: &str, key: &str| -> Vec<String> {
        let mut v: Vec<String> = lines
            .iter()
            .filter(|l| l["event"] == event && (event != "call" || l["decision"] == "allowed"))
            .map(|l| l[key].as_str().unwrap_or_default().to_string())
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        ids("execution_start", "execution"),
        ids("execution_end", "execution"),
        "an execution without an end"
    );
    assert_eq!(
        ids("call", "call"),
        ids("call_result", "call"),
        "a call without a result"
    );
    lines
        .iter()
        .filter(|l| l["event"] == "execution_end")
        .map(|l| l["outcome"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_mid_execution_frees_its_slot() {
    // One execution at a time, and a newcomer waits at most 200 ms for it:
    // if the abandoned execution kept its slot, the second one would fail.
    let (_sim, server, alice, audit_file) = serve_configured(
        TASK_DELAY,
        "",
        &["--executions-in-flight", "1", "--queue-wait-ms", "200"],
    )
    .await;
    let client = server.connect(&alice).await;
    let long = tokio::spawn(async move { call(&client, "execute", json!({"script": LONG})).await });
    server.wait_for("tools.node_status →");
    long.abort(); // the client, its session and its HTTP connection go away
    let _ = long.await;
    let ended = server.wait_for(": Cancelled,");
    eprintln!("server: {ended}");

    let again = server.connect(&alice).await;
    let r = call(&again, "execute", json!({"script": "'next'"})).await;
    assert_eq!(
        r.structured_content.as_ref().unwrap()["result"],
        "next",
        "{}",
        text(&r)
    );
    let outcomes = everything_ended(&audit_lines(&audit_file));
    assert_eq!(outcomes, ["Cancelled", "ok"]);
}

/// A rolling restart loses nothing that fits in the grace period: an
/// execution that started before SIGTERM runs to its end and its client
/// gets the result; then the server stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_an_execution_in_flight_finish_and_answer() {
    let (_sim, mut server, alice, audit_file) = serve_configured(TASK_DELAY, "", &[]).await;
    let client = server.connect(&alice).await;
    let running =
        tokio::spawn(
            async move { call(&client, "execute", json!({"script": ACROSS_SIGTERM})).await },
        );
    terminate_when_running(&server);
    let r = tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("the client never got the result of the execution SIGTERM let finish")
        .unwrap();
    assert_eq!(
        r.structured_content.as_ref().unwrap()["result"],
        "finished",
        "{}",
        text(&r)
    );
    server.wait_for("every execution in flight finished and answered");
    let child = std::mem::replace(&mut server.child, Command::new("true").spawn().unwrap());
    let status = exit_within(child, Duration::from_secs(20), "SIGTERM");
    assert!(status.success(), "{status:?}");
    let outcomes = everything_ended(&audit_lines(&audit_file));
    assert_eq!(outcomes, ["ok"]);
}

/// Sends SIGTERM to the server once its execution runs, and returns what
/// the client program `client` (which prints one JSON line: the result)
/// printed.
async fn across_sigterm(mut client: Command, what: &str) {
    let (_sim, server, alice, audit_file) = serve_configured(TASK_DELAY, "", &[]).await;
    let child = client
        .arg(&server.url)
        .arg(&alice)
        .arg(ACROSS_SIGTERM)
        .env_remove("AIRLOCK_CONFIG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let server = tokio::task::spawn_blocking(move || {
        terminate_when_running(&server);
        server
    })
    .await
    .unwrap();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let answer: Value = stdout
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| {
            panic!(
                "the {what} client got no answer across SIGTERM:\n{stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    assert_eq!(answer["result"]["result"], "finished", "{what}: {answer}");
    assert_eq!(answer["is_error"], false, "{what}: {answer}");
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut server = server;
    let child = std::mem::replace(&mut server.child, Command::new("true").spawn().unwrap());
    let status = exit_within(child, Duration::from_secs(20), "SIGTERM");
    assert!(status.success(), "{status:?}");
    assert_eq!(everything_ended(&audit_lines(&audit_file)), ["ok"]);
}

fn repo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The official Python SDK (2.x) follows an answer at once with
/// `tools/list` (to check the result against the tool's output schema),
/// on a new connection: a server that stopped listening with the answer
/// failed the very call it had answered. The drain serves open sessions
/// until they go quiet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drain_answers_the_python_sdk_client() {
    let mut client = Command::new(common::test_python());
    client.arg(repo().join("host/tests/clients/drain.py"));
    across_sigterm(client, "Python SDK").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drain_answers_the_typescript_sdk_client() {
    let Some((node, packages)) = common::node_packages() else {
        return;
    };
    // ES modules resolve packages from where the script is: next to them.
    let program = packages.join("drain.mjs");
    std::fs::copy(repo().join("host/tests/clients/drain.mjs"), &program).unwrap();
    let mut client = Command::new(node);
    client.arg(program);
    across_sigterm(client, "TypeScript SDK").await;
}

/// While it drains, a server sends new sessions elsewhere (503 with
/// Retry-After, and /healthz says so for the load balancer) and starts
/// no new execution in the sessions it still serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_server_takes_no_new_sessions_or_executions() {
    let (_sim, server, alice, _) = serve_configured(TASK_DELAY, "", &[]).await;
    let client = server.connect(&alice).await;
    let other = server.connect(&alice).await;
    let running =
        tokio::spawn(
            async move { call(&client, "execute", json!({"script": ACROSS_SIGTERM})).await },
        );
    let server = tokio::task::spawn_blocking(move || {
        terminate_when_running(&server);
        server.wait_for("stopping: no new sessions");
        server
    })
    .await
    .unwrap();
    let http = reqwest::Client::new();
    let health = http
        .get(format!("{}/healthz", server.base()))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 503);
    let new = http
        .post(&server.url)
        .bearer_auth(&alice)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"}}})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(new.status(), 503);
    assert_eq!(new.headers()["retry-after"], "1");
    let r = call(&other, "execute", json!({"script": "1 + 1"})).await;
    let error = &r.structured_content.as_ref().unwrap()["error"];
    assert_eq!(error["kind"], "ServerStopping", "{}", text(&r));
    let r = running.await.unwrap();
    assert_eq!(
        r.structured_content.as_ref().unwrap()["result"],
        "finished",
        "{}",
        text(&r)
    );
}

/// Past the grace period, what still runs is cancelled and audited so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_running_executions_and_leaves_a_verifiable_audit() {
    let (_sim, mut server, alice, audit_file) =
        serve_configured(TASK_DELAY, "", &["--shutdown-grace", "1s"]).await;
    let client = server.connect(&alice).await;
    let long = tokio::spawn(async move { call(&client, "execute", json!({"script": LONG})).await });
    terminate_when_running(&server);
    let ended = server.wait_for(": Cancelled,");
    eprintln!("server: {ended}");
    // The bound: the execution's own time limit is 30 s by default; a
    // server that drains must be gone well before then, not after 60 s.
    // (The harness kills its child when dropped; hand it a stand-in.)
    let child = std::mem::replace(&mut server.child, Command::new("true").spawn().unwrap());
    let status = exit_within(child, Duration::from_secs(20), "SIGTERM");
    assert!(status.success(), "{status:?}");
    long.abort();
    let outcomes = everything_ended(&audit_lines(&audit_file));
    assert_eq!(outcomes, ["Cancelled"]);
}

/// SIGTERM to `serve --demo` on stdio, before a client started a session
/// and in the middle of one: it ends as if stdin had closed, so the
/// simulator's temporary directory (its token files) is removed.
#[test]
fn sigterm_to_a_stdio_demo_leaves_no_temporary_files() {
    for with_session in [false, true] {
        sigterm_to_a_stdio_demo(with_session);
    }
}

fn sigterm_to_a_stdio_demo(with_session: bool) {
    use std::io::{BufRead, BufReader, Write};
    let scratch = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(["serve", "--demo"])
        .env("TMPDIR", scratch.path())
        .env("AIRLOCK_STATE_DIR", scratch.path().join("state"))
        .env("AIRLOCK_LOG", "info")
        .env_remove("AIRLOCK_CONFIG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let serving = Duration::from_secs(30);
    loop {
        let line = rx.recv_timeout(serving).expect("serve --demo starts");
        if line.contains("serving MCP on stdio") {
            break;
        }
    }
    let made: Vec<_> = std::fs::read_dir(scratch.path())
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.file_name()))
        .filter(|n| n.to_string_lossy().starts_with(".tmp"))
        .collect();
    assert_eq!(
        made.len(),
        1,
        "the simulator's directory while it runs: {made:?}"
    );
    if with_session {
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}});
        let stdin = child.stdin.as_mut().unwrap();
        writeln!(stdin, "{init}").unwrap();
        let mut answer = String::new();
        stdout.read_line(&mut answer).unwrap();
        assert!(answer.contains("\"id\":1"), "{answer}");
        writeln!(
            stdin,
            "{}",
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
        )
        .unwrap();
    }
    terminate(child.id());
    let status = exit_within(child, Duration::from_secs(20), "SIGTERM");
    assert!(status.success(), "session {with_session}: {status:?}");
    let left: Vec<_> = std::fs::read_dir(scratch.path())
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.file_name()))
        .filter(|n| n.to_string_lossy().starts_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_client_that_goes_away_mid_execution_leaves_a_complete_audit() {
    use std::io::{BufRead, BufReader, Write};
    let (_sim, dir, config) = configured(TASK_DELAY, "").await;
    let mut child = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .arg("--config")
        .arg(&config)
        .arg("serve")
        .env_remove("AIRLOCK_CONFIG")
        .env("AIRLOCK_LOG", "info")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let send = |stdin: &mut std::process::ChildStdin, v: Value| {
        writeln!(stdin, "{v}").unwrap();
        stdin.flush().unwrap();
    };
    send(
        &mut stdin,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}),
    );
    let mut lines = stdout.lines();
    let answer = lines.next().unwrap().unwrap();
    assert!(answer.contains("\"id\":1"), "{answer}");
    send(
        &mut stdin,
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    send(
        &mut stdin,
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": "execute", "arguments": {"script": LONG}}}),
    );
    let mut err_lines = stderr.lines();
    loop {
        let line = err_lines
            .next()
            .expect("the server said nothing about the call")
            .unwrap();
        if line.contains("tools.node_status →") {
            break;
        }
    }
    drop(stdin); // the client goes away with the execution still running
    let status = exit_within(child, Duration::from_secs(20), "losing its client");
    let rest: Vec<String> = err_lines.map_while(Result::ok).collect();
    eprintln!("server after the client left: {rest:?} ({status:?})");
    let outcomes = everything_ended(&audit_lines(&dir.path().join("audit.jsonl")));
    assert_eq!(outcomes, ["Cancelled"]);
}
