//! Four eyes, through the clients people use: an agent's MCP client set to
//! accept every question (the official Python SDK's and TypeScript SDK's
//! clients, answering every yes-or-no field with yes) cannot approve its
//! own identity's calls or plans. The identity (`olga`, mode operator)
//! runs `airlock serve` over stdio against the simulated cluster; each
//! run checks that the shutdown was not made (the guest still runs), that
//! the person was shown the request id and told someone else must approve
//! it, and that the request is still pending for an operator. With
//! `approve_own = true` for `olga`, the same client's yes runs the call:
//! the convenience is the operator's choice, and the test can fail.
//!
//! The command line keeps the same rule: `approvals approve --by olga`
//! of olga's request is refused, anyone else's approval is taken, and
//! the decision's audit line names the approver, the channel and whether
//! it was the requester.

mod common;

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_airlock");

/// Shuts VM 101 down (it runs on the simulated pve1), then reads its
/// status: what the call became, and whether it was made.
const SHUTDOWN: &str = r#"const tried = await Promise.allSettled([tools.vm_shutdown({node: "pve1", vmid: 101, forceStop: true, timeout: 5})]);
const after = await tools.vm_status({node: "pve1", vmid: 101});
({outcome: tried[0].status === "fulfilled" ? "made" : tried[0].reason.code, status: after.status})"#;

/// The same shutdown as a plan (nothing is sent while recording).
const PLANNED: &str =
    r#"await tools.vm_shutdown({node: "pve1", vmid: 101, forceStop: true, timeout: 5}); "planned""#;

/// A configuration for the simulated cluster where `olga` operates, and
/// may approve her own requests only when `approve_own`.
fn config(dir: &Path, approve_own: bool) -> PathBuf {
    let path = dir.join("airlock.toml");
    let own = if approve_own {
        "approve_own = true\n"
    } else {
        ""
    };
    std::fs::write(
        &path,
        format!(
            "state_dir = {:?}\n[identities.rita]\n[identities.olga]\nmode = \"operator\"\n{own}",
            dir.join("state").display().to_string()
        ),
    )
    .unwrap();
    path
}

/// The server command a client starts.
fn server_args(config: &Path) -> Vec<String> {
    vec![
        BIN.to_string(),
        "serve".into(),
        "--config".into(),
        config.display().to_string(),
        "--identity".into(),
        "olga".into(),
    ]
}

/// Runs one `execute` of `script` (in `mode`, if any) through the Python
/// SDK's auto-accepting client.
fn python_client(config: &Path, script: &str, mode: &str) -> Value {
    let program = common::repo().join("host/tests/clients/auto_accept.py");
    let out = Command::new(common::test_python())
        .arg(program)
        .arg(script)
        .arg(mode)
        .args(server_args(config))
        .env_remove("AIRLOCK_CONFIG")
        .env("AIRLOCK_LOG", "warn")
        .output()
        .unwrap();
    common::client_answer("python", out)
}

/// The same through the TypeScript SDK's client; `None` (SKIPPED) without
/// npm.
fn typescript_client(config: &Path, script: &str, mode: &str) -> Option<Value> {
    let (node, packages) = common::node_packages()?;
    // ES modules resolve packages from where the script is: next to them.
    let program = packages.join("auto_accept.mjs");
    std::fs::copy(
        common::repo().join("host/tests/clients/auto_accept.mjs"),
        &program,
    )
    .unwrap();
    let out = Command::new(node)
        .arg(program)
        .arg(script)
        .arg(mode)
        .args(server_args(config))
        .env_remove("AIRLOCK_CONFIG")
        .env("AIRLOCK_LOG", "warn")
        .output()
        .unwrap();
    Some(common::client_answer("typescript", out))
}

/// `airlock approvals ARGS` against `config`.
fn approvals(config: &Path, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .arg("--config")
        .arg(config)
        .arg("approvals")
        .args(args)
        .env_remove("AIRLOCK_CONFIG")
        .output()
        .unwrap()
}

/// What an auto-accepting client gets, and leaves behind, with four eyes
/// on and off.
fn the_client_cannot_approve_its_own_calls(client: &str, run: impl Fn(&Path, &str, &str) -> Value) {
    let dir = tempfile::tempdir().unwrap();
    let four_eyes = config(dir.path(), false);
    let r = run(&four_eyes, SHUTDOWN, "");
    // The execution waits for an operator's decision.
    assert_eq!(r["result"]["status"], "waiting", "{client}: {r}");
    assert_eq!(
        r["result"]["waiting"][0]["tool"], "vm_shutdown",
        "{client}: {r}"
    );
    let asked = r["asked"].as_array().unwrap();
    assert_eq!(asked.len(), 1, "{client}: told once: {r}");
    let told = asked[0].as_str().unwrap();
    assert!(
        told.contains("someone other than olga") && told.contains("ap-"),
        "{client}: {told}"
    );
    // The request waits for an operator, and nobody decided anything.
    let ids = approvals(&four_eyes, &["list", "--ids"]);
    let ids = String::from_utf8_lossy(&ids.stdout).trim().to_string();
    assert!(
        ids.starts_with("ap-") && !ids.contains('\n'),
        "{client}: {ids}"
    );
    assert!(
        told.contains(&ids),
        "{client}: the id shown is the request's"
    );
    let lines = common::simulated_audit(&four_eyes);
    assert!(
        !lines.iter().any(|l| l["event"] == "approval_decision"),
        "{client}: a decision was recorded"
    );
    assert!(!lines
        .iter()
        .any(|l| l["event"] == "call" && l["tool"] == "vm_shutdown" && l["decision"] == "allowed"));

    // A plan: recorded and filed, and left pending, whatever the client
    // answers.
    let r = run(&four_eyes, PLANNED, "plan");
    let plan = &r["result"]["plan"];
    assert_eq!(plan["status"], "pending", "{client}: {r}");
    let told = r["asked"][0].as_str().unwrap_or_default();
    assert!(
        told.contains("someone other than olga") && told.contains(plan["id"].as_str().unwrap()),
        "{client}: {r}"
    );

    // The operator allows olga to approve her own: the same yes now runs
    // the call (so the refusal above is the rule, not a broken client).
    let dir = tempfile::tempdir().unwrap();
    let own = config(dir.path(), true);
    let r = run(&own, SHUTDOWN, "");
    assert_eq!(r["result"]["result"]["outcome"], "made", "{client}: {r}");
    let decision = common::simulated_audit(&own)
        .into_iter()
        .find(|l| l["event"] == "approval_decision")
        .unwrap_or_else(|| panic!("{client}: no decision line"));
    assert_eq!(
        (
            &decision["decided_by"],
            &decision["channel"],
            &decision["own"],
            &decision["status"]
        ),
        (
            &json!("olga"),
            &json!("client"),
            &json!(true),
            &json!("approved")
        ),
        "{client}"
    );
}

#[test]
fn an_auto_accepting_python_sdk_client_cannot_approve_its_own_calls() {
    the_client_cannot_approve_its_own_calls("python", python_client);
}

#[test]
fn an_auto_accepting_typescript_sdk_client_cannot_approve_its_own_calls() {
    if common::node_packages().is_none() {
        return;
    }
    the_client_cannot_approve_its_own_calls("typescript", |c, s, m| {
        typescript_client(c, s, m).unwrap()
    });
}

/// The command line: the requester cannot approve as `--by` itself; an
/// operator can, and the decision's line says who, how, and not own.
#[test]
fn the_command_line_keeps_four_eyes_and_records_the_decision() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), false);
    let out = Command::new(BIN)
        .args(["--config"])
        .arg(&config)
        .args(["exec", "--no-wait", "--identity", "olga", "-"])
        .env_remove("AIRLOCK_CONFIG")
        .stdin(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(b"await tools.vm_shutdown({node: 'pve1', vmid: 101})")?;
            child.wait_with_output()
        })
        .unwrap();
    assert!(!out.status.success());
    let ids = approvals(&config, &["list", "--ids"]);
    let id = String::from_utf8_lossy(&ids.stdout).trim().to_string();
    assert!(id.starts_with("ap-"), "{id}");

    let own = approvals(&config, &["approve", &id, "--by", "olga"]);
    assert_eq!(own.status.code(), Some(1));
    let said = String::from_utf8_lossy(&own.stderr);
    assert!(
        said.contains("nobody approves their own request") && said.contains("approve_own"),
        "{said}"
    );
    // Olga in another spelling is still olga (found by an attacker's
    // review: `--by Olga` once approved what olga asked).
    for spelling in ["Olga", "OLGA", "ｏｌｇａ", "ol\u{200B}ga"] {
        let own = approvals(&config, &["approve", &id, "--by", spelling]);
        let said = String::from_utf8_lossy(&own.stderr);
        assert_eq!(own.status.code(), Some(1), "{spelling}: {said}");
        assert!(said.contains("nobody approves their own request"), "{said}");
    }
    // A name that is nobody the deployment knows is refused, with what to
    // give instead: a look-alike letter, a typo, or no --by at all.
    for (by, shown) in [("\u{43E}lga", "\u{43E}lga"), ("carol", "carol")] {
        let nobody = approvals(&config, &["approve", &id, "--by", by]);
        let said = String::from_utf8_lossy(&nobody.stderr);
        assert_eq!(nobody.status.code(), Some(1), "{by}: {said}");
        assert!(
            said.contains(&format!("--by `{shown}` names no identity"))
                && said.contains("olga, rita")
                && said.contains("[identities.NAME]"),
            "{said}"
        );
    }
    // Without --by, the login name decides: olga's, in any spelling, is
    // olga's own request.
    let default = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .args(["approvals", "approve", &id])
        .env("USER", "OLGA")
        .env_remove("AIRLOCK_CONFIG")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&default.stderr);
    assert!(said.contains("nobody approves their own request"), "{said}");
    assert!(common::simulated_audit(&config)
        .iter()
        .all(|l| l["event"] != "approval_decision"));
    // Refusing it would be allowed; approving by another person is.
    let other = approvals(&config, &["approve", &id, "--by", "rita"]);
    assert!(other.status.success(), "{other:?}");
    let decision = common::simulated_audit(&config)
        .into_iter()
        .find(|l| l["event"] == "approval_decision")
        .unwrap();
    assert_eq!(
        (
            &decision["approval"],
            &decision["decided_by"],
            &decision["channel"],
            &decision["own"],
            &decision["identity"]
        ),
        (
            &json!(id),
            &json!("rita"),
            &json!("cli"),
            &json!(false),
            &json!("olga")
        )
    );
    let v = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .args(["audit", "verify"])
        .env_remove("AIRLOCK_CONFIG")
        .output()
        .unwrap();
    assert!(v.status.success(), "{v:?}");
}

/// A real SSH key made by OpenSSH, and the fingerprint `ssh-keygen -l`
/// prints for it: the public key line and `SHA256:…`.
fn ssh_key(dir: &Path, comment: &str) -> (String, String) {
    let out = Command::new("sh")
        .arg(common::repo().join("scripts/install-ssh-keygen.sh"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "scripts/install-ssh-keygen.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = dir.join(comment.replace(['@', '.'], "_"));
    let made = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", comment, "-f"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let public = std::fs::read_to_string(file.with_extension("pub")).unwrap();
    let listed = Command::new("ssh-keygen")
        .args(["-l", "-E", "sha256", "-f"])
        .arg(file.with_extension("pub"))
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout).to_string();
    let fingerprint = listed
        .split_whitespace()
        .find(|w| w.starts_with("SHA256:"))
        .unwrap_or_else(|| panic!("no fingerprint in {listed}"))
        .to_string();
    (public.trim().to_string(), fingerprint)
}

/// `airlock ARGS` against `config`, with `stdin` as the script.
fn airlock(config: &Path, args: &[&str], stdin: &str) -> (bool, String) {
    let mut cmd = Command::new(BIN);
    cmd.arg("--config")
        .arg(config)
        .args(args)
        .env_remove("AIRLOCK_CONFIG");
    let out = common::run_with_stdin(&mut cmd, stdin);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// An intruder's key in a container's `ssh-public-keys`: every view an
/// approver has (the command line's list, a plan's table, the prompt in
/// the client) names it by type, fingerprint and comment, where all of
/// them used to say `[redacted]`. A password is shown as set, with its
/// length and a short hash; a long description in full on request.
#[test]
fn approvers_see_the_key_that_would_be_installed() {
    let dir = tempfile::tempdir().unwrap();
    let (intruder, fingerprint) = ssh_key(dir.path(), "intruder@evil.example");
    let (_, operators) = ssh_key(dir.path(), "ops@example");
    let config = config(dir.path(), false);
    // Admin calls need mode rw.
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("mode = \"operator\"", "mode = \"rw\"");
    std::fs::write(&config, text).unwrap();
    let description = format!("{}END", "cloud-init line\n".repeat(40));
    let script = format!(
        "await tools.ct_create({{node: 'pve1', vmid: 9100, ostemplate: 'local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst', password: 'hunter2hunter2', 'ssh-public-keys': {}, description: {}}})",
        serde_json::to_string(&intruder).unwrap(),
        serde_json::to_string(&description).unwrap()
    );
    let shown_key = format!(r#"ssh-keys[ssh-ed25519 {fingerprint} "intruder@evil.example"]"#);
    let seen = |view: &str, text: &str| {
        assert!(text.contains(&shown_key), "{view}: {text}");
        assert!(!text.contains("[redacted]"), "{view}: {text}");
        assert!(!text.contains("hunter2"), "{view}: {text}");
        assert!(
            text.contains("password=set(14 chars, hmac:"),
            "{view}: {text}"
        );
        assert!(!text.contains(&operators), "{view}");
    };

    // 1. One call, in `airlock approvals list`.
    let (ok, said) = airlock(
        &config,
        &["exec", "--no-wait", "--identity", "olga", "-"],
        &script,
    );
    assert!(!ok && said.contains("ApprovalRequired"), "{said}");
    let listed = approvals(&config, &["list"]);
    let listed = String::from_utf8_lossy(&listed.stdout).to_string();
    seen("approvals list", &listed);
    assert!(
        listed.contains("chars, sha256:") && !listed.contains("END"),
        "{listed}"
    );
    // In full on request.
    let id = String::from_utf8_lossy(&approvals(&config, &["list", "--ids"]).stdout)
        .trim()
        .to_string();
    let full = approvals(&config, &["show", &id]);
    let full = String::from_utf8_lossy(&full.stdout).to_string();
    assert!(
        full.contains("cloud-init line\\u{a}cloud-init line") && full.contains("END"),
        "{full}"
    );
    assert!(full.contains("key pve:POST /nodes/{node}/lxc"), "{full}");

    // 2. A plan's table, as `exec --plan` prints it and the list shows it.
    let (ok, said) = airlock(
        &config,
        &["exec", "--identity", "olga", "--plan", "-"],
        &script,
    );
    assert!(ok, "{said}");
    seen("the plan's table", &said);
    let listed = approvals(&config, &["list"]);
    seen(
        "approvals list (plan)",
        &String::from_utf8_lossy(&listed.stdout),
    );

    // 3. The question in the client (the Python SDK's).
    let r = python_client(&config, &script, "");
    let asked = r["asked"][0].as_str().unwrap_or_default();
    seen("the client's question", asked);
}

/// A chain written before names were compared as one person's: `Olga`
/// approved what `olga` asked, and the call ran. `audit verify` flags
/// the decision and the call, and exits 1 though every hash holds.
#[test]
fn audit_verify_flags_one_person_approving_under_another_spelling() {
    use airlock_gateway::audit::{seal, Head, GENESIS};
    let dir = tempfile::tempdir().unwrap();
    let mut head = Head {
        seq: 0,
        hash: GENESIS.into(),
    };
    let mut bytes = Vec::new();
    for (event, fields) in [
        (
            "approval_decision",
            json!({"approval": "ap-1", "tool": "vm_stop", "identity": "olga", "status": "approved",
                   "decided_by": "Olga", "channel": "cli", "own": false, "args_sha256": "00"}),
        ),
        (
            "call",
            json!({"tool": "vm_stop", "identity": "olga", "decision": "allowed", "approval": "ap-1",
                   "approved_by": "Olga", "approved_via": "cli"}),
        ),
        (
            "approval_decision",
            json!({"approval": "ap-2", "tool": "vm_stop", "identity": "olga", "status": "approved",
                   "decided_by": "rita", "channel": "cli", "own": false, "args_sha256": "01"}),
        ),
    ] {
        let (next, line) = seal(&head, event, fields.as_object().unwrap().clone()).unwrap();
        head = next;
        bytes.extend(line);
    }
    let file = dir.path().join("older.jsonl");
    std::fs::write(&file, bytes).unwrap();
    let v = Command::new(BIN)
        .args(["audit", "verify"])
        .arg(&file)
        .env_remove("AIRLOCK_CONFIG")
        .env("AIRLOCK_STATE_DIR", dir.path().join("state"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&v.stdout);
    assert_eq!(v.status.code(), Some(1), "{said}");
    assert!(said.contains("ok: 3 lines verified"), "{said}");
    assert!(
        said.contains("FOUR EYES line 1: Olga approved a request olga asked"),
        "{said}"
    );
    assert!(said.contains("FOUR EYES line 2:"), "{said}");
    assert!(!said.contains("line 3:"), "rita is another person: {said}");
}

/// SHUTDOWN, saying also what the refusal said.
const SHUTDOWN_SAYING: &str = r#"const tried = await Promise.allSettled([tools.vm_shutdown({node: "pve1", vmid: 101, forceStop: true, timeout: 5})]);
const after = await tools.vm_status({node: "pve1", vmid: 101});
({outcome: tried[0].status === "fulfilled" ? "made" : tried[0].reason.code, said: tried[0].status === "fulfilled" ? null : tried[0].reason.message, status: after.status})"#;

/// `host/tests/clients/answer.{py,mjs}`: one `execute` of SHUTDOWN_SAYING
/// as olga, every question answered with `action`, on `protocol`; with
/// `approve_by`, an operator approves a request the execution waits for
/// and the client follows it. `None` (SKIPPED) for TypeScript without npm.
fn answering(
    client: &str,
    config: &Path,
    action: &str,
    protocol: &str,
    approve_by: Option<&str>,
) -> Option<Value> {
    let mut cmd = match client {
        "python" => {
            let mut c = Command::new(common::test_python());
            c.arg(common::repo().join("host/tests/clients/answer.py"));
            c
        }
        _ => {
            let (node, packages) = common::node_packages()?;
            let program = packages.join("answer.mjs");
            std::fs::copy(
                common::repo().join("host/tests/clients/answer.mjs"),
                &program,
            )
            .unwrap();
            let mut c = Command::new(node);
            c.arg(program);
            c
        }
    };
    cmd.args([action, protocol, SHUTDOWN_SAYING])
        .args(server_args(config))
        .env_remove("AIRLOCK_CONFIG")
        .env("AIRLOCK_LOG", "info");
    if let Some(by) = approve_by {
        let approve = json!([BIN, "--config", config, "approvals", "approve", "--by", by]);
        cmd.env("APPROVE_WITH", approve.to_string());
    }
    let out = cmd.output().unwrap();
    // The server's log (its stderr, passed through the client's) says
    // which revision the session speaks, at info.
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    let said = match protocol {
        "2025" => "an MCP session started",
        _ => "an MCP client speaks a stateless revision",
    };
    assert!(log.contains(said), "{client} {protocol}: {log}");
    let revision = match protocol {
        "2025" => "protocol=2025-11-25",
        _ => "protocol=2026-07-28",
    };
    assert!(log.contains(revision), "{client}: {log}");
    Some(common::client_answer(client, out))
}

/// Found with Claude Code and the 2026-07-28 clients: a person's `decline`
/// reached the agent as "an operator denied … by olga", and a `cancel`
/// (dismissed without a choice: what headless `claude -p` answers every
/// question) counted as a decline. Now, on both revisions, through both
/// official SDKs: a decline denies, worded as the client's person; a
/// cancel decides nothing, the execution waits for an operator, the
/// client is not asked again, and once an operator approves, the
/// follow-up makes the change once.
fn a_decline_and_a_cancel_are_told_apart(client: &str) {
    for protocol in ["2025", "2026"] {
        let dir = tempfile::tempdir().unwrap();
        let conf = config(dir.path(), true);
        let Some(r) = answering(client, &conf, "decline", protocol, None) else {
            return;
        };
        let case = format!("{client} {protocol} decline");
        let got = &r["first"]["result"]["result"];
        assert_eq!(got["outcome"], "approval_denied", "{case}: {r}");
        let said = got["said"].as_str().unwrap_or_default();
        assert!(
            said.contains("the person in the client declined") && !said.contains("operator"),
            "{case}: {said}"
        );
        assert_eq!(got["status"], "running", "{case}: {r}");
        assert_eq!(r["asked"].as_array().unwrap().len(), 1, "{case}: {r}");
        let decision = common::simulated_audit(&conf)
            .into_iter()
            .find(|l| l["event"] == "approval_decision")
            .unwrap_or_else(|| panic!("{case}: no decision line"));
        assert_eq!(
            (&decision["channel"], &decision["status"]),
            (&json!("client"), &json!("denied")),
            "{case}"
        );

        let dir = tempfile::tempdir().unwrap();
        let conf = config(dir.path(), true);
        let r = answering(client, &conf, "cancel", protocol, Some("rita")).unwrap();
        let case = format!("{client} {protocol} cancel");
        let first = &r["first"]["result"];
        assert_eq!(first["status"], "waiting", "{case}: {r}");
        assert_eq!(first["waiting"][0]["tool"], "vm_shutdown", "{case}: {r}");
        assert_eq!(r["asked"].as_array().unwrap().len(), 1, "{case}: {r}");
        assert_eq!(r["asked_before_follow"], 1, "{case}: {r}");
        let how = first["waiting"][0]["how"].as_str().unwrap_or_default();
        assert!(
            how.contains("approvals approve") && (protocol == "2026" || how.contains("dismissed")),
            "{case}: {how}"
        );
        // The operator's approval, and nobody else's decision.
        let decisions: Vec<Value> = common::simulated_audit(&conf)
            .into_iter()
            .filter(|l| l["event"] == "approval_decision")
            .collect();
        assert_eq!(decisions.len(), 1, "{case}: {decisions:?}");
        assert_eq!(
            (&decisions[0]["decided_by"], &decisions[0]["channel"]),
            (&json!("rita"), &json!("cli")),
            "{case}"
        );
        let followed = &r["followed"]["result"]["result"];
        assert_eq!(followed["outcome"], "made", "{case}: {r}");
        let sent = common::simulated_audit(&conf)
            .into_iter()
            .filter(|l| {
                l["event"] == "call" && l["tool"] == "vm_shutdown" && l["decision"] == "allowed"
            })
            .count();
        assert_eq!(sent, 1, "{case}: sent once");
    }
}

#[test]
fn python_sdk_a_decline_and_a_cancel_are_told_apart_on_both_revisions() {
    a_decline_and_a_cancel_are_told_apart("python");
}

#[test]
fn typescript_sdk_a_decline_and_a_cancel_are_told_apart_on_both_revisions() {
    a_decline_and_a_cancel_are_told_apart("typescript");
}
