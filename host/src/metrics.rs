//! What an operator's Prometheus scrapes from a replica (`serve --http
//! --metrics ADDR`): executions by outcome and their latency, limit hits
//! by limit, tool calls by tool and decision and their latency, audit
//! appends and their latency, approval requests waiting, HTTP requests
//! refused at the door (no credential, a bad key or token, too many),
//! admissions to a sandbox slot and the time waited for one by identity. In the
//! OpenMetrics text format, from the Prometheus project's own Rust client.
//!
//! The counts are process-wide ([`global`]): every execution and gateway
//! call of this process is counted, whichever transport started it. Every
//! label value comes from a bounded set (tool names the catalog has, the
//! audit's decision words, error kinds, limit names, the first
//! [`MAX_IDENTITY_SERIES`] identities), so neither a script nor a crowd of
//! identities can make the registry grow.

use std::{
    collections::HashSet,
    net::SocketAddr,
    path::PathBuf,
    sync::{atomic::AtomicU64, Arc, Mutex, OnceLock},
    time::Duration,
};

use airlock_gateway::observe::Observer;
use prometheus_client::{
    encoding::{text::encode, EncodeLabelSet},
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{exponential_buckets, Histogram},
    },
    registry::Registry,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModeLabel {
    /// The mode the execution's identity runs in (`ro`, `operator`,
    /// `rw`): three series per histogram, whatever the identities.
    mode: &'static str,
}

/// A histogram per identity mode.
type ByMode = Family<ModeLabel, Histogram, fn() -> Histogram>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabel {
    limit: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabel {
    tool: String,
    decision: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StoreLabel {
    store: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AdmissionLabel {
    identity: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct IdentityLabel {
    identity: String,
}

/// Identities given series of their own; executions of any further
/// identity are counted under [`OTHER_IDENTITIES`], so identities from an
/// OpenID provider cannot grow the registry without bound.
pub const MAX_IDENTITY_SERIES: usize = 1000;
pub const OTHER_IDENTITIES: &str = "_other";

/// The limits that refuse an execution before it runs.
const ADMISSION_LIMITS: [&str; 6] = [
    "rate.executions_per_identity",
    "executions_in_flight",
    "queue_depth",
    "queue_wait_ms",
    "executions_per_identity",
    "queued_per_identity",
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WrittenLabel {
    written: &'static str,
}

/// Counts one execution in the sandbox while it lives.
pub struct InSandbox(Gauge);

impl Drop for InSandbox {
    fn drop(&mut self) {
        self.0.dec();
    }
}

pub struct Metrics {
    registry: Registry,
    executions: Family<OutcomeLabel, Counter>,
    execution_seconds: Histogram,
    limit_hits: Family<LimitLabel, Counter>,
    /// What executions used of each limit, for tuning them (the same
    /// numbers `airlock limits report` reads from the audit).
    used_sandbox_seconds: ByMode,
    used_memory_bytes: ByMode,
    used_tool_calls: ByMode,
    used_result_bytes: ByMode,
    used_journal_bytes: ByMode,
    calls: Family<CallLabel, Counter>,
    call_seconds: Histogram,
    audit_appends: Family<WrittenLabel, Counter>,
    audit_seconds: Histogram,
    approvals_pending: Gauge,
    executions_parked: Gauge,
    executions_resumed: Counter,
    executions_in_sandbox: Gauge,
    http_refusals: Family<ReasonLabel, Counter>,
    state_refusals: Family<StoreLabel, Counter>,
    /// Refusals since the last log line, per store, and when it was
    /// written: one line per store per [`STATE_LOG_EVERY`], with counts.
    state_log: Mutex<std::collections::HashMap<&'static str, (u64, Option<std::time::Instant>)>>,
    admissions: Family<AdmissionLabel, Counter>,
    admission_wait: Family<IdentityLabel, Counter<f64, AtomicU64>>,
    labelled: Mutex<HashSet<String>>,
}

/// How often a store's refusals are logged, at most.
pub const STATE_LOG_EVERY: Duration = Duration::from_secs(10);

/// This process's metrics.
pub fn global() -> &'static Arc<Metrics> {
    static METRICS: OnceLock<Arc<Metrics>> = OnceLock::new();
    METRICS.get_or_init(|| Arc::new(Metrics::new()))
}

/// Buckets from 50 µs to ~105 s, doubling: an in-process call and a long
/// script alike fall inside.
fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.000_05, 2.0, 22))
}

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("airlock");
        let executions = Family::<OutcomeLabel, Counter>::default();
        registry.register(
            "executions",
            "Executions ended, by outcome (ok, an error kind, Cancelled)",
            executions.clone(),
        );
        let execution_seconds = seconds();
        registry.register(
            "execution_seconds",
            "Time from an execution's audited start to its end",
            execution_seconds.clone(),
        );
        let limit_hits = Family::<LimitLabel, Counter>::default();
        registry.register(
            "limit_hits",
            "Executions ended and calls refused by a limit, by the limit's name",
            limit_hits.clone(),
        );
        let mut by_mode = |name: &str, help: &str, new: fn() -> Histogram| {
            let family = ByMode::new_with_constructor(new);
            registry.register(name, help, family.clone());
            family
        };
        let used_sandbox_seconds = by_mode(
            "execution_used_sandbox_seconds",
            "Time an execution's last run spent in the sandbox, against wall_time_ms, by the identity's mode",
            || Histogram::new(exponential_buckets(0.001, 2.0, 20)),
        );
        let used_memory_bytes = by_mode(
            "execution_used_memory_bytes",
            "Peak linear memory of an execution's last run, against memory_bytes, by the identity's mode",
            || Histogram::new(exponential_buckets(1_048_576.0, 2.0, 13)),
        );
        let used_tool_calls = by_mode(
            "execution_used_tool_calls",
            "Tool calls an execution made, against tool_calls, by the identity's mode",
            || Histogram::new(exponential_buckets(1.0, 2.0, 15)),
        );
        let used_result_bytes = by_mode(
            "execution_used_result_bytes",
            "Bytes of an execution's value as JSON (before any cut), against result_bytes, by the identity's mode",
            || Histogram::new(exponential_buckets(64.0, 2.0, 20)),
        );
        let used_journal_bytes = by_mode(
            "execution_used_journal_bytes",
            "A durable execution's journal at its end, against journal_bytes, by the identity's mode",
            || Histogram::new(exponential_buckets(1024.0, 2.0, 20)),
        );
        let calls = Family::<CallLabel, Counter>::default();
        registry.register(
            "tool_calls",
            "Gateway calls by tool and decision (as the audit records it)",
            calls.clone(),
        );
        let call_seconds = seconds();
        registry.register(
            "tool_call_seconds",
            "Time of a whole gateway call, backend included",
            call_seconds.clone(),
        );
        let audit_appends = Family::<WrittenLabel, Counter>::default();
        registry.register(
            "audit_appends",
            "Audit lines appended (written=true) or refused by the store (written=false)",
            audit_appends.clone(),
        );
        let audit_seconds = seconds();
        registry.register(
            "audit_append_seconds",
            "Time of one audit append",
            audit_seconds.clone(),
        );
        let approvals_pending = Gauge::default();
        registry.register(
            "approvals_pending",
            "Approval requests waiting for a decision, as of the scrape",
            approvals_pending.clone(),
        );
        let executions_parked = Gauge::default();
        registry.register(
            "executions_parked",
            "Durable executions in the deployment's state: those waiting (for decisions, or a follow-up), which hold no instance and no slot, only their sealed journal; and running ones, which their servers journal as they go",
            executions_parked.clone(),
        );
        let executions_in_sandbox = Gauge::default();
        registry.register(
            "executions_in_sandbox",
            "`execute` runs of this process holding a sandbox instance now, or queued for one",
            executions_in_sandbox.clone(),
        );
        let executions_resumed = Counter::default();
        registry.register(
            "executions_resumed",
            "Parked executions resumed by replay (each resume of one counts)",
            executions_resumed.clone(),
        );
        let http_refusals = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "http_refusals",
            "HTTP requests refused before reaching MCP, by reason (no_credential, bad_key, a token's failure such as expired or audience, rate_limited, auth_rate_limited (an address past --failed-auth-per-minute), not_your_session, unknown_session)",
            http_refusals.clone(),
        );
        let state_refusals = Family::<StoreLabel, Counter>::default();
        registry.register(
            "state_refusals",
            "Executions refused before they ran because a state store could not be reached, by store (audit, execution_places, approvals): answered StateUnavailable, retryable",
            state_refusals.clone(),
        );
        let admissions = Family::<AdmissionLabel, Counter>::default();
        registry.register(
            "admissions",
            "Executions admitted to a sandbox slot (outcome=admitted) or refused before running (outcome=the limit's name), by identity",
            admissions.clone(),
        );
        let admission_wait = Family::<IdentityLabel, Counter<f64, AtomicU64>>::default();
        registry.register(
            "admission_wait_seconds",
            "Time executions waited for a sandbox slot, by identity (admitted and refused alike)",
            admission_wait.clone(),
        );
        Self {
            admissions,
            admission_wait,
            labelled: Mutex::default(),
            registry,
            executions,
            execution_seconds,
            limit_hits,
            used_sandbox_seconds,
            used_memory_bytes,
            used_tool_calls,
            used_result_bytes,
            used_journal_bytes,
            calls,
            call_seconds,
            audit_appends,
            audit_seconds,
            approvals_pending,
            executions_parked,
            executions_resumed,
            executions_in_sandbox,
            http_refusals,
            state_refusals,
            state_log: Mutex::default(),
        }
    }

    /// An execution refused because `store` could not be reached:
    /// counted, and logged at most once per [`STATE_LOG_EVERY`] per store
    /// with how many were refused since (an outage under load refuses
    /// hundreds a second; the log says so in a line, not hundreds).
    pub fn state_refusal(&self, store: &'static str) {
        self.state_refusals
            .get_or_create(&StoreLabel { store })
            .inc();
        let mut log = self.state_log.lock().unwrap_or_else(|p| p.into_inner());
        let (count, last) = log.entry(store).or_insert((0, None));
        *count += 1;
        if last.is_none_or(|t| t.elapsed() >= STATE_LOG_EVERY) {
            tracing::error!(
                store,
                refused = *count,
                "executions refused: the {store} store cannot be reached (answered StateUnavailable, retryable); /healthz reports not ready until it can"
            );
            *count = 0;
            *last = Some(std::time::Instant::now());
        }
    }

    /// An HTTP request refused at the door; `reason` is one of a fixed
    /// set of words, never anything a client sent.
    pub fn refused(&self, reason: &'static str) {
        self.http_refusals
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    /// One execution ended: `outcome` is `ok`, an error kind or
    /// `Cancelled`; `limit` the limit it hit, if that is how it ended.
    pub fn execution(&self, outcome: &'static str, limit: Option<&'static str>, took: Duration) {
        self.executions
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
        self.execution_seconds.observe(took.as_secs_f64());
        if let Some(limit) = limit {
            self.limit_hits.get_or_create(&LimitLabel { limit }).inc();
        }
    }

    /// What one execution used of its limits; `mode` is its identity's.
    /// What was not measured (an execution cancelled outside the sandbox,
    /// a journal of one that is not durable) is not observed.
    pub fn used(&self, mode: &'static str, used: &airlock_gateway::gateway::LimitsUsed) {
        let label = ModeLabel { mode };
        self.used_tool_calls
            .get_or_create(&label)
            .observe(f64::from(used.tool_calls));
        let measured = [
            (
                &self.used_sandbox_seconds,
                used.sandbox.map(|d| d.as_secs_f64()),
            ),
            (
                &self.used_memory_bytes,
                used.peak_memory_bytes.map(|b| b as f64),
            ),
            (&self.used_result_bytes, used.result_bytes.map(|b| b as f64)),
            (
                &self.used_journal_bytes,
                used.journal_bytes.map(|b| b as f64),
            ),
        ];
        for (family, value) in measured {
            if let Some(v) = value {
                family.get_or_create(&label).observe(v);
            }
        }
    }

    /// One execution's admission: how long `identity` waited for a slot,
    /// and the limit that refused it if one did (`limit` of an
    /// execution's end; limits that are not about admission count it as
    /// admitted).
    pub fn admission(&self, identity: &str, waited: Duration, limit: Option<&'static str>) {
        let identity = &label_value(identity);
        let identity = {
            let mut labelled = self.labelled.lock().unwrap_or_else(|p| p.into_inner());
            if labelled.contains(identity) {
                identity.to_string()
            } else if labelled.len() < MAX_IDENTITY_SERIES {
                labelled.insert(identity.to_string());
                identity.to_string()
            } else {
                OTHER_IDENTITIES.to_string()
            }
        };
        let outcome = limit
            .filter(|l| ADMISSION_LIMITS.contains(l))
            .unwrap_or("admitted");
        self.admission_wait
            .get_or_create(&IdentityLabel {
                identity: identity.clone(),
            })
            .inc_by(waited.as_secs_f64());
        self.admissions
            .get_or_create(&AdmissionLabel { identity, outcome })
            .inc();
    }

    /// An execution enters the sandbox (holding or queued for an
    /// instance) until the guard is dropped.
    pub fn in_sandbox(&self) -> InSandbox {
        self.executions_in_sandbox.inc();
        InSandbox(self.executions_in_sandbox.clone())
    }

    /// Executions parked in the deployment, as of a scrape.
    pub fn parked(&self, n: usize) {
        self.executions_parked.set(n.min(i64::MAX as usize) as i64);
    }

    /// A parked execution resumed.
    pub fn resumed(&self) {
        self.executions_resumed.inc();
    }

    /// The exposition, with the pending approvals as counted just now
    /// (`None`: the store could not be asked; the gauge keeps its last).
    pub fn render(&self, pending: Option<u64>) -> String {
        if let Some(n) = pending {
            self.approvals_pending.set(n.min(i64::MAX as u64) as i64);
        }
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String does not fail");
        out
    }
}

/// An identity as a label value: the exposition library writes label
/// values as they are, so a `"` or `\` in an identity (a provider's
/// subject may hold them) would break the scrape. Anything but letters,
/// digits and `._-@:+/` becomes `_`; at most 128 bytes.
fn label_value(identity: &str) -> String {
    identity
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-@:+/".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(128)
        .collect()
}

impl Observer for Metrics {
    fn call(&self, tool: &str, decision: &'static str, elapsed: Duration) {
        self.calls
            .get_or_create(&CallLabel {
                tool: tool.to_string(),
                decision,
            })
            .inc();
        self.call_seconds.observe(elapsed.as_secs_f64());
    }

    fn limit_hit(&self, limit: &'static str) {
        self.limit_hits.get_or_create(&LimitLabel { limit }).inc();
    }

    fn audit_append(&self, elapsed: Duration, written: bool) {
        let written = if written { "true" } else { "false" };
        self.audit_appends
            .get_or_create(&WrittenLabel { written })
            .inc();
        self.audit_seconds.observe(elapsed.as_secs_f64());
    }
}

/// `serve --http --metrics ADDR [--metrics-key-file FILE]`.
#[derive(Clone, Debug)]
pub struct MetricsOptions {
    pub listen: SocketAddr,
    /// A file whose first line is the bearer key scrapers must send.
    /// Without one, only a loopback address may be listened on.
    pub key_file: Option<PathBuf>,
}

/// Serves `GET /metrics` on its own listener until the process ends.
/// Refuses a non-loopback address without a key file: the counts name
/// identities' tools and decisions, which are not for everyone.
pub async fn serve(
    options: MetricsOptions,
    gateway: Arc<airlock_gateway::Gateway>,
) -> Result<SocketAddr, String> {
    use axum::{
        http::{header, StatusCode},
        response::IntoResponse,
        routing::get,
        Router,
    };
    let key = match &options.key_file {
        Some(path) => {
            let text = airlock_edge::credential_file::read(path)
                .map_err(|e| format!("--metrics-key-file: {e}"))?;
            let key = text.lines().next().unwrap_or("").trim().to_string();
            if key.len() < 16 {
                return Err(format!(
                    "--metrics-key-file {}: the key on its first line is {} characters; use at least 16 (e.g. `openssl rand -hex 32`)",
                    path.display(),
                    key.len()
                ));
            }
            Some(airlock_gateway::keys::hash(&key))
        }
        None if options.listen.ip().is_loopback() => None,
        None => {
            return Err(format!(
                "--metrics {} is not a loopback address: add --metrics-key-file FILE so only scrapers with its key read the metrics",
                options.listen
            ))
        }
    };
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|e| format!("cannot listen on {} for metrics: {e}", options.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let scrape = move |headers: axum::http::HeaderMap| {
        let gateway = gateway.clone();
        async move {
            if let Some(expected) = key {
                use subtle::ConstantTimeEq;
                let given = headers
                    .get(header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.strip_prefix("Bearer "))
                    .map(|k| airlock_gateway::keys::hash(k.trim()));
                let ok = given.is_some_and(|g| bool::from(g.ct_eq(&expected)));
                if !ok {
                    return (
                        StatusCode::UNAUTHORIZED,
                        [(header::CONTENT_TYPE, "text/plain")],
                        "a valid bearer key is required (the one in --metrics-key-file)"
                            .to_string(),
                    )
                        .into_response();
                }
            }
            let pending = tokio::task::spawn_blocking(move || {
                // Counted where they are kept, as of the scrape: any
                // replica parks and ends them.
                if let Ok(n) = gateway.state().parked.count() {
                    global().parked(n as usize);
                }
                let now = gateway.now_ms();
                gateway.approvals().list(now, false).ok().map(|list| {
                    list.iter()
                        .filter(|r| r.status == airlock_gateway::approval::Status::Pending)
                        .count() as u64
                })
            })
            .await
            .ok()
            .flatten();
            let rendered = global().render(pending);
            let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
            let (kind, body) = if crate::exposition::wants_text(accept) {
                (
                    crate::exposition::TEXT,
                    crate::exposition::to_text(&rendered),
                )
            } else {
                (crate::exposition::OPENMETRICS, rendered)
            };
            (StatusCode::OK, [(header::CONTENT_TYPE, kind)], body).into_response()
        }
    };
    let app = Router::new().route("/metrics", get(scrape));
    tokio::spawn(async move {
        if let Err(e) = axum::serve(crate::listener::no_delay(listener), app).await {
            tracing::error!(error = %e, "the metrics listener stopped");
        }
    });
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_past_the_first_thousand_share_one_series() {
        let m = Metrics::new();
        for i in 0..MAX_IDENTITY_SERIES + 500 {
            m.admission(&format!("id-{i}"), Duration::from_millis(1), None);
        }
        m.admission("id-0", Duration::ZERO, Some("queued_per_identity"));
        let text = m.render(None);
        let series = text
            .lines()
            .filter(|l| l.starts_with("airlock_admissions_total{"))
            .count();
        // One per labelled identity, one for the rest, and id-0's refusal.
        assert_eq!(series, MAX_IDENTITY_SERIES + 2, "{series}");
        assert!(
            text.contains("airlock_admissions_total{identity=\"_other\",outcome=\"admitted\"} 500")
        );
        assert!(text.contains(
            "airlock_admissions_total{identity=\"id-0\",outcome=\"queued_per_identity\"} 1"
        ));
    }

    #[test]
    fn identities_cannot_break_the_exposition() {
        let m = Metrics::new();
        m.admission("x\",outcome=\"a\\\n", Duration::ZERO, None);
        let text = m.render(None);
        assert!(
            text.contains(
                "airlock_admissions_total{identity=\"x__outcome__a__\",outcome=\"admitted\"} 1"
            ),
            "{text}"
        );
    }
}
