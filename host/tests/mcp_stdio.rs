//! The built binary as an MCP server on stdio, driven by the rmcp client:
//! tools, search, schemas, a fan-out script against the simulated cluster,
//! approvals asked in the client, and cancellation.

mod common;

use common::{call, text};
use std::sync::{
    atomic::{AtomicU32, Ordering},
    Arc,
};

use rmcp::{
    model::{
        CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig,
        ElicitRequestParams, ElicitResult, ElicitationAction, Implementation,
    },
    service::{RequestContext, RunningService},
    transport::TokioChildProcess,
    ClientHandler, ErrorData as McpError, RoleClient, ServiceExt,
};
use serde_json::{json, Value};

/// A client that answers approval questions the way it was told to, and
/// counts progress notifications.
#[derive(Clone)]
struct Person {
    can_ask: bool,
    approve: bool,
    asked: Arc<AtomicU32>,
    /// Questions being answered right now, and the most at once.
    answering: Arc<AtomicU32>,
    most_at_once: Arc<AtomicU32>,
    progress: Arc<tokio::sync::Notify>,
    logs: tokio::sync::mpsc::UnboundedSender<Value>,
    /// Take the question and wait until the server withdraws it.
    hold: bool,
    /// The reasons of withdrawn questions (`notifications/cancelled`).
    withdrawn: tokio::sync::mpsc::UnboundedSender<String>,
    /// The server's state directory, removed when the client is dropped.
    state: Option<Arc<tempfile::TempDir>>,
    /// `resources` or `prompts`, per list-changed notification.
    lists_changed: tokio::sync::mpsc::UnboundedSender<&'static str>,
}

impl ClientHandler for Person {
    fn get_info(&self) -> ClientConfig {
        let caps = if self.can_ask {
            ClientCapabilities::builder().enable_elicitation().build()
        } else {
            ClientCapabilities::default()
        };
        ClientConfig::new(caps, Implementation::new("airlock-test", "1"))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        let now = self.answering.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_at_once.fetch_max(now, Ordering::SeqCst);
        let text = serde_json::to_string(&request).unwrap_or_default();
        if self.hold {
            // Answered only after the server withdrew the question (the
            // test fails on its own if it never does).
            std::future::pending::<()>().await;
        }
        // A person takes a moment: give other questions a chance to
        // arrive meanwhile, if the server sent any.
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        self.answering.fetch_sub(1, Ordering::SeqCst);
        assert!(
            text.contains("vm_shutdown"),
            "the question names the tool: {text}"
        );
        Ok(ElicitResult::new(ElicitationAction::Accept)
            .with_content(json!({"approve": self.approve})))
    }

    async fn on_cancelled(
        &self,
        params: rmcp::model::CancelledNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        let _ = self.withdrawn.send(params.reason.unwrap_or_default());
    }

    async fn on_progress(
        &self,
        _params: rmcp::model::ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        self.progress.notify_one();
    }

    async fn on_resource_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        let _ = self.lists_changed.send("resources");
    }

    async fn on_prompt_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        let _ = self.lists_changed.send("prompts");
    }

    #[allow(deprecated)] // MCP logging is deprecated (SEP-2577) but clients still use it
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        let _ = self.logs.send(serde_json::to_value(params).unwrap());
    }
}

async fn connect(person: Person, args: &[&str]) -> RunningService<RoleClient, Person> {
    connect_in(person, args, tempfile::tempdir().unwrap()).await
}

/// [`connect`], the server's state in `state`.
async fn connect_in(
    mut person: Person,
    args: &[&str],
    state: tempfile::TempDir,
) -> RunningService<RoleClient, Person> {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_airlock"));
    cmd.arg("serve")
        .args(args)
        .env("AIRLOCK_STATE_DIR", state.path())
        .env_remove("AIRLOCK_CONFIG")
        .env("AIRLOCK_LOG", "warn");
    // Lives as long as the client (which owns the person) does.
    person.state = Some(Arc::new(state));
    person
        .serve(TokioChildProcess::new(cmd).unwrap())
        .await
        .unwrap()
}

fn person() -> Person {
    listening_person().0
}

/// A person whose client keeps the server's log messages.
fn listening_person() -> (Person, tokio::sync::mpsc::UnboundedReceiver<Value>) {
    let (logs, rx) = tokio::sync::mpsc::unbounded_channel();
    let p = Person {
        can_ask: false,
        approve: false,
        asked: Arc::new(AtomicU32::new(0)),
        answering: Arc::default(),
        most_at_once: Arc::default(),
        progress: Arc::default(),
        logs,
        hold: false,
        withdrawn: tokio::sync::mpsc::unbounded_channel().0,
        state: None,
        lists_changed: tokio::sync::mpsc::unbounded_channel().0,
    };
    (p, rx)
}

fn structured(r: &CallToolResult) -> &Value {
    r.structured_content.as_ref().expect("structured content")
}

const STOP_ALL: &str = include_str!("../../examples/stop-node-vms.js");

/// The same shutdowns as STOP_ALL, settled rather than awaited all-or-
/// nothing, so that every approval request is filed in one run; returns
/// the approval hints.
const FILE_REQUESTS: &str = "const node = 'pve1';\n\
    const running = (await tools.vm_list({ node })).filter((vm) => vm.status === 'running' && !vm.template);\n\
    const tries = await Promise.allSettled(running.map((vm) => tools.vm_shutdown({ node, vmid: vm.vmid, timeout: 60, forceStop: true })));\n\
    tries.map((t) => t.status === 'rejected' && t.reason.code === 'approval_required' ? t.reason.details.how : t.status)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_tools_search_schema_and_a_fan_out_script() {
    let client = connect(person(), &["--demo"]).await;
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["search", "get_schema", "execute"]);
    assert!(serde_json::to_string(&tools).unwrap().len() < 2048);
    assert_eq!(
        tools[0].annotations.as_ref().unwrap().read_only_hint,
        Some(true)
    );

    let r = call(&client, "search", json!({"query": "stop a vm"})).await;
    let hits = structured(&r)["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["name"].as_str().unwrap().to_string())
        .collect::<Vec<_>>();
    assert!(hits.iter().take(3).any(|h| h == "vm_stop"), "{hits:?}");

    let r = call(
        &client,
        "get_schema",
        json!({"names": ["vm_list", "vm_lsit"]}),
    )
    .await;
    assert!(
        text(&r).contains("function vm_list(args: {"),
        "{}",
        text(&r)
    );
    assert_eq!(structured(&r)["schemas"][1]["did_you_mean"][0], "vm_list");

    let script = "const nodes = await tools.node_list({});\n\
                  const lists = await Promise.all(nodes.map((n) => tools.vm_list({node: n.node})));\n\
                  lists.flat().filter((v) => v.status === 'running').length";
    let r = call(&client, "execute", json!({"script": script})).await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    assert_eq!(structured(&r)["result"], 7);
    // The result carries a summary of the calls; the trace is kept.
    let calls = &structured(&r)["calls"];
    assert_eq!(calls["count"], 4, "{calls}");
    assert_eq!(calls["by_tool"]["vm_list"]["ok"], 3, "{calls}");
    assert_eq!(structured(&r)["untrusted_data"], true);
    assert!(structured(&r).get("trace").is_none());
    let id = structured(&r)["execution"].as_str().unwrap().to_string();
    // Every call succeeded: the text need not point at the trace.
    assert!(!text(&r).contains("trace:"), "{}", text(&r));
    assert!(text(&r).contains("4 calls in "), "{}", text(&r));
    let kept = client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(format!(
            "airlock://executions/{id}"
        )))
        .await
        .unwrap();
    let rmcp::model::ResourceContents::TextResourceContents { text: kept, .. } = &kept.contents[0]
    else {
        panic!("text contents")
    };
    let kept: Value = serde_json::from_str(kept).unwrap();
    assert_eq!(kept["trace"].as_array().unwrap().len(), 4, "{kept}");
    assert_eq!(kept["stats"]["tool_calls"], 4, "{kept}");
    // With `trace`, it comes in the result.
    let r = call(&client, "execute", json!({"script": script, "trace": true})).await;
    assert_eq!(structured(&r)["trace"].as_array().unwrap().len(), 4);
    assert_eq!(structured(&r)["stats"]["tool_calls"], 4);
    let r = call(&client, "execute", json!({"script": "1", "trace": "yes"})).await;
    assert_eq!(r.is_error, Some(true));
    assert!(
        text(&r).contains("`trace` must be true or false"),
        "{}",
        text(&r)
    );
    client.cancel().await.unwrap();
}

/// What a result costs the agent's context: the value, and a line about
/// the calls, whatever their number.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_cost_the_context_their_value_and_a_line() {
    let client = connect(person(), &["--demo"]).await;
    let r = call(&client, "execute", json!({"script": "1+1"})).await;
    assert_eq!(text(&r), "2\n");
    let r = call(
        &client,
        "execute",
        json!({"script": "(await Promise.all(Array.from({length: 500}, () => tools.node_list({})))).length"}),
    )
    .await;
    assert_eq!(structured(&r)["result"], 500, "{}", text(&r));
    let whole = serde_json::to_string(&r).unwrap();
    assert!(whole.len() <= 1024, "{} bytes: {whole}", whole.len());
    // A call failed: the text says where its trace is, and it is there.
    let r = call(
        &client,
        "execute",
        json!({"script": "try { await tools.no_such_tool({}) } catch (e) { e.code }"}),
    )
    .await;
    let id = structured(&r)["execution"].as_str().unwrap().to_string();
    let uri = format!("airlock://executions/{id}");
    assert!(text(&r).contains(&format!("trace: {uri}")), "{}", text(&r));
    let kept = client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(uri))
        .await
        .unwrap();
    assert!(format!("{kept:?}").contains("no_such_tool"), "{kept:?}");
    let fleet = include_str!("../../examples/fleet-report.js");
    let r = call(&client, "execute", json!({"script": fleet})).await;
    // As the text shows it: pretty, being small.
    let value = serde_json::to_string_pretty(&structured(&r)["result"]).unwrap();
    assert!(
        text(&r).len() <= value.len() + 200,
        "{} bytes of text for a {}-byte value: {}",
        text(&r).len(),
        value.len(),
        text(&r)
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_are_asked_in_the_client_and_the_execution_continues() {
    let alice = Person {
        can_ask: true,
        approve: true,
        ..person()
    };
    let asked = alice.asked.clone();
    let client = connect(alice, &["--demo", "--identity", "alice"]).await;
    let r = call(&client, "execute", json!({"script": STOP_ALL})).await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    let results: Vec<&str> = structured(&r)["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["result"].as_str().unwrap())
        .collect();
    assert_eq!(results, ["OK", "OK", "OK"]);
    assert_eq!(asked.load(Ordering::SeqCst), 3, "one question per shutdown");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declined_approval_denies_and_a_client_that_cannot_ask_gets_the_instruction() {
    let no = Person {
        can_ask: true,
        approve: false,
        ..person()
    };
    let client = connect(no, &["--demo", "--identity", "alice"]).await;
    let r = call(&client, "execute", json!({"script": STOP_ALL})).await;
    // The first shutdown was declined; the person is not asked again in
    // this execution, so the other two wait for an operator.
    assert_eq!(r.is_error, Some(false));
    assert_eq!(structured(&r)["status"], "waiting", "{}", text(&r));
    let waiting = structured(&r)["waiting"].as_array().unwrap();
    assert_eq!(waiting.len(), 2, "{}", text(&r));
    for w in waiting {
        let how = w["how"].as_str().unwrap();
        assert!(
            how.contains("not asked again") && how.contains("declined"),
            "{how}"
        );
    }
    client.cancel().await.unwrap();

    // A client that cannot ask gets the command that approves. A script
    // that settles every call files all its requests in one run, and
    // waits for them; an operator runs each command in a shell, as
    // written; following the execution, it goes through.
    let client = connect(person(), &["--demo", "--identity", "alice"]).await;
    let r = call(&client, "execute", json!({"script": FILE_REQUESTS})).await;
    assert_eq!(structured(&r)["status"], "waiting", "{}", text(&r));
    let hints = structured(&r)["waiting"].as_array().unwrap().clone();
    assert_eq!(hints.len(), 3, "{}", text(&r));
    let follow = structured(&r)["follow"].clone();
    for hint in &hints {
        let command = hint["how"].as_str().unwrap().split('`').nth(1).unwrap();
        assert!(command.contains(" approvals approve ap-"), "{hint}");
        let out = std::process::Command::new("sh")
            .args(["-c", command])
            .env_remove("AIRLOCK_CONFIG")
            .output()
            .unwrap();
        assert!(out.status.success(), "{command}: {out:?}");
    }
    let r = call(&client, "execute", follow).await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    assert_eq!(
        structured(&r)["result"],
        json!(["fulfilled", "fulfilled", "fulfilled"]),
        "{}",
        text(&r)
    );
    client.cancel().await.unwrap();
}

const STOP_GUESTS: &str = include_str!("../../examples/stop-node-guests.js");

/// What runs on pve1, as `vmid:status` sorted.
const PVE1_STATUS: &str = "const node = 'pve1';\n\
    const [v, c] = await Promise.all([tools.vm_list({ node }), tools.ct_list({ node })]);\n\
    [...v, ...c].map((g) => g.vmid + ':' + g.status).sort()";

async fn pve1(client: &RunningService<RoleClient, Person>) -> Value {
    let r = call(client, "execute", json!({"script": PVE1_STATUS})).await;
    structured(&r)["result"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_is_approved_once_in_the_client_then_applied_once() {
    let alice = Person {
        can_ask: true,
        approve: true,
        ..person()
    };
    let asked = alice.asked.clone();
    let client = connect(alice, &["--demo", "--identity", "alice"]).await;
    let before = pve1(&client).await;
    let running = before
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s.as_str().unwrap().ends_with(":running"))
        .count();
    assert!(running >= 2, "{before}");

    let r = call(
        &client,
        "execute",
        json!({"script": STOP_GUESTS, "mode": "plan"}),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    let plan = &structured(&r)["plan"];
    assert_eq!(plan["status"], "approved", "{}", text(&r));
    // Each shutdown, and the wait for its task: a step of the plan too.
    let steps = plan["changes"].as_array().unwrap();
    let waits = steps.iter().filter(|c| c.get("waits_on").is_some()).count();
    assert_eq!((steps.len() - waits, waits), (running, running), "{plan}");
    assert!(
        plan["changes"][0]["target"]
            .as_str()
            .unwrap()
            .contains("vmid="),
        "{plan}"
    );
    let id = plan["id"].as_str().unwrap().to_string();
    assert!(
        text(&r).contains(&format!("plan {id} (approved)")),
        "{}",
        text(&r)
    );
    for g in structured(&r)["result"].as_array().unwrap() {
        assert_eq!(g["result"], "planned", "wait_task answers a planned task");
    }
    assert_eq!(asked.load(Ordering::SeqCst), 1, "one question for the plan");
    assert_eq!(pve1(&client).await, before, "planning changed nothing");

    let r = call(
        &client,
        "execute",
        json!({"script": STOP_GUESTS, "plan": id}),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    let plan = &structured(&r)["plan"];
    assert_eq!(plan["status"], "applied");
    assert_eq!(plan["applied"].as_array().unwrap().len(), running);
    assert_eq!(plan["not_applied"], json!([]));
    for g in structured(&r)["result"].as_array().unwrap() {
        assert_eq!(g["result"], "OK");
    }
    assert_eq!(asked.load(Ordering::SeqCst), 1, "applying asks nothing");
    let after = pve1(&client).await;
    assert!(
        !after.to_string().contains(":running"),
        "every guest stopped: {after}"
    );

    let r = call(
        &client,
        "execute",
        json!({"script": STOP_GUESTS, "plan": id}),
    )
    .await;
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("plan_used"), "{}", text(&r));
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_approves_a_plan_and_a_changed_script_gets_nothing_unplanned() {
    let client = connect(person(), &["--demo", "--identity", "alice"]).await;
    for (args, says) in [
        (json!({"script": "1", "mode": "dry"}), "`mode` must be"),
        (
            json!({"script": "1", "mode": "plan", "plan": "pl-0123456789abcdef"}),
            "give one of them",
        ),
        (
            json!({"script": "1", "plan": 7}),
            "`plan` must be a plan id",
        ),
        (
            json!({"script": "1", "plan": "pl-0123456789abcdef"}),
            "plan_not_found",
        ),
        (
            json!({"script": "1", "plan": "x".repeat(100_000)}),
            "plan_not_found",
        ),
    ] {
        let r = call(&client, "execute", args).await;
        assert_eq!(r.is_error, Some(true));
        assert!(text(&r).contains(says), "{says}: {}", text(&r));
        assert!(text(&r).len() < 1_000, "a bad id is not echoed whole");
    }
    let before = pve1(&client).await;
    let r = call(
        &client,
        "execute",
        json!({"script": STOP_GUESTS, "mode": "plan"}),
    )
    .await;
    let plan = structured(&r)["plan"].clone();
    assert_eq!(plan["status"], "pending", "{}", text(&r));
    let id = plan["id"].as_str().unwrap().to_string();

    // Applying before anyone approved: refused, nothing runs.
    let r = call(
        &client,
        "execute",
        json!({"script": STOP_GUESTS, "plan": id}),
    )
    .await;
    assert!(text(&r).contains("plan_not_approved"), "{}", text(&r));

    // The operator runs the command the plan names, in a shell.
    let command = plan["next"].as_str().unwrap().split('`').nth(1).unwrap();
    assert!(
        command.contains(&format!(" approvals approve {id}")),
        "{command}"
    );
    let out = std::process::Command::new("sh")
        .args(["-c", command])
        .env_remove("AIRLOCK_CONFIG")
        .output()
        .unwrap();
    assert!(out.status.success(), "{command}: {out:?}");

    // The script changed between plan and apply (another timeout): no
    // call of it is in the plan, so each needs an approval of its own
    // and none is sent. Nothing of the plan was sent, so it is still
    // approved.
    let changed = STOP_GUESTS.replace("timeout: 60", "timeout: 61");
    let r = call(&client, "execute", json!({"script": changed, "plan": id})).await;
    assert_eq!(r.is_error, Some(true));
    assert_eq!(
        structured(&r)["error"]["kind"],
        "ApprovalRequired",
        "{}",
        text(&r)
    );
    assert!(
        text(&r).contains(&format!("not the next change of plan {id}")),
        "{}",
        text(&r)
    );
    let plan = &structured(&r)["plan"];
    assert_eq!(plan["status"], "not_started", "{plan}");
    assert_eq!(pve1(&client).await, before, "nothing outside the plan ran");
    // A script that does not even compile: nothing sent, still approved.
    let r = call(
        &client,
        "execute",
        json!({"script": "const = ;", "plan": id}),
    )
    .await;
    assert_eq!(
        structured(&r)["error"]["kind"],
        "SyntaxError",
        "{}",
        text(&r)
    );
    assert_eq!(structured(&r)["plan"]["status"], "not_started");
    // The script as planned applies it.
    let r = call(
        &client,
        "execute",
        json!({"script": STOP_GUESTS, "plan": id}),
    )
    .await;
    assert_eq!(structured(&r)["plan"]["status"], "applied", "{}", text(&r));
    assert_ne!(pve1(&client).await, before);
    client.cancel().await.unwrap();
}

/// Ten shutdowns of one VM with different timeouts (ten distinct calls,
/// each needing approval), fired at once and settled; each says `ok`, its
/// error code, and whether it said the client is not asked again.
const TEN_APPROVALS: &str = "const tries = await Promise.allSettled(Array.from({length: 10}, (_, i) =>\n\
      tools.vm_shutdown({node: 'pve1', vmid: 101, timeout: 10 + i})));\n\
    tries.map((t) => t.status === 'fulfilled' ? 'ok' : t.reason.code +\n\
      (String(t.reason.details && t.reason.details.how).includes('not asked again in this execution') ? ' (not asked)' : ''))";

/// The calls a parked execution waits for: how many, and whether each
/// says the person in the client is not asked again.
fn waiting_not_asked(r: &CallToolResult) -> (usize, bool) {
    let waiting = structured(r)["waiting"].as_array().expect("waiting calls");
    let not_asked = waiting.iter().all(|w| {
        w["how"]
            .as_str()
            .unwrap_or_default()
            .contains("not asked again in this execution")
    });
    (waiting.len(), not_asked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_decline_the_client_is_not_asked_again_in_that_execution() {
    let no = Person {
        can_ask: true,
        approve: false,
        ..person()
    };
    let (asked, most) = (no.asked.clone(), no.most_at_once.clone());
    let client = connect(no, &["--demo", "--identity", "alice"]).await;
    let r = call(&client, "execute", json!({"script": TEN_APPROVALS})).await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    // One declined; the nine others wait for an operator, unasked.
    assert_eq!(structured(&r)["status"], "waiting", "{}", text(&r));
    assert_eq!(waiting_not_asked(&r), (9, true), "{}", text(&r));
    assert_eq!(asked.load(Ordering::SeqCst), 1, "asked once");
    assert_eq!(most.load(Ordering::SeqCst), 1);
    client.cancel().await.unwrap();
}

/// With `Promise.all`, the decline of the first call ends the script while
/// its siblings wait behind that question; their approval requests are
/// already filed. The trace must say so: every call whose request is in
/// the store is traced as `approval_required` or `waiting`, the declined
/// one as `approval_denied`, none of them as merely `cancelled` (a call
/// cancelled before it reached the gateway filed nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_abandoned_after_a_decline_are_traced_as_their_requests_stand() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("airlock.toml");
    std::fs::write(
        &config,
        format!("state_dir = {:?}\n", dir.path().display().to_string()),
    )
    .unwrap();
    let config = config.display().to_string();
    let no = Person {
        can_ask: true,
        approve: false,
        ..person()
    };
    let client = connect(no, &["--config", &config, "--identity", "alice"]).await;
    let script = "await Promise.all(Array.from({length: 10}, (_, i) =>\n\
          tools.vm_shutdown({node: 'pve1', vmid: 101, timeout: 10 + i})))";
    let r = call(&client, "execute", json!({"script": script, "trace": true})).await;
    assert_eq!(
        structured(&r)["error"]["kind"],
        "PolicyDenied",
        "{}",
        text(&r)
    );
    client.cancel().await.unwrap();

    let mut traced = std::collections::BTreeMap::<String, usize>::new();
    for c in structured(&r)["trace"].as_array().expect("the trace") {
        *traced
            .entry(c["status"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(["--config", &config, "approvals", "list", "--all", "--json"])
        .env_remove("AIRLOCK_CONFIG")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let filed: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let state = |s: &str| filed.iter().filter(|r| r["status"] == s).count();
    assert_eq!(state("denied"), 1, "{filed:?}");
    assert_eq!(traced.get("approval_denied"), Some(&1), "{traced:?}");
    // A sibling that got its answer before the script ended is traced as
    // a durable execution's call waiting for a decision (`waiting`); one
    // cut off behind the question keeps its `approval_required` note.
    let count = |k: &str| traced.get(k).copied().unwrap_or(0);
    assert_eq!(
        count("approval_required") + count("waiting"),
        state("pending"),
        "each filed request is traced as such: {traced:?} {filed:?}"
    );
    assert!(
        state("pending") >= 1,
        "siblings filed before the person answered: {filed:?}"
    );
}

/// An execution that ends while its question is open (a sibling call
/// failed and `Promise.all` gave up) withdraws the question, so the client
/// does not keep asking about a call nobody waits for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_the_execution_no_longer_waits_for_is_withdrawn() {
    let (withdrawn, mut reasons) = tokio::sync::mpsc::unbounded_channel();
    let holding = Person {
        can_ask: true,
        hold: true,
        withdrawn,
        ..person()
    };
    let asked = holding.asked.clone();
    let client = connect(holding, &["--demo", "--identity", "alice"]).await;
    let script = "await Promise.all([\n\
          tools.vm_shutdown({node: 'pve1', vmid: 101, timeout: 5}),\n\
          new Promise((_, reject) => setTimeout(() => reject(new Error('sibling failed')), 50))])";
    let r = call(&client, "execute", json!({"script": script})).await;
    assert_eq!(r.is_error, Some(true), "{}", text(&r));
    assert!(text(&r).contains("sibling failed"), "{}", text(&r));
    let reason = tokio::time::timeout(std::time::Duration::from_secs(10), reasons.recv())
        .await
        .expect("the question is withdrawn")
        .unwrap();
    assert!(
        reason.contains("execution that asked has ended"),
        "{reason}"
    );
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execution_asks_one_question_at_a_time_and_a_few_at_most() {
    let yes = Person {
        can_ask: true,
        approve: true,
        ..person()
    };
    let (asked, most) = (yes.asked.clone(), yes.most_at_once.clone());
    let client = connect(yes, &["--demo", "--identity", "alice"]).await;
    let r = call(&client, "execute", json!({"script": TEN_APPROVALS})).await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    // Five asked and approved (they ran); five wait for an operator,
    // unasked.
    assert_eq!(structured(&r)["status"], "waiting", "{}", text(&r));
    assert_eq!(waiting_not_asked(&r), (5, true), "{}", text(&r));
    assert_eq!(asked.load(Ordering::SeqCst), 5, "five questions");
    assert_eq!(most.load(Ordering::SeqCst), 1, "never two at once");
    // The next execution may ask again.
    let r = call(
        &client,
        "execute",
        json!({"script": "await tools.vm_shutdown({node: 'pve1', vmid: 102, timeout: 5})"}),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    assert_eq!(asked.load(Ordering::SeqCst), 6);
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_that_needs_an_operator_is_never_asked_in_the_client() {
    let config_dir = tempfile::tempdir().unwrap();
    let config = config_dir.path().join("airlock.toml");
    std::fs::write(
        &config,
        "[identities.alice]\nmode = \"rw\"\napprove_in_client = false\n",
    )
    .unwrap();
    let alice = Person {
        can_ask: true,
        approve: true,
        ..person()
    };
    let asked = alice.asked.clone();
    let config = config.display().to_string();
    let client = connect(alice, &["--config", &config, "--identity", "alice"]).await;
    let r = call(
        &client,
        "execute",
        json!({"script": "await tools.vm_stop({node: 'pve1', vmid: 101})"}),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    assert_eq!(structured(&r)["status"], "waiting", "{}", text(&r));
    let waiting = &structured(&r)["waiting"][0];
    assert!(
        waiting["how"]
            .as_str()
            .unwrap()
            .contains(" approvals approve ap-"),
        "{waiting}"
    );
    assert_eq!(
        asked.load(Ordering::SeqCst),
        0,
        "the client was never asked"
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_execution_frees_its_slot_at_once() {
    use rmcp::{
        model::{CallToolRequest, ClientRequest},
        service::PeerRequestOptions,
    };
    // One execution at a time; a second waits at most 5 s for the slot.
    let p = person();
    let started = p.progress.clone();
    let client = connect(
        p,
        &[
            "--demo",
            "--executions-in-flight",
            "1",
            "--queue-wait-ms",
            "5000",
        ],
    )
    .await;
    let Value::Object(args) = json!({"script": "await tools.node_list({}); await new Promise((r) => setTimeout(r, 60000)); 'finished'"})
    else {
        unreachable!()
    };
    let long = ClientRequest::CallToolRequest(CallToolRequest::new(
        CallToolRequestParams::new("execute").with_arguments(args),
    ));
    let mut meta = rmcp::model::RequestMetaObject::default();
    meta.set_progress_token(rmcp::model::ProgressToken(
        rmcp::model::NumberOrString::Number(7),
    ));
    let mut options = PeerRequestOptions::no_options();
    options.meta = Some(meta);
    let handle = client
        .send_cancellable_request(long, options)
        .await
        .unwrap();
    // The progress notification for its first tool call says it is running.
    started.notified().await;
    let t0 = std::time::Instant::now();
    handle.cancel(Some("changed my mind".into())).await.unwrap();
    let r = call(&client, "execute", json!({"script": "'next'"})).await;
    assert_eq!(structured(&r)["result"], "next", "{}", text(&r));
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(5),
        "the slot was freed at once, not after 60 s"
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_prompts_completion_and_log_messages() {
    use rmcp::model::{
        ArgumentInfo, CompleteRequestParams, GetPromptRequestParams, ReadResourceRequestParams,
        Reference, ResourceContents,
    };
    let (p, mut logs) = listening_person();
    let client = connect(p, &["--demo"]).await;

    let listed = client.list_resources(None).await.unwrap();
    let uris: Vec<&str> = listed.resources.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(
        uris,
        [
            "airlock://catalog",
            "airlock://limits",
            "airlock://identity",
            "airlock://executions"
        ]
    );
    let read = |uri: &str| {
        let uri = uri.to_string();
        let client = &client;
        async move {
            let r = client
                .read_resource(ReadResourceRequestParams::new(uri))
                .await?;
            let ResourceContents::TextResourceContents { text, .. } = &r.contents[0] else {
                panic!("text contents")
            };
            Ok::<String, rmcp::ServiceError>(text.clone())
        }
    };
    let me: Value = serde_json::from_str(&read("airlock://identity").await.unwrap()).unwrap();
    assert_eq!(me["mode"], "ro", "stdio runs read-only by default: {me}");
    let catalog: Value = serde_json::from_str(&read("airlock://catalog").await.unwrap()).unwrap();
    let per_tier: u64 = catalog["backends"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|tiers| tiers.as_object().unwrap().values())
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert!(per_tier > 100, "{catalog}");
    assert_eq!(catalog["tools"], per_tier, "{catalog}");
    // Forbidden tools are counted (search counts them too) and said apart.
    let forbidden: u64 = catalog["backends"]
        .as_object()
        .unwrap()
        .values()
        .filter_map(|tiers| tiers["forbidden"].as_u64())
        .sum();
    assert!(forbidden > 0, "{catalog}");
    assert_eq!(catalog["callable"], per_tier - forbidden, "{catalog}");
    let decl = read("airlock://tools/vm_list").await.unwrap();
    assert!(decl.contains("function vm_list(args: {"), "{decl}");
    let err = read("airlock://tools/vm_lsit")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("vm_list"), "suggests the right name: {err}");

    let done = client
        .complete(CompleteRequestParams::new(
            Reference::for_resource("airlock://tools/{name}"),
            ArgumentInfo::new("name", "vm_sn"),
        ))
        .await
        .unwrap();
    assert!(
        done.completion
            .values
            .iter()
            .any(|v| v == "vm_snapshot_list"),
        "{:?}",
        done.completion.values
    );

    let prompts = client.list_prompts(None).await.unwrap();
    assert_eq!(prompts.prompts[0].name, "operate");
    let Value::Object(args) = json!({"task": "stop every running VM on pve2"}) else {
        unreachable!()
    };
    let got = client
        .get_prompt(GetPromptRequestParams::new("operate").with_arguments(args))
        .await
        .unwrap();
    let body = serde_json::to_string(&got.messages).unwrap();
    assert!(body.contains("stop every running VM on pve2"), "{body}");
    let err = client
        .get_prompt(GetPromptRequestParams::new("operate"))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("`task`"), "names the missing argument: {err}");

    // Before the client sets a level: no message for an execution that went
    // well (its result says so), a warning for one that failed.
    let r = call(&client, "execute", json!({"script": "1"})).await;
    assert_eq!(structured(&r)["result"], 1, "{}", text(&r));
    let r = call(
        &client,
        "execute",
        json!({"script": "throw new Error('no')"}),
    )
    .await;
    assert_eq!(r.is_error, Some(true), "{}", text(&r));
    let first = tokio::time::timeout(std::time::Duration::from_secs(10), logs.recv())
        .await
        .expect("a log message for the failed execution")
        .unwrap();
    assert_eq!(first["level"], "warning", "{first}");
    assert_eq!(first["data"]["outcome"], "RuntimeError", "{first}");

    // Debug level: every tool call is logged to the client, without its arguments.
    #[allow(deprecated)]
    client
        .set_level(rmcp::model::SetLevelRequestParams::new(
            rmcp::model::LoggingLevel::Debug,
        ))
        .await
        .unwrap();
    let r = call(
        &client,
        "execute",
        json!({"script": "await tools.vm_list({node: 'pve1'}); 1"}),
    )
    .await;
    assert_eq!(structured(&r)["result"], 1, "{}", text(&r));
    let mut seen = Vec::new();
    while !seen
        .iter()
        .any(|m: &Value| m.to_string().contains("vm_list"))
    {
        let m = tokio::time::timeout(std::time::Duration::from_secs(10), logs.recv())
            .await
            .expect("a log message for the tool call")
            .unwrap();
        seen.push(m);
    }
    let line = seen.last().unwrap().to_string();
    assert!(!line.contains("pve1"), "arguments are not logged: {line}");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collector_tools_resources_and_prompts_are_served() {
    use rmcp::model::{GetPromptRequestParams, ReadResourceRequestParams, ResourceContents};
    let client = connect(person(), &["--demo", "--collector"]).await;

    let r = call(&client, "search", json!({"query": "containers on a host"})).await;
    assert_eq!(structured(&r)["hits"][0]["name"], "quox_docker_status");

    let listed = client.list_resources(None).await.unwrap();
    let uris: Vec<&str> = listed.resources.iter().map(|r| r.uri.as_str()).collect();
    assert!(uris.contains(&"quox://fleet/health"), "{uris:?}");
    let health = client
        .read_resource(ReadResourceRequestParams::new("quox://fleet/health"))
        .await
        .unwrap();
    let ResourceContents::TextResourceContents { text: now, .. } = &health.contents[0] else {
        panic!("text")
    };
    assert!(now.contains("1 degraded"), "{now}");

    let prompts = client.list_prompts(None).await.unwrap();
    let names: Vec<&str> = prompts.prompts.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["operate", "incident_triage"]);
    let Value::Object(args) = json!({"service": "billing", "notes": "{{service}}"}) else {
        unreachable!()
    };
    let got = client
        .get_prompt(GetPromptRequestParams::new("incident_triage").with_arguments(args))
        .await
        .unwrap();
    let body = serde_json::to_string(&got.messages).unwrap();
    assert!(
        body.contains(
            "Triage an incident on billing (severity medium). Known so far: {{service}}."
        ),
        "{body}"
    );

    let r = call(
        &client,
        "execute",
        json!({"script": "(await tools.quox_fleet_status({})).hosts.filter((h) => h.status !== 'healthy').map((h) => h.host)"}),
    )
    .await;
    assert_eq!(structured(&r)["result"], json!(["db-1"]), "{}", text(&r));
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_comes_up_late_is_announced_as_changed_lists() {
    use airlock_sim::collector::CollectorSim;
    // A port with nothing on it yet, where the collector will start.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("quox.key");
    airlock_edge::credential_file::write(&key_file, "late-collector-key").unwrap();
    let config = dir.path().join("airlock.toml");
    std::fs::write(
        &config,
        format!(
            "[collector]\nurl = \"http://127.0.0.1:{port}\"\nservice_key_file = {:?}\n",
            key_file.to_str().unwrap()
        ),
    )
    .unwrap();
    let (changed, mut lists_changed) = tokio::sync::mpsc::unbounded_channel();
    let watcher = Person {
        lists_changed: changed,
        ..person()
    };
    let client = connect(watcher, &["--config", config.to_str().unwrap()]).await;
    let caps = client.peer_info().unwrap().capabilities.clone();
    assert_eq!(caps.resources.unwrap().list_changed, Some(true));
    assert_eq!(caps.prompts.unwrap().list_changed, Some(true));
    let before = client.list_resources(None).await.unwrap();
    assert!(before
        .resources
        .iter()
        .all(|r| !r.uri.starts_with("quox://")));

    let _collector = CollectorSim::start(port, "late-collector-key")
        .await
        .unwrap();
    let mut got = Vec::new();
    while got.len() < 2 {
        let next = tokio::time::timeout(std::time::Duration::from_secs(30), lists_changed.recv())
            .await
            .expect("the server announces the new lists")
            .unwrap();
        got.push(next);
    }
    got.sort();
    assert_eq!(got, ["prompts", "resources"]);
    let after = client.list_resources(None).await.unwrap();
    assert!(
        after
            .resources
            .iter()
            .any(|r| r.uri == "quox://fleet/health"),
        "{:?}",
        after.resources
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_runbook_is_a_prompt_and_runs_from_execute() {
    let state = tempfile::tempdir().unwrap();
    let airlock = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_airlock"))
            .args(args)
            .env("AIRLOCK_STATE_DIR", state.path())
            .env_remove("AIRLOCK_CONFIG")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/runbooks/stop_node_guests.toml"
    );
    airlock(&["runbook", "add", file, "--by", "alice"]);
    let drain = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/runbooks/drain_node.toml"
    );
    airlock(&["runbook", "add", drain, "--by", "alice"]);
    let listed = airlock(&["runbook", "list", "--json"]);
    let listed: Value = serde_json::from_str(&listed).unwrap();
    let version = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "stop_node_guests")
        .unwrap()["version"]
        .as_str()
        .unwrap()
        .to_string();
    airlock(&[
        "runbook",
        "approve",
        "stop_node_guests",
        &version,
        "--by",
        "rita",
    ]);

    let client = connect_in(person(), &["--identity", "olga"], state).await;
    // Only the approved one is a prompt.
    let prompts = client.list_prompts(None).await.unwrap();
    let names: Vec<&str> = prompts.prompts.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["operate", "runbook_stop_node_guests"], "{names:?}");
    let p = &prompts.prompts[1];
    let args: Vec<(&str, Option<bool>)> = p
        .arguments
        .iter()
        .flatten()
        .map(|a| (a.name.as_str(), a.required))
        .collect();
    assert!(args.contains(&("node", Some(true))), "{args:?}");
    let Value::Object(given) = json!({"node": "pve3", "timeout": "30"}) else {
        unreachable!()
    };
    let got = client
        .get_prompt(
            rmcp::model::GetPromptRequestParams::new("runbook_stop_node_guests")
                .with_arguments(given),
        )
        .await
        .unwrap();
    let body = serde_json::to_string(&got.messages).unwrap();
    assert!(
        body.contains(r#"runbooks.stop_node_guests({\"node\":\"pve3\",\"timeout\":30})"#),
        "the arguments as the runbook's input, typed: {body}"
    );
    let Value::Object(bad) = json!({"node": "pve3", "timeout": "5"}) else {
        unreachable!()
    };
    let err = client
        .get_prompt(
            rmcp::model::GetPromptRequestParams::new("runbook_stop_node_guests")
                .with_arguments(bad),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("timeout"), "names the argument: {err}");

    // Search lists both, marked; execute runs the approved one, nothing
    // asked in the client.
    let r = call(&client, "search", json!({"query": "stop guests node"})).await;
    let found = &structured(&r)["runbooks"];
    assert_eq!(
        found[0]["call"],
        "runbooks.stop_node_guests",
        "{}",
        text(&r)
    );
    assert!(text(&r).contains("[runbook, approved"), "{}", text(&r));
    let r = call(
        &client,
        "execute",
        json!({"script": "const r = await runbooks.stop_node_guests({ node: 'pve3', timeout: 30 }); r.stopped.length"}),
    )
    .await;
    assert_eq!(structured(&r)["result"], 3, "{}", text(&r));
    assert!(
        text(&r).contains("runbooks.stop_node_guests › vm_shutdown 2 ok"),
        "the summary counts the runbook's calls: {}",
        text(&r)
    );
    assert_eq!(client.service().asked.load(Ordering::SeqCst), 0);
}
