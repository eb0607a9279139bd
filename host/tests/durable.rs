//! Durable executions through the clients people use: a script that needs
//! another person's decision twice (snapshot, then shutdown) completes as
//! one execution — one `execute`, then follow-ups — with each change sent
//! once; a denied call throws in the script, which catches it. The
//! official Python SDK's and TypeScript SDK's clients run `airlock serve`
//! over stdio as alice; bob approves or denies from the command line, as
//! an operator would, between the client's calls.

mod common;

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_airlock");

/// The issue's two-step change: a snapshot, waited for, then a shutdown,
/// waited for; then the guest's status.
const SNAPSHOT_THEN_SHUTDOWN: &str = r#"const node = "pve1", vmid = 101;
const snap = await tools.wait_task({node, upid: await tools.vm_snapshot_create({node, vmid, snapname: "before_shutdown"})});
const down = await tools.wait_task({node, upid: await tools.vm_shutdown({node, vmid, timeout: 5})});
const after = await tools.vm_status({node, vmid});
({snapshot: snap.exitstatus, shutdown: down.exitstatus, status: after.status})"#;

/// A change the script tries and catches.
const CAUGHT: &str = r#"let said;
try { await tools.vm_shutdown({node: "pve1", vmid: 101, timeout: 5}); said = "made"; }
catch (e) { said = e.code + ": " + e.message; }
said"#;

/// The simulated cluster; alice may change anything, bob decides.
fn config(dir: &Path) -> PathBuf {
    let path = dir.join("airlock.toml");
    std::fs::write(
        &path,
        format!(
            "state_dir = {:?}\n[identities.alice]\nmode = \"rw\"\n[identities.bob]\n",
            dir.join("state").display().to_string()
        ),
    )
    .unwrap();
    path
}

fn server_args(config: &Path) -> Vec<String> {
    vec![
        BIN.to_string(),
        "serve".into(),
        "--config".into(),
        config.display().to_string(),
        "--identity".into(),
        "alice".into(),
    ]
}

/// `airlock --config CONFIG approvals VERB`, the request id and `--by`
/// to be appended by the client.
fn decide(config: &Path, verb: &str) -> String {
    json!([
        BIN,
        "--config",
        config.display().to_string(),
        "approvals",
        verb
    ])
    .to_string()
}

/// Runs `host/tests/clients/PROGRAM.py` with `args`, then the server's
/// command line, and takes its answer.
fn python_client(program: &str, args: &[&str], config: &Path, label: &str) -> Value {
    let out = Command::new(common::test_python())
        .arg(common::repo().join(format!("host/tests/clients/{program}.py")))
        .args(args)
        .args(server_args(config))
        .env_remove("AIRLOCK_CONFIG")
        .env("AIRLOCK_LOG", "warn")
        .output()
        .unwrap();
    common::client_answer(label, out)
}

fn python(config: &Path, script: &str, verb: &str) -> Value {
    python_client(
        "follow",
        &[script, "bob", &decide(config, verb)],
        config,
        "python",
    )
}

fn typescript(config: &Path, script: &str, verb: &str) -> Option<Value> {
    let (node, packages) = common::node_packages()?;
    let program = packages.join("follow.mjs");
    std::fs::copy(
        common::repo().join("host/tests/clients/follow.mjs"),
        &program,
    )
    .unwrap();
    let out = Command::new(node)
        .arg(program)
        .args([script, "bob", &decide(config, verb)])
        .args(server_args(config))
        .env_remove("AIRLOCK_CONFIG")
        .env("AIRLOCK_LOG", "warn")
        .output()
        .unwrap();
    Some(common::client_answer("typescript", out))
}

fn count(lines: &[Value], f: impl Fn(&Value) -> bool) -> usize {
    lines.iter().filter(|l| f(l)).count()
}

fn approved_twice_completes_as_one_execution(
    client: &str,
    run: impl Fn(&Path, &str, &str) -> Value,
) {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let r = run(&config, SNAPSHOT_THEN_SHUTDOWN, "approve");
    let answers = r["answers"].as_array().unwrap();
    assert_eq!(answers.len(), 3, "{client}: waits twice, then ends: {r}");
    assert_eq!(answers[0]["status"], "waiting", "{client}: {r}");
    assert_eq!(answers[0]["waiting"][0]["tool"], "vm_snapshot_create");
    assert_eq!(answers[1]["status"], "waiting", "{client}: {r}");
    assert_eq!(answers[1]["waiting"][0]["tool"], "vm_shutdown");
    let how = answers[0]["waiting"][0]["how"].as_str().unwrap();
    assert!(
        how.contains("approvals approve ap-") && how.contains("the execution waits"),
        "{client}: {how}"
    );
    assert!(!how.contains("run the script again"), "{client}: {how}");
    let id = &answers[0]["execution"];
    assert!(
        answers.iter().all(|a| &a["execution"] == id),
        "{client}: one execution: {r}"
    );
    assert_eq!(r["is_error"], false, "{client}: {r}");
    assert_eq!(
        answers[2]["result"],
        json!({"snapshot": "OK", "shutdown": "OK", "status": "stopped"}),
        "{client}: {r}"
    );

    // Each change was sent once, as the audit chain shows; the execution
    // started once, parked twice, resumed twice and ended once.
    let lines = common::simulated_audit(&config);
    for tool in ["vm_snapshot_create", "vm_shutdown"] {
        let sent = count(&lines, |l| {
            l["event"] == "call" && l["tool"] == tool && l["decision"] == "allowed"
        });
        assert_eq!(sent, 1, "{client}: {tool} sent once");
    }
    let of = |event: &str| count(&lines, |l| l["event"] == event && &l["execution"] == id);
    assert_eq!(
        [
            of("execution_start"),
            of("execution_parked"),
            of("execution_resumed"),
            of("execution_end")
        ],
        [1, 2, 2, 1],
        "{client}"
    );
    let end = lines
        .iter()
        .find(|l| l["event"] == "execution_end" && &l["execution"] == id)
        .unwrap();
    assert_eq!(end["outcome"], "ok");
    let verify = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .args(["audit", "verify"])
        .env_remove("AIRLOCK_CONFIG")
        .output()
        .unwrap();
    assert!(verify.status.success(), "{client}: {verify:?}");
}

fn a_denied_call_throws_in_the_script(client: &str, run: impl Fn(&Path, &str, &str) -> Value) {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let r = run(&config, CAUGHT, "deny");
    let answers = r["answers"].as_array().unwrap();
    assert_eq!(answers.len(), 2, "{client}: {r}");
    assert_eq!(answers[0]["status"], "waiting", "{client}: {r}");
    let said = answers[1]["result"].as_str().unwrap_or_default();
    assert!(
        said.starts_with("approval_denied: ") && said.contains("denied this exact call"),
        "{client}: {r}"
    );
    let lines = common::simulated_audit(&config);
    assert_eq!(
        count(&lines, |l| l["event"] == "call"
            && l["tool"] == "vm_shutdown"
            && l["decision"] == "allowed"),
        0,
        "{client}: nothing was sent"
    );
}

#[test]
fn python_sdk_a_two_step_change_approved_twice_is_one_execution() {
    approved_twice_completes_as_one_execution("python", python);
}

#[test]
fn typescript_sdk_a_two_step_change_approved_twice_is_one_execution() {
    if common::node_packages().is_none() {
        return;
    }
    approved_twice_completes_as_one_execution("typescript", |c, s, v| typescript(c, s, v).unwrap());
}

#[test]
fn python_sdk_a_denied_call_throws_where_the_script_catches_it() {
    a_denied_call_throws_in_the_script("python", python);
}

#[test]
fn typescript_sdk_a_denied_call_throws_where_the_script_catches_it() {
    if common::node_packages().is_none() {
        return;
    }
    a_denied_call_throws_in_the_script("typescript", |c, s, v| typescript(c, s, v).unwrap());
}

/// `airlock audit close`, run by the operator while the execution waits,
/// leaves it alone: it is waiting, not lost, and ends once, as `ok`.
#[test]
fn audit_close_leaves_a_waiting_execution_alone() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let c = config.display().to_string();
    // The client appends the request id, `--by` and the approver.
    let close_then_approve = json!([
        "sh",
        "-c",
        format!("{BIN} --config {c} audit close --older-than 0s >&2 && {BIN} --config {c} approvals approve \"$1\" --by \"$3\""),
        "sh"
    ])
    .to_string();
    let r = python_client(
        "follow",
        &[CAUGHT, "bob", &close_then_approve],
        &config,
        "python",
    );
    let answers = r["answers"].as_array().unwrap();
    assert_eq!(answers.len(), 2, "{r}");
    assert_eq!(answers[1]["result"], "made", "{r}");
    let id = &answers[0]["execution"];
    let lines = common::simulated_audit(&config);
    let ends: Vec<&Value> = lines
        .iter()
        .filter(|l| l["event"] == "execution_end" && &l["execution"] == id)
        .collect();
    assert_eq!(ends.len(), 1, "{ends:?}");
    assert_eq!(ends[0]["outcome"], "ok");
}

/// The same cluster, where alice may approve her own calls in her client.
fn own_config(dir: &Path) -> PathBuf {
    let path = config(dir);
    let text = std::fs::read_to_string(&path).unwrap().replace(
        "[identities.alice]\nmode = \"rw\"\n",
        "[identities.alice]\nmode = \"rw\"\napprove_own = true\n",
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// The Python SDK's default `Client` (2026-07-28, stateless), approving
/// every question it is asked.
fn stateless(config: &Path, script: &str, how: &str) -> Value {
    python_client("stateless_approve", &[script, how], config, "python 2026")
}

/// A 2026-07-28 client that can ask its user is asked each approval its
/// execution waits for, in an `InputRequiredResult`; its answers resume
/// the execution, which completes as one, each change sent once.
#[test]
fn a_stateless_client_is_asked_and_its_answers_resume_the_execution() {
    let dir = tempfile::tempdir().unwrap();
    let config = own_config(dir.path());
    let r = stateless(&config, SNAPSHOT_THEN_SHUTDOWN, "auto");
    assert_eq!(r["protocol"], "2026-07-28", "{r}");
    assert_eq!(
        r["final"]["result"]["result"],
        json!({"snapshot": "OK", "shutdown": "OK", "status": "stopped"}),
        "{r}"
    );
    let lines = asked_twice_and_each_change_sent_once(&r, &config);
    assert_eq!(
        [
            count(&lines, |l| l["event"] == "execution_start"),
            count(&lines, |l| l["event"] == "execution_parked"),
            count(&lines, |l| l["event"] == "execution_resumed"),
            count(&lines, |l| l["event"] == "execution_end"),
        ],
        [1, 2, 2, 1]
    );
}

/// The two-step change answered in the client (`r`, a client program's
/// answer): the snapshot asked, then the shutdown, each approved there by
/// its requester and sent once. The audit, for further checks.
fn asked_twice_and_each_change_sent_once(r: &Value, config: &Path) -> Vec<Value> {
    let asked = r["asked"].as_array().unwrap();
    assert_eq!(asked.len(), 2, "the snapshot, then the shutdown: {r}");
    assert!(asked[0].as_str().unwrap().contains("vm_snapshot_create"));
    assert!(asked[1].as_str().unwrap().contains("vm_shutdown"));
    let lines = common::simulated_audit(config);
    for tool in ["vm_snapshot_create", "vm_shutdown"] {
        let sent = count(&lines, |l| {
            l["event"] == "call" && l["tool"] == tool && l["decision"] == "allowed"
        });
        assert_eq!(sent, 1, "{tool} sent once");
    }
    let decisions: Vec<&Value> = lines
        .iter()
        .filter(|l| l["event"] == "approval_decision")
        .collect();
    assert_eq!(decisions.len(), 2);
    for d in decisions {
        assert_eq!(
            (&d["channel"], &d["own"], &d["status"]),
            (&json!("client"), &json!(true), &json!("approved"))
        );
    }
    lines
}

/// Four eyes on the 2026-07-28 path: nothing is asked that the person
/// may not decide; the execution waits for someone else.
#[test]
fn a_stateless_client_is_not_asked_what_someone_else_must_decide() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let r = stateless(&config, CAUGHT, "auto");
    assert_eq!(r["final"]["result"]["status"], "waiting", "{r}");
    assert_eq!(r["asked"], json!([]), "{r}");
}

/// A state changed on the way, sent with another script, or answered
/// twice, decides nothing; answered with neither yes nor no, it decides
/// nothing and the question is asked again (SEP-2322); the state as
/// sealed decides once.
#[test]
fn a_tampered_or_replayed_request_state_decides_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = own_config(dir.path());
    let r = stateless(&config, CAUGHT, "tamper");
    assert_eq!(
        r["first"]["input_required"].as_array().unwrap().len(),
        1,
        "{r}"
    );
    for (step, kind) in [
        ("tampered", "InvalidRequestState"),
        ("other_script", "InvalidRequestState"),
        ("replayed", "InvalidRequestState"),
    ] {
        assert_eq!(r[step]["is_error"], true, "{step}: {r}");
        assert_eq!(r[step]["result"]["error"]["kind"], kind, "{step}: {r}");
    }
    assert_eq!(
        r["garbled"]["input_required"].as_array().unwrap().len(),
        1,
        "asked again: {r}"
    );
    assert_eq!(r["answered"]["result"]["result"], "made", "{r}");
    let lines = common::simulated_audit(&config);
    assert_eq!(
        count(&lines, |l| l["event"] == "approval_decision"),
        1,
        "decided once"
    );
    assert_eq!(
        count(&lines, |l| l["event"] == "call"
            && l["tool"] == "vm_shutdown"
            && l["decision"] == "allowed"),
        1,
        "sent once"
    );
}

/// 2026-07-28 forbids log messages a request did not ask for: a request
/// without `io.modelcontextprotocol/logLevel` gets none — not even the
/// warning of an execution that failed, which a 2025 session gets by
/// default — and one that asks for `debug` gets each call's line and the
/// execution's.
#[test]
fn a_stateless_request_gets_log_messages_only_when_it_asks() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let script = "const n = (await tools.node_list({})).length; await tools.no_such_tool({}); n";
    let r = python_client("stateless_logs", &[script], &config, "python 2026 logs");
    assert_eq!(r["protocol"], "2026-07-28", "{r}");
    assert_eq!(r["results"][0]["error"]["kind"], "ToolError", "{r}");
    assert_eq!(r["unasked"], json!([]), "none asked for, none sent: {r}");
    let asked = r["asked"].as_array().unwrap();
    assert!(
        asked.iter().any(|m| m["data"]["status"] == "ok")
            && asked
                .iter()
                .any(|m| m["data"]["outcome"] == "ToolError" && m["level"] == "warning"),
        "the calls' lines and the execution's: {r}"
    );
}

/// The Python SDK's `Client` with the tasks extension (2026-07-28).
fn tasks(config: &Path, script: &str, how: &[&str]) -> Value {
    let mut args = vec![script];
    args.extend_from_slice(how);
    python_client("stateless_task", &args, config, "python 2026 tasks")
}

/// A client that declared the tasks extension gets its waiting execution
/// as a task: the approvals its person may give are asked through it
/// (`input_required`, answered with `tasks/update`), and the poll that
/// finds them decided goes on with it. Two approvals, each change once,
/// one execution.
#[test]
fn a_task_asks_its_approvals_and_completes_as_one_execution() {
    let dir = tempfile::tempdir().unwrap();
    let config = own_config(dir.path());
    let r = tasks(&config, SNAPSHOT_THEN_SHUTDOWN, &["approve"]);
    assert_eq!(r["protocol"], "2026-07-28", "{r}");
    assert_eq!(
        r["final"]["result"],
        json!({"snapshot": "OK", "shutdown": "OK", "status": "stopped"}),
        "{r}"
    );
    let seen: Vec<&str> = r["seen"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert_eq!(seen.first(), Some(&"input_required"), "{r}");
    assert_eq!(seen.last(), Some(&"completed"), "{r}");
    let lines = asked_twice_and_each_change_sent_once(&r, &config);
    assert_eq!(
        [
            count(&lines, |l| l["event"] == "execution_start"),
            count(&lines, |l| l["event"] == "execution_end"
                && l["outcome"] == "ok"),
        ],
        [1, 1]
    );
}

/// Four eyes through a task: nothing is asked that the person may not
/// decide; the task works on (`working`, naming the request and who may
/// decide it) until an operator approves, then completes.
#[test]
fn a_task_waits_for_an_operator_and_completes() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let operator = json!([
        BIN,
        "--config",
        config.display().to_string(),
        "approvals",
        "approve",
        "--by",
        "bob"
    ])
    .to_string();
    let r = tasks(&config, CAUGHT, &["operator", &operator]);
    assert_eq!(r["final"]["result"], "made", "{r}");
    assert_eq!(r["asked"], json!([]), "{r}");
    let seen = r["seen"].as_array().unwrap();
    assert_eq!(seen[0], "working", "{r}");
    assert!(!seen.contains(&json!("input_required")), "{r}");
    let lines = common::simulated_audit(&config);
    let decided: Vec<&Value> = lines
        .iter()
        .filter(|l| l["event"] == "approval_decision")
        .collect();
    assert_eq!(decided.len(), 1);
    assert_eq!(
        (&decided[0]["decided_by"], &decided[0]["channel"]),
        (&json!("bob"), &json!("cli")),
        "{}",
        decided[0]
    );
}

/// `tasks/cancel` ends a waiting task at once, as its identity's cancel
/// (one end line, `Cancelled`, nothing sent); a poll after it says
/// `cancelled`, a second cancel and an id that was never a task are
/// refused with -32602 and a reason.
#[test]
fn a_task_is_cancelled_and_ends_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let r = tasks(&config, CAUGHT, &["cancel"]);
    assert_eq!(r["handle"]["resultType"], "task", "{r}");
    assert_eq!(r["handle"]["status"], "working", "{r}");
    let id = r["handle"]["taskId"].clone();
    let said = r["handle"]["statusMessage"].as_str().unwrap();
    // A task's client polls; it is not told to follow the execution.
    assert!(
        said.contains("vm_shutdown: request ap-")
            && said.contains("this task goes on once it is decided")
            && !said.contains("follow"),
        "{r}"
    );
    assert_eq!(r["polled"]["status"], "working", "{r}");
    assert_eq!(r["after"]["status"], "cancelled", "{r}");
    assert_eq!(r["again"]["code"], -32602, "{r}");
    assert!(
        r["again"]["message"]
            .as_str()
            .unwrap()
            .contains("already ended"),
        "{r}"
    );
    assert_eq!(r["unknown"]["code"], -32602, "{r}");
    let lines = common::simulated_audit(&config);
    common::cancelled_once_by(&lines, &id, "alice");
    assert_eq!(
        count(&lines, |l| l["event"] == "call"
            && l["tool"] == "vm_shutdown"
            && l["decision"] == "allowed"),
        0,
        "nothing sent"
    );
}
