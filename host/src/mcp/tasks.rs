//! `execute` as a task: the 2026-07-28 tasks extension
//! (`io.modelcontextprotocol/tasks`). A request whose client declared the
//! extension gets, instead of a waiting answer, a task whose id is the
//! execution's: `tasks/get` polls it (and goes on with it once what it
//! waits for is in, by replay, on whichever replica the poll reaches),
//! `tasks/update` carries the person's answers to the approvals it asks
//! (`input_required`), and `tasks/cancel` ends it. An execution that
//! answers within its first request needs no task and gets none.
//!
//! A task lives where its execution lives: a waiting one in the
//! deployment's state, bound to the identity that ran it (another
//! identity's task id is unknown to it, like an id that never existed).
//! What an ended task answered is kept a while on the server that ended
//! it ([`KEPT_FOR`], [`KEPT_PER_IDENTITY`]), so a poll that lost its
//! answer can ask again there; everywhere else its end is in the audit
//! chain.

use std::{
    collections::VecDeque,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use airlock_catalog::visible::visible;
use rmcp::model::{
    CallToolResult, CreateTaskResult, DetailedTask, InputRequests, JsonObject, ProtocolVersion,
    Task, TaskPayload, TaskStatus,
};
use rmcp::{service::RequestContext, ErrorData as McpError, RoleServer};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// How often a client should poll, at the least: a poll that finds the
/// execution's decision in runs it (up to `answer_within_ms`).
pub const POLL_INTERVAL_MS: u64 = 1_000;
/// How long an ended task's answer is kept on the server that ended it.
pub const KEPT_FOR: Duration = Duration::from_secs(10 * 60);
/// Ended tasks kept per identity, and in all.
pub const KEPT_PER_IDENTITY: usize = 16;
pub const KEPT_TOTAL: usize = 256;
/// Longest task answer kept, in bytes of its JSON (kept as that text); a
/// longer one is answered once, by the poll that ended it.
pub const KEPT_BYTES: usize = 1 << 20;
/// Bytes of kept answers per identity, and in all.
pub const KEPT_BYTES_PER_IDENTITY: usize = 4 << 20;
pub const KEPT_BYTES_TOTAL: usize = 32 << 20;

/// Whether this request asks for tasks: it speaks 2026-07-28 or later and
/// its client declared the extension.
pub fn wanted(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28)
        && context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks())
}

/// An RFC 3339 time from ms since the epoch.
fn at(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// What a waiting answer says it waits for, in one line.
fn waits_for(answer: &Value) -> String {
    let parts: Vec<String> = answer["waiting"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| {
            let tool = visible(w["tool"].as_str().unwrap_or("?"));
            match w["request_id"].as_str() {
                // Who decides, and how: the task goes on by itself once
                // they have.
                Some(id) => format!(
                    "{tool}: request {} — {}; this task goes on once it is decided",
                    visible(id),
                    visible(w["how"].as_str().unwrap_or(""))
                ),
                // A read still running when the answer was due (the
                // execute path's advice is to follow the execution; a
                // task's client only polls).
                None => format!(
                    "{tool}: still running; it is made again and the task goes on at the next tasks/get"
                ),
            }
        })
        .collect();
    format!("waiting for {}", parts.join("; "))
}

/// The task a waiting answer becomes (`None`: the answer is not a
/// waiting one, and is given as it is).
/// `born_ms`: when the execution started (`None`: now).
pub fn created(
    answer: &CallToolResult,
    asks: bool,
    ttl: Duration,
    born_ms: impl FnOnce(&str) -> Option<i64>,
) -> Option<CreateTaskResult> {
    let id = super::render::waiting_execution(answer)?;
    let s = answer.structured_content.as_ref()?;
    let born = at(born_ms(id).unwrap_or_else(now_ms));
    let now = at(now_ms());
    let status = if asks {
        TaskStatus::InputRequired
    } else {
        TaskStatus::Working
    };
    Some(CreateTaskResult::new(
        Task::new(id, status, born, now)
            .with_status_message(waits_for(s))
            .with_ttl_ms(ttl.as_millis() as u64)
            .with_poll_interval_ms(POLL_INTERVAL_MS),
    ))
}

/// The task `tasks/get` answers, from what following its execution gave.
pub enum Polled {
    /// It waits, or runs a step elsewhere.
    Working(String),
    /// It waits for approvals its person may give: the questions.
    Asking(String, InputRequests),
    /// It ended: the answer `execute` would have given.
    Ended(CallToolResult),
    /// It was cancelled while it ran here.
    Cancelled,
}

struct Kept {
    id: String,
    identity: String,
    born_ms: i64,
    at: Instant,
    ended_ms: i64,
    /// The answer's JSON text (`None`: cancelled): a parsed tree of a
    /// small-valued array costs ten times its text.
    answer: Option<Arc<str>>,
}

impl Kept {
    fn bytes(&self) -> usize {
        self.answer.as_ref().map_or(0, |a| a.len())
    }
}

/// One poll running a task here.
struct Poll {
    identity: String,
    id: String,
    n: u64,
    token: CancellationToken,
}

/// Tasks ended on this server (their answers, a while), and the ones a
/// poll runs here now (so `tasks/cancel` reaches them).
#[derive(Default)]
pub struct Tasks {
    kept: Mutex<VecDeque<Kept>>,
    running: Mutex<Vec<Poll>>,
    polls: AtomicU64,
}

/// A poll running a task here, unregistered (only itself) when it ends.
pub struct Running<'a> {
    tasks: &'a Tasks,
    n: u64,
    /// Cancelled by `tasks/cancel` of the task's identity, or when the
    /// server closes: not by the poll's own request, whose client may
    /// time out or go away without ending the task.
    pub token: CancellationToken,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.tasks
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|p| p.n != self.n);
    }
}

impl Tasks {
    /// Registers a poll of `identity`'s task `id`; `closing` is the
    /// server's closing token.
    pub fn run<'a>(&'a self, id: &str, identity: &str, closing: &CancellationToken) -> Running<'a> {
        let token = closing.child_token();
        let n = self.polls.fetch_add(1, Ordering::Relaxed);
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Poll {
                identity: identity.to_string(),
                id: id.to_string(),
                n,
                token: token.clone(),
            });
        Running {
            tasks: self,
            n,
            token,
        }
    }

    /// Cancels the polls of `identity`'s task `id` running here now;
    /// whether there was one.
    pub fn cancel_running(&self, id: &str, identity: &str) -> bool {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let mut any = false;
        for p in running
            .iter()
            .filter(|p| p.id == id && p.identity == identity)
        {
            p.token.cancel();
            any = true;
        }
        any
    }

    /// Keeps an ended task's answer (`None`: cancelled), within the
    /// counts and bytes above: an identity's oldest go first, then the
    /// oldest of all.
    pub fn keep(&self, id: &str, identity: &str, born_ms: i64, answer: Option<&CallToolResult>) {
        let answer: Option<Arc<str>> = match answer.map(serde_json::to_string) {
            Some(Ok(text)) if text.len() <= KEPT_BYTES => Some(text.into()),
            Some(_) => return,
            None => None,
        };
        let k = Kept {
            id: id.to_string(),
            identity: identity.to_string(),
            born_ms,
            at: Instant::now(),
            ended_ms: now_ms(),
            answer,
        };
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.retain(|k| k.at.elapsed() < KEPT_FOR && k.id != id);
        let theirs = |kept: &VecDeque<Kept>| {
            kept.iter()
                .filter(|k| k.identity == identity)
                .fold((0, 0), |(n, b), k| (n + 1, b + k.bytes()))
        };
        loop {
            let (n, b) = theirs(&kept);
            if n < KEPT_PER_IDENTITY && b + k.bytes() <= KEPT_BYTES_PER_IDENTITY {
                break;
            }
            match kept.iter().position(|k| k.identity == identity) {
                Some(oldest) => drop(kept.remove(oldest)),
                None => break,
            }
        }
        while kept.len() >= KEPT_TOTAL
            || kept.iter().map(Kept::bytes).sum::<usize>() + k.bytes() > KEPT_BYTES_TOTAL
        {
            if kept.pop_front().is_none() {
                break;
            }
        }
        kept.push_back(k);
    }

    /// An ended task of `identity`'s kept here.
    pub fn ended(&self, id: &str, identity: &str) -> Option<DetailedTask> {
        let (born_ms, ended_ms, answer) = {
            let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
            let k = kept
                .iter()
                .find(|k| k.id == id && k.identity == identity && k.at.elapsed() < KEPT_FOR)?;
            (k.born_ms, k.ended_ms, k.answer.clone())
        };
        let task = Task::new(id, TaskStatus::Working, at(born_ms), at(ended_ms));
        let payload = match answer {
            Some(text) => match serde_json::from_str::<JsonObject>(&text) {
                Ok(result) => TaskPayload::Completed { result },
                Err(_) => return None,
            },
            None => TaskPayload::Cancelled,
        };
        Some(DetailedTask::new(task, payload))
    }
}

/// The task as `tasks/get` shows it.
/// `ttl`: the execution's lifetime (`lifetime_ms`), past which it ends.
pub fn detailed(id: &str, born_ms: i64, ttl: Duration, polled: &Polled) -> DetailedTask {
    let task = Task::new(id, TaskStatus::Working, at(born_ms), at(now_ms()))
        .with_ttl_ms(ttl.as_millis() as u64)
        .with_poll_interval_ms(POLL_INTERVAL_MS);
    let (task, payload) = match polled {
        Polled::Working(message) => (task.with_status_message(message), TaskPayload::Working),
        Polled::Asking(message, questions) => (
            task.with_status_message(message),
            TaskPayload::InputRequired {
                input_requests: questions.clone(),
            },
        ),
        Polled::Ended(answer) => (
            task,
            match serde_json::to_value(answer) {
                Ok(Value::Object(result)) => TaskPayload::Completed { result },
                _ => TaskPayload::Failed {
                    error: JsonObject::from_iter([(
                        "message".to_string(),
                        Value::from("the execution's answer could not be written as JSON"),
                    )]),
                },
            },
        ),
        Polled::Cancelled => (task, TaskPayload::Cancelled),
    };
    DetailedTask::new(task, payload)
}

/// What following the execution gave, as a poll sees it. An answer that
/// is not a waiting one is its end only if the execution's row is gone
/// (`gone`): a refusal to resume it now (the sandbox or the identity's
/// executions full, this server stopping under it) leaves it waiting.
pub fn polled(answer: CallToolResult, gone: impl FnOnce() -> bool) -> Result<Polled, McpError> {
    let Some(s) = answer.structured_content.as_ref() else {
        return Ok(Polled::Ended(answer));
    };
    if s["status"] == "waiting" {
        return Ok(Polled::Working(waits_for(s)));
    }
    let kind = s["error"]["kind"].as_str().unwrap_or("");
    match kind {
        "UnknownExecution" => Err(unknown(s["error"]["execution"].as_str().unwrap_or(""))),
        // Passing: it runs a step elsewhere, or this server or the state
        // cannot go on with it right now. The next poll tries again.
        "ExecutionBusy" | "StateUnavailable" | "ServerStopping" => Ok(Polled::Working(
            s["error"]["message"].as_str().unwrap_or("").to_string(),
        )),
        _ if gone() => Ok(Polled::Ended(answer)),
        _ => Ok(Polled::Working(format!(
            "it was not resumed now ({}); it waits, and the next poll tries again",
            visible(s["error"]["message"].as_str().unwrap_or(kind))
        ))),
    }
}

/// A task id this identity has no task under.
pub fn unknown(id: &str) -> McpError {
    McpError::invalid_params(
        format!(
            "no task {} of yours: it never existed, or it ended more than {} minutes ago or on another server (its end is in the audit chain: `airlock executions wait ID`)",
            visible(id),
            KEPT_FOR.as_secs() / 60
        ),
        None,
    )
}

/// A task that already ended cannot be cancelled.
pub fn already_ended(id: &str) -> McpError {
    McpError::invalid_params(
        format!(
            "task {} already ended; there is nothing to cancel",
            visible(id)
        ),
        None,
    )
}

impl super::AirlockServer {
    /// `tasks/get`: the task as it stands; when what its execution waits
    /// for is in, the poll goes on with it (here, by replay) and answers
    /// how far it got.
    pub(super) async fn task_get(
        &self,
        id: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<DetailedTask, McpError> {
        let caller = self.caller(context);
        let identity = caller.identity.clone();
        if let Some(ended) = self.shared.tasks.ended(id, &identity) {
            return Ok(ended);
        }
        let born = self
            .shared
            .durable
            .born_ms(id, &identity)
            .unwrap_or_else(now_ms);
        let ttl = self.shared.limits.lifetime();
        let running = self.shared.tasks.run(id, &identity, &self.shared.closing);
        let mut poll = context.clone();
        poll.ct = running.token.clone();
        let follow = serde_json::json!({ "execution": id });
        let answer = self
            .follow(&follow["execution"], &follow, Duration::ZERO, &poll)
            .await;
        let cancel_asked = running.token.is_cancelled() && !self.shared.closing.is_cancelled();
        drop(running);
        let kind = answer
            .structured_content
            .as_ref()
            .map(|s| (s["status"].clone(), s["error"]["kind"].clone()));
        let ran_to_cancel = kind.as_ref().is_some_and(|(_, k)| k == "Cancelled");
        let still_waits = kind.as_ref().is_some_and(|(status, k)| {
            status == "waiting" || k == "ExecutionBusy" || k == "StateUnavailable"
        });
        if cancel_asked && (ran_to_cancel || still_waits) {
            // Cancelled while this poll held it: ended by the run, or, when
            // the poll had put it back (nothing decided, busy), ended now.
            if ran_to_cancel || self.end_waiting(id, &identity).await.is_ok() {
                self.shared.tasks.keep(id, &identity, born, None);
                return Ok(detailed(id, born, ttl, &Polled::Cancelled));
            }
        }
        let asker = super::input_required::stateless_asker(
            context.protocol_version(),
            context.client_capabilities(),
        );
        let gone = || self.gone(id, &identity);
        let polled = match polled(answer, gone)? {
            Polled::Working(message) if asker => match self.questions_for_execution(id, &caller) {
                Some(questions) => Polled::Asking(message, questions),
                None => Polled::Working(message),
            },
            other => other,
        };
        if let Polled::Ended(answer) = &polled {
            self.shared.tasks.keep(id, &identity, born, Some(answer));
        }
        Ok(detailed(id, born, ttl, &polled))
    }

    /// `tasks/update`: the person's answers to the question its task
    /// asks decide that request (as the client channel, four eyes kept);
    /// answers to anything not asked now are ignored. The next poll goes
    /// on with the execution.
    pub(super) async fn task_update(
        &self,
        id: &str,
        responses: &rmcp::model::InputResponses,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let caller = self.caller(context);
        let Some(still) = self.shared.durable.waiting_requests(id, &caller.identity) else {
            if self.shared.tasks.ended(id, &caller.identity).is_some() {
                return Ok(());
            }
            return Err(not_waiting(id));
        };
        let gateway = &self.shared.gateway;
        let prompts = self.shared.durable.prompts(id, &caller.identity);
        let Some((_, asked)) = super::input_required::questions(gateway, &caller, &still, prompts)
        else {
            return Ok(());
        };
        let state = super::input_required::State {
            execution: id.to_string(),
            requests: asked,
        };
        let decided = super::input_required::decide(
            gateway,
            &caller,
            &state,
            &still,
            Some(responses),
            prompts,
        );
        if decided.decided > 0 || decided.done_asking {
            self.shared
                .durable
                .prompted(id, &caller.identity, 1, decided.done_asking);
        }
        Ok(())
    }

    /// `tasks/cancel`: a task a poll runs here is cancelled with its
    /// calls in flight; a waiting one ends at once, its end line naming
    /// its identity as who cancelled it.
    pub(super) async fn task_cancel(
        &self,
        id: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let identity = self.caller(context).identity;
        if self.shared.tasks.cancel_running(id, &identity) {
            return Ok(());
        }
        if self.shared.tasks.ended(id, &identity).is_some() {
            return Err(already_ended(id));
        }
        match self.end_waiting(id, &identity).await {
            Ok(born_ms) => {
                self.shared.tasks.keep(id, &identity, born_ms, None);
                Ok(())
            }
            Err(None) => Err(not_waiting(id)),
            Err(Some(e)) => Err(e),
        }
    }

    /// Ends `identity`'s waiting execution `id` (its end line:
    /// `Cancelled`, `cancelled_by` the identity); when it started.
    /// `Err(None)`: no such execution of theirs waits (unknown, or a
    /// follow-up holds it now).
    async fn end_waiting(&self, id: &str, identity: &str) -> Result<i64, Option<McpError>> {
        if self.shared.durable.born_ms(id, identity).is_none() {
            return Err(None);
        }
        let state = self.shared.gateway.state();
        let (parked, audit, now) = (
            state.parked.clone(),
            state.audit.clone(),
            self.shared.gateway.now_ms(),
        );
        let (execution, by) = (id.to_string(), identity.to_string());
        let cancelled = tokio::task::spawn_blocking(move || {
            airlock_gateway::parked::cancel(parked.as_ref(), audit.as_ref(), &execution, &by, now)
        })
        .await;
        let unavailable = |why: String| {
            // The store's own words are the operator's (the log), not the
            // client's.
            tracing::warn!(task = %id, error = %why, "a task could not be cancelled");
            Some(McpError::internal_error(
                format!(
                    "task {} could not be cancelled now: the deployment's state cannot be reached; try again shortly",
                    visible(id)
                ),
                None,
            ))
        };
        match cancelled {
            Ok(Ok(gone)) => Ok(gone.born_ms),
            Ok(Err(airlock_gateway::parked::CancelError::NotWaiting(_))) => Err(None),
            // The row is gone (it never goes on); only its end line is
            // owed, and `airlock audit close` writes it.
            Ok(Err(e @ airlock_gateway::parked::CancelError::EndLine { .. })) => {
                tracing::warn!(task = %id, error = %e, "a cancelled task's end line is owed");
                Ok(now_ms())
            }
            Ok(Err(e)) => Err(unavailable(e.to_string())),
            Err(e) => Err(unavailable(e.to_string())),
        }
    }

    /// Whether `identity`'s execution `id` has no row any more (it
    /// ended). A store that cannot say counts as not gone: the task is
    /// never reported ended on a guess.
    fn gone(&self, id: &str, identity: &str) -> bool {
        self.shared
            .durable
            .list(identity)
            .is_ok_and(|rows| !rows.iter().any(|r| r.execution == id))
    }
}

/// A task that neither waits here nor ended here: unknown, or a poll on
/// another server runs it now.
fn not_waiting(id: &str) -> McpError {
    McpError::invalid_params(
        format!(
            "task {} of yours is not waiting: it never existed, it ended, or a poll on another server runs a step of it right now (then try again once that poll answers)",
            visible(id)
        ),
        None,
    )
}
