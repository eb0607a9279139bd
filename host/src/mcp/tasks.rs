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
    collections::{HashMap, VecDeque},
    sync::Mutex,
    time::{Duration, Instant},
};

use airlock_gateway::visible::visible;
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
/// Longest task answer kept, in bytes of its JSON; a longer one is
/// answered once, by the poll that ended it.
pub const KEPT_BYTES: usize = 1 << 20;

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
            let how = visible(w["how"].as_str().unwrap_or(""));
            match w["request_id"].as_str() {
                Some(id) => format!("{tool}: request {} — {how}", visible(id)),
                None => format!("{tool}: {how}"),
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
    let s = answer.structured_content.as_ref()?;
    if s["status"] != "waiting" {
        return None;
    }
    let id = s["execution"].as_str()?;
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
    /// `None`: cancelled.
    answer: Option<JsonObject>,
}

/// Tasks ended on this server (their answers, a while), and the ones a
/// poll runs here now (so `tasks/cancel` reaches them).
#[derive(Default)]
pub struct Tasks {
    kept: Mutex<VecDeque<Kept>>,
    running: Mutex<HashMap<String, (String, CancellationToken)>>,
}

/// A task a poll runs here, unregistered when the poll ends.
pub struct Running<'a> {
    tasks: &'a Tasks,
    id: String,
    pub token: CancellationToken,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.tasks
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
    }
}

impl Tasks {
    /// Registers a poll that runs `id` for `identity`, cancelled with the
    /// poll's request or by `tasks/cancel`.
    pub fn run<'a>(&'a self, id: &str, identity: &str, request: &CancellationToken) -> Running<'a> {
        let token = request.child_token();
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_string(), (identity.to_string(), token.clone()));
        Running {
            tasks: self,
            id: id.to_string(),
            token,
        }
    }

    /// Cancels `identity`'s task `id` if a poll runs it here now.
    pub fn cancel_running(&self, id: &str, identity: &str) -> bool {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        match running.get(id) {
            Some((who, token)) if who == identity => {
                token.cancel();
                true
            }
            _ => false,
        }
    }

    /// Keeps an ended task's answer (`None`: cancelled).
    pub fn keep(&self, id: &str, identity: &str, born_ms: i64, answer: Option<&CallToolResult>) {
        let answer = match answer.map(serde_json::to_value) {
            Some(Ok(Value::Object(o))) => Some(o),
            Some(_) => return,
            None => None,
        };
        if answer
            .as_ref()
            .is_some_and(|a| serde_json::to_vec(a).map_or(true, |b| b.len() > KEPT_BYTES))
        {
            return;
        }
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.retain(|k| k.at.elapsed() < KEPT_FOR && k.id != id);
        if kept.iter().filter(|k| k.identity == identity).count() >= KEPT_PER_IDENTITY {
            if let Some(oldest) = kept.iter().position(|k| k.identity == identity) {
                kept.remove(oldest);
            }
        }
        if kept.len() >= KEPT_TOTAL {
            kept.pop_front();
        }
        kept.push_back(Kept {
            id: id.to_string(),
            identity: identity.to_string(),
            born_ms,
            at: Instant::now(),
            ended_ms: now_ms(),
            answer,
        });
    }

    /// An ended task of `identity`'s kept here.
    pub fn ended(&self, id: &str, identity: &str) -> Option<DetailedTask> {
        let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let k = kept
            .iter()
            .find(|k| k.id == id && k.identity == identity && k.at.elapsed() < KEPT_FOR)?;
        let task = Task::new(id, TaskStatus::Working, at(k.born_ms), at(k.ended_ms));
        Some(DetailedTask::new(
            task,
            match &k.answer {
                Some(result) => TaskPayload::Completed {
                    result: result.clone(),
                },
                None => TaskPayload::Cancelled,
            },
        ))
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

/// What following the execution gave, as a poll sees it.
pub fn polled(answer: CallToolResult) -> Result<Polled, McpError> {
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
        _ => Ok(Polled::Ended(answer)),
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
        let running = self.shared.tasks.run(id, &identity, &context.ct);
        let mut poll = context.clone();
        poll.ct = running.token.clone();
        let follow = serde_json::json!({ "execution": id });
        let answer = self
            .follow(&follow["execution"], &follow, Duration::ZERO, &poll)
            .await;
        let cancelled = running.token.is_cancelled()
            && answer
                .structured_content
                .as_ref()
                .is_some_and(|s| s["error"]["kind"] == "Cancelled");
        drop(running);
        if cancelled {
            self.shared.tasks.keep(id, &identity, born, None);
            return Ok(detailed(id, born, ttl, &Polled::Cancelled));
        }
        let asker = super::input_required::stateless_asker(
            context.protocol_version(),
            context.client_capabilities(),
        );
        let polled = match polled(answer)? {
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
        let (decided, denied) =
            super::input_required::decide(gateway, &caller, &state, &still, Some(responses));
        if decided > 0 {
            self.shared
                .durable
                .prompted(id, &caller.identity, 1, denied);
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
        if self.shared.durable.born_ms(id, &identity).is_none() {
            return Err(not_waiting(id));
        }
        let state = self.shared.gateway.state();
        let (parked, audit, now) = (
            state.parked.clone(),
            state.audit.clone(),
            self.shared.gateway.now_ms(),
        );
        let (execution, by) = (id.to_string(), identity.clone());
        let cancelled = tokio::task::spawn_blocking(move || {
            airlock_gateway::parked::cancel(parked.as_ref(), audit.as_ref(), &execution, &by, now)
        })
        .await
        .map_err(|e| McpError::internal_error(format!("the cancel did not finish: {e}"), None))?;
        match cancelled {
            Ok(gone) => {
                self.shared.tasks.keep(id, &identity, gone.born_ms, None);
                Ok(())
            }
            Err(airlock_gateway::parked::CancelError::NotWaiting(_)) => Err(not_waiting(id)),
            Err(e) => Err(McpError::internal_error(
                format!("task {} could not be cancelled: {e}", visible(id)),
                None,
            )),
        }
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
