//! Runbooks end to end, through the `airlock` binary against the
//! simulated cluster: an operator adds a file, another approves its
//! version, scripts run it by name. Each case checks what the cluster
//! did (a guest still runs, or moved), what the audit says, and what
//! `audit verify` holds the calls to.

mod common;

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_airlock");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn example(name: &str) -> PathBuf {
    repo()
        .join("examples/runbooks")
        .join(format!("{name}.toml"))
}

/// A deployment of its own: a state directory, and identities olga
/// (operator), alice (rw) and rita (ro), none approving their own calls,
/// and bob and carol, people who only write and approve (listed, as `--by`
/// must name someone the deployment knows).
struct Deployment {
    dir: tempfile::TempDir,
}

impl Deployment {
    fn new(extra: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("airlock.toml"),
            format!(
                "state_dir = {:?}\n{extra}\n[identities.olga]\nmode = \"operator\"\n[identities.alice]\nmode = \"rw\"\n[identities.rita]\nmode = \"ro\"\n[identities.bob]\n[identities.carol]\n",
                dir.path().join("state").display().to_string()
            ),
        )
        .unwrap();
        Self { dir }
    }

    fn config(&self) -> String {
        self.dir.path().join("airlock.toml").display().to_string()
    }

    fn airlock(&self, args: &[&str], stdin: &str) -> Output {
        let mut cmd = Command::new(BIN);
        cmd.arg("--config")
            .arg(self.config())
            .args(args)
            .env_remove("AIRLOCK_STATE_URL")
            .env_remove("AIRLOCK_AUDIT_FILE");
        common::run_with_stdin(&mut cmd, stdin)
    }

    /// Runs a command that must succeed; its standard output.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.airlock(args, "");
        assert!(
            out.status.success(),
            "{args:?}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    /// Adds a runbook file as `by`; its full version.
    fn add(&self, file: &Path, by: &str) -> String {
        let said = self.ok(&["runbook", "add", file.to_str().unwrap(), "--by", by]);
        let version = said
            .split("(sha256 ")
            .nth(1)
            .and_then(|s| s.split(')').next())
            .unwrap_or_else(|| panic!("no version in: {said}"))
            .to_string();
        assert_eq!(version.len(), 64, "{said}");
        version
    }

    /// Runs `script` as `identity`; the script's value (or the error).
    fn exec(&self, identity: &str, script: &str) -> Value {
        // Failing fast where a call waits for approval, as the tests
        // below read it.
        let out = self.airlock(
            &["exec", "--json", "--no-wait", "--identity", identity, "-"],
            script,
        );
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}{}", text(&out.stdout), text(&out.stderr)));
        v
    }

    fn audit(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.path().join("state/simulated/audit.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn approvals_pending(&self) -> String {
        self.ok(&["approvals", "list", "--ids"])
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs `stop_node_guests` on pve3, then reads what still runs there.
const STOP_PVE3: &str = r#"const tried = await Promise.allSettled([runbooks.stop_node_guests({ node: "pve3", timeout: 30 })]);
const [vms, cts] = await Promise.all([tools.vm_list({ node: "pve3" }), tools.ct_list({ node: "pve3" })]);
({
  outcome: tried[0].status === "fulfilled" ? "ran" : tried[0].reason.code,
  message: tried[0].status === "fulfilled" ? null : tried[0].reason.message,
  value: tried[0].status === "fulfilled" ? tried[0].value : null,
  running: [...vms, ...cts].filter((g) => g.status === "running").length,
})"#;

#[test]
fn an_unapproved_version_refuses_its_changes_and_an_approved_one_makes_them_without_asking() {
    let d = Deployment::new("");
    let version = d.add(&example("stop_node_guests"), "alice");
    assert_eq!(
        version,
        sha256sum(&example("stop_node_guests")),
        "the version is what `sha256sum FILE` prints"
    );

    let before = d.exec("olga", STOP_PVE3);
    let r = &before["result"]["ok"];
    assert_eq!(r["outcome"], "runbook_failed", "{before}");
    let message = r["message"].as_str().unwrap();
    assert!(message.contains("is not approved"), "{message}");
    assert!(
        message.contains(&format!(
            "airlock runbook approve stop_node_guests {}",
            &version
        )),
        "{message}"
    );
    assert_eq!(r["running"], 3, "pve3's three guests still run: {before}");
    assert_eq!(
        d.approvals_pending().trim(),
        "",
        "nothing was filed for a person"
    );

    // The author cannot approve it; another operator can.
    let own = d.airlock(
        &[
            "runbook",
            "approve",
            "stop_node_guests",
            &version,
            "--by",
            "alice",
        ],
        "",
    );
    assert!(!own.status.success());
    assert!(
        text(&own.stderr).contains("another person must approve it"),
        "{}",
        text(&own.stderr)
    );
    d.ok(&[
        "runbook",
        "approve",
        "stop_node_guests",
        &version,
        "--by",
        "bob",
    ]);

    let after = d.exec("olga", STOP_PVE3);
    let r = &after["result"]["ok"];
    assert_eq!(r["outcome"], "ran", "{after}");
    assert_eq!(r["running"], 0, "{after}");
    assert_eq!(
        r["value"]["stopped"].as_array().unwrap().len(),
        3,
        "{after}"
    );
    assert_eq!(
        d.approvals_pending().trim(),
        "",
        "no call asked for an approval"
    );
    // The runbook's calls are in the caller's trace and count.
    let trace: Vec<&str> = after["trace"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["tool"].as_str().unwrap())
        .collect();
    assert!(
        trace.contains(&"runbooks.stop_node_guests › vm_shutdown"),
        "{trace:?}"
    );
    assert_eq!(after["stats"]["tool_calls"], trace.len(), "{after}");

    // Each change's line names the runbook, its version, the approver.
    let lines = d.audit();
    let shutdowns: Vec<&Value> = lines
        .iter()
        .filter(|l| l["event"] == "call" && l["decision"] == "allowed")
        .filter(|l| l["tool"] == "vm_shutdown" || l["tool"] == "ct_shutdown")
        .collect();
    assert_eq!(shutdowns.len(), 3);
    for l in &shutdowns {
        assert_eq!(l["runbook"], "stop_node_guests");
        assert_eq!(l["runbook_version"], version.as_str());
        assert_eq!(l["approved_by"], "bob");
        assert_eq!(l["approved_via"], "runbook");
        assert_eq!(l["runbook_args"]["timeout"], 30);
    }
    let refused = lines
        .iter()
        .filter(|l| l["decision"] == "runbook_refused")
        .count();
    // The runbook's script asks for its three shutdowns at once and
    // fails at the first refusal: the others may be cancelled before the
    // gateway refuses them (on a loaded machine, 2 of 3 were). None went.
    assert!(
        (1..=3).contains(&refused),
        "the unapproved run's shutdowns were refused: {refused}"
    );
    let starts = lines
        .iter()
        .filter(|l| l["event"] == "runbook_start")
        .count();
    assert_eq!(starts, 2);
    let verified = d.ok(&["audit", "verify"]);
    assert!(
        verified.contains("call(s) of 2 runbook run(s) stayed inside their versions' files"),
        "{verified}"
    );
}

fn sha256sum(file: &Path) -> String {
    let out = Command::new("sha256sum").arg(file).output().unwrap();
    text(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// Shuts one VM down, within bounds that allow VM 101 only.
const ONE_VM: &str = r#"name = "stop_one"
description = "Shut one web VM down."
tiers = ["read", "operate"]
max_changes = 1

[input]
type = "object"
required = ["vmid"]
properties.vmid = { type = "integer" }

[[calls]]
tool = "vm_shutdown"
args.vmid = { enum = [101] }
args.node = { const = "pve1" }

[script]
source = '''
await tools.vm_shutdown({ node: "pve1", vmid: input.vmid, timeout: 10, forceStop: true });
await tools.vm_shutdown({ node: "pve1", vmid: input.vmid, timeout: 10, forceStop: true });
'''
"#;

fn run_one(vmid: u32) -> String {
    format!(
        r#"const tried = await Promise.allSettled([runbooks.stop_one({{ vmid: {vmid} }})]);
const s = await tools.vm_status({{ node: "pve1", vmid: {vmid} }});
({{ outcome: tried[0].status === "fulfilled" ? "ran" : tried[0].reason.code, message: tried[0].reason ? tried[0].reason.message : null, status: s.status }})"#
    )
}

#[test]
fn an_argument_outside_the_bounds_is_refused_unsent_and_max_changes_holds() {
    let d = Deployment::new("");
    let file = d.dir.path().join("stop_one.toml");
    std::fs::write(&file, ONE_VM).unwrap();
    let version = d.add(&file, "alice");
    d.ok(&["runbook", "approve", "stop_one", &version, "--by", "bob"]);
    let audit_before = d.audit().len();

    let outside = d.exec("olga", &run_one(102));
    let r = &outside["result"]["ok"];
    assert_eq!(r["outcome"], "runbook_failed", "{outside}");
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains("args.vmid of vm_shutdown is outside the bound runbook stop_one sets"),
        "{outside}"
    );
    assert_eq!(r["status"], "running", "VM 102 was not shut down");
    let lines = d.audit();
    let sent: Vec<&Value> = lines[audit_before..]
        .iter()
        .filter(|l| l["tool"] == "vm_shutdown")
        .collect();
    assert_eq!(sent.len(), 1, "one line for the refused call");
    assert_eq!(sent[0]["decision"], "runbook_refused");
    assert!(sent[0].get("backend").is_none() || sent[0]["decision"] != "allowed");

    // Inside the bounds: the first shutdown runs, the second is past
    // max_changes = 1 and is refused.
    let inside = d.exec("olga", &run_one(101));
    let r = &inside["result"]["ok"];
    let lines = d.audit();
    let shutdowns: Vec<&str> = lines
        .iter()
        .filter(|l| l["tool"] == "vm_shutdown" && l["execution"] == inside["execution"])
        .map(|l| l["decision"].as_str().unwrap())
        .collect();
    assert_eq!(shutdowns, ["allowed", "runbook_refused"], "{inside}");
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains("at most 1 changes in one run (max_changes)"),
        "{inside}"
    );
    assert_eq!(d.approvals_pending().trim(), "");
}

#[test]
fn outside_the_bounds_asks_as_usual_when_the_deployment_says_so() {
    let d = Deployment::new("[runbooks]\noutside_bounds = \"ask\"\n");
    let file = d.dir.path().join("stop_one.toml");
    std::fs::write(&file, ONE_VM).unwrap();
    let version = d.add(&file, "alice");
    d.ok(&["runbook", "approve", "stop_one", &version, "--by", "bob"]);
    let outside = d.exec("olga", &run_one(102));
    let r = &outside["result"]["ok"];
    assert_eq!(r["status"], "running", "{outside}");
    assert!(
        r["message"].as_str().unwrap().contains("needs approval"),
        "{outside}"
    );
    let pending = d.approvals_pending();
    assert_eq!(pending.lines().count(), 1, "one request filed: {pending}");
    let line = d
        .audit()
        .into_iter()
        .find(|l| l["tool"] == "vm_shutdown")
        .unwrap();
    assert_eq!(line["decision"], "approval_required");
    assert!(
        line["runbook_outside"]
            .as_str()
            .unwrap()
            .contains("args.vmid"),
        "{line}"
    );
}

#[test]
fn an_edited_file_is_a_new_version_that_needs_its_own_approval() {
    let d = Deployment::new("");
    let original = std::fs::read_to_string(example("stop_node_guests")).unwrap();
    let file = d.dir.path().join("stop_node_guests.toml");
    std::fs::write(&file, &original).unwrap();
    let v1 = d.add(&file, "alice");
    d.ok(&["runbook", "approve", "stop_node_guests", &v1, "--by", "bob"]);

    // One comment more is a new version: current, and unapproved.
    std::fs::write(&file, format!("{original}# reviewed again\n")).unwrap();
    let diff = d.ok(&[
        "runbook",
        "diff",
        "stop_node_guests",
        file.to_str().unwrap(),
    ]);
    assert!(diff.contains("+# reviewed again"), "{diff}");
    let v2 = d.add(&file, "alice");
    assert_ne!(v1, v2);
    let list = d.ok(&["runbook", "list"]);
    assert!(
        list.contains(&v2[..12]) && list.contains("unapproved"),
        "{list}"
    );
    let r = d.exec("olga", STOP_PVE3);
    assert_eq!(r["result"]["ok"]["outcome"], "runbook_failed", "{r}");
    assert_eq!(r["result"]["ok"]["running"], 3);

    // The reviewed bytes, added again, are current and approved again.
    std::fs::write(&file, &original).unwrap();
    assert_eq!(d.add(&file, "carol"), v1);
    let r = d.exec("olga", STOP_PVE3);
    assert_eq!(r["result"]["ok"]["outcome"], "ran", "{r}");

    // Retired: scripts are told it does not exist.
    d.ok(&["runbook", "retire", "stop_node_guests"]);
    let r = d.exec("olga", STOP_PVE3);
    assert_eq!(r["result"]["ok"]["outcome"], "not_found", "{r}");
}

#[test]
fn search_lists_runbooks_with_their_input_schema_and_status() {
    let d = Deployment::new("");
    let v = d.add(&example("drain_node"), "alice");
    d.add(&example("stop_node_guests"), "alice");
    d.ok(&["runbook", "approve", "drain_node", &v, "--by", "bob"]);
    let out: Value = serde_json::from_str(&d.ok(&["search", "--json", "drain", "node"])).unwrap();
    let runbooks = out["runbooks"].as_array().unwrap();
    assert_eq!(runbooks[0]["call"], "runbooks.drain_node", "{out}");
    assert_eq!(runbooks[0]["kind"], "runbook");
    assert_eq!(runbooks[0]["status"], "approved");
    assert_eq!(runbooks[0]["version"], &v[..12]);
    assert_eq!(runbooks[0]["input_schema"]["required"][0], "node");
    assert!(
        !out["hits"].as_array().unwrap().is_empty(),
        "tools are still found"
    );
    let stop = runbooks
        .iter()
        .find(|r| r["call"] == "runbooks.stop_node_guests");
    assert_eq!(stop.unwrap()["status"], "unapproved");
    // A read-only search (tier read) still lists them: they read too.
    let nothing: Value = serde_json::from_str(&d.ok(&["search", "--json", "zzzz"])).unwrap();
    assert!(nothing.get("runbooks").is_none(), "{nothing}");
}

#[test]
fn a_runbook_runs_apart_from_the_script_that_calls_it() {
    let d = Deployment::new("");
    let v = d.add(&example("stop_node_guests"), "alice");
    d.ok(&["runbook", "approve", "stop_node_guests", &v, "--by", "bob"]);
    // The caller's realm is not the runbook's: replacing Array.prototype
    // .filter here does not make the runbook stop pve3's stopped guest or
    // any other node's; and a second runbook at once, one in plan mode,
    // and a read-only identity's run are refused.
    let script = r#"Array.prototype.filter = function () { return this; };
const [a, b] = await Promise.allSettled([
  runbooks.stop_node_guests({ node: "pve3" }),
  runbooks.stop_node_guests({ node: "pve1" }),
]);
({ a: a.status === "fulfilled" ? a.value.stopped.map((g) => g.vmid) : a.reason.message, b: b.reason ? b.reason.code : "ran", bm: b.reason ? b.reason.message : null })"#;
    let r = d.exec("olga", script);
    let v = &r["result"]["ok"];
    assert_eq!(v["a"], serde_json::json!([107, 108, 202]), "{r}");
    assert_eq!(v["b"], "runbook_refused", "{r}");
    assert!(
        v["bm"]
            .as_str()
            .unwrap()
            .contains("running a runbook already"),
        "{r}"
    );

    let planned = d.airlock(
        &["exec", "--plan", "--identity", "olga", "-"],
        r#"await runbooks.stop_node_guests({ node: "pve1" })"#,
    );
    assert!(
        text(&planned.stdout).contains("do not run in plan mode")
            || text(&planned.stderr).contains("do not run in plan mode"),
        "{}{}",
        text(&planned.stdout),
        text(&planned.stderr)
    );

    let ro = d.exec("rita", STOP_PVE3);
    assert_eq!(ro["result"]["ok"]["outcome"], "runbook_failed", "{ro}");
    assert!(
        ro["result"]["ok"]["message"]
            .as_str()
            .unwrap()
            .contains("is not allowed"),
        "{ro}"
    );
    assert_eq!(ro["result"]["ok"]["running"], 3);
}

#[test]
fn the_example_runbooks_do_what_they_say_on_the_simulator() {
    let d = Deployment::new("");
    for name in ["drain_node", "snapshot_then_upgrade", "stop_node_guests"] {
        let v = d.add(&example(name), "alice");
        d.ok(&["runbook", "approve", name, &v, "--by", "bob"]);
    }
    let drained = d.exec(
        "alice",
        r#"const r = await runbooks.drain_node({ node: "pve2", target: "pve3" });
const [vms, cts] = await Promise.all([tools.vm_list({ node: "pve2" }), tools.ct_list({ node: "pve2" })]);
({ moved: r.moved.map((g) => g.vmid), still: [...vms, ...cts].filter((g) => g.status === "running").length, on3: (await tools.vm_list({ node: "pve3" })).map((g) => g.vmid).sort() })"#,
    );
    let v = &drained["result"]["ok"];
    assert_eq!(v["moved"], serde_json::json!([104, 105, 201]), "{drained}");
    assert_eq!(v["still"], 0, "{drained}");
    assert_eq!(
        v["on3"],
        serde_json::json!([104, 105, 107, 108]),
        "{drained}"
    );

    let upgraded = d.exec(
        "alice",
        r#"const r = await runbooks.snapshot_then_upgrade({ node: "pve1", vmids: [100, 101], memory: 8192, cores: 4, snapname: "before_upgrade" });
const cfg = await tools.vm_config({ node: "pve1", vmid: 100 });
const snaps = await tools.vm_snapshot_list({ node: "pve1", vmid: 101 });
({ r, memory: cfg.memory, cores: cfg.cores, snaps: snaps.map((s) => s.name) })"#,
    );
    let v = &upgraded["result"]["ok"];
    assert_eq!(
        v["memory"].to_string().trim_matches('"'),
        "8192",
        "{upgraded}"
    );
    assert_eq!(v["cores"].to_string().trim_matches('"'), "4", "{upgraded}");
    assert!(
        v["snaps"]
            .as_array()
            .unwrap()
            .contains(&Value::from("before_upgrade")),
        "{upgraded}"
    );
    assert_eq!(v["r"]["results"].as_array().unwrap().len(), 2);

    // A bound the input schema would let through is still held: memory
    // past the runbook's ceiling is refused by the schema first.
    let too_big = d.exec(
        "alice",
        r#"const t = await Promise.allSettled([runbooks.snapshot_then_upgrade({ node: "pve1", vmids: [100], memory: 999999 })]); t[0].reason.code"#,
    );
    assert_eq!(too_big["result"]["ok"], "invalid_args", "{too_big}");

    let stopped = d.exec("olga", STOP_PVE3);
    assert_eq!(stopped["result"]["ok"]["running"], 0, "{stopped}");
    let verified = d.ok(&["audit", "verify"]);
    assert!(
        verified.contains("stayed inside their versions' files"),
        "{verified}"
    );
}

#[test]
fn a_bad_runbook_file_is_refused_with_the_field_and_the_rule() {
    let d = Deployment::new("");
    let file = d.dir.path().join("bad.toml");
    for (text, says) in [
        (
            &ONE_VM.replace("name = \"stop_one\"", "name = \"Stop-One\"") as &str,
            "runbook field `name`",
        ),
        (
            &ONE_VM.replace("tiers = [\"read\", \"operate\"]", "tiers = []"),
            "runbook field `tiers`",
        ),
        (
            &ONE_VM.replace("args.vmid = { enum = [101] }", "args.vmid = { type = 7 }"),
            "calls[0].args.vmid",
        ),
        (
            &ONE_VM.replace("max_changes = 1", "max_changes = 5000"),
            "max_changes",
        ),
    ] {
        std::fs::write(&file, text).unwrap();
        let out = d.airlock(&["runbook", "add", file.to_str().unwrap()], "");
        assert!(!out.status.success());
        assert!(
            text_of(&out.stderr).contains(says),
            "{says}: {}",
            text_of(&out.stderr)
        );
    }
    assert!(d.ok(&["runbook", "list"]).contains("no runbooks"));
}

/// What an approver reads is what runs: a runbook's script is JavaScript
/// as written, so one an agent's script could be (TypeScript, a Markdown
/// fence, `export default`) is refused at `runbook add`, saying why.
/// Found by an attacker's reading: in a TypeScript runbook, a line of a
/// template literal starting `import type` was blanked as a line, and
/// text the approver read as a string ran as a `vm_shutdown` its logic
/// never makes (`confirm: false` answered `stopped: false`).
#[test]
fn a_runbook_that_is_not_javascript_as_written_is_refused_at_add() {
    let d = Deployment::new("");
    let file = d.dir.path().join("flip.toml");
    let flip = ONE_VM.replace(
        "await tools.vm_shutdown({ node: \"pve1\", vmid: input.vmid, timeout: 10, forceStop: true });\nawait tools.vm_shutdown({ node: \"pve1\", vmid: input.vmid, timeout: 10, forceStop: true });",
        "const confirm: boolean = false;\nconst doc = `\nimport type { Vm } from \"./vm\"; `;\nconst more = `\nawait tools.vm_shutdown({ node: \"pve1\", vmid: input.vmid, timeout: 10, forceStop: true });\n`; // `\n({ stopped: confirm, doc, more })",
    );
    assert!(flip.contains("import type"), "{flip}");
    let fenced = ONE_VM
        .replace("source = '''\n", "source = '''\n```js\n")
        .replace("forceStop: true });\n'''", "forceStop: true });\n```\n'''");
    assert!(fenced.contains("```js"), "{fenced}");
    for (text, line) in [(flip, 1), (fenced, 1)] {
        std::fs::write(&file, &text).unwrap();
        let out = d.airlock(&["runbook", "add", file.to_str().unwrap()], "");
        let said = text_of(&out.stderr);
        assert!(!out.status.success(), "{said}");
        for part in [
            format!("does not parse as JavaScript at line {line}"),
            "runs exactly as its approver reads it".into(),
            "without TypeScript types, a Markdown fence or `export default`".into(),
        ] {
            assert!(said.contains(&part), "{part}: {said}");
        }
    }
    assert!(d.ok(&["runbook", "list"]).contains("no runbooks"));
    // The same text as an agent's own script: its templates stay text,
    // and nothing is sent.
    let v = d.exec(
        "olga",
        "const input = { vmid: 101 };\nconst confirm: boolean = false;\nconst doc = `\nimport type { Vm } from \"./vm\"; `;\nconst more = `\nawait tools.vm_shutdown({ node: \"pve1\", vmid: input.vmid, timeout: 10, forceStop: true });\n`; // `\n({ stopped: confirm, doc })",
    );
    assert_eq!(v["result"]["ok"]["stopped"], json!(false), "{v}");
    assert_eq!(
        v["result"]["ok"]["doc"],
        json!("\nimport type { Vm } from \"./vm\"; "),
        "{v}"
    );
    assert!(
        !d.audit().iter().any(|l| l["tool"] == json!("vm_shutdown")),
        "nothing sent"
    );
}

fn text_of(b: &[u8]) -> String {
    text(b)
}

/// Echoes its input, and reads as many nodes as it is told to.
const ECHO: &str = r#"name = "echo"
description = "Echo the input; read the node list n times."
tiers = ["read"]
max_changes = 0

[input]
type = "object"
properties.timeout = { type = "integer", maximum = 600 }
properties.n = { type = "integer", minimum = 0, maximum = 100 }

[script]
source = '''
const reads = await Promise.allSettled(Array.from({ length: input.n ?? 0 }, () => tools.node_list({})));
({ timeout: input.timeout, keys: Object.keys(input), reads: reads.filter((r) => r.status === "fulfilled").length })
'''
"#;

#[test]
fn a_runbook_s_input_is_what_its_schema_checked_and_its_calls_share_the_caller_s_limit() {
    let d = Deployment::new("[limits]\ntool_calls = 10\n");
    let file = d.dir.path().join("echo.toml");
    std::fs::write(&file, ECHO).unwrap();
    d.add(&file, "alice");
    // A `__proto__` key is a property of its own, not the input's
    // prototype: the runbook sees no timeout the schema did not check.
    let r = d.exec(
        "rita",
        r#"await runbooks.echo(JSON.parse('{"__proto__": {"timeout": 999999}}'))"#,
    );
    assert_eq!(
        r["result"]["ok"]["keys"],
        serde_json::json!(["__proto__"]),
        "{r}"
    );
    assert!(r["result"]["ok"].get("timeout").is_none(), "{r}");
    // An argument holding `-->` or `<!--` (which a script's text may not
    // hold) reaches the runbook as given: its input is put in escaped.
    let r = d.exec(
        "rita",
        r#"await runbooks.echo({ ["a -\u002d> b \u003c!-- c"]: 1 })"#,
    );
    assert_eq!(
        r["result"]["ok"]["keys"],
        serde_json::json!(["a --> b <!-- c"]),
        "{r}"
    );

    // tool_calls = 10: the script's 4 reads and its runbook call leave
    // the runbook 5; past them it fails, and the script, at 10 with the
    // runbook's, can make no more.
    let r = d.exec(
        "rita",
        r#"const mine = await Promise.allSettled([1, 2, 3, 4].map(() => tools.node_list({})));
const [theirs] = await Promise.allSettled([runbooks.echo({ n: 20 })]);
const [after] = await Promise.allSettled([tools.node_list({})]);
({ mine: mine.filter((x) => x.status === "fulfilled").length, theirs: theirs.reason.details.error, after: after.reason.code })"#,
    );
    let v = &r["result"]["ok"];
    assert_eq!(v["mine"], 4, "{r}");
    assert_eq!(v["theirs"]["limit"], "tool_calls", "{r}");
    assert_eq!(v["theirs"]["value"], 5, "{r}");
    assert_eq!(v["after"], "limit_exceeded", "{r}");
    let sent = d
        .audit()
        .iter()
        .filter(|l| l["tool"] == "node_list" && l["execution"] == r["execution"])
        .count();
    assert!(sent <= 9, "no more than the limit reached the gateway: {r}");
    assert!(r["stats"]["tool_calls"].as_u64().unwrap() <= 11, "{r}");
}

/// A person picks an approved runbook's prompt in the official Python
/// and TypeScript SDK clients; the script its message gives runs.
#[test]
fn a_runbook_prompt_runs_through_the_python_and_typescript_sdk_clients() {
    let d = Deployment::new("");
    let v = d.add(&example("stop_node_guests"), "alice");
    d.add(&example("drain_node"), "alice");
    d.ok(&["runbook", "approve", "stop_node_guests", &v, "--by", "bob"]);
    let server = [
        BIN.to_string(),
        "--config".into(),
        d.config(),
        "serve".into(),
        "--identity".into(),
        "olga".into(),
    ];
    let v_short = v[..12].to_string();
    let given = r#"{"node": "pve3", "timeout": "30"}"#;
    let mut runs = vec![(
        "python",
        Command::new(common::test_python())
            .arg(repo().join("host/tests/clients/runbook_prompt.py"))
            .arg("stop_node_guests")
            .arg(given)
            .args(&server)
            .env("AIRLOCK_LOG", "warn")
            .output()
            .unwrap(),
    )];
    if let Some((node, packages)) = common::node_packages() {
        // ES modules resolve packages from where the script is.
        let program = packages.join("runbook_prompt.mjs");
        std::fs::copy(
            repo().join("host/tests/clients/runbook_prompt.mjs"),
            &program,
        )
        .unwrap();
        runs.push((
            "typescript",
            Command::new(node)
                .arg(program)
                .arg("stop_node_guests")
                .arg(given)
                .args(&server)
                .env("AIRLOCK_LOG", "warn")
                .output()
                .unwrap(),
        ));
    }
    for (i, (client, out)) in runs.iter().enumerate() {
        assert!(out.status.success(), "{client}: {}", text(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            v["prompts"],
            serde_json::json!(["operate", "runbook_stop_node_guests"]),
            "{client}: only the approved one: {v}"
        );
        assert!(
            v["message"]
                .as_str()
                .unwrap()
                .contains(&format!("(version {}", &v_short)),
            "{client}: {v}"
        );
        assert_eq!(v["is_error"], false, "{client}: {v}");
        // Each client's server starts its own simulated cluster: pve3's
        // three running guests are stopped in each.
        assert_eq!(
            v["result"]["result"]["stopped"].as_array().map(Vec::len),
            Some(3),
            "{client} ({i}): {v}"
        );
    }
    assert_eq!(d.approvals_pending().trim(), "");
}

/// Sets a VM's description: an admin-tier change whose text is free.
const SET_DESC: &str = r#"name = "set_desc"
description = "Set a VM's description."
tiers = ["read", "admin"]
max_changes = 1

[input]
type = "object"
required = ["vmid", "text"]
properties.vmid = { type = "integer" }
properties.text = { type = "string" }

[[calls]]
tool = "vm_config_update"
args.node = { const = "pve1" }
args.vmid = { enum = [100, 101] }
args.description = { type = "string", maxLength = 200 }

[script]
source = '''
await tools.vm_config_update({ node: "pve1", vmid: input.vmid, description: input.text });
"set"
'''
"#;

/// Found by an attacker's review: the author approved their own version
/// as `--by Alice`, and a runbook's free text reached the audit chain in
/// clear. One person in any spelling is one person, and a bounded value
/// reaches a line only where its bound fixes it.
#[test]
fn the_author_in_another_spelling_cannot_approve_and_free_text_stays_out_of_the_audit() {
    let d = Deployment::new("");
    let file = d.dir.path().join("set_desc.toml");
    std::fs::write(&file, SET_DESC).unwrap();
    let version = d.add(&file, "alice");
    for spelling in ["Alice", "ALICE", "ａｌｉｃｅ", " alice"] {
        let own = d.airlock(
            &["runbook", "approve", "set_desc", &version, "--by", spelling],
            "",
        );
        let said = text(&own.stderr);
        assert!(!own.status.success(), "{spelling}: {said}");
        assert!(said.contains("another person must approve it"), "{said}");
    }
    // Someone the deployment does not know cannot approve it either.
    let nobody = d.airlock(
        &[
            "runbook", "approve", "set_desc", &version, "--by", "mallory",
        ],
        "",
    );
    assert!(text(&nobody.stderr).contains("--by `mallory` names no identity"));
    assert!(d.ok(&["runbook", "list"]).contains("unapproved"));

    d.ok(&["runbook", "approve", "set_desc", &version, "--by", "bob"]);
    let secret = "db root pw: Hunter2-S3cr3t!";
    let ran = d.exec(
        "alice",
        &format!("await runbooks.set_desc({{ vmid: 100, text: {secret:?} }})"),
    );
    assert_eq!(ran["result"]["ok"], "set", "{ran}");
    let raw = std::fs::read_to_string(d.dir.path().join("state/simulated/audit.jsonl")).unwrap();
    assert!(!raw.contains("Hunter2"), "the text reached the audit chain");
    let lines = d.audit();
    let change = lines
        .iter()
        .find(|l| l["tool"] == "vm_config_update" && l["decision"] == "allowed")
        .expect("the change's line");
    let args = &change["runbook_args"];
    assert_eq!(
        (&args["node"], &args["vmid"]),
        (&json!("pve1"), &json!(100))
    );
    let tag = args["description"]["hmac"].as_str().unwrap_or_default();
    assert!(
        tag.len() == 8 && tag.chars().all(|c| c.is_ascii_hexdigit()),
        "{args}"
    );
    // The auditor's check still holds the run to its file.
    let verified = d.ok(&["audit", "verify"]);
    assert!(
        verified.contains("stayed inside their versions' files"),
        "{verified}"
    );
    let approved = lines
        .iter()
        .find(|l| l["event"] == "runbook_approved")
        .unwrap();
    assert_eq!(
        (&approved["by"], &approved["author"]),
        (&json!("bob"), &json!("alice"))
    );
}

/// A runbook of one change, within its bounds.
const ONE_SHUTDOWN: &str = r#"name = "stop_once"
description = "Shut one web VM down, once."
tiers = ["read", "operate"]
max_changes = 1

[input]
type = "object"
required = ["vmid"]
properties.vmid = { type = "integer" }

[[calls]]
tool = "vm_shutdown"
args.vmid = { enum = [101] }
args.node = { const = "pve1" }

[script]
source = '''
const upid = await tools.vm_shutdown({ node: "pve1", vmid: input.vmid, timeout: 10, forceStop: true });
({ upid: typeof upid })
'''
"#;

/// A script runs an approved runbook, then waits for a person to decide
/// its next change: when the execution goes on, by replay, the runbook's
/// run is what the journal says it was, not a new run, so its change is
/// not made again (and a new run's `max_changes` would not have stopped
/// it: each run has its own).
#[test]
fn a_runbook_run_before_a_wait_is_not_run_again_when_the_execution_goes_on() {
    use std::io::{BufRead, Write};
    let d = Deployment::new("");
    let file = d.dir.path().join("stop_once.toml");
    std::fs::write(&file, ONE_SHUTDOWN).unwrap();
    let version = d.add(&file, "alice");
    d.ok(&["runbook", "approve", "stop_once", &version, "--by", "bob"]);
    let script = r#"const stopped = await runbooks.stop_once({ vmid: 101 });
const snap = await tools.vm_snapshot_create({ node: "pve1", vmid: 102, snapname: "after_stop" });
({ stopped, snap: typeof snap })"#;
    let mut exec = common::Reaped::new(
        Command::new(BIN)
            .arg("--config")
            .arg(d.config())
            .args(["exec", "--json", "--identity", "alice", "-"])
            .env_remove("AIRLOCK_STATE_URL")
            .env_remove("AIRLOCK_AUDIT_FILE")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    exec.child()
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let mut stderr = std::io::BufReader::new(exec.child().stderr.take().unwrap());
    let mut said = String::new();
    loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap() == 0 {
            let out = exec.output();
            panic!("exec ended without waiting: {said}{}", text(&out.stdout));
        }
        said.push_str(&line);
        if line.starts_with("[airlock] waiting: vm_snapshot_create") {
            break;
        }
    }
    let pending = d.approvals_pending();
    let ids: Vec<&str> = pending.split_whitespace().collect();
    assert_eq!(ids.len(), 1, "only the snapshot asks: {pending}");
    d.ok(&["approvals", "approve", ids[0], "--by", "bob"]);
    let out = exec.output();
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{said}", text(&out.stdout)));
    assert_eq!(
        v["result"]["ok"],
        json!({"stopped": {"upid": "string"}, "snap": "string"}),
        "{v}"
    );
    let lines = d.audit();
    let decisions = |tool: &str| -> Vec<String> {
        lines
            .iter()
            .filter(|l| {
                l["event"] == "call" && l["tool"] == tool && l["execution"] == v["execution"]
            })
            .map(|l| l["decision"].as_str().unwrap_or("").to_string())
            .collect()
    };
    assert_eq!(
        decisions("vm_shutdown"),
        ["allowed"],
        "the runbook's change, once"
    );
    assert!(
        decisions("vm_snapshot_create").contains(&"allowed".to_string()),
        "{:?}",
        decisions("vm_snapshot_create")
    );
    let ends = lines
        .iter()
        .filter(|l| l["event"] == "execution_end" && l["execution"] == v["execution"])
        .count();
    assert_eq!(ends, 1, "one execution");
}
