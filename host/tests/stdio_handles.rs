//! `airlock serve` on its standard handles: pipes are opened again as
//! non-blocking files of the server's own and go through the reactor
//! (`host/src/stdio.rs`), leaving descriptors 0, 1 and 2 as they were
//! (their open files may be shared with other programs); a socket for
//! stdin and stdout (as inetd or a socket-activated unit hands them over)
//! keeps tokio's blocking handles; stdout on the same pipe as stderr
//! serves all the same.

use std::{
    io::{BufRead, BufReader, Write},
    os::unix::net::UnixStream,
    process::{Child, Command, Stdio},
};

use serde_json::{json, Value};

fn airlock(state: &std::path::Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_airlock"));
    cmd.args(["serve", "--demo"])
        .env("AIRLOCK_STATE_DIR", state)
        .env_remove("AIRLOCK_CONFIG")
        // Diagnostics on, so the shared pipe carries both.
        .env("AIRLOCK_LOG", "info");
    cmd
}

/// Sends requests one by one and reads until each one's answer, skipping
/// anything that is not a JSON-RPC message with that id (diagnostics on a
/// shared pipe, notifications).
fn converse(to: &mut impl Write, from: impl std::io::Read) -> Vec<Value> {
    let mut lines = BufReader::new(from).lines();
    let mut answers = Vec::new();
    let requests = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "execute", "arguments": {"script": "(await tools.node_list({})).length + 1"}}}),
    ];
    for request in requests {
        writeln!(to, "{request}").unwrap();
        to.flush().unwrap();
        let Some(id) = request.get("id") else {
            continue;
        };
        loop {
            let line = lines
                .next()
                .expect("the server answers before it closes stdout")
                .unwrap();
            match serde_json::from_str::<Value>(&line) {
                Ok(m) if m.get("id") == Some(id) => {
                    answers.push(m);
                    break;
                }
                _ => continue,
            }
        }
    }
    answers
}

fn check(answers: &[Value]) {
    assert_eq!(
        answers[0]["result"]["serverInfo"]["name"], "airlock",
        "{answers:?}"
    );
    assert_eq!(answers[1]["result"], json!({}), "{answers:?}");
    // Three simulated nodes, plus one: the call went through the gateway.
    assert_eq!(
        answers[2]["result"]["structuredContent"]["result"], 4,
        "{answers:?}"
    );
}

/// Whether the server's descriptor `fd` is in non-blocking mode (Linux:
/// /proc/PID/fdinfo).
fn nonblocking(child: &Child, fd: &str) -> bool {
    let info = std::fs::read_to_string(format!("/proc/{}/fdinfo/{fd}", child.id())).unwrap();
    let flags = info
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .map(|f| u32::from_str_radix(f.trim(), 8).unwrap())
        .unwrap();
    flags & 0o4000 != 0
}

/// Whether the server holds, besides descriptors 0–2, a non-blocking
/// descriptor of the same pipe or socket as its descriptor `of`: the one
/// the reactor drives.
fn reactor_has(child: &Child, of: u32) -> bool {
    let dir = format!("/proc/{}/fd", child.id());
    let target = std::fs::read_link(format!("{dir}/{of}")).unwrap();
    std::fs::read_dir(&dir).unwrap().any(|e| {
        let e = e.unwrap();
        let fd = e.file_name().into_string().unwrap();
        !["0", "1", "2"].contains(&fd.as_str())
            && std::fs::read_link(e.path()).is_ok_and(|t| t == target)
            && nonblocking(child, &fd)
    })
}

/// Descriptors 0, 1 and 2 are as the server was given them: blocking.
fn standard_handles_untouched(child: &Child) -> bool {
    ["0", "1", "2"].iter().all(|fd| !nonblocking(child, fd))
}

fn finish(mut child: Child) {
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "the session ends cleanly when its input ends: {status}"
    );
}

#[test]
fn a_socket_for_stdin_and_stdout_serves() {
    let state = tempfile::tempdir().unwrap();
    let (ours, theirs) = UnixStream::pair().unwrap();
    let child = airlock(state.path())
        .stdin(Stdio::from(std::os::fd::OwnedFd::from(
            theirs.try_clone().unwrap(),
        )))
        .stdout(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let answers = converse(&mut ours.try_clone().unwrap(), ours.try_clone().unwrap());
    check(&answers);
    assert!(standard_handles_untouched(&child));
    assert!(!reactor_has(&child, 0), "a socket is not a pipe");
    ours.shutdown(std::net::Shutdown::Write).unwrap();
    finish(child);
}

#[test]
fn stdout_sharing_a_pipe_with_stderr_serves() {
    let state = tempfile::tempdir().unwrap();
    let (reader, writer) = std::io::pipe().unwrap();
    let mut child = airlock(state.path())
        .stdin(Stdio::piped())
        .stdout(writer.try_clone().unwrap())
        .stderr(writer)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let answers = converse(&mut stdin, &reader);
    check(&answers);
    // Both pipes went to the reactor through files of the server's own;
    // stderr, on the stdout pipe, stayed blocking.
    assert!(reactor_has(&child, 0) && reactor_has(&child, 1));
    assert!(standard_handles_untouched(&child));
    // Closing stdin ends the session; read what the server still writes
    // (its last diagnostics) until it exits.
    drop(stdin);
    let mut rest = Vec::new();
    std::io::Read::read_to_end(&mut &reader, &mut rest).unwrap();
    finish(child);
}

#[test]
fn pipes_of_their_own_go_to_the_reactor() {
    let state = tempfile::tempdir().unwrap();
    let mut child = airlock(state.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let answers = converse(&mut stdin, child.stdout.take().unwrap());
    check(&answers);
    assert!(reactor_has(&child, 0) && reactor_has(&child, 1));
    assert!(standard_handles_untouched(&child));
    drop(stdin);
    finish(child);
}
