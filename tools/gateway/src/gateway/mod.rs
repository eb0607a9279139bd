//! The one path every tool call takes:
//! rate limit → lookup → validation → policy → approval → audit →
//! backend → redaction → audit.
//!
//! A call refused at any step never reaches a backend, and every call,
//! refused or not, leaves a trace in the audit: a line with the decision,
//! or, for a rate-limited refusal after the first of a run, a count on
//! its identity's next line (below). If the audit line cannot be
//! written the call is refused: nothing runs unrecorded.
//!
//! The rate limit comes first: a refusal costs the host work too (a
//! lookup, an audit line, an approval request filed), so a loop of refused
//! calls is throttled like any other. Everything a script chooses that
//! reaches a line is cut to a fixed size (`audit_fields`).
//!
//! Rate-limited refusals are themselves bounded in the audit: once an
//! identity is rate-limited, its first `rate_limited` refusal gets its
//! line; further ones are counted, not written, until that identity's
//! next line (an admitted or otherwise refused call, an execution's start
//! or end), which carries the count as `rate_limited_since` with the
//! first and last of them (`rate_limited_first`, `rate_limited_last`).
//! A count still open when the gateway is dropped is written as a
//! `rate_limited` event. So a loop of refused calls writes lines at the
//! rate its identity's calls are admitted, not at the rate it calls.

mod executions;
mod rate_counts;

pub use executions::StartError;
use rate_counts::Unwritten;

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex, RwLock,
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use serde_json::{json, Map, Value};
use tokio::sync::Semaphore;

use crate::{
    approval::{ApprovalError, ApprovalStore, Asked, Check},
    audit::{AuditError, AuditStore},
    audit_fields,
    backend::Backend,
    backend::TaskEnd,
    catalog::{self, quote_name, Catalog, CatalogError, Clash},
    config::GatewayConfig,
    digest::{sha256_hex, sha256_json},
    discovery,
    observe::{Observer, TimedAudit, UNKNOWN_TOOL},
    plan::{Applying, PlanError, PlanRun, PlannedChange, Recorder, Taking},
    plan_apply::{Called as PlanCalled, StepEnd},
    policy::{Mode, Policy, PolicyError},
    redact,
    spec::{Tier, ToolSpec},
    state::{State, StateError},
    summary,
};

/// Who is calling, and from which execution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub identity: String,
    /// The execution the call belongs to, when it came from a script.
    pub execution: Option<String>,
    /// The mode the identity provider's groups grant this caller (an
    /// OAuth token's group claim); used only when `[identities]` has no
    /// grant for `identity`.
    pub from_groups: Option<Mode>,
    /// The mode the gateway allowed this call in; set before a backend
    /// runs it (a backend may pick credentials by it), `None` before.
    pub mode: Option<Mode>,
    /// The change plan the execution records or applies, if any.
    pub plan: Option<PlanRun>,
    /// The identity provider lets this caller approve its own requests
    /// (its issuer's `approve_own`, or one of its groups in
    /// `approve_own_groups`); used only when `[identities]` does not say.
    pub approve_own: bool,
}

impl Caller {
    pub fn new(identity: impl Into<String>) -> Self {
        Self {
            identity: identity.into(),
            execution: None,
            from_groups: None,
            mode: None,
            plan: None,
            approve_own: false,
        }
    }

    /// A caller whose identity provider's groups grant `mode`.
    pub fn with_groups_mode(mut self, mode: Option<Mode>) -> Self {
        self.from_groups = mode;
        self
    }

    /// A caller whose identity provider lets it approve its own requests.
    pub fn with_approve_own(mut self, allowed: bool) -> Self {
        self.approve_own = allowed;
        self
    }
}

/// A call that ran.
#[derive(Clone, Debug, PartialEq)]
pub struct Called {
    pub value: Value,
    /// Secret-looking fields replaced before the value left the gateway.
    pub redacted: usize,
}

/// A call that did not succeed, from [`Gateway::call_keeping_args`].
#[derive(Debug)]
pub struct Refused {
    pub error: CallError,
    /// The call's arguments, when it was refused before they were handed
    /// to a backend.
    pub args: Option<Value>,
}

impl Refused {
    fn before_backend(error: CallError, args: Value) -> Self {
        Self {
            error,
            args: Some(args),
        }
    }

    fn after_backend(error: CallError) -> Self {
        Self { error, args: None }
    }
}

/// Why a call did not run or did not succeed. Each has a stable `code`
/// that scripts see as `e.code`.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CallError {
    /// `name` is quoted as `catalog::quote_name` does: cut and visible.
    #[error("no tool named `{name}`{}", did_you_mean_text(.did_you_mean))]
    UnknownTool {
        name: String,
        did_you_mean: Vec<String>,
    },
    /// Refused before any lookup; `name` is quoted, `bytes` its length.
    #[error(
        "no tool named `{name}`: a tool name is at most {} bytes; this one is {bytes}",
        catalog::MAX_NAME_BYTES
    )]
    NameTooLong { name: String, bytes: usize },
    #[error("invalid arguments for {tool}: {}", .problems.join("; "))]
    InvalidArguments { tool: String, problems: Vec<String> },
    #[error("{reason}")]
    PolicyDenied { tool: String, reason: String },
    #[error("{tool} needs approval: request {request_id} ({summary}); {how}")]
    ApprovalRequired {
        tool: String,
        request_id: String,
        summary: String,
        how: String,
    },
    #[error("{tool} needs approval, but {reason}")]
    ApprovalTooLarge { tool: String, reason: String },
    #[error("{tool} needs approval, but identity {identity} already has {limit} approval requests waiting (approval.max_open_per_identity = {limit}), so no more are filed; decide or let expire the open requests first: `{list_command}`")]
    ApprovalLimit {
        tool: String,
        identity: String,
        limit: u32,
        list_command: String,
    },
    #[error("identity {identity} made more than {limit} calls in the last minute; wait and retry, or ask the operator to raise rate.calls_per_minute")]
    RateLimited { identity: String, limit: u32 },
    #[error("{message}")]
    Backend {
        tool: String,
        code: String,
        message: String,
    },
    #[error("the audit log cannot be written, so no call runs: {0}")]
    AuditUnavailable(String),
    #[error("the approval store is unavailable, so calls needing approval are refused: {0}")]
    ApprovalUnavailable(String),
    #[error("the rate limiter cannot be asked, so no call runs: {0}")]
    RateUnavailable(String),
    /// Plan mode could not record this change (the plan is full).
    #[error("{tool} could not be added to the plan: {error}")]
    Plan { tool: String, error: PlanError },
}

/// What a script is told when a store fails: what went wrong (a full
/// disk, a lock held too long), never where the store is or what a
/// database server said (host names and server messages are the
/// operator's, in the log, which gets the whole error).
trait Told: std::fmt::Display {
    fn reason(&self) -> String;
}

const DATABASE_DOWN: &str = "the state database is unavailable";

impl Told for AuditError {
    fn reason(&self) -> String {
        match self {
            AuditError::Write { message, .. } | AuditError::Read { message, .. } => message.clone(),
            AuditError::Locked { waited, .. } => format!(
                "the log is locked by another process for more than {} s",
                waited.as_secs_f64()
            ),
            AuditError::Store { .. } => DATABASE_DOWN.into(),
            other => other.to_string(),
        }
    }
}

impl Told for ApprovalError {
    fn reason(&self) -> String {
        match self {
            ApprovalError::Storage(m) if m.starts_with("PostgreSQL") => DATABASE_DOWN.into(),
            ApprovalError::Storage(m) => m.clone(),
            other => other.to_string(),
        }
    }
}

impl Told for crate::rate::RateUnavailable {
    fn reason(&self) -> String {
        DATABASE_DOWN.into()
    }
}

fn told(e: &impl Told) -> String {
    tracing::error!(error = %e, "a state store failed; the call is refused");
    e.reason()
}

fn did_you_mean_text(names: &[String]) -> String {
    if names.is_empty() {
        String::new()
    } else {
        format!(
            "; did you mean {}?",
            names
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

impl CallError {
    /// The code a script sees as `e.code`.
    pub fn code(&self) -> &str {
        match self {
            CallError::UnknownTool { .. } | CallError::NameTooLong { .. } => "not_found",
            CallError::InvalidArguments { .. } => "invalid_arguments",
            CallError::PolicyDenied { .. } => "policy_denied",
            CallError::ApprovalRequired { .. } => "approval_required",
            CallError::ApprovalTooLarge { .. } => "approval_too_large",
            CallError::ApprovalLimit { .. } => "approval_limit",
            CallError::RateLimited { .. } => "rate_limited",
            CallError::Backend { code, .. } => code,
            CallError::AuditUnavailable(_) => "audit_unavailable",
            CallError::ApprovalUnavailable(_) => "approval_unavailable",
            CallError::RateUnavailable(_) => "rate_unavailable",
            CallError::Plan { error, .. } => error.code(),
        }
    }

    /// Structured details a script can act on (`e.details`).
    pub fn details(&self) -> Value {
        match self {
            CallError::UnknownTool { did_you_mean, .. } => json!({"did_you_mean": did_you_mean}),
            CallError::NameTooLong { bytes, .. } => {
                json!({"did_you_mean": [], "name_bytes": bytes, "max_name_bytes": catalog::MAX_NAME_BYTES})
            }
            CallError::ApprovalTooLarge { .. } => {
                json!({"max_summary_chars": summary::MAX_SUMMARY_CHARS, "max_detail_chars": summary::MAX_DETAIL_CHARS})
            }
            CallError::ApprovalLimit { limit, .. } => json!({"max_open_per_identity": limit}),
            CallError::InvalidArguments { problems, .. } => json!({"problems": problems}),
            CallError::ApprovalRequired {
                request_id,
                summary,
                how,
                ..
            } => {
                json!({"request_id": request_id, "summary": summary, "how": how})
            }
            CallError::RateLimited { limit, .. } => json!({"calls_per_minute": limit}),
            CallError::Plan { .. } => json!({
                "max_plan_changes": crate::plan::MAX_PLAN_CHANGES,
                "max_plan_summary_chars": crate::plan::MAX_PLAN_SUMMARY_CHARS,
            }),
            _ => Value::Null,
        }
    }

    /// The word the audit line records as the decision.
    pub fn decision(&self) -> &'static str {
        match self {
            CallError::UnknownTool { .. } | CallError::NameTooLong { .. } => "unknown_tool",
            CallError::InvalidArguments { .. } => "invalid",
            CallError::PolicyDenied { .. } => "denied",
            CallError::ApprovalRequired { .. } => "approval_required",
            CallError::ApprovalTooLarge { .. } => "approval_too_large",
            CallError::ApprovalLimit { .. } => "approval_limit",
            CallError::RateLimited { .. } => "rate_limited",
            CallError::AuditUnavailable(_)
            | CallError::ApprovalUnavailable(_)
            | CallError::RateUnavailable(_) => "refused",
            CallError::Plan { .. } => "plan_refused",
            CallError::Backend { .. } => "allowed",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error(transparent)]
    Approval(#[from] ApprovalError),
    #[error(transparent)]
    Audit(#[from] AuditError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error("two backends have the id `{0}`")]
    DuplicateBackend(String),
    #[error("{0}")]
    Config(String),
}

type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The most `tool_renamed` lines one catalog rebuild writes.
const MAX_MOVE_LINES: usize = 100;

pub struct Gateway {
    /// The current catalog and the backend generations it was built from.
    catalog: RwLock<(Arc<Catalog>, u64)>,
    policy: Policy,
    /// Approvals, the audit chain, rate buckets (and what the host serves
    /// from the same store: keys, sessions).
    state: State,
    approval_tiers: Vec<Tier>,
    /// Tiers whose approval may be asked in the MCP client.
    in_client_tiers: Vec<Tier>,
    approve_command: String,
    backends: HashMap<String, (Arc<dyn Backend>, Semaphore)>,
    /// Backend ids in the order given: earlier ones keep a clashing name.
    order: Vec<String>,
    calls_per_minute: u32,
    /// `rate.executions_per_identity` (0: not counted) and how long a
    /// place is held at most.
    executions_per_identity: u32,
    execution_hold_ms: u64,
    /// Per identity: rate-limited refusals counted since its last line.
    /// An identity quiet a minute has its count written as a line of its
    /// own when the map sweeps (identities from a provider are many).
    unwritten: Mutex<crate::rate::Swept<Unwritten>>,
    /// Running executions and their identities, so an execution's end can
    /// carry its identity's count.
    executions: Mutex<HashMap<String, String>>,
    next_call: AtomicU64,
    /// Told of every call's decision and time, and of limit hits.
    observer: Option<Arc<dyn Observer>>,
    /// Distinguishes this process's call ids in a shared audit log.
    instance: String,
    clock: Clock,
    /// The deployment's key for the hashes approvers see secrets by,
    /// read from the approval store on first need.
    summary_key: std::sync::OnceLock<summary::SummaryKey>,
}

fn rfc3339_ms(ms: i64) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(at).to_string()
}

impl Gateway {
    /// Why the backend whose namespace `name` is in has not offered its
    /// tools yet, if it has not.
    fn unavailable_for(&self, name: &str) -> Option<String> {
        self.backends.values().find_map(|(b, _)| {
            let ns = b.namespace()?;
            name.starts_with(ns).then(|| b.unavailable()).flatten()
        })
    }

    /// The backends whose tools are missing from the catalog, and why:
    /// for `search` to say so rather than report fewer tools.
    pub fn unavailable_backends(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self
            .backends
            .iter()
            .filter_map(|(id, (b, _))| Some((id.clone(), b.unavailable()?)))
            .collect();
        out.sort();
        out
    }
}

/// Sums the backends' generations: any change to any of them changes it
/// (generations only grow).
fn generation_of<'a>(backends: impl Iterator<Item = &'a Arc<dyn Backend>>) -> u64 {
    backends.map(|b| b.generation()).fold(0, u64::wrapping_add)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Gateway {
    /// Builds the catalog from `backends` (in order: earlier ones keep a
    /// clashing name), checks the policy against it, opens the approval
    /// store and the audit log. Returns the clashes for startup to report.
    pub fn new(
        config: GatewayConfig,
        backends: Vec<Arc<dyn Backend>>,
    ) -> Result<(Self, Vec<Clash>), GatewayError> {
        config.approval.check().map_err(GatewayError::Config)?;
        config.rate.check().map_err(GatewayError::Config)?;
        let mut by_id = HashMap::new();
        let mut sources = Vec::new();
        let mut order = Vec::new();
        for b in backends {
            let id = b.id().to_string();
            if by_id.contains_key(&id) {
                return Err(GatewayError::DuplicateBackend(id));
            }
            order.push(id.clone());
            sources.push((id.clone(), b.tools()));
            by_id.insert(
                id,
                (b, Semaphore::new(config.rate.backend_concurrency as usize)),
            );
        }
        let (catalog, clashes) = Catalog::build(sources)?;
        // A discovering backend's tools can be named before they are
        // discovered: by catalog name (its namespace) or by key (its id).
        let dynamic: Vec<String> = by_id
            .iter()
            .filter_map(|(id, (b, _))| b.namespace().map(|ns| [ns.to_string(), format!("{id}:")]))
            .flatten()
            .collect();
        // The policy is checked first: a mistake in the file is reported
        // before any database is connected to.
        let policy = Policy::new(config.policy.clone(), &catalog, &dynamic)?;
        let state = State::open(&config)?;
        let generation = generation_of(by_id.values().map(|(b, _)| b));
        let mut instance = [0u8; 4];
        let _ = getrandom::fill(&mut instance);
        Ok((
            Self {
                catalog: RwLock::new((Arc::new(catalog), generation)),
                policy,
                state,
                approval_tiers: config.approval.tiers,
                in_client_tiers: config.approval.in_client,
                approve_command: config.approve_command,
                backends: by_id,
                order,
                calls_per_minute: config.rate.calls_per_minute,
                executions_per_identity: config.rate.executions_per_identity,
                execution_hold_ms: config.rate.execution_hold_ms,
                unwritten: Mutex::new(crate::rate::Swept::new()),
                executions: Mutex::new(HashMap::new()),
                next_call: AtomicU64::new(1),
                observer: None,
                instance: hex::encode(instance),
                clock: Arc::new(now_ms),
                summary_key: std::sync::OnceLock::new(),
            },
            clashes,
        ))
    }

    /// Reports every call, limit hit and audit append to `observer`.
    pub fn with_observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.state.audit = Arc::new(TimedAudit {
            inner: self.state.audit.clone(),
            observer: observer.clone(),
        });
        self.observer = Some(observer);
        self
    }

    /// Replaces the wall clock (milliseconds since the epoch), for tests of
    /// expiry.
    pub fn with_clock(mut self, clock: impl Fn() -> i64 + Send + Sync + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// The catalog as of now: rebuilt first if a backend's tools changed
    /// since it was last built (a collector that came up, or refreshed).
    pub fn catalog(&self) -> Arc<Catalog> {
        let now = generation_of(self.backends.values().map(|(b, _)| b));
        {
            let current = self.catalog.read().unwrap_or_else(|p| p.into_inner());
            if current.1 == now {
                return current.0.clone();
            }
        }
        let mut current = self.catalog.write().unwrap_or_else(|p| p.into_inner());
        let mut moves = Vec::new();
        if current.1 != now {
            match self.rebuild() {
                Ok((catalog, clashes)) => {
                    for c in &clashes {
                        tracing::warn!("tool name clash after a backend refresh: {c}");
                    }
                    moves = Self::report_moves(&current.0, &catalog);
                    tracing::info!(tools = catalog.len(), "tool catalog rebuilt");
                    *current = (Arc::new(catalog), now);
                }
                // Keep serving the last good catalog; a backend's bad list
                // must not take the others down.
                Err(e) => {
                    tracing::warn!(error = %e, "could not rebuild the tool catalog; keeping the previous one");
                    current.1 = now;
                }
            }
        }
        let catalog = current.0.clone();
        drop(current);
        if !moves.is_empty() {
            self.record_moves(moves);
        }
        catalog
    }

    /// Reports every name a refresh moved: a tool (by key) now called
    /// otherwise, and a name that now calls another tool. Policy lists
    /// and approvals follow the tool, not the name (see `policy`), so a
    /// move never widens access; scripts calling the old name reach the
    /// new tool, so it is logged and written to the audit chain.
    fn report_moves(before: &Catalog, after: &Catalog) -> Vec<Map<String, Value>> {
        let mut seen = std::collections::HashSet::new();
        let mut lines = Vec::new();
        for e in after.iter() {
            let key = e.spec.key.as_str();
            if !seen.insert(key) {
                continue;
            }
            let (was, is) = (before.names_of_key(key), after.names_of_key(key));
            if was.is_empty() || was == is {
                continue;
            }
            // What each old name calls now (nothing, or another tool).
            let now_calls: Vec<String> = was
                .iter()
                .filter(|n| !is.contains(n))
                .map(|n| match after.get(n) {
                    Some(other) => format!("`{n}` now calls `{}`", other.spec.key),
                    None => format!("`{n}` calls nothing"),
                })
                .collect();
            tracing::warn!(
                key,
                from = ?was,
                to = ?is,
                "a backend refresh renamed a tool: policy and approvals follow it by its key; {}",
                now_calls.join(", ")
            );
            let mut line = Map::new();
            line.insert("tool_key".into(), audit_fields::tool_key(key));
            let names = |ns: &[&str]| {
                Value::Array(ns.iter().take(8).map(|n| audit_fields::tool(n)).collect())
            };
            line.insert("from".into(), names(&was));
            line.insert("to".into(), names(&is));
            lines.push(line);
        }
        lines
    }

    /// Writes the moves a rebuild found (outside the catalog's lock): at
    /// most [`MAX_MOVE_LINES`] lines per rebuild, then one line counting
    /// the rest, so a backend that renames everything on every refresh
    /// cannot fill the audit chain.
    fn record_moves(&self, moves: Vec<Map<String, Value>>) {
        let total = moves.len();
        for line in moves.into_iter().take(MAX_MOVE_LINES) {
            if let Err(err) = self.state.audit.append("tool_renamed", line) {
                tracing::error!(error = %err, "could not record a renamed tool in the audit log");
                return;
            }
        }
        if total > MAX_MOVE_LINES {
            let mut line = Map::new();
            line.insert("more".into(), Value::from(total - MAX_MOVE_LINES));
            if let Err(err) = self.state.audit.append("tool_renamed", line) {
                tracing::error!(error = %err, "could not record renamed tools in the audit log");
            }
        }
    }

    fn rebuild(&self) -> Result<(Catalog, Vec<Clash>), CatalogError> {
        let sources: Vec<(String, Vec<ToolSpec>)> = self
            .order
            .iter()
            .map(|id| (id.clone(), self.backends[id].0.tools()))
            .collect();
        Catalog::build(sources)
    }

    /// What an `ApprovalRequired` error tells the agent to do: the shell
    /// command that approves `request_id`, and for how long it holds.
    pub fn approve_instruction(&self, request_id: &str) -> String {
        format!(
            "an operator can run `{}` (or deny it); then run the script again within {} minutes",
            self.approve_command_for(request_id),
            self.state.approvals.ttl_ms() / 60_000
        )
    }

    /// The command that approves `request_id` from a shell.
    pub fn approve_command_for(&self, request_id: &str) -> String {
        format!("{} {request_id}", self.approve_command)
    }

    /// What to do with a filed plan: who approves it, and how to apply it.
    pub fn plan_instruction(&self, plan_id: &str) -> String {
        format!(
            "an operator can run `{} {plan_id}` (or deny it), or the person in the client approves it; then run the same script with execute's `plan: \"{plan_id}\"` within {} minutes of the approval",
            self.approve_command,
            self.state.approvals.ttl_ms() / 60_000
        )
    }

    /// The command that lists open requests, next to the approve command
    /// (so it carries the same `--config`).
    fn list_command(&self) -> String {
        match self.approve_command.strip_suffix(" approve") {
            Some(base) => format!("{base} list"),
            None => "airlock approvals list".into(),
        }
    }

    /// Whether the person in `identity`'s MCP client may be asked to
    /// approve a call of `tool`: its tier is in `approval.in_client` and
    /// the identity's `approve_in_client` is not off. When not, the call
    /// waits for an operator (`airlock approvals approve`), so a client
    /// cannot approve its own calls. Unknown tools: no.
    pub fn may_approve_in_client(&self, identity: &str, tool: &str) -> bool {
        if catalog::name_too_long(tool).is_some() {
            return false;
        }
        let catalog = self.catalog();
        catalog.get(tool).is_some_and(|e| {
            self.in_client_tiers.contains(&e.spec.tier) && self.policy.approve_in_client(identity)
        })
    }

    pub fn approvals(&self) -> &dyn ApprovalStore {
        &*self.state.approvals
    }

    /// What a person approving `args` is shown; refused (`approval_too_large`)
    /// when it cannot be shown whole, or (`approval_unavailable`) without
    /// the deployment's key for secrets' hashes.
    fn shown(&self, tool: &str, args: &Value) -> Result<summary::Rendered, CallError> {
        // Read from the store once, outside any lock: replicas racing to
        // create it agree on the store's one row.
        let key = match self.summary_key.get() {
            Some(k) => k.clone(),
            None => {
                let k = summary::SummaryKey::new(
                    self.state
                        .approvals
                        .summary_key()
                        .map_err(|e| CallError::ApprovalUnavailable(told(&e)))?,
                );
                self.summary_key.get_or_init(|| k).clone()
            }
        };
        summary::summarize(args, &key).map_err(|e| CallError::ApprovalTooLarge {
            tool: tool.to_string(),
            reason: e.to_string(),
        })
    }

    /// Whether `caller` may approve its own requests (`approve_own`).
    pub fn may_approve_own(&self, caller: &Caller) -> bool {
        self.policy
            .approve_own(&caller.identity, caller.approve_own)
    }

    /// Decides request `id` as `decider` (four eyes kept by the store)
    /// and writes the decision to the audit chain.
    pub fn decide(
        &self,
        id: &str,
        decider: &crate::decision::Decider,
        to: crate::approval::Status,
    ) -> Result<crate::approval::Request, ApprovalError> {
        crate::decision::decide(
            &*self.state.approvals,
            &*self.state.audit,
            id,
            decider,
            self.now_ms(),
            to,
        )
    }

    /// The stores this gateway keeps its state in; the host serves bearer
    /// keys and transport sessions from the same place.
    pub fn state(&self) -> &State {
        &self.state
    }

    pub fn audit(&self) -> &dyn AuditStore {
        &*self.state.audit
    }

    /// The audit file, when the chain is kept in one (not in PostgreSQL).
    pub fn audit_path(&self) -> Option<&std::path::Path> {
        self.state.audit.file()
    }

    /// Whether the configuration names `identity` (`[identities]`): a
    /// token whose groups map to no mode is accepted only for those.
    pub fn lists_identity(&self, identity: &str) -> bool {
        self.policy.lists(identity)
    }

    /// The mode `caller` acts in (see [`crate::policy::Policy::mode_of`]).
    pub fn mode_of(&self, caller: &Caller) -> Mode {
        self.policy.mode_of(&caller.identity, caller.from_groups)
    }

    /// Tiers whose calls wait for a person's approval, so a client can say
    /// up front which of its calls will be asked about.
    pub fn approval_tiers(&self) -> &[Tier] {
        &self.approval_tiers
    }

    pub fn now_ms(&self) -> i64 {
        (self.clock)()
    }

    /// Runs one call through the whole pipeline.
    pub async fn call(
        &self,
        caller: &Caller,
        name: &str,
        args: Value,
    ) -> Result<Called, CallError> {
        self.call_keeping_args(caller, name, args)
            .await
            .map_err(|r| r.error)
    }

    /// [`Gateway::call`], handing the arguments back with a refusal made
    /// before the backend, so a caller that can settle it (a person in
    /// the client approving an `ApprovalRequired`) calls again without
    /// having kept a copy of every call's arguments.
    pub async fn call_keeping_args(
        &self,
        caller: &Caller,
        name: &str,
        args: Value,
    ) -> Result<Called, Refused> {
        let Some(observer) = &self.observer else {
            return self.run_call(caller, name, args).await;
        };
        let started = Instant::now();
        let result = self.run_call(caller, name, args).await;
        let decision = match &result {
            Ok(_) => "allowed",
            Err(r) => r.error.decision(),
        };
        match result.as_ref().err().map(|r| &r.error) {
            Some(CallError::RateLimited { .. }) => observer.limit_hit("rate.calls_per_minute"),
            Some(CallError::ApprovalLimit { .. }) => {
                observer.limit_hit("approval.max_open_per_identity")
            }
            _ => {}
        }
        let tool = if discovery::is_discovery(name)
            || (catalog::name_too_long(name).is_none() && self.catalog().get(name).is_some())
        {
            name
        } else {
            UNKNOWN_TOOL
        };
        observer.call(tool, decision, started.elapsed());
        result
    }

    async fn run_call(&self, caller: &Caller, name: &str, args: Value) -> Result<Called, Refused> {
        let call_id = format!(
            "{}-{}",
            self.instance,
            self.next_call.fetch_add(1, Ordering::Relaxed)
        );
        let mut line = Map::new();
        line.insert("call".into(), Value::String(call_id.clone()));
        line.insert("identity".into(), Value::String(caller.identity.clone()));
        if let Some(e) = &caller.execution {
            line.insert("execution".into(), Value::String(e.clone()));
        }
        line.insert("tool".into(), audit_fields::tool(name));
        audit_fields::add_arg_keys(&args, &mut line);
        let args_hash = sha256_json(&args);
        line.insert("args_sha256".into(), Value::String(args_hash.clone()));

        if discovery::is_discovery(name) {
            return self.discovery_call(caller, name, args, call_id, line);
        }
        let catalog = self.catalog();
        // Applying a plan, a call that may be one of its steps waits until
        // the step before has its answer, and keeps the turn until its
        // own answer is in: one step in flight at a time.
        let _turn = match &caller.plan {
            Some(PlanRun::Apply(plan)) if catalog::name_too_long(name).is_none() => {
                match catalog.get(name) {
                    Some(e) if plan.may_be_step(&called(&e.spec), e.spec.tier) => {
                        Some(plan.turn().await)
                    }
                    _ => None,
                }
            }
            _ => None,
        };
        let entry = match self.admit(&catalog, caller, name, &args, &args_hash, &mut line) {
            Ok(e) => e,
            Err(refusal) => return Err(self.refuse(caller, refusal, line, args)),
        };
        let spec = entry.spec.clone();
        line.insert("backend".into(), Value::String(spec.backend.clone()));
        if let Some(PlanRun::Record(recorder)) = &caller.plan {
            return self
                .planned_call(caller, recorder, &spec, args, &args_hash, line)
                .await;
        }
        self.run_admitted(caller, spec, args, line).await
    }

    /// The rest of an admitted call: its line, the backend, the result's
    /// line.
    async fn run_admitted(
        &self,
        caller: &Caller,
        spec: ToolSpec,
        args: Value,
        mut line: Map<String, Value>,
    ) -> Result<Called, Refused> {
        let call_id = line
            .get("call")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        line.insert("decision".into(), Value::String("allowed".into()));
        // The plan step this call makes, if it makes one: ended by the
        // backend's answer, or, should this future be dropped first, as
        // cancelled (the change may or may not have been made).
        let mut step = match (
            &caller.plan,
            line.get("plan_change").and_then(Value::as_u64),
        ) {
            (Some(PlanRun::Apply(plan)), Some(n)) => Some(StepGuard {
                plan,
                n: n as u32,
                waits: plan
                    .changes
                    .get((n as usize).saturating_sub(1))
                    .is_some_and(|c| c.waits_on.is_some()),
                sent: false,
                ended: false,
            }),
            _ => None,
        };
        let (backend, slots) = self
            .backends
            .get(&spec.backend)
            .expect("every catalog entry has its backend");
        // A plan's first change takes the backend's slot before the plan
        // is taken: cancelled while it waits, it has done nothing and the
        // plan is not spent. Every other call is recorded first (its
        // approval, if any, is already spent), so a cancellation while it
        // waits still leaves a `cancelled` result line.
        let first_of_plan = step.as_ref().is_some_and(|s| !s.plan.taken());
        let mut held = None;
        if first_of_plan {
            held = Some(
                slots
                    .acquire()
                    .await
                    .expect("the semaphore is never closed"),
            );
        }
        if let Some(s) = step.as_mut() {
            if first_of_plan {
                if let Err(refusal) = self.take_plan_now(caller, s.plan, &spec.name) {
                    s.ended = true;
                    line.insert("decision".into(), Value::String(refusal.decision().into()));
                    line.insert("reason".into(), audit_fields::code(refusal.code()));
                    if let Err(e) = self.append_for(&caller.identity, "call", line) {
                        tracing::error!(error = %e, "could not record a refused plan step in the audit log");
                    }
                    return Err(Refused::before_backend(refusal, args));
                }
            }
            if let Some(by) = s.plan.approved_by() {
                line.insert("approved_by".into(), audit_fields::decider(&by));
            }
        }
        if let Err(e) = self.append_for(&caller.identity, "call", line) {
            // Not made: the step is the plan's next one again.
            if let Some(mut s) = step.take() {
                s.plan.untake();
                s.ended = true;
            }
            let error = CallError::AuditUnavailable(told(&e));
            return Err(Refused::before_backend(error, args));
        }

        let started = Instant::now();
        let mut pending = Pending {
            audit: &*self.state.audit,
            call_id: Some(call_id.clone()),
            started,
            sent: false,
        };
        let _slot = match held {
            Some(slot) => slot,
            None => slots
                .acquire()
                .await
                .expect("the semaphore is never closed"),
        };
        // From here the backend may have acted on it.
        pending.sent = true;
        if let Some(s) = step.as_mut() {
            s.sent = true;
        }
        let result = {
            let acting = Caller {
                mode: Some(self.mode_of(caller)),
                ..caller.clone()
            };
            backend.call(&acting, &spec, args).await
        };
        pending.call_id = None;
        let duration_ms = started.elapsed().as_millis() as u64;
        let mut done = Map::new();
        done.insert("call".into(), Value::String(call_id));
        done.insert("duration_ms".into(), Value::from(duration_ms));
        let outcome = match result {
            Ok(reply) => {
                done.insert("status".into(), Value::String("ok".into()));
                if let Some(r) = &reply.request_id {
                    done.insert("backend_request_id".into(), audit_fields::request_id(r));
                }
                if let Some(s) = step.as_mut() {
                    let end = s.end_of(&**backend, &spec, &reply);
                    if s.waits {
                        let task = match &end {
                            StepEnd::Made(_) => "ok",
                            StepEnd::NotEnded => "running",
                            StepEnd::Failed(_) => "failed",
                        };
                        done.insert("task".into(), Value::String(task.into()));
                    }
                    s.end(end);
                }
                let mut value = reply.value;
                let redacted = redact::redact(&mut value);
                if redacted > 0 {
                    done.insert("redacted_fields".into(), Value::from(redacted));
                }
                Ok(Called { value, redacted })
            }
            Err(e) => {
                done.insert("status".into(), audit_fields::code(&e.code));
                // A step that failed stops the plan: what the person
                // approved after it assumed it was made.
                if let Some(s) = step.as_mut() {
                    s.end(StepEnd::Failed(
                        audit_fields::code(&e.code)
                            .as_str()
                            .unwrap_or("error")
                            .to_string(),
                    ));
                }
                Err(CallError::Backend {
                    tool: spec.name.clone(),
                    code: e.code,
                    message: e.message,
                })
            }
        };
        if let Some(s) = &step {
            done.insert("plan".into(), Value::String(s.plan.id.clone()));
            done.insert("plan_change".into(), Value::from(s.n));
        }
        // The call has happened; if even its result cannot be recorded the
        // result is withheld rather than handed on unrecorded.
        if let Err(e) = self.state.audit.append("call_result", done) {
            // Nothing more of a plan is sent while its steps go unrecorded.
            if let Some(s) = &step {
                s.plan.stop_before_next("audit_unavailable");
            }
            return Err(Refused::after_backend(CallError::AuditUnavailable(told(
                &e,
            ))));
        }
        outcome.map_err(Refused::after_backend)
    }

    /// A call admitted while recording a plan: a read runs as usual
    /// unless its arguments carry a planned value (then the backend's
    /// `planned_read` answers it); anything else is recorded, not sent,
    /// and answered with the backend's `planned` value. Each gets its
    /// audit line, `decision: "planned"` for those not sent.
    async fn planned_call(
        &self,
        caller: &Caller,
        recorder: &Recorder,
        spec: &ToolSpec,
        args: Value,
        args_hash: &str,
        mut line: Map<String, Value>,
    ) -> Result<Called, Refused> {
        let (backend, _) = self
            .backends
            .get(&spec.backend)
            .expect("every catalog entry has its backend");
        let waits_on = if spec.tier == Tier::Read {
            match recorder.marked_change(&args) {
                // A read of a planned change's task: a step of the plan.
                Some(k) if backend.reads_task(spec) => Some(k),
                // Any other read of a planned value: answered by the plan,
                // not a step (it checks nothing the next change could wait
                // for), so not shown as one.
                Some(_) => {
                    line.insert("plan".into(), Value::String(recorder.id.clone()));
                    line.insert("decision".into(), Value::String("planned".into()));
                    let value = backend.planned_read(spec, &args);
                    if let Err(e) = self.append_for(&caller.identity, "call", line) {
                        recorder.lost_a_line();
                        let error = CallError::AuditUnavailable(told(&e));
                        return Err(Refused::before_backend(error, args));
                    }
                    return Ok(Called { value, redacted: 0 });
                }
                None => {
                    // An ordinary read: the rest of `run_call`, without a plan.
                    let reading = Caller {
                        plan: None,
                        ..caller.clone()
                    };
                    return self.run_admitted(&reading, spec.clone(), args, line).await;
                }
            }
        } else {
            None
        };
        // A change, or a read of a change's result: a step of the plan.
        let shown = match self.shown(&spec.name, &args) {
            Ok(s) => s,
            Err(refusal) => return Err(self.refuse(caller, refusal, line, args)),
        };
        let change = PlannedChange {
            n: 0,
            tool: spec.name.clone(),
            key: spec.key.clone(),
            tier: spec.tier,
            args_hash: args_hash.to_string(),
            summary: shown.short,
            detail: shown.full,
            target: crate::plan::target_of(spec, &args),
            needs_approval: waits_on.is_none() && self.approval_tiers.contains(&spec.tier),
            waits_on,
        };
        let token = match recorder.record(change) {
            Ok(t) => t,
            Err(error) => {
                let refusal = CallError::Plan {
                    tool: spec.name.clone(),
                    error,
                };
                return Err(self.refuse(caller, refusal, line, args));
            }
        };
        line.insert("plan".into(), Value::String(recorder.id.clone()));
        line.insert(
            "plan_change".into(),
            Value::from(token.rsplit('.').next().and_then(|n| n.parse::<u32>().ok())),
        );
        let value = match waits_on {
            Some(k) => {
                line.insert("waits_on".into(), Value::from(k));
                backend.planned_read(spec, &args)
            }
            None => backend.planned(spec, &args, &token),
        };
        line.insert("decision".into(), Value::String("planned".into()));
        if let Err(e) = self.append_for(&caller.identity, "call", line) {
            recorder.lost_a_line();
            let error = CallError::AuditUnavailable(told(&e));
            return Err(Refused::before_backend(error, args));
        }
        Ok(Called { value, redacted: 0 })
    }

    /// Records a call refused before any backend (the first of a run of
    /// rate-limited ones starts the count; the rest are only counted).
    fn refuse(
        &self,
        caller: &Caller,
        refusal: CallError,
        mut line: Map<String, Value>,
        args: Value,
    ) -> Refused {
        let rate_limited = matches!(refusal, CallError::RateLimited { .. });
        if rate_limited && !self.first_rate_limited(&caller.identity) {
            // Counted; the identity's next line carries the count.
            return Refused::before_backend(refusal, args);
        }
        line.insert("decision".into(), Value::String(refusal.decision().into()));
        line.insert("reason".into(), audit_fields::code(refusal.code()));
        let written = if rate_limited {
            // The first of a run: its line starts the count.
            self.state.audit.append("call", line).inspect_err(|_| {
                self.unwritten
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .map
                    .remove(&caller.identity);
            })
        } else {
            self.append_for(&caller.identity, "call", line)
        };
        if let Err(e) = written {
            let error = CallError::AuditUnavailable(told(&e));
            return Refused::before_backend(error, args);
        }
        Refused::before_backend(refusal, args)
    }

    /// `catalog.search` or `catalog.describe` from a script: rate-limited
    /// and audited as any call, answered from the catalog by what the
    /// caller's mode may call ([`discovery`]).
    // The refusal hands the arguments back, as `run_call`'s does.
    #[allow(clippy::result_large_err)]
    fn discovery_call(
        &self,
        caller: &Caller,
        name: &str,
        args: Value,
        call_id: String,
        mut line: Map<String, Value>,
    ) -> Result<Called, Refused> {
        let started = Instant::now();
        // What `admit` would let through: the mode, deny and allow lists,
        // read-only.
        let catalog = self.catalog();
        let may_call = |tool: &str, _tier: Tier| {
            catalog.get(tool).is_some_and(|e| {
                self.policy
                    .decide(&caller.identity, caller.from_groups, &e.spec, &catalog)
                    .is_ok()
            })
        };
        let answer = self.take_token(&caller.identity).and_then(|()| {
            discovery::answer(&catalog, name, &args, may_call).map_err(|problems| {
                CallError::InvalidArguments {
                    tool: name.to_string(),
                    problems,
                }
            })
        });
        let value = match answer {
            Ok(v) => v,
            Err(refusal) => return Err(self.refuse(caller, refusal, line, args)),
        };
        line.insert("backend".into(), Value::String("catalog".into()));
        line.insert("decision".into(), Value::String("allowed".into()));
        if let Err(e) = self.append_for(&caller.identity, "call", line) {
            let error = CallError::AuditUnavailable(told(&e));
            return Err(Refused::before_backend(error, args));
        }
        let mut done = Map::new();
        done.insert("call".into(), Value::String(call_id));
        done.insert(
            "duration_ms".into(),
            Value::from(started.elapsed().as_millis() as u64),
        );
        done.insert("status".into(), Value::String("ok".into()));
        if let Err(e) = self.state.audit.append("call_result", done) {
            let error = CallError::AuditUnavailable(told(&e));
            return Err(Refused::before_backend(error, args));
        }
        Ok(Called { value, redacted: 0 })
    }

    /// Rate limit, lookup, validation, policy and approval. Adds what it
    /// learns to the audit line.
    fn admit<'c>(
        &self,
        catalog: &'c Catalog,
        caller: &Caller,
        name: &str,
        args: &Value,
        args_hash: &str,
        line: &mut Map<String, Value>,
    ) -> Result<&'c crate::catalog::Entry, CallError> {
        // Charged before anything else, whatever the call turns out to be.
        self.take_token(&caller.identity)?;
        if catalog::name_too_long(name).is_some() {
            return Err(CallError::NameTooLong {
                name: quote_name(name),
                bytes: name.len(),
            });
        }
        let entry = match catalog.get(name) {
            Some(entry) => entry,
            None => {
                return Err(match self.unavailable_for(name) {
                    Some(why) => CallError::Backend {
                        tool: quote_name(name),
                        code: "unavailable".into(),
                        message: format!("{}: {why}", quote_name(name)),
                    },
                    None => CallError::UnknownTool {
                        name: quote_name(name),
                        did_you_mean: catalog.suggest(name),
                    },
                })
            }
        };
        let spec = &entry.spec;
        line.insert("tool_key".into(), audit_fields::tool_key(&spec.key));
        line.insert("tier".into(), Value::String(spec.tier.as_str().into()));
        let problems = entry.problems(args);
        if !problems.is_empty() {
            return Err(CallError::InvalidArguments {
                tool: spec.name.clone(),
                problems,
            });
        }
        self.policy
            .decide(&caller.identity, caller.from_groups, spec, catalog)
            .map_err(|d| CallError::PolicyDenied {
                tool: spec.name.clone(),
                reason: d.0,
            })?;
        let needs_approval = self.approval_tiers.contains(&spec.tier);
        match &caller.plan {
            // Recording: nothing above a read is sent, so nothing is
            // approved now; the plan is, as a whole. A read runs, so it
            // is approved as always.
            Some(PlanRun::Record(_)) if spec.tier != Tier::Read => return Ok(entry),
            // A read the plan answers is not sent: nothing to approve.
            Some(PlanRun::Record(r)) if r.marked_change(args).is_some() => return Ok(entry),
            Some(PlanRun::Apply(plan)) if plan.may_be_step(&called(spec), spec.tier) => {
                match plan.take(&called(spec), args_hash, spec.tier, needs_approval, args) {
                    // Taken from the store, if it is the first, once its
                    // backend slot is held (`run_admitted`).
                    Taking::Step { change, .. } => {
                        line.insert("plan".into(), Value::String(plan.id.clone()));
                        line.insert("plan_change".into(), Value::from(change.n));
                        if let Some(k) = change.waits_on {
                            line.insert("waits_on".into(), Value::from(k));
                        }
                        return Ok(entry);
                    }
                    Taking::Stopped(stop) => {
                        line.insert("plan".into(), Value::String(plan.id.clone()));
                        return Err(CallError::Plan {
                            tool: spec.name.clone(),
                            error: PlanError::Stopped {
                                id: plan.id.clone(),
                                at: stop.at,
                                why: stop.why,
                            },
                        });
                    }
                    Taking::NotInPlan => {}
                }
            }
            _ => {}
        }
        if needs_approval {
            let shown = self.shown(&spec.name, args)?;
            let asked = Asked {
                identity: &caller.identity,
                tool: &spec.name,
                tool_key: &spec.key,
                args_hash,
                summary: &shown.short,
                detail: shown.full.as_deref(),
            };
            let check = self
                .state
                .approvals
                .check(&asked, self.now_ms())
                .map_err(|e| CallError::ApprovalUnavailable(told(&e)))?;
            match check {
                Check::Proceed {
                    request_id,
                    decided_by,
                    decided_via,
                    own,
                } => {
                    line.insert("approval".into(), Value::String(request_id));
                    // Who granted it, how, and whether it was the
                    // requester belong in the tamper-evident chain, not
                    // only in the (mutable) approval store.
                    if let Some(by) = decided_by {
                        line.insert("approved_by".into(), audit_fields::decider(&by));
                    }
                    if let Some(via) = decided_via {
                        line.insert("approved_via".into(), audit_fields::code(&via));
                    }
                    if own {
                        line.insert("approved_own".into(), Value::Bool(true));
                    }
                }
                Check::Required(r) => {
                    line.insert("approval".into(), Value::String(r.id.clone()));
                    let mut how = self.approve_instruction(&r.id);
                    if let Some(PlanRun::Apply(plan)) = &caller.plan {
                        line.insert("plan".into(), Value::String(plan.id.clone()));
                        let next = match (plan.stopped(), plan.next_change()) {
                            (Some(stop), _) => {
                                format!("it stopped at step {} ({})", stop.at, stop.why)
                            }
                            (None, Some(c)) => {
                                format!("its next change is {}. {} ({})", c.n, c.tool, c.summary)
                            }
                            (None, None) => "every change of it is made".into(),
                        };
                        how = format!(
                            "this call is not the next change of plan {} ({next}; changes are made in the plan's order, once each, and a changed argument makes another call), so it needs an approval of its own: {how}",
                            plan.id
                        );
                    }
                    return Err(CallError::ApprovalRequired {
                        tool: spec.name.clone(),
                        how,
                        request_id: r.id,
                        summary: r.summary,
                    });
                }
                Check::TooManyOpen { limit } => {
                    return Err(CallError::ApprovalLimit {
                        tool: spec.name.clone(),
                        identity: caller.identity.clone(),
                        limit,
                        list_command: self.list_command(),
                    });
                }
                Check::Denied(r) => {
                    line.insert("approval".into(), Value::String(r.id.clone()));
                    return Err(CallError::PolicyDenied {
                        tool: spec.name.clone(),
                        reason: format!(
                            "an operator denied this exact call (request {}, by {})",
                            r.id,
                            r.decided_by.unwrap_or_else(|| "an operator".into())
                        ),
                    });
                }
            }
        }
        Ok(entry)
    }

    fn take_token(&self, identity: &str) -> Result<(), CallError> {
        let per_minute = self.calls_per_minute;
        if per_minute == 0 {
            return Ok(());
        }
        match self.state.rate.take(identity, per_minute, self.now_ms()) {
            Ok(true) => Ok(()),
            Ok(false) => Err(CallError::RateLimited {
                identity: identity.to_string(),
                limit: per_minute,
            }),
            Err(e) => Err(CallError::RateUnavailable(told(&e))),
        }
    }
}

/// What became of a recorded plan at the end of its execution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanFiled {
    /// The script made no change.
    Empty,
    /// No change needs an approval: nothing to decide; the script runs
    /// as it is.
    NothingToApprove(Vec<PlannedChange>),
    /// Filed for a decision.
    Filed(Box<crate::approval::Request>),
    /// Not filed: the identity has `limit` requests waiting.
    TooManyOpen {
        changes: Vec<PlannedChange>,
        limit: u32,
    },
}

impl Gateway {
    /// Ends a plan-mode execution: files its changes as one approval
    /// request when any needs approval, and writes the plan's audit line
    /// (`plan`: its id, execution, how many changes, and the hash of
    /// their list, which the `planned` call lines of the execution add
    /// up to).
    pub fn file_plan(&self, caller: &Caller, recorder: &Recorder) -> Result<PlanFiled, CallError> {
        let changes = recorder.changes();
        if changes.is_empty() {
            return Ok(PlanFiled::Empty);
        }
        if !recorder.complete() {
            return Err(CallError::AuditUnavailable(
                "a planned change could not be written to the audit log, so the plan is not filed"
                    .into(),
            ));
        }
        let filed = if changes.iter().any(|c| c.needs_approval) {
            let check = self
                .state
                .approvals
                .file_plan(&recorder.id, &caller.identity, &changes, self.now_ms())
                .map_err(|e| CallError::ApprovalUnavailable(told(&e)))?;
            match check {
                Check::Required(r) => PlanFiled::Filed(Box::new(r)),
                Check::TooManyOpen { limit } => PlanFiled::TooManyOpen {
                    changes: changes.clone(),
                    limit,
                },
                other => unreachable!("filing a plan answers Required or TooManyOpen: {other:?}"),
            }
        } else {
            PlanFiled::NothingToApprove(changes.clone())
        };
        let mut line = Map::new();
        line.insert("plan".into(), Value::String(recorder.id.clone()));
        line.insert("identity".into(), Value::String(caller.identity.clone()));
        if let Some(e) = &caller.execution {
            line.insert("execution".into(), Value::String(e.clone()));
        }
        line.insert("changes".into(), Value::from(changes.len()));
        line.insert(
            "changes_sha256".into(),
            Value::String(crate::plan::list_hash(&changes)),
        );
        let status = match &filed {
            PlanFiled::Filed(_) => "pending",
            PlanFiled::TooManyOpen { .. } => "approval_limit",
            _ => "nothing_to_approve",
        };
        line.insert("status".into(), Value::String(status.into()));
        if let Err(e) = self.append_for(&caller.identity, "plan", line) {
            // Filed but not in the chain: made undecidable, never applied.
            if let PlanFiled::Filed(r) = &filed {
                let airlock = crate::decision::Decider {
                    who: "airlock: the plan's audit line could not be written".into(),
                    channel: crate::decision::Channel::Airlock,
                    may_approve_own: false,
                };
                if let Err(denied) = self.state.approvals.deny(&r.id, &airlock, self.now_ms()) {
                    tracing::error!(plan = %r.id, error = %denied, "a plan whose audit line failed could not be denied either; deny it with `airlock approvals deny`");
                }
            }
            return Err(CallError::AuditUnavailable(told(&e)));
        }
        Ok(filed)
    }

    /// Opens `caller`'s approved plan `id` for one execution to apply,
    /// without using it: the plan is taken from the store when its first
    /// change is about to be sent, so an execution that is refused, does
    /// not compile, is cancelled or sends nothing leaves it approved. A
    /// plan that could not be taken now is refused here already, with a
    /// `plan_apply` line saying why.
    pub fn open_plan(&self, caller: &Caller, id: &str) -> Result<Arc<Applying>, PlanError> {
        let found = if crate::plan::is_plan_id(id) {
            self.state
                .approvals
                .get(id)
                .map_err(|e| self.plan_store_error(e.into()))
                .and_then(|r| {
                    match crate::approval::untakeable(&r, &caller.identity, self.now_ms()) {
                        Some(refused) => Err(refused),
                        None => Ok(r),
                    }
                })
        } else {
            Err(PlanError::NotFound(quote_name(id)))
        };
        match found {
            Ok(r) => Ok(Arc::new(Applying::new(r.id, r.changes.unwrap_or_default()))),
            Err(e) => {
                self.plan_apply_line(caller, id, Err(&e)).map_err(|audit| {
                    PlanError::Storage(format!(
                        "the audit log cannot be written, so nothing runs: {audit}"
                    ))
                })?;
                Err(e)
            }
        }
    }

    /// Says a store failure while taking a plan as every store failure
    /// is said: no host, no server text.
    fn plan_store_error(&self, e: PlanError) -> PlanError {
        match e {
            PlanError::Storage(m) => PlanError::Storage(told(&ApprovalError::Storage(m))),
            other => other,
        }
    }

    /// Writes `plan_apply`: the plan taken for applying (with the hash of
    /// its list and who approved it), or refused and why.
    fn plan_apply_line(
        &self,
        caller: &Caller,
        id: &str,
        taken: Result<&crate::approval::Request, &PlanError>,
    ) -> Result<(), String> {
        let mut line = Map::new();
        line.insert("plan".into(), audit_fields::code(id));
        line.insert("identity".into(), Value::String(caller.identity.clone()));
        if let Some(e) = &caller.execution {
            line.insert("execution".into(), Value::String(e.clone()));
        }
        match taken {
            Ok(r) => {
                line.insert("decision".into(), Value::String("applying".into()));
                line.insert("changes_sha256".into(), Value::String(r.args_hash.clone()));
                if let Some(by) = &r.decided_by {
                    line.insert("approved_by".into(), audit_fields::decider(by));
                }
            }
            Err(e) => {
                line.insert("decision".into(), Value::String("refused".into()));
                line.insert("reason".into(), audit_fields::code(e.code()));
            }
        }
        self.append_for(&caller.identity, "plan_apply", line)
            .map(|_| ())
            .map_err(|e| told(&e))
    }

    /// Takes the plan from the store as its first change is about to be
    /// sent (approved → used, once, whatever runs at the same time), and
    /// writes `plan_apply`. Refused, the plan stops: nothing of it is
    /// sent.
    fn take_plan_now(&self, caller: &Caller, plan: &Applying, tool: &str) -> Result<(), CallError> {
        let taken = self
            .state
            .approvals
            .take_plan(&plan.id, &caller.identity, self.now_ms())
            .map_err(|e| self.plan_store_error(e));
        let written = self.plan_apply_line(caller, &plan.id, taken.as_ref());
        match (taken, written) {
            (Ok(r), Ok(())) => {
                plan.mark_taken(r.decided_by);
                Ok(())
            }
            (Ok(_), Err(audit)) => {
                // Taken but unrecorded: nothing of it runs (and it stays
                // used).
                plan.mark_taken(None);
                plan.stop_before_next("audit_unavailable");
                Err(CallError::AuditUnavailable(audit))
            }
            (Err(error), _) => {
                plan.stop_before_next(error.code());
                Err(CallError::Plan {
                    tool: tool.to_string(),
                    error,
                })
            }
        }
    }

    /// Records how applying a plan went (`plan_end`): how many changes
    /// were made, which were not, and where it stopped if it did. A plan
    /// this execution never took (it sent nothing) is still approved and
    /// gets no line.
    pub fn plan_finished(&self, caller: &Caller, plan: &Applying) {
        if !plan.taken() {
            return;
        }
        let left: Vec<Value> = plan
            .not_applied()
            .iter()
            .map(|c| Value::from(c.n))
            .collect();
        let mut line = Map::new();
        line.insert("plan".into(), Value::String(plan.id.clone()));
        if let Some(e) = &caller.execution {
            line.insert("execution".into(), Value::String(e.clone()));
        }
        line.insert("applied".into(), Value::from(plan.applied().len()));
        line.insert("not_applied".into(), Value::Array(left));
        if let Some(stop) = plan.stopped() {
            line.insert("stopped_at".into(), Value::from(stop.at));
            line.insert("stopped".into(), audit_fields::code(&stop.why));
        }
        if let Err(e) = self.append_for(&caller.identity, "plan_end", line) {
            tracing::warn!(plan = %plan.id, error = %e, "could not record the end of a plan's apply in the audit log");
        }
    }

    /// Records a person's decision on a plan (`plan_decision`), made in
    /// the client or by an operator command.
    pub fn plan_decided(&self, request: &crate::approval::Request) -> Result<(), AuditError> {
        crate::decision::record(&*self.state.audit, request)
    }
}

/// The tool `spec` is, as a plan matches it.
fn called(spec: &ToolSpec) -> PlanCalled<'_> {
    PlanCalled {
        name: &spec.name,
        key: &spec.key,
    }
}

/// A plan step on its way to the backend. Dropped before its answer (the
/// execution was cancelled or ran out of time), it stops the plan: the
/// change may or may not have been made, so nothing after it is.
struct StepGuard<'a> {
    plan: &'a Applying,
    n: u32,
    /// A read of an earlier change's result (a wait for its task).
    waits: bool,
    /// Handed to the backend (until then a cancellation made nothing).
    sent: bool,
    ended: bool,
}

impl StepGuard<'_> {
    /// How a successful answer ends the step: a change is made (and what
    /// it answered kept for the reads of it); a read of a task is made
    /// only once the task ended OK.
    fn end_of(&self, backend: &dyn Backend, spec: &ToolSpec, reply: &crate::Reply) -> StepEnd {
        if !self.waits {
            let answered = reply
                .request_id
                .clone()
                .or_else(|| reply.value.as_str().map(str::to_string));
            return StepEnd::Made(answered);
        }
        match backend.task_end(spec, &reply.value) {
            Some(TaskEnd::Ok) => StepEnd::Made(None),
            // Only task reads are recorded as steps; a plan that says
            // otherwise (an older Airlock's, a backend that changed) is
            // not trusted to have waited.
            None => StepEnd::Failed("not a read of a task".into()),
            Some(TaskEnd::Running) => StepEnd::NotEnded,
            Some(TaskEnd::Failed(status)) => StepEnd::Failed(crate::visible::quote(&status, 64)),
        }
    }

    fn end(&mut self, end: StepEnd) {
        self.ended = true;
        self.plan.ended(end);
    }
}

impl Drop for StepGuard<'_> {
    fn drop(&mut self) {
        if !self.ended {
            let why = if self.sent {
                "cancelled"
            } else {
                "cancelled before it was sent"
            };
            self.plan.ended(StepEnd::Failed(why.into()));
        }
    }
}

/// An allowed call on its way to the backend. If the future running it is
/// dropped first (the client went away, the execution was cancelled or
/// hit its time limit), the audit still gets the call's result line, with
/// status `cancelled`, so no allowed call is left without an ending.
struct Pending<'a> {
    audit: &'a dyn AuditStore,
    /// `None` once the call has ended normally.
    call_id: Option<String>,
    started: Instant,
    /// Whether the backend was handed the call: a call cancelled while
    /// it waited for a backend slot is recorded `sent: false`, known not
    /// made.
    sent: bool,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        let Some(call_id) = self.call_id.take() else {
            return;
        };
        let mut done = Map::new();
        done.insert("call".into(), Value::String(call_id));
        done.insert(
            "duration_ms".into(),
            Value::from(self.started.elapsed().as_millis() as u64),
        );
        done.insert("status".into(), Value::String("cancelled".into()));
        if !self.sent {
            done.insert("sent".into(), Value::Bool(false));
        }
        if let Err(e) = self.audit.append("call_result", done) {
            tracing::error!(error = %e, "could not record a cancelled call in the audit log");
        }
    }
}
