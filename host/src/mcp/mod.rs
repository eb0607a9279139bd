//! Airlock as an MCP server: three tools (`search`, `get_schema`,
//! `execute`) over the catalog, the sandbox and the gateway, for one
//! identity per session; a few read-only resources, one prompt, and the
//! session's log.

mod client_tools;
mod input_required;
mod lists;
mod logging;
mod prompts;
mod question;
pub(crate) mod render;
pub mod resources;
mod tasks;
pub mod tools;
mod traces;

use std::sync::{atomic::AtomicU32, Arc};

use airlock_catalog::{search::Query, Tier};
use airlock_gateway::{Caller, Gateway};
use airlock_sandbox::{ExecError, Journal, Limits, Sandbox};
#[allow(deprecated)]
use rmcp::model::SetLevelRequestParams;
use rmcp::{
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams,
        CompleteResult, GetPromptRequestParams, GetPromptResponse, Implementation,
        ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
        PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
        ServerCapabilities, ServerConfig,
    },
    service::RequestContext,
    ErrorData as McpError, RoleServer, ServerHandler,
};
use serde_json::{json, Value};

use crate::execution::{Ended, Execution, Finished};
use client_tools::ClientTools;
use logging::{Level, SessionLog};

/// What every session shares.
pub struct Shared {
    pub gateway: Arc<Gateway>,
    pub sandbox: Sandbox,
    pub limits: Limits,
    /// Prepended to the three tool names (e.g. `proxmox_code_`).
    pub prefix: String,
    /// A QuoxCORE collector, whose resources and prompts are offered too.
    pub collector: Option<Arc<airlock_collector::Collector>>,
    /// Every running execution holds a token of this tracker, so a server
    /// that stops (stdin closed, SIGTERM) can wait for the cancelled ones
    /// to write their audit end line before the process exits.
    pub executions: tokio_util::task::TaskTracker,
    /// Recent executions' call traces, for `airlock://executions/{id}`.
    pub traces: traces::Traces,
    /// Executions parked in the deployment's state, waiting for
    /// decisions.
    pub durable: Arc<crate::durable::Durable>,
    /// Cancelled when the server starts to stop: a durable execution's
    /// answer is due at once (a read in flight is dropped, made again on
    /// the follow-up; a change in flight is waited for), so it parks
    /// instead of being ended.
    pub stopping: tokio_util::sync::CancellationToken,
    /// Cancelled when the stopping server closes its sessions, its grace
    /// over: an execution cancelled from then on was stopped by the
    /// server, not by its client, and a durable one is let go of to be
    /// resumed (see [`crate::durable::Durable::let_go`]).
    pub closing: tokio_util::sync::CancellationToken,
    /// `execute` as a task: the ones ended here, the ones a poll runs.
    pub tasks: tasks::Tasks,
}

impl Shared {
    /// Waits, at most `bound`, for the executions still running to end
    /// and record how they ended. Called once the transport has stopped
    /// and cancelled them; returns how many were still running after
    /// `bound` (0 when every one ended).
    pub async fn executions_ended(&self, bound: std::time::Duration) -> usize {
        self.executions.close();
        let left = match tokio::time::timeout(bound, self.executions.wait()).await {
            Ok(()) => 0,
            Err(_) => self.executions.len(),
        };
        // Parked executions live in the state, not in this process: they
        // wait on for the next start, or another replica.
        left
    }

    /// Ends the parked executions past their lifetime, in the log.
    pub fn end_expired(&self) {
        self.end_parked(self.durable.expired(), "LifetimeExceeded");
    }

    /// Writes the end lines of parked executions taken out of waiting.
    pub fn end_parked(
        &self,
        ended: Vec<airlock_gateway::parked::ParkedInfo>,
        outcome: &'static str,
    ) {
        for p in ended {
            let id = &p.execution;
            let lived = crate::durable::since(p.born_ms);
            // Counted, not timed: its life is not a run.
            crate::metrics::global().execution(outcome, None, Default::default());
            if let Err(e) = self.gateway.execution_finished(id, outcome, p.calls, lived) {
                tracing::warn!(execution = %id, error = %e, "could not record the end of a parked execution");
            }
        }
    }
}

/// Who an HTTP request authenticated as (and the mode an OAuth token's
/// groups grant); put into the request's extensions by the HTTP
/// transport's key or token check.
#[derive(Clone, Debug)]
pub struct Identity(pub Caller);

/// One MCP session. On stdio it acts as the configured identity; over HTTP
/// each request acts as the identity its bearer key belongs to.
#[derive(Clone)]
pub struct AirlockServer {
    shared: Arc<Shared>,
    identity: String,
    log: SessionLog,
    lists: lists::Follower,
    activity: lists::Activity,
}

impl AirlockServer {
    pub fn new(shared: Arc<Shared>, identity: impl Into<String>) -> Self {
        Self {
            shared,
            identity: identity.into(),
            log: SessionLog::default(),
            lists: lists::Follower::default(),
            activity: lists::Activity::default(),
        }
    }

    fn caller(&self, context: &RequestContext<RoleServer>) -> Caller {
        context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Identity>())
            .map(|i| i.0.clone())
            .unwrap_or_else(|| Caller::new(self.identity.clone()))
    }

    fn args(request: &CallToolRequestParams) -> Value {
        Value::Object(request.arguments.clone().unwrap_or_default())
    }

    fn invalid(message: impl Into<String>) -> CallToolResult {
        let message = message.into();
        CallToolResult::structured_error(
            serde_json::json!({"error": {"kind": "InvalidRequest", "message": message}}),
        )
    }

    fn search(&self, args: &Value) -> CallToolResult {
        let Some(text) = args.get("query").and_then(Value::as_str) else {
            return Self::invalid("`query` (a string, e.g. \"stop vm\") is required");
        };
        let tiers: Vec<Tier> = args
            .get("tier")
            .and_then(Value::as_array)
            .map(|t| t.iter().filter_map(|x| x.as_str()?.parse().ok()).collect())
            .unwrap_or_default();
        let limit = args
            .get("limit")
            .and_then(Value::as_u64)
            .map(|l| l as usize);
        let mut results = self.shared.gateway.catalog().search(&Query {
            text: text.into(),
            tiers: tiers.clone(),
            backend: None,
            limit,
        });
        let runbooks = crate::runbooks::search(&self.shared.gateway, text, &tiers, &mut results);
        // A backend that has not offered its tools yet is not "no match".
        for (_, why) in self.shared.gateway.unavailable_backends() {
            results.add_hint(format!("Not searched: {why}."));
        }
        render::search(&results, &runbooks)
    }

    fn get_schema(&self, args: &Value) -> CallToolResult {
        let names: Vec<String> = args
            .get("names")
            .and_then(Value::as_array)
            .map(|n| {
                n.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .take(20)
                    .collect()
            })
            .unwrap_or_default();
        if names.is_empty() {
            return Self::invalid("`names` (an array of tool names from search) is required");
        }
        render::schemas(&self.shared.gateway.catalog().schemas(&names))
    }

    async fn execute(&self, args: &Value, context: &RequestContext<RoleServer>) -> CallToolResult {
        if let Some(follow) = args.get("execution") {
            return self
                .follow(follow, args, crate::durable::FOLLOW_WAIT, context)
                .await;
        }
        let script = match args.get("script") {
            Some(Value::String(script)) => script.as_str(),
            None | Some(Value::Null) => {
                return Self::invalid("`script` (JavaScript source) is required, or `execution` (the id of a waiting execution) to follow one")
            }
            // Given, as the wrong type (a client that parses `script=[1,2]`
            // as JSON): said so, not "required".
            Some(other) => {
                return Self::invalid(format!(
                    "`script` must be a string of JavaScript or TypeScript source, and this one is {}: send the program's text as one JSON string",
                    airlock_catalog::validate::kind_of(other)
                ))
            }
        };
        let full = match Self::full_trace(args) {
            Ok(full) => full,
            Err(e) => return Self::invalid(e),
        };
        let plan_arg = match crate::plans::PlanArg::from_args(args) {
            Ok(p) => p,
            Err(e) => return Self::invalid(e),
        };
        let caller =
            match crate::plans::prepare(&self.shared.gateway, self.caller(context), &plan_arg) {
                Ok(c) => c,
                // Nothing ran: the plan is not the caller's, not approved,
                // used, expired or altered.
                Err(e @ airlock_gateway::plan::PlanError::Storage(_)) => {
                    crate::metrics::global().state_refusal("approvals");
                    return CallToolResult::structured_error(crate::execution::state_unavailable(
                        "approvals",
                        &format!("{}: {e}", e.code()),
                    ));
                }
                Err(e) => return Self::invalid(format!("{}: {e}", e.code())),
            };
        if let Some(stopping) = self.stopping() {
            return stopping;
        }
        let _running = self.shared.executions.token();
        let identity = caller.identity.clone();
        let execution = match Execution::start(&self.shared.gateway, caller, script) {
            Ok(e) => e,
            Err(e) => return Self::not_started(&identity, e),
        };
        // Plans have their own way to wait for a person: one approval of
        // the whole plan. Reused instances cannot be replayed.
        let durable = self.shared.sandbox.config().mode == airlock_sandbox::Mode::Fresh
            && execution.caller().plan.is_none();
        let run = Run {
            script,
            journal: durable.then(Journal::new),
            born_ms: crate::durable::born_now(),
            orphan: false,
            holder: None,
            full,
            waited_for: Vec::new(),
            prompts: Default::default(),
            idle: 0,
            sends: Default::default(),
        };
        self.run(execution, run, context).await
    }

    /// `execute`, where a 2026-07-28 client that can ask its user is
    /// asked the approvals its execution waits for in an
    /// `InputRequiredResult`, and its answers (with the sealed state)
    /// decide them and resume the execution.
    async fn execute_asking(
        &self,
        request: &CallToolRequestParams,
        args: &Value,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResponse {
        let asker = input_required::stateless_asker(
            context.protocol_version(),
            context.client_capabilities(),
        );
        let modern = context
            .protocol_version()
            .is_some_and(|v| v >= rmcp::model::ProtocolVersion::V_2026_07_28);
        let answer = match request.request_state.as_deref() {
            Some(_) if !modern => Self::invalid(
                "`requestState` answers an InputRequiredResult, which only 2026-07-28 requests get; follow a waiting execution with execute({\"execution\": ID})",
            ),
            Some(sealed) => {
                self.answered(sealed, args, request.input_responses.as_ref(), context)
                    .await
            }
            None => self.execute(args, context).await,
        };
        if tasks::wanted(context) {
            let asks = asker && self.questions_for(&answer, context).is_some();
            let identity = self.caller(context).identity;
            let born = |id: &str| self.shared.durable.born_ms(id, &identity);
            if let Some(task) = tasks::created(&answer, asks, self.shared.limits.lifetime(), born) {
                return CallToolResponse::Task(task);
            }
        }
        if asker {
            if let Some(asked) = self.ask_instead(&answer, args, context) {
                return asked.into();
            }
        }
        answer.into()
    }

    /// The question a waiting answer's person may be put now.
    fn questions_for(
        &self,
        answer: &CallToolResult,
        context: &RequestContext<RoleServer>,
    ) -> Option<rmcp::model::InputRequests> {
        self.questions_for_execution(render::waiting_execution(answer)?, &self.caller(context))
    }

    /// The question `caller`'s waiting `execution` may put to its person
    /// now (one a round, as [`input_required::questions`] decides).
    fn questions_for_execution(
        &self,
        execution: &str,
        caller: &Caller,
    ) -> Option<rmcp::model::InputRequests> {
        let requests = self
            .shared
            .durable
            .waiting_requests(execution, &caller.identity)?;
        let prompts = self.shared.durable.prompts(execution, &caller.identity);
        input_required::questions(&self.shared.gateway, caller, &requests, prompts)
            .map(|(questions, _)| questions)
    }

    /// The questions for a waiting answer, when its person may decide.
    fn ask_instead(
        &self,
        answer: &CallToolResult,
        args: &Value,
        context: &RequestContext<RoleServer>,
    ) -> Option<rmcp::model::InputRequiredResult> {
        let execution = render::waiting_execution(answer)?;
        let s = answer.structured_content.as_ref()?;
        let requests: Vec<String> = s["waiting"]
            .as_array()?
            .iter()
            .filter_map(|w| w["request_id"].as_str().map(str::to_string))
            .collect();
        let prompts = self
            .shared
            .durable
            .prompts(execution, &self.caller(context).identity);
        let asked = input_required::ask(
            &self.shared.gateway,
            &self.caller(context),
            execution,
            &requests,
            args,
            prompts,
        )?;
        self.shared
            .durable
            .prompted(execution, &self.caller(context).identity, 1, false);
        Some(asked)
    }

    /// A client's answers to the questions of an `InputRequiredResult`,
    /// with its sealed state: they decide the requests the execution
    /// still waits for, and the execution is followed.
    async fn answered(
        &self,
        sealed: &str,
        args: &Value,
        answers: Option<&rmcp::model::InputResponses>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let caller = self.caller(context);
        let gateway = &self.shared.gateway;
        let refused = |kind: &str, message: String| {
            CallToolResult::structured_error(json!({"error": {
                "kind": kind,
                "message": airlock_catalog::visible::visible(&message),
            }}))
        };
        let state = match input_required::open(gateway, &caller.identity, args, sealed) {
            Ok(s) => s,
            Err(e) => return refused("InvalidRequestState", e.to_string()),
        };
        let Some(still) = self
            .shared
            .durable
            .waiting_requests(&state.execution, &caller.identity)
        else {
            return refused(
                "InvalidRequestState",
                format!(
                    "execution {} no longer waits (it went on or ended); nothing was decided",
                    state.execution
                ),
            );
        };
        let prompts = self
            .shared
            .durable
            .prompts(&state.execution, &caller.identity);
        let input_required::Decided {
            decided,
            done_asking,
        } = input_required::decide(gateway, &caller, &state, &still, answers, prompts);
        self.shared
            .durable
            .prompted(&state.execution, &caller.identity, 0, done_asking);
        let follow = json!({"execution": state.execution});
        if decided == 0 && still.iter().any(|r| state.requests.contains(r)) {
            // Nothing readable answered what was asked, and it still
            // waits for it: asked again (SEP-2322), bounded by the
            // questions an execution may put.
            return self
                .follow(
                    &follow["execution"],
                    &follow,
                    std::time::Duration::ZERO,
                    context,
                )
                .await;
        }
        if decided == 0 {
            return refused(
                "InvalidRequestState",
                format!("the requestState names no request execution {} still waits for, or none was answered; nothing was decided. Follow it with execute({{\"execution\": \"{}\"}})", state.execution, state.execution),
            );
        }
        self.follow(
            &follow["execution"],
            &follow,
            crate::durable::FOLLOW_WAIT,
            context,
        )
        .await
    }

    fn full_trace(args: &Value) -> Result<bool, &'static str> {
        match args.get("trace") {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(
                "`trace` must be true or false: true adds every call and the stats to the result",
            ),
        }
    }

    /// Stopping: what is running finishes, nothing new starts or resumes.
    fn stopping(&self) -> Option<CallToolResult> {
        self.shared.executions.is_closed().then(|| {
            CallToolResult::structured_error(json!({"error": {
                "kind": "ServerStopping",
                "message": "this server is stopping and starts no new executions; run the script again in a new session (which lands on a server that is up)",
            }}))
        })
    }

    /// The answer when an execution could not start or resume.
    fn not_started(identity: &str, e: crate::execution::NotStarted) -> CallToolResult {
        match e {
            crate::execution::NotStarted::Refused(
                e @ airlock_gateway::gateway::StartError::Busy { limit, .. },
            ) => {
                crate::metrics::global().admission(
                    identity,
                    std::time::Duration::ZERO,
                    Some("rate.executions_per_identity"),
                );
                CallToolResult::structured_error(json!({"error": {
                    "kind": "LimitExceeded",
                    "limit": "rate.executions_per_identity",
                    "value": limit,
                    "used": limit as u64 + 1,
                    "message": e.to_string(),
                }}))
            }
            e => match e.unavailable_store() {
                Some(store) => {
                    tracing::debug!(error = %e, "execution refused: a state store cannot be reached");
                    crate::metrics::global().state_refusal(store);
                    // Where the store is and what its server said are the
                    // operator's (the log has them), not the agent's.
                    CallToolResult::structured_error(crate::execution::state_unavailable(
                        store,
                        &format!("the {store} store cannot be reached, so nothing runs"),
                    ))
                }
                None => Self::invalid(e.to_string()),
            },
        }
    }

    /// `execute({"execution": ID})`: goes on with a parked execution of
    /// the caller's once a decision it waits for is in (waiting at most
    /// `wait` for one), by replay; or says it still waits.
    async fn follow(
        &self,
        id: &Value,
        args: &Value,
        wait: std::time::Duration,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let Some(id) = id.as_str() else {
            return Self::invalid(
                "`execution` must be the id (a string) a waiting execution's answer gave",
            );
        };
        if args.get("script").is_some() || args.get("mode").is_some() || args.get("plan").is_some()
        {
            return Self::invalid("give `execution` alone to follow a waiting execution (its script is kept), or `script` to start a new one");
        }
        let full = match Self::full_trace(args) {
            Ok(full) => full,
            Err(e) => return Self::invalid(e),
        };
        let caller = self.caller(context);
        let (parked, orphan, holder) = match self.shared.durable.take(id, &caller.identity) {
            Ok(t) => (t.parked, t.orphan, t.holder),
            Err(e @ crate::durable::FollowError::Tampered(_)) => {
                // Its row is gone; the chain says how it ended.
                crate::metrics::global().execution("JournalTampered", None, Default::default());
                if let Err(w) = self.shared.gateway.execution_finished(
                    id,
                    "JournalTampered",
                    0,
                    Default::default(),
                ) {
                    tracing::warn!(execution = %id, error = %w, "could not record the end of a tampered execution");
                }
                return CallToolResult::structured_error(json!({"error": {
                    "kind": "JournalTampered",
                    "execution": airlock_catalog::visible::visible(id),
                    "message": airlock_catalog::visible::visible(&e.to_string()),
                }}));
            }
            Err(e @ crate::durable::FollowError::Expired(..)) => {
                return CallToolResult::structured_error(json!({"error": {
                    "kind": "LifetimeExceeded",
                    "execution": airlock_catalog::visible::visible(id),
                    "message": airlock_catalog::visible::visible(&e.to_string()),
                }}));
            }
            Err(e @ crate::durable::FollowError::Running(_)) => {
                return CallToolResult::structured_error(json!({"error": {
                    "kind": "ExecutionBusy",
                    "execution": airlock_catalog::visible::visible(id),
                    "message": airlock_catalog::visible::visible(&e.to_string()),
                }}));
            }
            Err(e @ crate::durable::FollowError::Unavailable(_)) => {
                crate::metrics::global().state_refusal("parked");
                return CallToolResult::structured_error(crate::execution::state_unavailable(
                    "parked",
                    &airlock_catalog::visible::visible(&e.to_string()),
                ));
            }
            Err(e) => {
                return CallToolResult::structured_error(json!({"error": {
                    "kind": "UnknownExecution",
                    "execution": airlock_catalog::visible::visible(id),
                    "message": airlock_catalog::visible::visible(&e.to_string()),
                }}))
            }
        };
        let requests = crate::durable::request_ids(&parked.waiting);
        // A call that waited only for this answer to be due goes on at
        // once; decisions are waited for a while.
        let later = parked
            .waiting
            .iter()
            .any(|w| w.details.get("request_id").is_none());
        let decided = later
            || tokio::select! {
                d = crate::durable::decision_in(&self.shared.gateway, &requests, wait) => d,
                _ = context.ct.cancelled() => false,
            };
        if !decided {
            self.shared.durable.put_back(id, &holder);
            return render::waiting(id, &parked.waiting, &parked.identity, None);
        }
        if let Some(stopping) = self.stopping() {
            self.shared.durable.put_back(id, &holder);
            return stopping;
        }
        let _running = self.shared.executions.token();
        let identity = caller.identity.clone();
        let execution = match Execution::resume(&self.shared.gateway, caller, id) {
            Ok(e) => e,
            Err(e) => {
                self.shared.durable.put_back(id, &holder);
                return Self::not_started(&identity, e);
            }
        };
        let run = Run {
            script: &parked.script,
            journal: Some(parked.journal),
            born_ms: parked.born_ms,
            orphan,
            holder: Some(holder),
            full,
            waited_for: parked.waiting,
            prompts: parked.prompts,
            idle: parked.idle,
            sends: parked.sends,
        };
        self.run(execution, run, context).await
    }

    /// Runs (or resumes) one execution with the client's tools, and
    /// answers: its outcome, or, when it parked, what it waits for.
    async fn run(
        &self,
        execution: Execution,
        run: Run<'_>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let Run {
            script,
            journal,
            born_ms,
            orphan,
            holder,
            full,
            waited_for,
            prompts,
            idle,
            sends,
        } = run;
        let resumed = journal.as_ref().is_some_and(|j| !j.entries.is_empty());
        let answers_before = journal.as_ref().map_or(0, crate::durable::answers);
        let identity = execution.caller().identity.clone();
        let peer = context.peer.clone();
        // A 2026-07-28 request cannot carry a question of the server's
        // (it gets an InputRequiredResult instead, see `execute_asking`).
        let stateless = context
            .protocol_version()
            .is_some_and(|v| v >= rmcp::model::ProtocolVersion::V_2026_07_28);
        let can_ask = !stateless
            && peer
                .peer_info()
                .is_some_and(|info| info.capabilities.elicitation.is_some());
        let log = self.log.for_request(stateless, context.meta.log_level());
        // An execution an older version parked says nothing of what a
        // dead holder sent past its last wait: the old rules hold.
        let orphan = orphan && !sends.recorded;
        let checkpoints = journal.as_ref().map(|_| {
            let base = crate::durable::Parked {
                identity: identity.clone(),
                script: script.to_string(),
                journal: Journal::new(),
                waiting: Vec::new(),
                calls: 0,
                born_ms,
                prompts,
                idle,
                sends,
            };
            Arc::new(crate::checkpoints::Checkpoints::new(
                self.shared.durable.clone(),
                execution.id(),
                base,
                holder.clone(),
            ))
        });
        let tools = ClientTools {
            gateway: self.shared.gateway.clone(),
            caller: execution.caller().clone(),
            peer: peer.clone(),
            can_ask,
            progress: context.meta.get_progress_token(),
            log: log.clone(),
            done: AtomicU32::new(0),
            asking: client_tools::Asking::after(prompts),
            runbooks: crate::runbooks::Runner::new(&self.shared.sandbox, &self.shared.limits),
            durable: journal.is_some(),
            answer_within: journal
                .is_some()
                .then(|| self.shared.limits.answer_within()),
            answer_by: Default::default(),
            orphaned: orphan.then(|| {
                waited_for
                    .iter()
                    .filter_map(|w| {
                        Some((w.call, w.details.get("request_id")?.as_str()?.to_string()))
                    })
                    .collect()
            }),
            checkpoints,
            stopping: self.shared.stopping.clone(),
        };
        let (sandbox, limits) = (&self.shared.sandbox, &self.shared.limits);
        let mut journal = journal;
        // A `notifications/cancelled` drops the execution: the script
        // stops, its tool calls are cancelled, its slot is freed.
        let outcome = tokio::select! {
            o = async {
                let _in_sandbox = crate::metrics::global().in_sandbox();
                match journal.as_mut() {
                    Some(j) => sandbox.execute_journaled(script, limits, &tools, j).await,
                    None => sandbox.execute(script, limits, &tools).await,
                }
            } => Some(o),
            _ = context.ct.cancelled() => None,
        };
        let mut outcome = outcome;
        // The lease its records were written under (a new execution's
        // first record added its row), and what it sent.
        let (holder, mut sends) = match &tools.checkpoints {
            Some(c) => c.finish(),
            None => (holder, Default::default()),
        };
        if let (Some(o), Some(journal)) = (outcome.as_mut(), journal) {
            // A resumed execution the sandbox did not admit (busy): nothing
            // of it ran, so it waits on, to be followed again shortly.
            if let (true, Err(ExecError::LimitExceeded { limit, .. })) = (resumed, &o.result) {
                if limit.is_admission() {
                    let id = execution.id().to_string();
                    execution.park(&crate::durable::request_ids(&waited_for), o);
                    if let Some(holder) = &holder {
                        self.shared.durable.put_back(&id, holder);
                    }
                    let kept = traces::Traces::would_keep(o);
                    return render::outcome(o, &id, full, kept);
                }
            }
            // Parked again without a single new answer: a read still
            // running each time. Past the bound it ends, named.
            let idle = match crate::durable::answers(&journal) == answers_before && resumed {
                true => idle + 1,
                false => 0,
            };
            if let (Err(ExecError::Parked { waiting }), true) =
                (&o.result, idle > crate::durable::MAX_IDLE_PARKS)
            {
                let tool = waiting.first().map(|w| w.tool.clone()).unwrap_or_default();
                o.result = Err(ExecError::ToolError {
                    code: "stalled".into(),
                    message: format!(
                        "{tool} was still running each of the last {} times this execution's answer was due, and nothing else went on: it ends here. Look at the target directly (is the task stuck?), then run what is left",
                        crate::durable::MAX_IDLE_PARKS
                    ),
                    tool,
                    details: Value::Null,
                });
            }
            if let Err(ExecError::Parked { waiting }) = &o.result {
                sends.settle(&journal);
                let parked = crate::durable::Parked {
                    identity: identity.clone(),
                    script: script.to_string(),
                    journal,
                    waiting: waiting.clone(),
                    calls: o.stats.tool_calls,
                    born_ms,
                    // Began as `prompts` (`Asking::after`), with this
                    // run's questions added.
                    prompts: tools.asking.kept(),
                    idle,
                    sends,
                };
                let id = execution.id().to_string();
                let requests = crate::durable::request_ids(waiting);
                let mut parked_now = self.shared.durable.park(&id, &parked, holder.as_deref());
                // Its only record may never have landed: then there is no
                // row to replace, and it is added.
                if matches!(parked_now, Err(crate::durable::ParkError::LeaseLost))
                    && tools
                        .checkpoints
                        .as_ref()
                        .is_some_and(|c| c.row_uncertain())
                {
                    parked_now = self.shared.durable.park(&id, &parked, None);
                }
                match parked_now {
                    Ok(()) => {
                        // Logged as parked (its place given back) before
                        // its identity may follow it.
                        execution.park(&requests, o);
                        self.shared.durable.ready(&id);
                        let data = json!({
                            "message": format!("execution {id} as {identity}: waiting for {}", crate::durable::waits_for(waiting)),
                            "execution": id,
                            "identity": identity,
                            "outcome": "Parked",
                            "waiting": requests,
                        });
                        log.send(&peer, Level::Notice, data).await;
                        return render::waiting(&id, waiting, &identity, Some((o, full)));
                    }
                    // It cannot wait here: it ends as it did before
                    // executions could wait, asking for a run again.
                    Err(e) => {
                        o.result = Err(render::not_waiting(&parked.waiting, &e));
                    }
                }
            }
        }
        if let Some(holder) = &holder {
            // The server stopped under it (its shutdown grace ran out while
            // the script computed, with no call to park at): nothing more
            // of it runs here, and its last record is what it did. The
            // next follow-up, on another replica or after the restart,
            // resumes it from there at once.
            if outcome.is_none() && self.shared.closing.is_cancelled() {
                self.shared.durable.let_go(execution.id(), holder);
                execution.let_go(tools.done.load(std::sync::atomic::Ordering::SeqCst));
                return Self::invalid("this server stopped while the execution ran; follow it (execute with `execution`) on another server, or on this one once it is back, and it goes on from its last change");
            }
            self.shared.durable.ended(execution.id(), holder);
        }
        let succeeded = outcome.as_ref().is_some_and(|o| o.result.is_ok());
        let mut plan = crate::plans::conclude(&self.shared.gateway, execution.caller(), succeeded);
        let asker = execution.caller().clone();
        let Finished {
            id: execution,
            kind,
            calls,
            took,
        } = execution.finish(match &outcome {
            Some(o) => Ended::Ran(o),
            None => Ended::Cancelled {
                calls: tools.done.load(std::sync::atomic::Ordering::SeqCst),
            },
        });
        let level = if kind == "ok" {
            Level::Info
        } else {
            Level::Warning
        };
        let data = json!({
            "message": format!("execution {execution} as {identity}: {kind}, {calls} tool calls, {} ms", took.as_millis()),
            "execution": execution,
            "identity": identity,
            "outcome": kind,
            "tool_calls": calls,
            "ms": took.as_millis() as u64,
        });
        log.send(&peer, level, data).await;
        if let Some(report) = plan.as_mut() {
            client_tools::decide_plan(&self.shared.gateway, &asker, &peer, can_ask, report).await;
        }
        match outcome {
            Some(o) => {
                let kept = traces::Traces::would_keep(&o);
                let mut answer = render::outcome(&o, &execution, full, kept);
                if let Some(report) = &plan {
                    render::with_plan(&mut answer, report);
                }
                self.shared.traces.keep(&execution, &identity, o);
                answer
            }
            None => CallToolResult::structured_error(json!({"error": {
                "kind": "Cancelled",
                "message": "the execution was cancelled; what it changed before stays done (its calls so far are in the audit log)",
            }})),
        }
    }
}

/// One execution to run: a new one, or a parked one going on.
struct Run<'a> {
    script: &'a str,
    /// Set for a durable execution: what it did so far.
    journal: Option<Journal>,
    /// When it first started (ms since the epoch).
    born_ms: i64,
    /// It was taken from a process that died resuming it.
    orphan: bool,
    /// The lease of the take that resumes it.
    holder: Option<String>,
    full: bool,
    /// What a resumed execution waited for.
    waited_for: Vec<airlock_sandbox::Waiting>,
    /// The questions its person was put so far (2026-07-28 path).
    prompts: crate::durable::Prompts,
    /// What it sent and was answered, as its row said.
    sends: crate::durable::Sends,
    /// Parks in a row without a new answer.
    idle: u32,
}

/// The longest resource URI an error gives back as asked.
const MAX_ECHOED_URI: usize = 2048;

impl ServerHandler for AirlockServer {
    #[allow(deprecated)] // enable_logging: see logging.rs
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .enable_prompts()
            .enable_completions()
            .enable_logging()
            .build();
        // `execute` as a task, for clients that declare the extension.
        capabilities
            .extensions
            .get_or_insert_with(Default::default)
            .insert(
                rmcp::model::TASKS_EXTENSION_ID.to_string(),
                Default::default(),
            );
        // Only a collector's resources and prompts ever change.
        if self.shared.collector.is_some() {
            if let Some(r) = capabilities.resources.as_mut() {
                r.list_changed = Some(true);
            }
            if let Some(p) = capabilities.prompts.as_mut() {
                p.list_changed = Some(true);
            }
        }
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("airlock", env!("CARGO_PKG_VERSION")))
            .with_instructions(format!(
                "Infrastructure tools as code: use {p}search to find tools, {p}get_schema for their exact signatures, \
                 then {p}execute one JavaScript program that calls them (tools.NAME(args)) and returns only what you need.",
                p = self.shared.prefix
            ))
    }

    /// As rmcp answers it, and one info line per session with the
    /// protocol revision it speaks (operators asked which clients speak
    /// what; before, only rmcp's debug logging said).
    async fn initialize(
        &self,
        request: rmcp::model::InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::InitializeResult, McpError> {
        context.peer.set_peer_info(request.clone());
        let answer = self.negotiate_initialize(&request);
        if let Ok(result) = &answer {
            tracing::info!(
                protocol = %result.protocol_version,
                asked = %request.protocol_version,
                client = %airlock_catalog::visible::visible(&request.client_info.name),
                client_version = %airlock_catalog::visible::visible(&request.client_info.version),
                "an MCP session started"
            );
        }
        answer
    }

    async fn on_initialized(&self, context: rmcp::service::NotificationContext<RoleServer>) {
        if let Some(collector) = &self.shared.collector {
            let http = context
                .extensions
                .get::<axum::http::request::Parts>()
                .is_some();
            self.activity.touch();
            self.lists.start(
                collector,
                context.peer,
                self.activity.clone(),
                http.then_some(lists::HTTP_IDLE),
            );
        }
    }

    async fn ping(&self, _context: RequestContext<RoleServer>) -> Result<(), McpError> {
        self.activity.touch();
        Ok(())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        self.activity.touch();
        Ok(ListToolsResult::with_all_items(tools::list(
            &self.shared.prefix,
            &self.shared.limits,
        )))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.activity.touch();
        stateless_client_seen(&context);
        let args = Self::args(&request);
        let name = request
            .name
            .strip_prefix(self.shared.prefix.as_str())
            .unwrap_or(&request.name);
        let result = match name {
            tools::SEARCH => self.search(&args),
            tools::GET_SCHEMA => self.get_schema(&args),
            tools::EXECUTE => return Ok(self.execute_asking(&request, &args, &context).await),
            other => {
                return Err(McpError::invalid_params(
                    format!(
                    "no tool `{other}`; this server has {p}search, {p}get_schema and {p}execute",
                    p = self.shared.prefix
                ),
                    None,
                ))
            }
        };
        Ok(result.into())
    }

    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, McpError> {
        self.activity.touch();
        self.task_get(&request.task_id, &context)
            .await
            .map(rmcp::model::GetTaskResult::new)
    }

    async fn update_task(
        &self,
        request: rmcp::model::UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.activity.touch();
        self.task_update(&request.task_id, &request.input_responses, &context)
            .await
    }

    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.activity.touch();
        self.task_cancel(&request.task_id, &context).await
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        self.activity.touch();
        Ok(ListResourcesResult::with_all_items(resources::list(
            &self.shared,
        )))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        self.activity.touch();
        Ok(ListResourceTemplatesResult::with_all_items(
            resources::templates(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        self.activity.touch();
        let caller = self.caller(&context);
        resources::read(&self.shared, &caller, &request.uri)
            .await
            .map(Into::into)
            .map_err(|e| match e {
                resources::ResourceError::Unavailable => {
                    McpError::internal_error(e.to_string(), None)
                }
                // The URI asked for, as 2026-07-28 says (SEP-2164), when
                // it is of a length a URI has.
                e => McpError::resource_not_found(
                    e.to_string(),
                    (request.uri.len() <= MAX_ECHOED_URI).then(|| json!({"uri": request.uri})),
                ),
            })
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        self.activity.touch();
        Ok(ListPromptsResult::with_all_items(prompts::list(
            self.shared.collector.as_deref(),
            &self.shared.gateway,
        )))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        self.activity.touch();
        prompts::get(
            &request.name,
            request.arguments.as_ref(),
            &self.shared.prefix,
            self.shared.collector.as_deref(),
            &self.shared.gateway,
        )
        .map(Into::into)
        .map_err(|e| McpError::invalid_params(e.to_string(), None))
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        self.activity.touch();
        let completion = match request.r#ref.as_resource_uri() {
            Some(resources::TOOL_TEMPLATE) if request.argument.name == "name" => {
                resources::complete_tool_name(&self.shared, &request.argument.value)
            }
            _ => Default::default(),
        };
        Ok(CompleteResult::new(completion))
    }

    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.activity.touch();
        self.log.set(request.level);
        Ok(())
    }
}

/// One info line for each client that speaks 2026-07-28 or later, the
/// first time it calls a tool here: such a client has no session (and
/// may not even ask `server/discover`), so this is where an operator
/// learns which clients speak what. At most [`CLIENTS_NOTED`] are
/// remembered per process; past that, none is logged.
fn stateless_client_seen(context: &RequestContext<RoleServer>) {
    const CLIENTS_NOTED: usize = 256;
    static SEEN: std::sync::OnceLock<
        std::sync::Mutex<std::collections::HashSet<(String, String, String)>>,
    > = std::sync::OnceLock::new();
    let Some(version) = context
        .protocol_version()
        .filter(|v| *v >= rmcp::model::ProtocolVersion::V_2026_07_28)
    else {
        return;
    };
    let client = context.client_info();
    let (name, client_version) = client
        .map(|c| {
            (
                airlock_catalog::visible::visible(&c.name),
                airlock_catalog::visible::visible(&c.version),
            )
        })
        .unwrap_or_default();
    let key = (version.to_string(), name, client_version);
    let mut seen = SEEN
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if seen.len() < CLIENTS_NOTED && seen.insert(key.clone()) {
        tracing::info!(
            protocol = %key.0,
            client = %key.1,
            client_version = %key.2,
            "an MCP client speaks a stateless revision (no session)"
        );
    }
}
