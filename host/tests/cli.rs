//! The `airlock` binary as a user runs it: a real process, scripts from a
//! file or stdin, flags and environment, exit codes.

use std::{
    io::Write,
    process::{Command, Output, Stdio},
};

fn airlock(args: &[&str], stdin: &str, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_airlock"));
    cmd.args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("airlock starts");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn exec_reads_stdin_and_prints_the_result() {
    let out = airlock(&["exec", "-"], "const n = await tools.list_nodes({});\nconsole.log('nodes', n.length);\nn.map((x) => x.node)", &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(value, serde_json::json!(["pve1", "pve2", "pve3"]));
    let err = text(&out.stderr);
    assert!(err.contains("[log] nodes 3"), "{err}");
    assert!(err.contains("ok: 1 tool call"), "{err}");
}

#[test]
fn json_output_carries_the_whole_outcome() {
    let out = airlock(
        &["exec", "--json", "-"],
        "await tools.guest_status({node: 'pve1', vmid: 100})",
        &[],
    );
    assert!(out.status.success());
    let outcome: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(outcome["result"]["ok"]["name"], "web-1");
    assert_eq!(outcome["trace"][0]["tool"], "guest_status");
    assert_eq!(outcome["stats"]["mode"], "fresh");
}

#[test]
fn a_hit_limit_exits_1_and_names_it() {
    let script = "for (const n of ['pve1', 'pve2']) await tools.list_guests({node: n})";
    let out = airlock(&["exec", "--tool-calls", "1", "-"], script, &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("LimitExceeded") && err.contains("tool_calls") && err.contains("used 2 of 1"),
        "{err}"
    );
    // The same limit from the environment.
    let out = airlock(&["exec", "-"], script, &[("AIRLOCK_TOOL_CALLS", "1")]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn script_errors_exit_1_with_position() {
    let out = airlock(&["exec", "-"], "const a = 1;\nconst = 2;", &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("SyntaxError at line 2"), "{err}");
}

#[test]
fn bad_settings_exit_2_naming_the_problem() {
    let out = airlock(&["exec", "--memory-bytes", "lots", "-"], "1", &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("memory-bytes"));
    let out = airlock(&["exec", "--calls-in-flight", "0", "-"], "1", &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("calls_in_flight"),
        "{}",
        text(&out.stderr)
    );
    let out = airlock(&["exec", "/nonexistent/script.js"], "", &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("/nonexistent/script.js"));
}

#[test]
fn demo_runs_with_no_configuration() {
    let out = airlock(&["demo"], "", &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(value["nodes_offline"], serde_json::json!(["pve3"]));
    assert_eq!(value["running"], 7);
}

#[test]
fn help_labels_the_demo_tool_host() {
    let out = airlock(&["exec", "--help"], "", &[]);
    assert!(text(&out.stdout).contains("DEMO TOOL HOST"));
}
