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

mod admit;
mod approvals;
mod executions;
pub mod owed_ends;
mod plans;
mod rate_counts;
mod rebuild;
mod refusals;

pub use executions::{LimitsUsed, StartError};
pub use plans::PlanFiled;
use plans::{called, StepGuard};
use rate_counts::Unwritten;
use refusals::told;
pub use refusals::{CallError, Called, GatewayError, Refused, STATE_RETRY_AFTER_MS};

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

use crate::caller::Caller;

use crate::{
    approval::{ApprovalError, ApprovalStore, Asked, Check},
    audit::{AuditError, AuditStore},
    audit_fields,
    backend::Backend,
    backend::TaskEnd,
    config::GatewayConfig,
    observe::{Observer, TimedAudit, UNKNOWN_TOOL},
    plan::{PlanError, PlannedChange, Recorder},
    plan_apply::{Applying, Called as PlanCalled, PlanRun, StepEnd, Taking},
    policy::{Mode, Policy, PolicyError},
    state::{OpenError, State, Stores},
};
use airlock_approver::summary;
use airlock_catalog::{
    catalog::{self, quote_name, Catalog, CatalogError, Clash},
    digest::{sha256_hex, sha256_json},
    discovery, redact,
    spec::{Tier, ToolSpec},
};

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
    runbook_outside: airlock_runbooks::runbook::Outside,
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
    /// End lines the chain is owed after an outage (`owed_ends`).
    owed_ends: Mutex<owed_ends::OwedEnds>,
    /// Set while one caller writes them.
    owed_writing: std::sync::atomic::AtomicBool,
    next_call: AtomicU64,
    /// Told of every call's decision and time, and of limit hits.
    observer: Option<Arc<dyn Observer>>,
    /// Told of each request filed for a person, once set.
    filed: std::sync::OnceLock<Arc<dyn crate::observe::Filed>>,
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
        stores: &dyn Stores,
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
        let state = stores.open(&config.approval).map_err(GatewayError::State)?;
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
                runbook_outside: config.runbook_outside,
                backends: by_id,
                order,
                calls_per_minute: config.rate.calls_per_minute,
                executions_per_identity: config.rate.executions_per_identity,
                execution_hold_ms: config.rate.execution_hold_ms,
                unwritten: Mutex::new(crate::rate::Swept::new()),
                executions: Mutex::new(HashMap::new()),
                owed_ends: Mutex::default(),
                owed_writing: Default::default(),
                next_call: AtomicU64::new(1),
                observer: None,
                filed: std::sync::OnceLock::new(),
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

    /// Tells `hook` of every request filed for a person from now on (set
    /// once; a second hook is refused and returned).
    pub fn on_filed(
        &self,
        hook: Arc<dyn crate::observe::Filed>,
    ) -> Result<(), Arc<dyn crate::observe::Filed>> {
        self.filed.set(hook)
    }

    /// A request `r` was filed just now.
    pub(super) fn tell_filed(&self, r: &crate::approval::Request) {
        if let Some(hook) = self.filed.get() {
            hook.filed(r);
        }
    }

    /// Replaces the wall clock (milliseconds since the epoch), for tests of
    /// expiry.
    pub fn with_clock(mut self, clock: impl Fn() -> i64 + Send + Sync + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// What a runbook's call outside its file does here.
    pub fn runbook_outside(&self) -> airlock_runbooks::runbook::Outside {
        self.runbook_outside
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
        // A runbook's own script numbers its calls apart from its caller.
        let script_call = caller.script_call.filter(|_| caller.runbook.is_none());
        if let Some(n) = script_call {
            line.insert("script_call".into(), Value::from(n));
        }
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
        if script_call.is_some() {
            line.insert(
                "tier".into(),
                serde_json::to_value(spec.tier).unwrap_or(Value::Null),
            );
        }
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
