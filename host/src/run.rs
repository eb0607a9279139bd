//! `airlock exec` and `airlock demo`: one script, run as an identity,
//! through the sandbox and the gateway, audited from start to end; with
//! `--plan` its changes are recorded and filed for one approval, with
//! `--apply ID` an approved plan's changes are made.

use std::{io::Read, path::PathBuf, process::ExitCode, sync::Arc};

use airlock_catalog::visible::visible;
use airlock_gateway::{
    approval::Status,
    decision::{Channel, Decider},
    Caller, Gateway,
};
use airlock_sandbox::{Limits, Sandbox};

use crate::{
    execution::Execution,
    plans::{self, PlanArg},
    report,
    settings::{ConfigFile, SandboxFlags},
    wiring,
};

pub const DEMO_SCRIPT: &str = include_str!("../../examples/fleet-report.js");

/// What the demo plans, has approved and applies after the fleet report.
pub const DEMO_PLAN_SCRIPT: &str = include_str!("../../examples/stop-node-guests.js");

/// The identity the demo's plan runs as (mode `operator`).
pub const DEMO_PLAN_IDENTITY: &str = "olga";

/// The runbook the demo adds, has approved and runs after the plan.
pub const DEMO_RUNBOOK: &str = include_str!("../../examples/runbooks/drain_node.toml");

/// What the demo's runbook step runs, as `alice` (mode rw: migrations
/// are admin tools).
pub const DEMO_RUNBOOK_SCRIPT: &str =
    "const drained = await runbooks.drain_node({ node: \"pve2\", target: \"pve3\" });\ndrained\n";

pub enum Script {
    File(PathBuf),
    Demo,
}

/// Where [`Runner::run`] prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// The value on stdout, the rest on stderr.
    Human,
    /// The whole outcome as JSON on stdout.
    Json,
    /// Everything on stderr.
    Stderr,
}

/// What `exec` does when its script waits for another person's decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnWait {
    /// The call fails at once (`ApprovalRequired`, with the request id).
    Fail,
    /// This process waits for the decision, then goes on by replay.
    Wait,
    /// The execution is kept in the deployment's state, as a server
    /// parks it; its id is printed and this process ends. Its identity
    /// follows it from an MCP client (`execute({"execution": ID})`), on
    /// any server sharing the state.
    Detach,
}

/// A gateway and a sandbox, ready for scripts.
pub struct Runner {
    pub gateway: Arc<Gateway>,
    sandbox: Sandbox,
    limits: Limits,
}

impl Runner {
    pub async fn new(file: &ConfigFile, flags: &SandboxFlags) -> Result<Self, String> {
        let (config, limits) = flags.resolve(file).map_err(|e| e.to_string())?;
        let gateway = wiring::gateway(file)
            .await
            .map_err(|e| format!("cannot start the tool gateway: {e}"))?;
        let sandbox = Sandbox::new(config)
            .await
            .map_err(|e| format!("cannot start the sandbox: {e}"))?;
        Ok(Self {
            gateway,
            sandbox,
            limits,
        })
    }

    /// Runs `source` as `identity` and prints the outcome (and the plan's
    /// report, if any). Returns whether it succeeded, and the plan's
    /// report.
    pub async fn run(
        &self,
        source: &str,
        identity: &str,
        plan: &PlanArg,
        output: Output,
        on_wait: OnWait,
    ) -> Result<(bool, Option<plans::Report>), String> {
        let caller = plans::prepare(&self.gateway, Caller::new(identity), plan)
            .map_err(|e| format!("{}: {e}", e.code()))?;
        let not_started = |e: crate::execution::NotStarted| {
            match e.unavailable_store() {
            Some(store) => format!("StateUnavailable: the {store} store cannot be reached, so nothing ran; run it again in a few seconds: {e}"),
            None => e.to_string(),
        }
        };
        let mut execution = Execution::start(&self.gateway, caller, source).map_err(not_started)?;
        // `lifetime_ms` counts from here, waits included.
        let born = std::time::Instant::now();
        // A plan has its own way to wait for a person (one approval of the
        // whole plan); reused instances cannot be replayed.
        let durable = on_wait != OnWait::Fail
            && execution.caller().plan.is_none()
            && self.sandbox.config().mode == airlock_sandbox::Mode::Fresh;
        let mut tools = execution.tools_running_runbooks(&self.sandbox, &self.limits);
        tools.durable = durable;
        let outcome = if durable {
            let mut journal = airlock_sandbox::Journal::new();
            loop {
                let o = self
                    .sandbox
                    .execute_journaled(source, &self.limits, &tools, &mut journal)
                    .await;
                let Err(airlock_sandbox::ExecError::Parked { waiting }) = &o.result else {
                    break o;
                };
                // Nobody else follows it: this process waits for the
                // decisions, holding no instance and no slot, then goes
                // on by replay — what it did is not done again.
                let requests = crate::durable::request_ids(waiting);
                for w in waiting {
                    let how = w.details.get("how").and_then(|h| h.as_str()).unwrap_or("");
                    eprintln!("[airlock] waiting: {}: {how}", w.tool);
                }
                let (id, caller) = (execution.id().to_string(), execution.caller().clone());
                if on_wait == OnWait::Detach {
                    return self.detach(execution, source, journal, &o, output);
                }
                let first = waiting.first().cloned();
                execution.park(&requests, &o);
                let left = self.limits.lifetime().saturating_sub(born.elapsed());
                crate::durable::decision_in(&self.gateway, &requests, left).await;
                // Nobody decided before the requests expired: it ends
                // here, as it would have without waiting (nothing is
                // asked again unattended).
                let decided = requests.iter().any(|r| {
                    self.gateway
                        .approvals()
                        .get(r)
                        .is_ok_and(|r| r.status != airlock_gateway::approval::Status::Pending)
                });
                eprintln!(
                    "[airlock] {}",
                    if decided {
                        "decided; going on"
                    } else {
                        "nobody decided before the requests expired; ending"
                    }
                );
                execution = loop {
                    match Execution::resume(&self.gateway, caller.clone(), &id) {
                        Ok(e) => break e,
                        // Its identity's places are all taken for now.
                        Err(crate::execution::NotStarted::Refused(
                            airlock_gateway::gateway::StartError::Busy { .. },
                        )) => tokio::time::sleep(std::time::Duration::from_millis(500)).await,
                        Err(e) => return Err(not_started(e)),
                    }
                };
                if !decided {
                    let mut o = o;
                    let field = |k: &str| {
                        first
                            .as_ref()
                            .and_then(|w| w.details.get(k)?.as_str())
                            .unwrap_or("")
                            .to_string()
                    };
                    o.result = Err(airlock_sandbox::ExecError::ApprovalRequired {
                        tool: first.as_ref().map(|w| w.tool.clone()).unwrap_or_default(),
                        request_id: field("request_id"),
                        how: "nobody decided before the request expired; run the script again to ask again (what it did before is done)".into(),
                    });
                    break o;
                }
            }
        } else {
            self.sandbox.execute(source, &self.limits, &tools).await
        };
        let report = plans::conclude(&self.gateway, execution.caller(), outcome.is_ok());
        let finished = execution.finish(crate::execution::Ended::Ran(&outcome));
        let view = report::View {
            outcome: &outcome,
            identity,
            mode: self.gateway.mode_of(&Caller::new(identity)),
            execution: &finished.id,
            plan: report.as_ref(),
            value_on_stderr: output == Output::Stderr,
        };
        let ok = if output == Output::Json {
            report::json(&view)
        } else {
            report::human(&view)
        };
        Ok((ok, report))
    }
}

impl Runner {
    /// Keeps a waiting execution in the deployment's state and says how
    /// to follow it: a detached `exec` ends here, its execution does not.
    fn detach(
        &self,
        execution: Execution,
        source: &str,
        journal: airlock_sandbox::Journal,
        ran: &airlock_sandbox::Outcome,
        output: Output,
    ) -> Result<(bool, Option<plans::Report>), String> {
        let Err(airlock_sandbox::ExecError::Parked { waiting }) = &ran.result else {
            unreachable!("only a parked outcome is detached");
        };
        let durable = crate::durable::Durable::new(
            self.gateway.clone(),
            &self.limits,
            std::time::Duration::from_millis(self.sandbox.config().capacity.queue_wait_ms),
        );
        let id = execution.id().to_string();
        let identity = execution.caller().identity.clone();
        let requests = crate::durable::request_ids(waiting);
        let parked = crate::durable::Parked {
            identity: identity.clone(),
            script: source.to_string(),
            journal,
            waiting: waiting.clone(),
            calls: ran.stats.tool_calls,
            born_ms: crate::durable::born_now() - execution.ran_for().as_millis() as i64,
            prompts: Default::default(),
            idle: 0,
            // Every change it sent was answered and is in the journal:
            // nothing was sent past the wait.
            sends: crate::durable::Sends {
                recorded: true,
                ..Default::default()
            },
        };
        if let Err(e) = durable.park(&id, &parked, None) {
            // It cannot be kept: it ends as a `--no-wait` run would.
            let mut ended = ran.clone();
            ended.result = Err(crate::mcp::render::not_waiting(waiting, &e));
            let finished = execution.finish(crate::execution::Ended::Ran(&ended));
            let view = report::View {
                outcome: &ended,
                identity: &identity,
                mode: self.gateway.mode_of(&Caller::new(&identity)),
                execution: &finished.id,
                plan: None,
                value_on_stderr: output == Output::Stderr,
            };
            let ok = match output {
                Output::Json => report::json(&view),
                _ => report::human(&view),
            };
            return Ok((ok, None));
        }
        execution.park(&requests, ran);
        durable.ready(&id);
        // What an agent's `execute` would have answered.
        let answer = crate::mcp::render::waiting(&id, waiting, &identity, None);
        match output {
            Output::Json => println!(
                "{}",
                serde_json::to_string_pretty(&answer.structured_content).unwrap_or_default()
            ),
            _ => {
                println!("{id}");
                eprintln!(
                    "[airlock] execution {id} as {} is kept, waiting for {}: {} follows it with execute({{\"execution\": \"{id}\"}}) on any server sharing this state; `airlock executions show {id}` says where it stands",
                    visible(&identity),
                    crate::durable::waits_for(waiting),
                    visible(&identity),
                );
            }
        }
        Ok((true, None))
    }
}

pub async fn exec(
    file: &ConfigFile,
    script: Script,
    identity: &str,
    json: bool,
    plan: &PlanArg,
    on_wait: OnWait,
    flags: &SandboxFlags,
) -> ExitCode {
    let (source, demo) = match script {
        Script::File(path) => match read_script(&path) {
            Ok(s) => (s, false),
            Err(e) => return fail(&e),
        },
        Script::Demo => (DEMO_SCRIPT.to_string(), true),
    };
    let runner = match Runner::new(file, flags).await {
        Ok(r) => r,
        Err(e) => return fail(&e),
    };
    if demo {
        eprintln!("Running examples/fleet-report.js against the simulated cluster:\n");
        eprintln!("{DEMO_SCRIPT}");
    }
    let output = if json { Output::Json } else { Output::Human };
    let ok = match runner.run(&source, identity, plan, output, on_wait).await {
        Ok((ok, _)) => ok,
        Err(e) => return fail(&e),
    };
    if demo && ok && !json {
        if let Err(e) = demo_plan(&runner).await {
            return fail(&e);
        }
        if let Err(e) = demo_runbook(&runner).await {
            return fail(&e);
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// The demo's second part: every running guest on a node shut down
/// through one plan — recorded, approved once (by the demo, as an
/// operator would with `airlock approvals approve`), applied.
async fn demo_plan(runner: &Runner) -> Result<(), String> {
    let who = DEMO_PLAN_IDENTITY;
    eprintln!(
        "\n— Plan, approve once, apply: examples/stop-node-guests.js as {who} (mode operator), \
         whose shutdowns each need an approval —\n\n{DEMO_PLAN_SCRIPT}"
    );
    eprintln!("1. In plan mode (`execute` with mode \"plan\"; `airlock exec --plan`): reads run, changes are recorded, nothing is sent.\n");
    let (ok, report) = runner
        .run(
            DEMO_PLAN_SCRIPT,
            who,
            &PlanArg::Record,
            Output::Stderr,
            OnWait::Fail,
        )
        .await?;
    let id = match report {
        Some(r) if ok && r.waiting().is_some() => r.id().to_string(),
        _ => return Err("the demo's plan was not filed for approval".into()),
    };
    eprintln!("\n2. One approval for the whole plan (what `airlock approvals approve {id}` does, or the person in the MCP client):\n");
    let gateway = &runner.gateway;
    let demo = Decider {
        who: "the demo, as operator".into(),
        channel: Channel::Demo,
        may_approve_own: false,
        reason: None,
    };
    gateway
        .decide(&id, &demo, Status::Approved)
        .map_err(|e| e.to_string())?;
    eprintln!("approved: plan {id}\n");
    eprintln!("3. Applied (`execute` with plan \"{id}\"; `airlock exec --apply {id}`): each planned change runs once, without asking again.\n");
    let (ok, _) = runner
        .run(
            DEMO_PLAN_SCRIPT,
            who,
            &PlanArg::Apply(id.clone()),
            Output::Stderr,
            OnWait::Fail,
        )
        .await?;
    if !ok {
        return Err("the demo's plan did not apply".into());
    }
    eprintln!("\n4. Once used, the plan cannot be applied again:");
    match plans::prepare(gateway, Caller::new(who), &PlanArg::Apply(id)) {
        Err(e) => eprintln!("{}: {e}", e.code()),
        Ok(_) => return Err("the demo's plan applied twice".into()),
    }
    Ok(())
}

/// The demo's third part: a runbook, reviewed and approved once by a
/// person other than its author, run by an agent's script with
/// arguments; its migrations need no approval of their own.
async fn demo_runbook(runner: &Runner) -> Result<(), String> {
    let store = &runner.gateway.state().runbooks;
    let now = runner.gateway.now_ms();
    eprintln!(
        "\n— A runbook, approved once: examples/runbooks/drain_node.toml, added by one person \
         (`airlock runbook add`), approved by another (`airlock runbook approve`) —\n"
    );
    let (stored, _) = store
        .add("drain_node", DEMO_RUNBOOK, "the demo, as author", now)
        .map_err(|e| e.to_string())?;
    let version = airlock_runbooks::runbook::short(&stored.version).to_string();
    if stored.approved_by.is_none() {
        store
            .approve("drain_node", &stored.version, "the demo, as operator", now)
            .map_err(|e| e.to_string())?;
    }
    eprintln!("drain_node version {version}: approved by the demo, as operator\n");
    eprintln!("Run by alice's script, which migrates every running guest on pve2 to pve3 without asking per call:\n\n{DEMO_RUNBOOK_SCRIPT}");
    let (ok, _) = runner
        .run(
            DEMO_RUNBOOK_SCRIPT,
            "alice",
            &PlanArg::Run,
            Output::Stderr,
            OnWait::Fail,
        )
        .await?;
    if !ok {
        return Err("the demo's runbook did not run".into());
    }
    Ok(())
}

fn fail(message: &str) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(2)
}

fn read_script(path: &PathBuf) -> Result<String, String> {
    if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| format!("reading the script from stdin: {e}"))?;
        return Ok(s);
    }
    std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))
}
