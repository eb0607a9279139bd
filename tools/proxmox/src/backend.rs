//! The Proxmox VE backend: one or more clusters ("targets"), a token per
//! identity per target, the curated or the full catalog, and `wait_task`.

use std::{collections::HashMap, path::PathBuf, sync::Arc, time::Duration};

use async_trait::async_trait;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::{
    apidata,
    body::{BodyCap, DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_MAX_SCHEMA_BYTES},
    client::{wire_value, ApiToken, PveClient, PveError, Request, Timeouts},
    curated::{self, TierOverrides},
    full,
    route::{Route, RouteKind},
    secrets,
    tiers::{TierRule, TierRules},
    upid::Upid,
};
use airlock_catalog::spec::{Tier, ToolSpec};
use airlock_edge::json_budget;
use airlock_edge::tls::{parse_fingerprint, Trust};
use airlock_gateway::{
    backend::{Backend, BackendError, Reply, TaskEnd},
    caller::Caller,
    policy::Mode,
};

/// Which tools to offer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CatalogKind {
    /// The hand-written catalog of daily operations (default).
    #[default]
    Curated,
    /// One tool per API operation, generated from the API schema.
    Full,
}

/// One cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetConfig {
    /// `https://host:8006`
    pub url: String,
    /// SHA-256 fingerprint of the cluster's certificate (`AB:CD:...`).
    pub fingerprint: Option<String>,
    /// PEM bundle of CAs that signed the cluster's certificate.
    pub ca_file: Option<PathBuf>,
    /// Identity → file holding that person's API token.
    #[serde(default)]
    pub tokens: HashMap<String, PathBuf>,
    /// Mode → file holding the API token of identities without one of
    /// their own (people an OpenID provider names): `ro` a PVEAuditor
    /// token, and so on, so the cluster's own permissions still match
    /// the mode the call was allowed in.
    #[serde(default)]
    pub tokens_by_mode: HashMap<Mode, PathBuf>,
    #[serde(default)]
    pub connect_timeout_secs: Option<u64>,
    #[serde(default)]
    pub request_timeout_secs: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProxmoxConfig {
    pub catalog: CatalogKind,
    /// For the full catalog: the API schema file (`apidata.js` or JSON);
    /// when unset it is fetched from the default target.
    pub schema_file: Option<PathBuf>,
    /// The target used when a call names none; default: the only one, or
    /// the first in name order.
    pub default_target: Option<String>,
    pub targets: std::collections::BTreeMap<String, TargetConfig>,
    /// Tier rules by method and path, checked before the defaults.
    pub tier_rules: Vec<TierRule>,
    /// Tier overrides by tool name.
    pub tiers: HashMap<String, Tier>,
    /// At most this many bytes of an API answer are read, holding at most
    /// one JSON value per 16 bytes of it (`json_budget`); a larger one is
    /// the error `response_too_large`. The cluster decides what it sends,
    /// so the host's memory is capped here.
    pub max_response_bytes: u64,
    /// At most this many bytes of the API schema (`apidata.js`) are read at
    /// start-up for the full catalog.
    pub max_schema_bytes: u64,
}

impl Default for ProxmoxConfig {
    fn default() -> Self {
        Self {
            catalog: CatalogKind::default(),
            schema_file: None,
            default_target: None,
            targets: Default::default(),
            tier_rules: Vec::new(),
            tiers: HashMap::new(),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            max_schema_bytes: DEFAULT_MAX_SCHEMA_BYTES,
        }
    }
}

/// The smallest cap accepted for `max_response_bytes` and
/// `max_schema_bytes`: below it not even an error answer fits.
const MIN_BODY_CAP: u64 = 1024;

#[derive(Debug, thiserror::Error)]
pub enum ProxmoxError {
    #[error("proxmox: no targets configured; add [proxmox.targets.<name>] with url, fingerprint and tokens")]
    NoTargets,
    #[error("proxmox target {target}: {message}")]
    Target { target: String, message: String },
    #[error("proxmox: default_target `{0}` is not a configured target")]
    DefaultTarget(String),
    #[error("proxmox: {0}")]
    Config(String),
}

struct Target {
    client: PveClient,
    tokens: HashMap<String, ApiToken>,
    by_mode: HashMap<Mode, ApiToken>,
}

pub struct ProxmoxBackend {
    id: String,
    targets: HashMap<String, Target>,
    default_target: String,
    tools: Vec<ToolSpec>,
    routes: HashMap<String, Route>,
    /// How often `wait_task` polls at first, and at most.
    poll: (Duration, Duration),
}

/// Characters left as they are in a path segment (RFC 3986 unreserved plus
/// the `:` `@` `!` of task ids).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b':')
    .remove(b'@')
    .remove(b'!');

impl ProxmoxBackend {
    /// Reads every target's token files and builds its client, then the
    /// catalog (fetching the schema from the default target for `full`).
    pub async fn new(config: &ProxmoxConfig) -> Result<Self, ProxmoxError> {
        if config.targets.is_empty() {
            return Err(ProxmoxError::NoTargets);
        }
        for (setting, value) in [
            ("max_response_bytes", config.max_response_bytes),
            ("max_schema_bytes", config.max_schema_bytes),
        ] {
            if value < MIN_BODY_CAP {
                return Err(ProxmoxError::Config(format!(
                    "{setting} = {value} is below {MIN_BODY_CAP} bytes; not even an error answer fits"
                )));
            }
        }
        let mut targets = HashMap::new();
        for (name, t) in &config.targets {
            let err = |message: String| ProxmoxError::Target {
                target: name.clone(),
                message,
            };
            let trust = match (&t.fingerprint, &t.ca_file) {
                (Some(fp), None) => Trust::Pin(parse_fingerprint(fp).map_err(|e| err(e.to_string()))?),
                (None, Some(ca)) => Trust::CaBundle(ca.clone()),
                (Some(_), Some(_)) => return Err(err("set `fingerprint` or `ca_file`, not both".into())),
                (None, None) => return Err(err("needs `fingerprint` (SHA-256 of its certificate) or `ca_file`; TLS is always verified".into())),
            };
            let mut timeouts = Timeouts::default();
            if let Some(s) = t.connect_timeout_secs {
                timeouts.connect = Duration::from_secs(s);
            }
            if let Some(s) = t.request_timeout_secs {
                timeouts.request = Duration::from_secs(s);
            }
            let client = PveClient::new(&t.url, &trust, timeouts)
                .map_err(|e| err(e.to_string()))?
                .with_max_response_bytes(config.max_response_bytes);
            let mut tokens = HashMap::new();
            for (identity, file) in &t.tokens {
                let token = ApiToken::from_file(file)
                    .map_err(|e| err(format!("token of identity {identity}: {e}")))?;
                tokens.insert(identity.clone(), token);
            }
            let mut by_mode = HashMap::new();
            for (mode, file) in &t.tokens_by_mode {
                let token = ApiToken::from_file(file)
                    .map_err(|e| err(format!("token of mode {mode}: {e}")))?;
                by_mode.insert(*mode, token);
            }
            targets.insert(
                name.clone(),
                Target {
                    client,
                    tokens,
                    by_mode,
                },
            );
        }
        let default_target = match &config.default_target {
            Some(d) if targets.contains_key(d) => d.clone(),
            Some(d) => return Err(ProxmoxError::DefaultTarget(d.clone())),
            None => config
                .targets
                .keys()
                .next()
                .expect("checked non-empty")
                .clone(),
        };
        let rules =
            TierRules::new(&config.tier_rules).map_err(|e| ProxmoxError::Config(e.to_string()))?;
        let id = "pve".to_string();
        let generated = match config.catalog {
            CatalogKind::Curated => {
                curated::tools(&rules, &TierOverrides::from_iter(config.tiers.clone()), &id)
            }
            CatalogKind::Full => {
                let text = match &config.schema_file {
                    Some(f) => std::fs::read_to_string(f).map_err(|e| {
                        ProxmoxError::Config(format!("schema_file {}: {e}", f.display()))
                    })?,
                    None => {
                        fetch_schema(
                            &targets[&default_target],
                            &default_target,
                            BodyCap::schema(config.max_schema_bytes),
                        )
                        .await?
                    }
                };
                let ops =
                    apidata::parse_text(&text).map_err(|e| ProxmoxError::Config(e.to_string()))?;
                let mut tools = full::generate(&ops, &rules, &id);
                for (spec, _) in tools.iter_mut() {
                    if let Some(t) = config.tiers.get(&spec.name) {
                        spec.tier = *t;
                        spec.hints = airlock_catalog::spec::Hints::for_tier(*t);
                    }
                }
                tools
            }
        };
        // A misspelt override would silently leave its tool at the default
        // tier: refuse it, as the policy refuses a misspelt deny entry.
        let mut overridden: Vec<&String> = config.tiers.keys().collect();
        overridden.sort();
        for name in overridden {
            if !generated.iter().any(|(spec, _)| &spec.name == name) {
                let hint = airlock_catalog::catalog::similar_names(
                    name,
                    generated.iter().map(|(s, _)| s.name.as_str()),
                );
                let hint = match hint.first() {
                    Some(s) => format!(" (did you mean `{s}`?)"),
                    None => " (`airlock search` lists the tools)".to_string(),
                };
                return Err(ProxmoxError::Config(format!(
                    "[proxmox.tiers] names `{name}`, which is not a tool of this catalog{hint}"
                )));
            }
        }
        let mut tools = Vec::new();
        let mut routes = HashMap::new();
        for (spec, route) in generated {
            routes.insert(spec.name.clone(), route);
            tools.push(spec);
        }
        Ok(Self {
            id,
            targets,
            default_target,
            tools,
            routes,
            poll: (Duration::from_millis(250), Duration::from_secs(2)),
        })
    }

    /// Polls faster, for tests against a simulator whose tasks take
    /// milliseconds.
    pub fn with_poll(mut self, first: Duration, max: Duration) -> Self {
        self.poll = (first, max);
        self
    }

    fn target(&self, args: &Value) -> Result<(&str, &Target), BackendError> {
        let name = args
            .get("target")
            .and_then(Value::as_str)
            .unwrap_or(&self.default_target);
        self.targets
            .get_key_value(name)
            .map(|(k, t)| (k.as_str(), t))
            .ok_or_else(|| {
                let mut known: Vec<&String> = self.targets.keys().collect();
                known.sort();
                BackendError::new(
                    "invalid_arguments",
                    format!("no Proxmox target `{name}`; configured targets: {known:?}"),
                )
            })
    }

    fn token<'a>(
        &self,
        target_name: &str,
        target: &'a Target,
        caller: &Caller,
        tier: Tier,
    ) -> Result<&'a ApiToken, BackendError> {
        // The least mode's token that does the call, up to the caller's:
        // an rw caller's reads go with the ro token when there is one.
        let by_mode = caller.mode.and_then(|allowed| {
            let least = Mode::needed_for(tier)?;
            [Mode::Ro, Mode::Operator, Mode::Rw]
                .into_iter()
                .skip_while(|m| *m != least)
                .take_while(|m| *m <= allowed)
                .find_map(|m| target.by_mode.get(&m))
        });
        target.tokens.get(&caller.identity).or(by_mode).ok_or_else(|| {
            let mode = caller.mode.map(|m| m.as_str()).unwrap_or("(none)");
            BackendError::new(
                "unauthorized",
                format!("identity {} has no Proxmox API token for target {target_name}, and there is none for its mode {mode}; the operator adds one under [proxmox.targets.{target_name}.tokens] or [proxmox.targets.{target_name}.tokens_by_mode]", caller.identity),
            )
        })
    }
}

async fn fetch_schema(target: &Target, name: &str, cap: BodyCap) -> Result<String, ProxmoxError> {
    // The viewer's script needs no token, but any token works.
    let token = target
        .tokens
        .values()
        .chain(
            [Mode::Ro, Mode::Operator, Mode::Rw]
                .iter()
                .filter_map(|m| target.by_mode.get(m)),
        )
        .next()
        .ok_or_else(|| ProxmoxError::Target {
            target: name.into(),
            message: "needs at least one token to fetch the API schema".into(),
        })?;
    let text = target
        .client
        .fetch_text(token, "/pve-docs/api-viewer/apidata.js", cap)
        .await
        .map_err(|e| ProxmoxError::Target {
            target: name.into(),
            message: format!("fetching the API schema: {e}"),
        })?;
    // Counted before it is parsed, like every answer (`json_budget`); the
    // script around the schema counts too, which only errs on the safe
    // side. PVE 9.1's schema holds 137,036 values.
    let limit = json_budget::max_values(cap.bytes);
    if json_budget::count_values(text.as_bytes(), limit) > limit {
        return Err(ProxmoxError::Target {
            target: name.into(),
            message: format!(
                "the API schema holds more than {limit} JSON values (at most one per {} bytes of proxmox.{} = {}) and was not parsed",
                json_budget::BYTES_PER_VALUE,
                cap.setting,
                cap.bytes
            ),
        });
    }
    Ok(text)
}

/// Turns validated arguments into a request for `route`.
pub fn build_request(route: &Route, args: &Value) -> Result<Request, BackendError> {
    let map = args.as_object().cloned().unwrap_or_default();
    let mut path = String::new();
    let mut used: Vec<&str> = vec!["target"];
    for segment in route.path.split('/').filter(|s| !s.is_empty()) {
        path.push('/');
        match segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
            Some(wire) => {
                let (local, value) = map
                    .iter()
                    .find(|(k, _)| route.wire_name(k) == wire)
                    .ok_or_else(|| {
                        BackendError::new("invalid_arguments", format!("`{wire}` is required"))
                    })?;
                used.push(local);
                let text = wire_value(value).join(",");
                path.push_str(&utf8_percent_encode(&text, SEGMENT).to_string());
            }
            None => path.push_str(segment),
        }
    }
    let mut params = Vec::new();
    for (k, v) in &map {
        if used.contains(&k.as_str()) || route.local.contains(k) {
            continue;
        }
        let wire = route.wire_name(k).to_string();
        for value in wire_value(v) {
            params.push((wire.clone(), value));
        }
    }
    for (k, v) in &route.fixed {
        for value in wire_value(v) {
            params.push((k.clone(), value));
        }
    }
    Ok(Request {
        method: route.method,
        path,
        params,
    })
}

/// The error for a failed call to target `target`: failures of the
/// connection name the target by its configured name (the client's own
/// texts name neither the host nor the URL).
fn backend_error(target: &str, e: PveError) -> BackendError {
    match e {
        PveError::Connect(_) | PveError::Timeout(_) => {
            BackendError::new(e.code(), format!("Proxmox target `{target}`: {e}"))
        }
        e => BackendError::new(e.code(), e.to_string()),
    }
}

/// The task id in a call's answer, for the audit: only a string that
/// parses as a UPID (at most 512 bytes, no control characters:
/// `upid.rs`), as the cluster wrote it, so that it is the id the script
/// got. Anything else the cluster answers stays in the result and never
/// becomes a request id.
fn task_id(value: &Value) -> Option<String> {
    value
        .as_str()
        .filter(|s| s.parse::<Upid>().is_ok())
        .map(str::to_string)
}

#[async_trait]
impl Backend for ProxmoxBackend {
    fn id(&self) -> &str {
        &self.id
    }

    fn tools(&self) -> Vec<ToolSpec> {
        self.tools.clone()
    }

    /// A task-starting call answers a task id that parses as one (node
    /// from the arguments, start time now, the tool as its type) and
    /// whose user is `airlock-plan@TOKEN`: printed, it says it is
    /// planned; passed to `wait_task`, the plan answers.
    fn planned(&self, tool: &ToolSpec, args: &Value, token: &str) -> Value {
        let is_task = tool
            .output_schema
            .as_ref()
            .and_then(|s| s.get("type"))
            .and_then(Value::as_str)
            == Some("string");
        if !is_task {
            return json!({"planned": token});
        }
        let node = args
            .get("node")
            .and_then(Value::as_str)
            .filter(|n| {
                format!("UPID:{n}:00000000:00000000:00000000:x::x:")
                    .parse::<Upid>()
                    .is_ok()
            })
            .unwrap_or("cluster");
        let upid = Upid {
            node: node.into(),
            pid: 0,
            pstart: 0,
            starttime: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            kind: tool
                .name
                .chars()
                .filter(char::is_ascii_alphanumeric)
                .take(32)
                .collect(),
            id: match args.get("vmid") {
                Some(Value::Number(n)) => n.to_string(),
                _ => String::new(),
            },
            user: format!("airlock-plan@{token}"),
        };
        Value::String(upid.to_string())
    }

    /// `wait_task` for a planned task answers at once that it is planned
    /// (`ok: true`, so a script that checks goes on as it would after a
    /// success, and the plan lists what it would then do).
    fn planned_read(&self, tool: &ToolSpec, args: &Value) -> Value {
        match self.routes.get(&tool.name).map(|r| &r.kind) {
            Some(RouteKind::WaitTask) => json!({
                "upid": args.get("upid").cloned().unwrap_or(Value::Null),
                "status": "stopped",
                "exitstatus": "planned",
                "ok": true,
                "planned": true,
                "log": [],
            }),
            _ => {
                json!({"planned": true, "message": "answered by the plan: an argument is the result of a planned change, which has not been made"})
            }
        }
    }

    /// `wait_task` and a task's status (`GET …/tasks/{upid}/status`) say
    /// how a task ended: `status` `stopped` with `exitstatus` `OK` is the
    /// only good end (`WARNINGS: n` is not OK); `running` has not ended.
    fn reads_task(&self, tool: &ToolSpec) -> bool {
        self.routes.get(&tool.name).is_some_and(|route| {
            route.kind == RouteKind::WaitTask
                || (route.method == apidata::Method::Get
                    && route.path.ends_with("/tasks/{upid}/status"))
        })
    }

    fn task_end(&self, tool: &ToolSpec, value: &Value) -> Option<TaskEnd> {
        if !self.reads_task(tool) {
            return None;
        }
        Some(match value.get("status").and_then(Value::as_str) {
            Some("stopped") => match value.get("exitstatus").and_then(Value::as_str) {
                Some("OK") => TaskEnd::Ok,
                Some(other) => TaskEnd::Failed(other.to_string()),
                None => TaskEnd::Failed("no exit status".into()),
            },
            Some("running") => TaskEnd::Running,
            _ => TaskEnd::Failed("no task status in the answer".into()),
        })
    }

    async fn call(
        &self,
        caller: &Caller,
        tool: &ToolSpec,
        args: Value,
    ) -> Result<Reply, BackendError> {
        let route = self.routes.get(&tool.name).ok_or_else(|| {
            BackendError::new(
                "not_found",
                format!("the Proxmox backend has no tool `{}`", tool.name),
            )
        })?;
        let (target_name, target) = self.target(&args)?;
        let token = self.token(target_name, target, caller, tool.tier)?;
        if route.kind == RouteKind::WaitTask {
            return self
                .wait_task(target_name, target, token, route, &args)
                .await;
        }
        let request = build_request(route, &args)?;
        let mut value = target
            .client
            .call(token, &request)
            .await
            .map_err(|e| backend_error(target_name, e))?;
        secrets::mask(&route.path, &mut value);
        let request_id = task_id(&value);
        Ok(Reply { value, request_id })
    }
}

impl ProxmoxBackend {
    /// Polls the task's status with backoff until it stops or the timeout
    /// passes; returns the exit status and the end of the log.
    async fn wait_task(
        &self,
        target_name: &str,
        target: &Target,
        token: &ApiToken,
        route: &Route,
        args: &Value,
    ) -> Result<Reply, BackendError> {
        let upid = args
            .get("upid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        upid.parse::<crate::upid::Upid>()
            .map_err(|e| BackendError::new("invalid_arguments", e.to_string()))?;
        let timeout =
            Duration::from_secs(args.get("timeout").and_then(Value::as_u64).unwrap_or(300));
        let tail = args.get("log_lines").and_then(Value::as_u64).unwrap_or(20) as usize;
        let status_req = build_request(route, args)?;
        let deadline = tokio::time::Instant::now() + timeout;
        let mut delay = self.poll.0;
        let status = loop {
            let status = target
                .client
                .call(token, &status_req)
                .await
                .map_err(|e| backend_error(target_name, e))?;
            if status.get("status").and_then(Value::as_str) == Some("stopped") {
                break status;
            }
            if tokio::time::Instant::now() + delay > deadline {
                return Ok(Reply {
                    value: json!({"upid": upid, "status": "running", "ok": false, "exitstatus": null, "message": format!("still running after {} s; call wait_task again to keep waiting", timeout.as_secs())}),
                    request_id: Some(upid),
                });
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 3 / 2).min(self.poll.1);
        };
        let log_req = Request {
            method: apidata::Method::Get,
            path: status_req.path.trim_end_matches("/status").to_string() + "/log",
            params: vec![
                ("start".into(), "0".into()),
                ("limit".into(), "5000".into()),
            ],
        };
        let log = target
            .client
            .call(token, &log_req)
            .await
            .map_err(|e| backend_error(target_name, e))?;
        let lines: Vec<Value> = log
            .as_array()
            .map(|l| l.iter().filter_map(|x| x.get("t").cloned()).collect())
            .unwrap_or_default();
        let log_tail: Vec<Value> = lines[lines.len().saturating_sub(tail)..].to_vec();
        let exitstatus = status
            .get("exitstatus")
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_string();
        Ok(Reply {
            value: json!({
                "upid": upid,
                "status": "stopped",
                "exitstatus": exitstatus,
                "ok": exitstatus == "OK",
                "log": log_tail,
            }),
            request_id: Some(upid),
        })
    }
}

/// Shares one backend behind `Arc` in the gateway's list.
pub fn boxed(b: ProxmoxBackend) -> Arc<dyn Backend> {
    Arc::new(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_built_as_pve_expects() {
        let tools = curated::tools(&TierRules::defaults(), &Default::default(), "pve");
        let route = |n: &str| tools.iter().find(|(s, _)| s.name == n).unwrap().1.clone();
        let r = build_request(&route("vm_migrate"), &json!({"node": "pve1", "vmid": 100, "target_node": "pve2", "online": true, "target": "lab"})).unwrap();
        assert_eq!(r.path, "/nodes/pve1/qemu/100/migrate");
        assert_eq!(
            r.params,
            [
                ("target".to_string(), "pve2".to_string()),
                ("online".to_string(), "1".to_string())
            ]
        );
        let r = build_request(
            &route("backup_list"),
            &json!({"node": "pve1", "storage": "local"}),
        )
        .unwrap();
        assert_eq!(r.params, [("content".to_string(), "backup".to_string())]);
        let upid = "UPID:pve1:0000A1B2:002A0B3C:6751A0B2:qmstart:100:root@pam!airlock:";
        let r = build_request(
            &route("task_status"),
            &json!({"node": "pve1", "upid": upid}),
        )
        .unwrap();
        assert_eq!(r.path, format!("/nodes/pve1/tasks/{upid}/status"));
        let r = build_request(
            &route("wait_task"),
            &json!({"node": "pve1", "upid": upid, "timeout": 5}),
        )
        .unwrap();
        assert!(r.params.is_empty(), "local parameters are not sent");
    }
}
