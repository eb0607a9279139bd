//! Secrets over every path: distinctive Proxmox token secrets, collector
//! service keys, HTTP bearer keys and a password passed by a script are
//! planted (random per run), every way in is exercised with them — `serve`
//! over stdio and over HTTP with JSON debug logs in a file, successful
//! calls, policy refusals, approvals (asked in the client and decided with
//! the CLI), validation failures with the password in the failing field,
//! backend errors (a wrong token, a refused collector key), a wrong bearer
//! key, MCP log notifications, resources and prompts, `audit verify`,
//! `exec` and `demo` — and everything that comes out is collected: child
//! stdout and stderr, log files, audit logs, the approval store's bytes,
//! every result, structured content, error and notification. None of it
//! may hold a planted value.
//!
//! The planted values did travel: the simulator saw each token id and the
//! password among a create's parameters, the collector ran calls with the
//! key and refused the wrong one, the bearer keys opened sessions.

mod common;

use std::{
    path::{Path, PathBuf},
    pin::Pin,
    process::Stdio,
    sync::{Arc, Mutex},
    task::{Context, Poll},
    time::Duration,
};

use airlock_catalog::Tier;
use airlock_collector::{CollectorConfig, TierRule};
use airlock_sim::collector::CollectorSim;
use airlock_sim::{Role, SimConfig, SimToken, Simulator};
use common::{call, text};
use rmcp::{
    model::{
        CallToolResult, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult,
        ElicitationAction, GetPromptRequestParams, Implementation, ReadResourceRequestParams,
    },
    service::{RequestContext, RunningService},
    transport::{
        streamable_http_client::StreamableHttpClientTransportConfig, StreamableHttpClientTransport,
    },
    ClientHandler, ErrorData as McpError, RoleClient, ServiceExt,
};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, ReadBuf};

/// Every filter on: Airlock's own lines and its dependencies' (hyper,
/// reqwest, rustls, wasmtime) at trace. rmcp stays at warn unless the
/// filter names it (`AIRLOCK_LOG=trace,rmcp=debug`): it logs each request
/// whole, scripts included, which an operator asks for by name only.
const LOG_LEVEL: &str = "trace";

const TEMPLATE: &str = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst";

fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    getrandom::fill(&mut b).unwrap();
    hex::encode(b)
}

/// A value nobody could write by accident: a name, then 96 random bits.
/// Token secrets allow only letters, digits and `-`, so every planted
/// value keeps to those (its JSON, URL and form encodings are itself).
fn plant(kind: &str) -> String {
    format!("plant-{kind}-{}", random_hex(12))
}

// ---------------------------------------------------------------------
// Where secrets could show up, and how they are looked for.

/// One place and what it held.
type Place = (String, Vec<u8>);

/// Everything that came out, by where it came from.
#[derive(Clone, Default)]
struct Evidence(Arc<Mutex<Vec<Place>>>);

impl Evidence {
    fn add(&self, place: impl Into<String>, content: impl AsRef<[u8]>) {
        self.0
            .lock()
            .unwrap()
            .push((place.into(), content.as_ref().to_vec()));
    }

    fn add_result(&self, place: &str, r: &CallToolResult) {
        self.add(format!("{place}: result text"), text(r));
        self.add(
            format!("{place}: whole result"),
            serde_json::to_string(r).unwrap(),
        );
    }

    fn places(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|(p, _)| p.clone())
            .collect()
    }
}

const B64_STANDARD: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const B64_URL: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

fn base64(bytes: &[u8], alphabet: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().fold(0u32, |n, b| n << 8 | *b as u32) << (8 * (3 - chunk.len()));
        for i in 0..=chunk.len() {
            out.push(alphabet[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

/// The forms of `value` that would give it away:
/// - the value itself (its JSON, URL and form encodings are the same);
/// - every 16-character window of it holding at least 12 of its random
///   characters (its trailing hex digits): a truncated, quoted or partly
///   masked copy (`plant-pw-3fa9b1c04e2d…`, the value without its first
///   or last character) still holds one, and 48 random bits never occur
///   by chance;
/// - its base64 in both alphabets at each of the three alignments it can
///   have inside a longer encoded text (`Basic user:secret`, a header
///   dump), keeping only the characters that depend on the value alone;
/// - its hex encoding.
///
/// Hashes are not searched: the audit log holds a SHA-256 of the
/// arguments by design, which says nothing about the password.
fn needles(value: &str) -> Vec<(String, String)> {
    const WINDOW: usize = 16;
    const RANDOM_IN_WINDOW: usize = 12;
    let mut out = vec![("raw".to_string(), value.to_string())];
    let chars: Vec<char> = value.chars().collect();
    let random = chars
        .iter()
        .rev()
        .take_while(|c| c.is_ascii_hexdigit())
        .count();
    let first = chars
        .len()
        .saturating_sub(random + WINDOW - RANDOM_IN_WINDOW);
    for start in first..=chars.len().saturating_sub(WINDOW) {
        out.push((
            format!("characters {start}..{} of it", start + WINDOW),
            chars[start..start + WINDOW].iter().collect(),
        ));
    }
    let bytes = value.as_bytes();
    for (name, alphabet) in [("base64", B64_STANDARD), ("base64url", B64_URL)] {
        for k in 0..3 {
            let mut padded = vec![0u8; k];
            padded.extend_from_slice(bytes);
            let encoded: Vec<char> = base64(&padded, alphabet).chars().collect();
            let first = (8 * k).div_ceil(6);
            let end = 8 * (k + bytes.len()) / 6;
            out.push((
                format!("{name} at offset {k}"),
                encoded[first..end].iter().collect(),
            ));
        }
    }
    out.push(("hex".into(), hex::encode(bytes)));
    out
}

/// Each place that holds a secret in some form, with the secret masked
/// in a short context.
fn findings(secrets: &[(String, String)], places: &[Place]) -> Vec<String> {
    let mut found = Vec::new();
    for (place, bytes) in places {
        let hay = String::from_utf8_lossy(bytes);
        for (what, value) in secrets {
            for (form, needle) in needles(value) {
                let Some(at) = hay.find(&needle) else {
                    continue;
                };
                let mut from = at.saturating_sub(60);
                while !hay.is_char_boundary(from) {
                    from -= 1;
                }
                let mut to = (at + needle.len() + 60).min(hay.len());
                while !hay.is_char_boundary(to) {
                    to += 1;
                }
                let context = hay[from..to]
                    .replace(&needle, &format!("«{what}»"))
                    .replace('\n', "⏎");
                found.push(format!("{what} ({form}) in {place}: …{context}…"));
                break;
            }
        }
    }
    found
}

// ---------------------------------------------------------------------
// The world: a simulated cluster and collector with planted credentials,
// configurations pointing at them, and the evidence collected so far.

struct World {
    dir: tempfile::TempDir,
    sim: Simulator,
    collector: CollectorSim,
    /// What each planted value is, and the value.
    secrets: Vec<(String, String)>,
    password: String,
    collector_key: String,
    wrong_collector_key: String,
    proxmox_toml: String,
    evidence: Evidence,
}

/// Where the collector's service key comes from.
enum KeySource {
    File,
    /// `QUOX_SERVICE_KEY` in the server's environment.
    Env,
}

impl World {
    async fn new() -> World {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().unwrap();
        let token = |name: &str, role| SimToken {
            id: format!("airlock@pve!{name}"),
            secret: plant(&format!("pve-{name}")),
            role,
        };
        let sim_config = SimConfig {
            task_delay: Duration::from_millis(50),
            tokens: vec![
                token("admin", Role::Admin),
                token("operator", Role::Operator),
                token("reader", Role::Reader),
            ],
            port: 0,
            api_viewer: None,
        };
        let sim = Simulator::start(&sim_config).await.unwrap();
        let mut proxmox =
            airlock::demo::proxmox_section(&sim, &sim_config, &dir.path().join("tokens")).unwrap();
        // mallory's token file holds the admin token id with a wrong secret.
        let wrong_token = plant("pve-wrong");
        let mallory_file = dir.path().join("tokens/mallory.token");
        airlock_edge::credential_file::write(
            &mallory_file,
            &format!("airlock@pve!admin={wrong_token}"),
        )
        .unwrap();
        proxmox
            .targets
            .get_mut("sim")
            .unwrap()
            .tokens
            .insert("mallory".into(), mallory_file);
        // The state directory line is written per configuration; alice
        // approves her own calls in the client (the approval's path is
        // what this test follows, not who may take it).
        let proxmox_toml = airlock::demo::config_toml(&proxmox, Path::new("STATE"))
            .lines()
            .filter(|l| !l.starts_with("state_dir") && !l.starts_with('#'))
            .map(|l| match l {
                "[identities.alice]" => "[identities.alice]\napprove_own = true",
                other => other,
            })
            .collect::<Vec<_>>()
            .join("\n");

        let collector_key = plant("quox-key");
        airlock_edge::credential_file::write(&dir.path().join("quox.key"), &collector_key).unwrap();
        let collector = CollectorSim::start(0, &collector_key).await.unwrap();

        let mut secrets: Vec<(String, String)> = sim_config
            .tokens
            .iter()
            .map(|t| (format!("the {} token secret", t.id), t.secret.clone()))
            .collect();
        let password = plant("pw");
        let wrong_collector_key = plant("quox-wrong");
        secrets.extend([
            ("mallory's wrong token secret".to_string(), wrong_token),
            ("the collector key".into(), collector_key.clone()),
            (
                "the wrong collector key".into(),
                wrong_collector_key.clone(),
            ),
            ("the password".into(), password.clone()),
        ]);
        World {
            dir,
            sim,
            collector,
            secrets,
            password,
            collector_key,
            wrong_collector_key,
            proxmox_toml,
            evidence: Evidence::default(),
        }
    }

    /// A configuration file with its own state directory (own audit log
    /// and approval store): the demo identities plus mallory (ro, wrong
    /// token), the simulated cluster and the simulated collector.
    fn config(&self, name: &str, key: KeySource) -> PathBuf {
        let state = self.dir.path().join(name);
        std::fs::create_dir_all(&state).unwrap();
        let collector = CollectorConfig {
            url: self.collector.url(),
            service_key_file: match key {
                KeySource::File => Some(self.dir.path().join("quox.key")),
                KeySource::Env => None,
            },
            tiers: vec![TierRule {
                pattern: "fleet_*".into(),
                tier: Tier::Read,
            }],
            ..CollectorConfig::default()
        };
        #[derive(serde::Serialize)]
        struct Section<'a> {
            collector: &'a CollectorConfig,
        }
        let text = format!(
            "state_dir = {:?}\n{}\n\n[identities.mallory]\nmode = \"ro\"\n\n{}",
            state.display().to_string(),
            self.proxmox_toml,
            toml::to_string(&Section {
                collector: &collector
            })
            .unwrap()
        );
        let path = state.join("airlock.toml");
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Runs the binary to completion; its output is evidence.
    fn run(&self, label: &str, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_airlock"))
            .args(args)
            .env_remove("AIRLOCK_CONFIG")
            .env_remove("QUOX_SERVICE_KEY")
            .env_remove("INTERNAL_SERVICE_KEY")
            .env("AIRLOCK_LOG", LOG_LEVEL)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        self.evidence.add(format!("{label}: stdout"), &out.stdout);
        self.evidence.add(format!("{label}: stderr"), &out.stderr);
        out
    }

    /// Every file under the state directories (audit logs, approval
    /// stores with their journals, log files, configurations) becomes
    /// evidence; token and key files are outside them.
    fn collect_state(&self) {
        fn walk(dir: &Path, evidence: &Evidence) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    walk(&path, evidence);
                } else {
                    evidence.add(path.display().to_string(), std::fs::read(&path).unwrap());
                }
            }
        }
        for entry in std::fs::read_dir(self.dir.path()).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() && path.file_name().unwrap() != "tokens" {
                walk(&path, &self.evidence);
            }
        }
    }

    /// Fails naming every place a planted value showed up in, after
    /// checking that each kind of place expected was collected (and is
    /// not empty).
    fn assert_no_secret_anywhere(&self, expected: &[&str]) {
        let places = self.evidence.0.lock().unwrap().clone();
        for want in expected {
            let bytes: usize = places
                .iter()
                .filter(|(p, _)| p.contains(want))
                .map(|(_, b)| b.len())
                .sum();
            assert!(
                bytes > 0,
                "nothing collected from {want}: {:?}",
                self.evidence.places()
            );
        }
        let total: usize = places.iter().map(|(_, b)| b.len()).sum();
        eprintln!(
            "searched {} places ({} KiB) for {} planted values",
            places.len(),
            total / 1024,
            self.secrets.len()
        );
        assert!(
            places.len() > 20,
            "too little evidence: {:?}",
            self.evidence.places()
        );
        let found = findings(&self.secrets, &places);
        assert!(
            found.is_empty(),
            "{} planted secret(s) leaked:\n{}",
            found.len(),
            found.join("\n")
        );
    }
}

// ---------------------------------------------------------------------
// MCP clients that keep what they are sent.

#[derive(Clone)]
struct Keeper {
    name: String,
    can_ask: bool,
    evidence: Evidence,
}

impl ClientHandler for Keeper {
    fn get_info(&self) -> ClientConfig {
        let caps = if self.can_ask {
            ClientCapabilities::builder().enable_elicitation().build()
        } else {
            ClientCapabilities::default()
        };
        ClientConfig::new(caps, Implementation::new("airlock-secrets-test", "1"))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        self.evidence.add(
            format!("{}: approval question", self.name),
            serde_json::to_string(&request).unwrap(),
        );
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(json!({"approve": true})))
    }

    #[allow(deprecated)] // MCP logging is deprecated (SEP-2577) but clients still use it
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        self.evidence.add(
            format!("{}: MCP log notification", self.name),
            serde_json::to_string(&params).unwrap(),
        );
    }
}

/// The server's stdout on the way to the client, copied as it passes.
struct Tee<R> {
    inner: R,
    copy: Arc<Mutex<Vec<u8>>>,
}

impl<R: AsyncRead + Unpin> AsyncRead for Tee<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if polled.is_ready() {
            let new = buf.filled()[before..].to_vec();
            self.copy.lock().unwrap().extend_from_slice(&new);
        }
        polled
    }
}

/// `airlock serve` on stdio as `identity`, with a JSON log file.
struct StdioServer {
    label: String,
    client: RunningService<RoleClient, Keeper>,
    child: tokio::process::Child,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: tokio::task::JoinHandle<Vec<u8>>,
    log: PathBuf,
}

impl StdioServer {
    async fn start(
        world: &World,
        label: &str,
        config: &Path,
        identity: &str,
        can_ask: bool,
        env: &[(&str, &str)],
    ) -> StdioServer {
        let log = config.with_file_name(format!("{label}.log"));
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_airlock"));
        cmd.arg("--config")
            .arg(config)
            .args(["--log-format", "json", "--log-file"])
            .arg(&log)
            .args(["serve", "--identity", identity])
            .env_remove("AIRLOCK_CONFIG")
            .env_remove("QUOX_SERVICE_KEY")
            .env_remove("INTERNAL_SERVICE_KEY")
            .env("AIRLOCK_LOG", LOG_LEVEL)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().unwrap();
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let reader = Tee {
            inner: child.stdout.take().unwrap(),
            copy: stdout.clone(),
        };
        let mut err = child.stderr.take().unwrap();
        let stderr = tokio::spawn(async move {
            let mut all = Vec::new();
            let _ = tokio::io::AsyncReadExt::read_to_end(&mut err, &mut all).await;
            all
        });
        let keeper = Keeper {
            name: label.to_string(),
            can_ask,
            evidence: world.evidence.clone(),
        };
        let client = keeper
            .serve((reader, child.stdin.take().unwrap()))
            .await
            .unwrap();
        set_debug(&client).await;
        StdioServer {
            label: label.to_string(),
            client,
            child,
            stdout,
            stderr,
            log,
        }
    }

    /// Ends the session (the server exits when its stdin closes) and
    /// keeps its stdout, stderr and log file.
    async fn stop(self, world: &World) {
        self.client.cancel().await.unwrap();
        let mut child = self.child;
        let status = child.wait().await.unwrap();
        let label = &self.label;
        let stderr = self.stderr.await.unwrap();
        world.evidence.add(
            format!("{label}: stdout"),
            self.stdout.lock().unwrap().clone(),
        );
        world.evidence.add(format!("{label}: stderr"), &stderr);
        let log = std::fs::read(&self.log).unwrap_or_default();
        assert!(
            String::from_utf8_lossy(&log).contains(r#""level":"TRACE""#),
            "{label} wrote a log file ({status}); stderr: {}",
            String::from_utf8_lossy(&stderr)
        );
        world.evidence.add(format!("{label}: log file"), log);
    }
}

async fn set_debug<H: ClientHandler>(client: &RunningService<RoleClient, H>) {
    #[allow(deprecated)]
    client
        .set_level(rmcp::model::SetLevelRequestParams::new(
            rmcp::model::LoggingLevel::Debug,
        ))
        .await
        .unwrap();
}

/// Calls a tool and keeps what comes back.
async fn kept<H: ClientHandler>(
    world: &World,
    client: &RunningService<RoleClient, H>,
    place: &str,
    tool: &str,
    args: Value,
) -> CallToolResult {
    let r = call(client, tool, args).await;
    world.evidence.add_result(place, &r);
    // The execution's kept trace is a surface too.
    if let Some(id) = r
        .structured_content
        .as_ref()
        .and_then(|s| s["execution"].as_str())
    {
        let uri = format!("airlock://executions/{id}");
        let shown = match client
            .read_resource(rmcp::model::ReadResourceRequestParams::new(uri.clone()))
            .await
        {
            Ok(t) => serde_json::to_string(&t).unwrap(),
            Err(e) => e.to_string(),
        };
        world.evidence.add(format!("{place}: {uri}"), shown);
    }
    r
}

fn structured(r: &CallToolResult) -> &Value {
    r.structured_content.as_ref().expect("structured content")
}

/// Reads every resource and renders every prompt the server lists, plus
/// a tool declaration and an unknown resource; all of it is evidence.
async fn resources_and_prompts<H: ClientHandler>(
    world: &World,
    client: &RunningService<RoleClient, H>,
    place: &str,
) {
    let listed = client.list_resources(None).await.unwrap();
    world.evidence.add(
        format!("{place}: resources"),
        serde_json::to_string(&listed).unwrap(),
    );
    let mut uris: Vec<String> = listed.resources.iter().map(|r| r.uri.clone()).collect();
    uris.extend([
        "airlock://tools/ct_create".into(),
        "quox://nothing/here".into(),
    ]);
    for uri in uris {
        let got = client
            .read_resource(ReadResourceRequestParams::new(uri.clone()))
            .await;
        let shown = match got {
            Ok(r) => serde_json::to_string(&r).unwrap(),
            Err(e) => e.to_string(),
        };
        world
            .evidence
            .add(format!("{place}: resource {uri}"), shown);
    }
    let templates = client.list_resource_templates(None).await.unwrap();
    world.evidence.add(
        format!("{place}: resource templates"),
        serde_json::to_string(&templates).unwrap(),
    );
    let prompts = client.list_prompts(None).await.unwrap();
    world.evidence.add(
        format!("{place}: prompts"),
        serde_json::to_string(&prompts).unwrap(),
    );
    for p in &prompts.prompts {
        let Value::Object(args) = json!({"task": "check pve1", "service": "billing"}) else {
            unreachable!()
        };
        for args in [Some(args), None] {
            let mut params = GetPromptRequestParams::new(p.name.clone());
            if let Some(a) = args {
                params = params.with_arguments(a);
            }
            let shown = match client.get_prompt(params).await {
                Ok(r) => serde_json::to_string(&r).unwrap(),
                Err(e) => e.to_string(),
            };
            world
                .evidence
                .add(format!("{place}: prompt {}", p.name), shown);
        }
    }
}

/// Every call a script can make with the password, each settled so one
/// run reports them all: a create that needs approval, a password too
/// long and of the wrong type (validation fails on the password itself),
/// a password where the tool has none, and a read of each backend.
fn password_script(password: &str, vmid: u32) -> String {
    format!(
        "const pw = '{password}';\n\
         const node = 'pve1';\n\
         const ostemplate = '{TEMPLATE}';\n\
         const out = {{}};\n\
         const attempt = async (name, f) => {{\n\
           try {{ out[name] = await f(); }}\n\
           catch (e) {{ out[name] = {{ code: e.code, message: e.message, details: e.details, text: String(e) }}; }}\n\
         }};\n\
         await attempt('read', () => tools.vm_list({{ node }}));\n\
         await attempt('collector', () => tools.quox_fleet_status({{}}));\n\
         await attempt('create', () => tools.ct_create({{ node, vmid: {vmid}, ostemplate, hostname: 'ct{vmid}', password: pw }}));\n\
         await attempt('too_long', () => tools.ct_create({{ node, vmid: {vmid} + 1, ostemplate, password: pw + pw }}));\n\
         await attempt('wrong_type', () => tools.ct_create({{ node, vmid: {vmid} + 1, ostemplate, password: [pw] }}));\n\
         await attempt('not_a_parameter', () => tools.vm_list({{ node, password: pw }}));\n\
         await attempt('nested', () => tools.vm_list({{ node, options: {{ password: pw, depth: 'x' }} }}));\n\
         out"
    )
}

/// The same invalid create, not caught: the execution itself fails.
fn failing_script(password: &str) -> String {
    format!(
        "const pw = '{password}';\n\
         await tools.ct_create({{ node: 'pve1', vmid: 9990, ostemplate: '{TEMPLATE}', password: 'x'.repeat(60) + pw }});"
    )
}

fn code_of(r: &CallToolResult, name: &str) -> String {
    structured(r)["result"][name]["code"]
        .as_str()
        .unwrap_or("(no error)")
        .to_string()
}

/// The planted values reached the backends: the simulator was called with
/// each token that should work, and saw the password among the
/// parameters of a create (so redaction is not hiding it from the backend,
/// and a leak would have had something to leak).
async fn assert_the_values_travelled(world: &World, create_vmid: u32) {
    let requests = world.sim.requests().await;
    let used = |id: &str| requests.iter().any(|(_, _, t)| t.contains(id));
    assert!(
        used("airlock@pve!admin"),
        "alice's token was used: {requests:?}"
    );
    assert!(used("airlock@pve!reader"), "rita's token was used");
    let pw = format!("password={}", world.password);
    assert!(
        requests.iter().any(|(m, p, _)| m == "POST"
            && p.contains("/lxc?")
            && p.contains(&pw)
            && p.contains(&format!("vmid={create_vmid}"))),
        "the approved create reached the simulator with the password"
    );
    assert!(
        !world.collector.executed().is_empty(),
        "the collector ran calls made with its key"
    );
}

// ---------------------------------------------------------------------

#[test]
fn the_search_finds_a_planted_value_in_every_form_it_looks_for() {
    let secret = plant("pw");
    let secrets = vec![("the password".to_string(), secret.clone())];
    let b64 = |s: &str| base64(s.as_bytes(), B64_STANDARD);
    for (leak, form) in [
        (format!("a {secret} b"), "raw"),
        (format!("'{}…'", &secret[..24]), "truncated"),
        (secret[1..].to_string(), "without its first character"),
        (
            secret[..secret.len() - 1].to_string(),
            "without its last character",
        ),
        (b64(&format!("user:{secret}")), "base64 at offset 2"),
        (b64(&format!("u:{secret}")), "base64 at offset 1"),
        (b64(&format!("xyz{secret}")), "base64 at offset 0"),
        (
            base64(format!("k={secret}").as_bytes(), B64_URL),
            "base64url",
        ),
        (hex::encode(&secret), "hex"),
    ] {
        let places = vec![("somewhere".to_string(), leak.into_bytes())];
        let found = findings(&secrets, &places);
        assert_eq!(found.len(), 1, "{form} is found");
        assert!(
            !found[0].contains(&secret),
            "the report masks it: {}",
            found[0]
        );
    }
    let clean = vec![(
        "clean".to_string(),
        b"password=[redacted] plant-pw-".to_vec(),
    )];
    assert!(findings(&secrets, &clean).is_empty());
    assert_eq!(base64(b"Man", B64_STANDARD), "TWFu");
    assert_eq!(base64(b"Ma", B64_STANDARD), "TWE");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_on_stdio_keeps_every_secret_out() {
    let world = World::new().await;
    let config = world.config("stdio", KeySource::File);
    let config_str = config.display().to_string();

    // alice (rw) with a client that asks its person: the create is
    // approved in the client and runs.
    let alice = StdioServer::start(&world, "stdio alice", &config, "alice", true, &[]).await;
    for (tool, args) in [
        (
            "search",
            json!({"query": "create a container with a root password"}),
        ),
        (
            "get_schema",
            json!({"names": ["ct_create", "ct_creat", "quox_fleet_status"]}),
        ),
    ] {
        kept(
            &world,
            &alice.client,
            &format!("stdio alice: {tool}"),
            tool,
            args,
        )
        .await;
    }
    let r = kept(
        &world,
        &alice.client,
        "stdio alice: password script",
        "execute",
        json!({"script": password_script(&world.password, 9001)}),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    let result = &structured(&r)["result"];
    assert_eq!(
        result["create"]["code"],
        Value::Null,
        "the create ran: {result}"
    );
    assert!(
        result["read"].as_array().is_some_and(|l| !l.is_empty()),
        "{result}"
    );
    assert!(
        result["collector"]["hosts"][0]["host"].is_string(),
        "the collector answered: {result}"
    );
    for name in ["too_long", "wrong_type", "not_a_parameter", "nested"] {
        assert_eq!(code_of(&r, name), "invalid_arguments", "{name}: {result}");
    }
    let r = kept(
        &world,
        &alice.client,
        "stdio alice: failing script",
        "execute",
        json!({"script": failing_script(&world.password)}),
    )
    .await;
    assert_eq!(r.is_error, Some(true), "{}", text(&r));
    assert!(
        text(&r).contains("args.password: the value is longer than 64 characters"),
        "the error still says what is wrong: {}",
        text(&r)
    );
    resources_and_prompts(&world, &alice.client, "stdio alice").await;
    alice.stop(&world).await;

    // rita (ro): the create is refused by policy.
    let rita = StdioServer::start(&world, "stdio rita", &config, "rita", true, &[]).await;
    let r = kept(
        &world,
        &rita.client,
        "stdio rita: password script",
        "execute",
        json!({"script": password_script(&world.password, 9101)}),
    )
    .await;
    assert_eq!(code_of(&r, "create"), "policy_denied", "{}", text(&r));
    rita.stop(&world).await;

    // mallory's token file holds a wrong secret: the cluster answers 401.
    let mallory = StdioServer::start(&world, "stdio mallory", &config, "mallory", false, &[]).await;
    let r = kept(
        &world,
        &mallory.client,
        "stdio mallory: password script",
        "execute",
        json!({"script": password_script(&world.password, 9201)}),
    )
    .await;
    assert_eq!(code_of(&r, "read"), "unauthorized", "{}", text(&r));
    mallory.stop(&world).await;

    // A collector key from the environment that the collector refuses.
    let refused_before = world.collector.rejected_keys();
    let env_config = world.config("stdio-wrong-key", KeySource::Env);
    let wrong = StdioServer::start(
        &world,
        "stdio wrong collector key",
        &env_config,
        "alice",
        false,
        &[("QUOX_SERVICE_KEY", world.wrong_collector_key.as_str())],
    )
    .await;
    let r = kept(
        &world,
        &wrong.client,
        "stdio wrong collector key: script",
        "execute",
        json!({"script": "await tools.quox_fleet_status({})"}),
    )
    .await;
    assert_eq!(r.is_error, Some(true), "{}", text(&r));
    resources_and_prompts(&world, &wrong.client, "stdio wrong collector key").await;
    wrong.stop(&world).await;
    assert!(
        world.collector.rejected_keys() > refused_before,
        "the wrong collector key reached the collector"
    );

    // The operator's commands on the same state.
    world.run(
        "approvals list",
        &["--config", &config_str, "approvals", "list", "--all"],
        &[],
    );
    world.run(
        "approvals list --json",
        &[
            "--config",
            &config_str,
            "approvals",
            "list",
            "--all",
            "--json",
        ],
        &[],
    );
    let out = world.run(
        "audit verify",
        &["--config", &config_str, "audit", "verify"],
        &[],
    );
    assert!(out.status.success(), "{out:?}");

    assert_the_values_travelled(&world, 9001).await;
    world.collect_state();
    world.assert_no_secret_anywhere(&[
        "stdio alice: stdout",
        "stdio alice: log file",
        "approval question",
        "MCP log notification",
        "stdio wrong collector key: log file",
        "audit.jsonl",
        "approvals.db",
        "approvals list: stdout",
        "audit verify: stdout",
    ]);
}

/// `airlock serve --http` with a JSON log file; stderr lines arrive on a
/// channel (and are kept), stdout is kept.
struct HttpServer {
    child: std::process::Child,
    url: String,
    lines: std::sync::mpsc::Receiver<String>,
    stderr: Arc<Mutex<Vec<u8>>>,
    /// Taken by [`HttpServer::stop`].
    stdout: Option<std::thread::JoinHandle<Vec<u8>>>,
    stderr_done: Option<std::thread::JoinHandle<()>>,
    log: PathBuf,
}

/// A failed assertion before `stop` must not leave the server running.
impl Drop for HttpServer {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl HttpServer {
    fn start(config: &Path, enrollment: &Path, env: &[(&str, &str)]) -> HttpServer {
        use std::io::{BufRead, Read};
        let log = config.with_file_name("http.log");
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_airlock"))
            .arg("--config")
            .arg(config)
            .args(["--log-format", "json", "--log-file"])
            .arg(&log)
            .args(["serve", "--http", "127.0.0.1:0", "--enrollment"])
            .arg(enrollment)
            .env_remove("AIRLOCK_CONFIG")
            .env_remove("QUOX_SERVICE_KEY")
            .env_remove("INTERNAL_SERVICE_KEY")
            .env("AIRLOCK_LOG", LOG_LEVEL)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = child.stdout.take().unwrap();
        let stdout = std::thread::spawn(move || {
            let mut all = Vec::new();
            let _ = out.read_to_end(&mut all);
            all
        });
        let err = child.stderr.take().unwrap();
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let (tx, lines) = std::sync::mpsc::channel();
        let kept = stderr.clone();
        let stderr_done = std::thread::spawn(move || {
            for line in std::io::BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                kept.lock()
                    .unwrap()
                    .extend_from_slice(format!("{line}\n").as_bytes());
                let _ = tx.send(line);
            }
        });
        let mut server = HttpServer {
            child,
            url: String::new(),
            lines,
            stderr,
            stdout: Some(stdout),
            stderr_done: Some(stderr_done),
            log,
        };
        let line = loop {
            match server.lines.recv_timeout(Duration::from_secs(120)) {
                Ok(line) if line.contains("serving MCP at ") => break line,
                Ok(_) => continue,
                Err(e) => panic!("the server never said where it serves: {e}"),
            }
        };
        server.url = line
            .split("serving MCP at ")
            .nth(1)
            .unwrap()
            .trim()
            .to_string();
        server
    }

    async fn connect(
        &self,
        key: &str,
        name: &str,
        evidence: &Evidence,
    ) -> RunningService<RoleClient, Keeper> {
        let config = StreamableHttpClientTransportConfig::with_uri(self.url.as_str())
            .auth_header(key.to_string());
        let keeper = Keeper {
            name: name.to_string(),
            can_ask: false,
            evidence: evidence.clone(),
        };
        let client = keeper
            .serve(StreamableHttpClientTransport::from_config(config))
            .await
            .unwrap();
        set_debug(&client).await;
        client
    }

    /// SIGTERM, then keeps stdout, stderr and the log file.
    fn stop(mut self, world: &World) {
        let pid = self.child.id().to_string();
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(status.success());
        let exit = self.child.wait().unwrap();
        let stdout = self.stdout.take().unwrap().join().unwrap();
        self.stderr_done.take().unwrap().join().unwrap();
        world.evidence.add("http server: stdout", stdout);
        world
            .evidence
            .add("http server: stderr", self.stderr.lock().unwrap().clone());
        let log = std::fs::read(&self.log).unwrap_or_default();
        assert!(!log.is_empty(), "the HTTP server wrote a log file ({exit})");
        world.evidence.add("http server: log file", log);
    }
}

/// `airlock enroll`: the key it prints once is a secret from then on
/// (its stdout is the one place it belongs, so only stderr is evidence).
fn enroll_kept(world: &mut World, file: &Path, identity: &str) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(["enroll", identity, "--file"])
        .arg(file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    world
        .evidence
        .add(format!("enroll {identity}: stderr"), &out.stderr);
    let key = String::from_utf8(out.stdout).unwrap().trim().to_string();
    world
        .secrets
        .push((format!("{identity}'s bearer key"), key.clone()));
    key
}

/// A raw POST to /mcp with an Authorization header; status, headers and
/// body are evidence.
async fn raw_post(world: &World, url: &str, place: &str, authorization: &str) -> u16 {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}});
    let r = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("authorization", authorization)
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    world.evidence.add(
        format!("{place}: response headers"),
        format!("{:?}", r.headers()),
    );
    world
        .evidence
        .add(format!("{place}: response body"), r.text().await.unwrap());
    status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_over_http_keeps_every_secret_out() {
    let mut world = World::new().await;
    // The collector key comes from the environment here.
    let config = world.config("http", KeySource::Env);
    let config_str = config.display().to_string();
    let enrollment = config.with_file_name("clients.toml");
    let alice_key = enroll_kept(&mut world, &enrollment, "alice");
    let rita_key = enroll_kept(&mut world, &enrollment, "rita");
    let mallory_key = enroll_kept(&mut world, &enrollment, "mallory");
    let wrong_key = format!("alk_{}", random_hex(32));
    world
        .secrets
        .push(("an unenrolled bearer key".into(), wrong_key.clone()));
    let key = world.collector_key.clone();
    let server = HttpServer::start(&config, &enrollment, &[("QUOX_SERVICE_KEY", &key)]);

    // Keys that open nothing.
    for (place, header) in [
        ("wrong bearer key", format!("Bearer {wrong_key}")),
        ("wrong key, other scheme", format!("Basic {wrong_key}")),
        (
            "a token secret as the key",
            format!("Bearer {}", world.secrets[0].1),
        ),
    ] {
        let status = raw_post(&world, &server.url, place, &header).await;
        assert_eq!(status, 401, "{place}");
    }
    assert_eq!(
        raw_post(
            &world,
            &server.url,
            "right key, raw",
            &format!("Bearer {alice_key}")
        )
        .await,
        200,
        "alice's key opens a session"
    );

    // alice (rw): the create needs an approval, decided with the CLI.
    let alice = server
        .connect(&alice_key, "http alice", &world.evidence)
        .await;
    let script = password_script(&world.password, 9002);
    let r = kept(
        &world,
        &alice,
        "http alice: password script",
        "execute",
        json!({"script": script}),
    )
    .await;
    // The execution waits for that decision.
    assert_eq!(structured(&r)["status"], "waiting", "{}", text(&r));
    assert_eq!(structured(&r)["waiting"][0]["tool"], "ct_create");
    let request = structured(&r)["waiting"][0]["request_id"]
        .as_str()
        .unwrap()
        .to_string();
    let follow = structured(&r)["follow"].clone();
    world.run(
        "approvals list",
        &["--config", &config_str, "approvals", "list"],
        &[],
    );
    world.run(
        "approvals list --json",
        &[
            "--config",
            &config_str,
            "approvals",
            "list",
            "--all",
            "--json",
        ],
        &[],
    );
    let out = world.run(
        "approvals approve",
        &[
            "--config",
            &config_str,
            "approvals",
            "approve",
            &request,
            "--by",
            "rita",
        ],
        &[],
    );
    assert!(out.status.success(), "{out:?}");
    let r = kept(
        &world,
        &alice,
        "http alice: password script, approved",
        "execute",
        follow,
    )
    .await;
    let result = &structured(&r)["result"];
    assert_eq!(
        result["create"]["code"],
        Value::Null,
        "the approved create ran: {result}"
    );
    assert!(result["collector"]["hosts"].is_array(), "{result}");
    let r = kept(
        &world,
        &alice,
        "http alice: failing script",
        "execute",
        json!({"script": failing_script(&world.password)}),
    )
    .await;
    assert_eq!(r.is_error, Some(true), "{}", text(&r));
    resources_and_prompts(&world, &alice, "http alice").await;
    alice.cancel().await.unwrap();

    // rita (ro): refused by policy. mallory: a wrong token, 401.
    let rita = server
        .connect(&rita_key, "http rita", &world.evidence)
        .await;
    let r = kept(
        &world,
        &rita,
        "http rita: password script",
        "execute",
        json!({"script": password_script(&world.password, 9102)}),
    )
    .await;
    assert_eq!(code_of(&r, "create"), "policy_denied", "{}", text(&r));
    rita.cancel().await.unwrap();
    let mallory = server
        .connect(&mallory_key, "http mallory", &world.evidence)
        .await;
    let r = kept(
        &world,
        &mallory,
        "http mallory: password script",
        "execute",
        json!({"script": password_script(&world.password, 9202)}),
    )
    .await;
    assert_eq!(code_of(&r, "read"), "unauthorized", "{}", text(&r));
    mallory.cancel().await.unwrap();

    server.stop(&world);
    let out = world.run(
        "audit verify",
        &["--config", &config_str, "audit", "verify"],
        &[],
    );
    assert!(out.status.success(), "{out:?}");
    assert_the_values_travelled(&world, 9002).await;
    world.collect_state();
    world.assert_no_secret_anywhere(&[
        "http server: stderr",
        "http server: log file",
        "wrong bearer key: response body",
        "http alice: MCP log notification",
        "http mallory: password script",
        "audit.jsonl",
        "approvals.db",
        "approvals approve: stdout",
    ]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_and_demo_keep_every_secret_out() {
    let world = World::new().await;
    let config = world.config("exec", KeySource::File);
    let config_str = config.display().to_string();
    // The scripts hold the password; they live outside the state directory.
    let script = world.dir.path().join("password.js");
    std::fs::write(&script, password_script(&world.password, 9003)).unwrap();
    let script_str = script.display().to_string();
    let failing = world.dir.path().join("failing.js");
    std::fs::write(&failing, failing_script(&world.password)).unwrap();
    let failing_str = failing.display().to_string();
    let log = config.with_file_name("exec.log").display().to_string();
    let logged = ["--log-format", "json", "--log-file", &log];

    for (label, identity) in [
        ("exec alice", "alice"),
        ("exec rita", "rita"),
        ("exec mallory", "mallory"),
    ] {
        let out = world.run(
            label,
            &[
                &logged[..],
                &[
                    "--config",
                    &config_str,
                    "exec",
                    "--no-wait",
                    "--identity",
                    identity,
                    "--json",
                    &script_str,
                ],
            ]
            .concat(),
            &[],
        );
        let outcome: Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{label}: {e}: {out:?}"));
        let want = if identity == "alice" {
            "approval_required"
        } else {
            "policy_denied"
        };
        assert_eq!(
            outcome["result"]["ok"]["create"]["code"], want,
            "{label}: {outcome}"
        );
        if identity == "mallory" {
            assert_eq!(
                outcome["result"]["ok"]["read"]["code"], "unauthorized",
                "{label}: {outcome}"
            );
        }
        assert_eq!(
            outcome["result"]["ok"]["too_long"]["code"], "invalid_arguments",
            "{label}: {outcome}"
        );
    }
    let out = world.run(
        "exec alice, failing",
        &[
            &logged[..],
            &[
                "--config",
                &config_str,
                "exec",
                "--no-wait",
                "--identity",
                "alice",
                &failing_str,
            ],
        ]
        .concat(),
        &[],
    );
    assert!(!out.status.success(), "{out:?}");
    // Text output too (not only --json).
    world.run(
        "exec alice, text",
        &[
            &logged[..],
            &[
                "--config",
                &config_str,
                "exec",
                "--no-wait",
                "--identity",
                "alice",
                &script_str,
            ],
        ]
        .concat(),
        &[],
    );

    // The demo brings its own tokens and key (fresh, in a directory it
    // removes); the password is the script's.
    let demo_log = config.with_file_name("demo.log").display().to_string();
    for identity in ["alice", "rita"] {
        let label = format!("demo {identity}");
        let out = world.run(
            &label,
            &[
                "--log-format",
                "json",
                "--log-file",
                &demo_log,
                "demo",
                "--no-wait",
                "--collector",
                "--identity",
                identity,
                "--json",
                &script_str,
            ],
            &[],
        );
        let outcome: Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{label}: {e}: {out:?}"));
        assert_eq!(
            outcome["result"]["ok"]["too_long"]["code"], "invalid_arguments",
            "{label}: {outcome}"
        );
    }
    world.run("demo, failing", &["demo", "--no-wait", &failing_str], &[]);

    let out = world.run(
        "audit verify",
        &["--config", &config_str, "audit", "verify"],
        &[],
    );
    assert!(out.status.success(), "{out:?}");
    let requests = world.sim.requests().await;
    assert!(
        requests.iter().any(|(_, _, t)| t == "airlock@pve!admin"),
        "{requests:?}"
    );
    assert!(!world.collector.executed().is_empty());
    world.collect_state();
    world.assert_no_secret_anywhere(&[
        "exec alice: stdout",
        "exec mallory: stdout",
        "exec alice, failing: stderr",
        "demo alice: stdout",
        "demo alice: stderr",
        "exec.log",
        "demo.log",
        "audit.jsonl",
        "approvals.db",
    ]);
}
