//! The QuoxCORE collector backend. A collector serves tools chosen per
//! agent, read-only resources and operational prompts over HTTP; Airlock
//! discovers the three lists at start-up and on an interval, offers the
//! tools in its catalog as `quox_<name>` (so they can never shadow a
//! Proxmox tool) and runs every call through the gateway like any other.
//!
//! If the collector is down, Airlock runs without its tools and keeps
//! trying in the background (exponential backoff up to 8 s); the catalog
//! picks the tools up as soon as a discovery succeeds.
//!
//! It implements the gateway's `Backend` trait and knows nothing of
//! Proxmox, MCP or the simulated collector (which it is tested against).

mod client;
mod discovery;
pub mod sanitize;
pub mod template;

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, RwLock, Weak,
    },
    time::{Duration, Instant},
};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

pub use discovery::{PromptArgument, Resource};

use airlock_catalog::spec::{Tier, ToolSpec};
use airlock_gateway::{
    backend::{Backend, BackendError, Reply},
    caller::Caller,
};

/// Backend id, recorded in audit lines.
pub const BACKEND_ID: &str = "quox";
/// Every collector tool's catalog name starts with it.
pub const NAMESPACE: &str = "quox_";
/// How long a live resource's content is reused.
pub const LIVE_CACHE: Duration = Duration::from_secs(30);
const MAX_BACKOFF: Duration = Duration::from_secs(8);

/// `[collector]` in the configuration.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct CollectorConfig {
    pub url: String,
    /// For an `https://` collector: a PEM bundle of the CAs to trust …
    pub ca_file: Option<PathBuf>,
    /// … or the SHA-256 fingerprint of its certificate.
    pub fingerprint: Option<String>,
    /// A file holding the service key; else `QUOX_SERVICE_KEY`, else
    /// `INTERNAL_SERVICE_KEY`. Never written in the configuration itself.
    pub service_key_file: Option<PathBuf>,
    /// Else `QUOX_AGENT_ID`, else `quox`.
    pub agent_id: Option<String>,
    /// Else `QUOX_SESSION_ID`, else one made up per process. Each
    /// identity gets a session of its own under it (`<session_id>-<hash of
    /// the identity>`), so the collector can tell people apart.
    pub session_id: Option<String>,
    /// The organisation every call is attributed to (`org_id`); else
    /// `QUOX_ORG_ID`, else `airlock`. Each call also names the Airlock
    /// identity that made it (`user_id`).
    pub org_id: Option<String>,
    pub timeout_secs: u64,
    /// How often the lists are discovered again.
    pub refresh_secs: u64,
    pub max_response_bytes: u64,
    /// First matching rule gives a tool's tier (`*` is a wildcard over the
    /// collector's own name); unmatched tools get `default_tier`.
    pub tiers: Vec<TierRule>,
    pub default_tier: Tier,
}

impl Default for CollectorConfig {
    fn default() -> Self {
        Self {
            url: "http://127.0.0.1:9848".into(),
            ca_file: None,
            fingerprint: None,
            service_key_file: None,
            agent_id: None,
            session_id: None,
            org_id: None,
            timeout_secs: 30,
            refresh_secs: 60,
            max_response_bytes: 4 << 20,
            tiers: Vec::new(),
            default_tier: Tier::Admin,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TierRule {
    #[serde(rename = "match")]
    pub pattern: String,
    pub tier: Tier,
}

/// What went wrong talking to the collector. Texts carry neither the
/// collector's address nor the key.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CollectorError {
    #[error("collector configuration: {0}")]
    Config(String),
    #[error("the collector is unreachable")]
    Unreachable {
        /// Whether the request may have reached it (only a refused
        /// connection proves it did not).
        sent: bool,
    },
    #[error("the collector did not answer within {} s", .0.as_secs())]
    Timeout(Duration),
    #[error("the collector refused the service key (HTTP {0}); check service_key_file or QUOX_SERVICE_KEY")]
    KeyRefused(u16),
    #[error("the collector answered HTTP {status}{}", if message.is_empty() { String::new() } else { format!(": {message}") })]
    Status { status: u16, message: String },
    #[error("the collector's answer is larger than {limit} bytes (collector.max_response_bytes)")]
    TooLarge { limit: u64 },
    /// Within the byte cap, but too costly to parse (`json_budget`).
    #[error("the collector's answer holds more than {limit} JSON values (at most one per {} bytes of collector.max_response_bytes = {cap}; a key counts as one value, an object or array as {}) and was not parsed; ask for less or raise collector.max_response_bytes", airlock_edge::json_budget::BYTES_PER_VALUE, airlock_edge::json_budget::CONTAINER_WEIGHT)]
    TooManyValues { limit: u64, cap: u64 },
    #[error("the collector's answer is not valid JSON ({0})")]
    Malformed(String),
    #[error("no resource {0} from the collector")]
    UnknownResource(String),
}

impl CollectorError {
    /// The tool-error code a script sees.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Timeout(_) => "timeout",
            Self::Unreachable { .. } => "unavailable",
            Self::KeyRefused(_) => "backend_auth",
            Self::TooLarge { .. } | Self::TooManyValues { .. } => "response_too_large",
            Self::Malformed(_) => "bad_response",
            _ => "backend_error",
        }
    }
}

/// Why a collector prompt could not be rendered.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum PromptError {
    #[error("no collector prompt `{0}`")]
    Unknown(String),
    #[error("prompt `{prompt}` needs the argument `{argument}`")]
    Missing { prompt: String, argument: String },
    #[error("prompt `{prompt}` has no argument `{argument}` (it has: {known})")]
    Extra {
        prompt: String,
        argument: String,
        known: String,
    },
    #[error("prompt argument `{0}` must be a string")]
    NotText(String),
}

/// A collector prompt as a client lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct PromptInfo {
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub arguments: Vec<PromptArgument>,
}

/// The collector is down, rather than refusing or answering badly.
fn is_outage(e: &CollectorError) -> bool {
    match e {
        CollectorError::Unreachable { .. } | CollectorError::Timeout(_) => true,
        CollectorError::Status { status, .. } => *status >= 500,
        _ => false,
    }
}

/// The resource and prompt lists as a client sees them: everything but
/// a live resource's content and the prompts' templates.
fn listed(found: &Found) -> Vec<String> {
    let resources = found.resources.iter().map(|r| {
        format!(
            "r\0{}\0{}\0{:?}\0{:?}\0{}",
            r.uri, r.name, r.title, r.description, r.mime_type
        )
    });
    let prompts = found.prompts.iter().map(|p| {
        format!(
            "p\0{}\0{:?}\0{:?}\0{:?}",
            p.name, p.title, p.description, p.arguments
        )
    });
    resources.chain(prompts).collect()
}

/// What the last successful discovery found.
#[derive(Default)]
struct Found {
    /// When the resource list was last installed.
    resources_at: Option<Instant>,
    /// The collector's tool list as it last answered it.
    tools_list: Option<Value>,
    tools: Vec<discovery::Tool>,
    resources: Vec<Resource>,
    prompts: Vec<Arc<discovery::Prompt>>,
}

pub struct Collector {
    client: client::Client,
    agent_id: String,
    session_id: String,
    org_id: String,
    config: CollectorConfig,
    found: RwLock<Found>,
    generation: AtomicU64,
    /// Tells watchers (tests, the start-up report) that the tools changed.
    changed: tokio::sync::watch::Sender<u64>,
    /// Counts changes of the resource or prompt lists (not of a live
    /// resource's content), for MCP sessions to send `list_changed`.
    lists: tokio::sync::watch::Sender<u64>,
    up: AtomicBool,
    /// Why the last discovery failed (never the collector's address).
    last_failure: std::sync::Mutex<Option<String>>,
    live: std::sync::Mutex<HashMap<String, (Instant, String)>>,
    /// The last failed live read, for 30 s.
    live_failure: std::sync::Mutex<Option<(Instant, CollectorError)>>,
}

impl Collector {
    /// The session of `identity` under this process's session id: stable
    /// for the process, one per person, and no longer than an id may be.
    fn session_for(&self, identity: &str) -> String {
        let hash = airlock_catalog::digest::sha256_hex(identity.as_bytes());
        format!("{}-{}", self.session_id, &hash[..12])
            .chars()
            .take(64)
            .collect()
    }
}

/// `args` with the schema's top-level `default`s for the properties the
/// call left out, as the collector's own clients send them.
fn with_defaults(schema: &Value, mut args: Value) -> Value {
    let properties = schema.get("properties").and_then(Value::as_object);
    if let (Some(properties), Some(given)) = (properties, args.as_object_mut()) {
        for (name, property) in properties {
            if let Some(default) = property.get("default") {
                given.entry(name.clone()).or_insert_with(|| default.clone());
            }
        }
    }
    args
}

fn valid_id(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Plain HTTP only to this machine: the service key travels in a header,
/// so over `http://` to another host anyone on the path can read it.
fn check_plain_http(url: &str) -> Result<(), CollectorError> {
    let parsed = reqwest::Url::parse(url)
        .map_err(|e| CollectorError::Config(format!("collector.url is not a URL ({e})")))?;
    if parsed.scheme() != "http" {
        return Ok(());
    }
    // The URL parser has already turned `127.1` or `0x7f.0.0.1` into the
    // dotted form and lower-cased the name.
    let host = parsed.host_str().unwrap_or_default();
    let loopback = host == "localhost"
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if loopback {
        return Ok(());
    }
    Err(CollectorError::Config(
        "collector.url: plain http:// is only allowed to a loopback address (127.0.0.0/8, ::1, localhost), because the service key would cross the network in clear; use https:// with collector.ca_file or collector.fingerprint, or reach the collector through a loopback address".into(),
    ))
}

/// Whether the collector's `approvalId` may be recorded as the request id
/// in the audit: short, and only characters an id has. The collector
/// chooses it, so anything else stays in the result alone.
fn valid_request_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'))
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

impl Collector {
    /// Resolves the key and ids; does not contact the collector.
    pub fn new(config: CollectorConfig) -> Result<Self, CollectorError> {
        let url = config.url.trim();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(CollectorError::Config(format!(
                "collector.url must start with http:// or https://, not {url:?}"
            )));
        }
        check_plain_http(url)?;
        let key = match &config.service_key_file {
            Some(path) => airlock_edge::credential_file::read(path)
                .map_err(|e| CollectorError::Config(format!("collector.service_key_file: {e}")))?
                .trim()
                .to_string(),
            None => env("QUOX_SERVICE_KEY")
                .or_else(|| env("INTERNAL_SERVICE_KEY"))
                .ok_or_else(|| {
                    CollectorError::Config(
                        "no service key: set collector.service_key_file, or QUOX_SERVICE_KEY (or INTERNAL_SERVICE_KEY)".into(),
                    )
                })?,
        };
        if key.is_empty() {
            return Err(CollectorError::Config(
                "the collector service key is empty".into(),
            ));
        }
        let agent_id = config
            .agent_id
            .clone()
            .or_else(|| env("QUOX_AGENT_ID"))
            .unwrap_or_else(|| "quox".into());
        let session_id = config
            .session_id
            .clone()
            .or_else(|| env("QUOX_SESSION_ID"))
            .unwrap_or_else(|| {
                let mut b = [0u8; 6];
                let _ = getrandom::fill(&mut b);
                format!("airlock-{}", hex::encode(b))
            });
        let org_id = config
            .org_id
            .clone()
            .or_else(|| env("QUOX_ORG_ID"))
            .unwrap_or_else(|| "airlock".into());
        for (what, id) in [
            ("agent id", &agent_id),
            ("session id", &session_id),
            ("org id", &org_id),
        ] {
            if !valid_id(id) {
                return Err(CollectorError::Config(format!(
                    "collector {what} {id:?} must match ^[A-Za-z0-9_-]{{1,64}}$"
                )));
            }
        }
        for rule in &config.tiers {
            if rule.pattern.is_empty() {
                return Err(CollectorError::Config(
                    "collector.tiers: a rule's `match` is empty".into(),
                ));
            }
        }
        let trust = match (&config.fingerprint, &config.ca_file) {
            (Some(fp), _) => Some(airlock_edge::tls::Trust::Pin(
                airlock_edge::tls::parse_fingerprint(fp)
                    .map_err(|e| CollectorError::Config(format!("collector.fingerprint: {e}")))?,
            )),
            (None, Some(ca)) => Some(airlock_edge::tls::Trust::CaBundle(ca.clone())),
            (None, None) => None,
        };
        let client = client::Client::new(
            url,
            &key,
            trust.as_ref(),
            Duration::from_secs(config.timeout_secs.max(1)),
            config.max_response_bytes.max(1024),
        )?;
        Ok(Self {
            client,
            agent_id,
            session_id,
            org_id,
            config,
            found: RwLock::default(),
            generation: AtomicU64::new(0),
            changed: tokio::sync::watch::channel(0).0,
            lists: tokio::sync::watch::channel(0).0,
            up: AtomicBool::new(false),
            last_failure: Default::default(),
            live: Default::default(),
            live_failure: Default::default(),
        })
    }

    /// Whether the last discovery succeeded.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::SeqCst)
    }

    /// Fetches the three lists in parallel and installs what they hold.
    /// The tool list is required; resources and prompts are kept from
    /// before if their lists fail.
    pub async fn discover(&self) -> Result<(), CollectorError> {
        let query = [("agent_id", self.agent_id.as_str())];
        let (tools, resources, prompts) = tokio::join!(
            self.client.get("/api/v1/tools/list", &query),
            self.client.get("/api/v1/resources/list", &[]),
            self.client.get("/api/v1/prompts/list", &[]),
        );
        let list = match tools {
            Ok(list) => list,
            Err(e) => {
                self.up.store(false, Ordering::SeqCst);
                *self.last_failure.lock().unwrap() = Some(e.to_string());
                return Err(e);
            }
        };
        // The list rarely changes between refreshes; compiling every
        // tool's schema again for an identical list is wasted work.
        let unchanged = self
            .found
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .tools_list
            .as_ref()
            == Some(&list);
        let tools = (!unchanged)
            .then(|| discovery::tools(&list, &self.config.tiers, self.config.default_tier));
        // Parsed before the lock is taken, so readers never wait on it.
        let resources = match resources {
            Ok(list) => Some(discovery::resources(&list)),
            Err(e) => {
                tracing::warn!("collector resources list: {e}; keeping the previous one");
                None
            }
        };
        let prompts = match prompts {
            Ok(list) => Some(
                discovery::prompts(&list)
                    .into_iter()
                    .map(Arc::new)
                    .collect::<Vec<_>>(),
            ),
            Err(e) => {
                tracing::warn!("collector prompts list: {e}; keeping the previous one");
                None
            }
        };
        let listed_before = listed(&self.found.read().unwrap_or_else(|p| p.into_inner()));
        let mut found = self.found.write().unwrap_or_else(|p| p.into_inner());
        if let Some(tools) = tools {
            found.tools_list = Some(list);
            if found.tools != tools {
                found.tools = tools;
                let g = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
                self.changed.send_replace(g);
            }
        }
        if let Some(r) = resources {
            found.resources = r;
            found.resources_at = Some(Instant::now());
        }
        if let Some(p) = prompts {
            found.prompts = p;
        }
        drop(found);
        if listed(&self.found.read().unwrap_or_else(|p| p.into_inner())) != listed_before {
            self.lists.send_modify(|n| *n += 1);
        }
        self.up.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Discovers again every `refresh_secs`, and after a failure with
    /// backoff (0.5 s doubling to 8 s), until the collector is dropped.
    pub fn keep_discovering(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let weak: Weak<Self> = Arc::downgrade(self);
        let refresh = Duration::from_secs(self.config.refresh_secs.max(1));
        tokio::spawn(async move {
            let mut backoff = Duration::from_millis(500);
            let mut was_up = weak.upgrade().is_some_and(|c| c.is_up());
            loop {
                let wait = if was_up { refresh } else { backoff };
                tokio::time::sleep(wait).await;
                let Some(me) = weak.upgrade() else { return };
                match me.discover().await {
                    Ok(()) => {
                        if !was_up {
                            tracing::info!(
                                tools = me.tool_count(),
                                "the QuoxCORE collector is up; its tools are in the catalog"
                            );
                        }
                        was_up = true;
                        backoff = Duration::from_millis(500);
                    }
                    Err(e) => {
                        if was_up {
                            tracing::warn!(
                                "the QuoxCORE collector stopped answering: {e}; retrying"
                            );
                        }
                        was_up = false;
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                    }
                }
            }
        })
    }

    /// Sees every change of the discovered tools (the value is the
    /// backend's generation).
    pub fn watch(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Sees every change of the resource and prompt lists as a client
    /// lists them (a live resource's new content is no change).
    pub fn watch_lists(&self) -> tokio::sync::watch::Receiver<u64> {
        self.lists.subscribe()
    }

    pub fn tool_count(&self) -> usize {
        self.found.read().map(|f| f.tools.len()).unwrap_or(0)
    }

    pub fn resources(&self) -> Vec<Resource> {
        self.found
            .read()
            .map(|f| f.resources.clone())
            .unwrap_or_default()
    }

    /// A resource's text: live ones are fetched again (the collector
    /// re-reads them per list) unless read in the last 30 s.
    /// When the collector is down (unreachable, too slow, or a 5xx), the
    /// newest content known is served (the last read or listing, as
    /// QuoxMCP falls back), and the failure is remembered for 30 s so
    /// reads during an outage do not each wait on it; with no content
    /// known, the failure is the answer. Any other failure (a refused key,
    /// an answer too large or malformed) is the answer.
    pub async fn read_resource(&self, uri: &str) -> Result<Resource, CollectorError> {
        let known = self
            .resources()
            .into_iter()
            .find(|r| r.uri == uri)
            .ok_or_else(|| CollectorError::UnknownResource(uri.to_string()))?;
        if !known.live {
            return Ok(known);
        }
        let cached = self
            .live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(uri)
            .cloned();
        if let Some((at, content)) = &cached {
            if at.elapsed() < LIVE_CACHE {
                return Ok(Resource {
                    content: content.clone(),
                    ..known
                });
            }
        }
        let recent_failure = self
            .live_failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .filter(|(at, _)| at.elapsed() < LIVE_CACHE);
        let failure = match recent_failure {
            Some((_, e)) => e,
            None => match self.client.get("/api/v1/resources/list", &[]).await {
                Ok(list) => {
                    *self.live_failure.lock().unwrap_or_else(|p| p.into_inner()) = None;
                    let fresh = discovery::resources(&list);
                    self.remember_live(&fresh);
                    return fresh
                        .into_iter()
                        .find(|r| r.uri == uri)
                        .ok_or_else(|| CollectorError::UnknownResource(uri.to_string()));
                }
                Err(e) if is_outage(&e) => {
                    tracing::warn!(
                        "collector resource {uri:?}: {e}; serving the newest content known for 30 s"
                    );
                    *self.live_failure.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some((Instant::now(), e.clone()));
                    e
                }
                Err(e) => return Err(e),
            },
        };
        // The newer of the last read and the last listing.
        let listed_at = self
            .found
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .resources_at;
        let content = match cached {
            Some((at, c)) if listed_at.is_none_or(|l| at > l) => c,
            _ => known.content,
        };
        if content.is_empty() {
            return Err(failure);
        }
        Ok(Resource { content, ..known })
    }

    /// Keeps the live resources' content as this listing holds it, and
    /// nothing else: the cache is never larger than one listing.
    fn remember_live(&self, resources: &[Resource]) {
        let now = Instant::now();
        *self.live.lock().unwrap_or_else(|p| p.into_inner()) = resources
            .iter()
            .filter(|r| r.live)
            .map(|r| (r.uri.clone(), (now, r.content.clone())))
            .collect();
    }

    pub fn prompts(&self) -> Vec<PromptInfo> {
        self.found
            .read()
            .map(|f| {
                f.prompts
                    .iter()
                    .map(|p| PromptInfo {
                        name: p.name.clone(),
                        title: p.title.clone(),
                        description: p.description.clone(),
                        arguments: p.arguments.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The prompt's messages as (role, text), its templates filled with
    /// `args` (strings only; every required one present, no unknown ones).
    pub fn render_prompt(
        &self,
        name: &str,
        args: Option<&Map<String, Value>>,
    ) -> Result<Vec<(String, String)>, PromptError> {
        let prompt = self
            .found
            .read()
            .ok()
            .and_then(|f| f.prompts.iter().find(|p| p.name == name).cloned())
            .ok_or_else(|| PromptError::Unknown(name.to_string()))?;
        let mut vars = HashMap::new();
        for (k, v) in args.into_iter().flatten() {
            if !prompt.arguments.iter().any(|a| &a.name == k) {
                return Err(PromptError::Extra {
                    prompt: name.to_string(),
                    argument: k.chars().take(64).collect(),
                    known: prompt
                        .arguments
                        .iter()
                        .map(|a| a.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            }
            let Value::String(s) = v else {
                return Err(PromptError::NotText(k.clone()));
            };
            vars.insert(k.clone(), s.clone());
        }
        if let Some(missing) = prompt
            .arguments
            .iter()
            .find(|a| a.required && vars.get(&a.name).is_none_or(|v| v.trim().is_empty()))
        {
            return Err(PromptError::Missing {
                prompt: name.to_string(),
                argument: missing.name.clone(),
            });
        }
        Ok(prompt
            .messages
            .iter()
            .map(|(role, t)| (role.clone(), t.render(&vars)))
            .collect())
    }

    /// The collector's own name of the tool whose key is `key`, while the
    /// collector still offers it.
    fn original_of(&self, key: &str) -> Option<String> {
        self.found.read().ok().and_then(|f| {
            f.tools
                .iter()
                .find(|t| t.spec.key == key)
                .map(|t| t.original.clone())
        })
    }
}

/// Connection attempts for one execute when the connection is refused.
const EXECUTE_ATTEMPTS: u32 = 3;

#[async_trait]
impl Backend for Collector {
    fn id(&self) -> &str {
        BACKEND_ID
    }

    fn tools(&self) -> Vec<ToolSpec> {
        self.found
            .read()
            .map(|f| f.tools.iter().map(|t| t.spec.clone()).collect())
            .unwrap_or_default()
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    fn namespace(&self) -> Option<&str> {
        Some(NAMESPACE)
    }

    fn unavailable(&self) -> Option<String> {
        // Once discovered, the tools stay in the catalog while the
        // collector is down, and their calls say it is unreachable.
        let discovered = self.found.read().is_ok_and(|f| f.tools_list.is_some());
        if discovered {
            return None;
        }
        let why = self
            .last_failure
            .lock()
            .unwrap()
            .clone()
            .unwrap_or_else(|| "not asked yet".into());
        Some(format!(
            "the QuoxCORE collector has not answered since Airlock started ({why}); its tools join the catalog as soon as it does"
        ))
    }

    async fn call(
        &self,
        caller: &Caller,
        tool: &ToolSpec,
        args: Value,
    ) -> Result<Reply, BackendError> {
        // By key, not by name: a refresh may have given the name to
        // another tool since this call was admitted.
        let original = self.original_of(&tool.key).ok_or_else(|| {
            BackendError::new(
                "unavailable",
                format!("{} is no longer offered by the collector", tool.name),
            )
        })?;
        let body = json!({
            "tool_name": original,
            "input": with_defaults(&tool.input_schema, args),
            "agent_id": self.agent_id,
            "session_id": self.session_for(&caller.identity),
            "org_id": self.org_id,
            "user_id": caller.identity,
        });
        let mut attempt = 1;
        let value = loop {
            match self.client.post("/api/v1/tools/execute", &body).await {
                Ok(v) => break v,
                // Retried only when the connection was refused: then the
                // request provably never reached the collector.
                Err(CollectorError::Unreachable { sent: false }) if attempt < EXECUTE_ATTEMPTS => {
                    tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
                    attempt += 1;
                }
                Err(e) => return Err(BackendError::new(e.code(), e.to_string())),
            }
        };
        // A failure the collector reports in its answer reaches the script:
        // its text loses addresses, URLs and paths on the way.
        let mut value = value;
        if let Some(error) = value.get_mut("error") {
            if let Some(text) = error.as_str() {
                *error = Value::String(sanitize::sanitize(text));
            }
        }
        let request_id = value
            .get("approvalId")
            .and_then(Value::as_str)
            .filter(|id| valid_request_id(id))
            .map(str::to_string);
        Ok(Reply { value, request_id })
    }
}
