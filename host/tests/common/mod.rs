//! A running `airlock serve --http` (the demo, or a configuration a test
//! writes) for the tests that drive it over HTTP.
#![allow(dead_code)] // each test binary uses part of it

use std::{
    ffi::OsString,
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use rmcp::{
    model::{CallToolRequestParams, CallToolResult},
    service::{RunningService, Service},
    transport::{
        streamable_http_client::StreamableHttpClientTransportConfig, StreamableHttpClientTransport,
    },
    RoleClient, ServiceExt,
};

/// A child process a test waits for (an `exec` waiting for a decision,
/// an `executions wait`), killed and reaped if the test ends first, a
/// failed assertion included.
pub struct Reaped(Option<Child>);

impl Reaped {
    pub fn new(child: Child) -> Self {
        Self(Some(child))
    }

    pub fn child(&mut self) -> &mut Child {
        self.0.as_mut().expect("not waited for yet")
    }

    /// Waits for it to end; its output.
    pub fn output(mut self) -> std::process::Output {
        self.0.take().unwrap().wait_with_output().unwrap()
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The enrollment file's name in a server's state directory.
pub const ENROLLMENT: &str = "clients.toml";

/// Runs `cmd` to its end with `stdin` as its standard input, and captures
/// its output. The process may exit without reading (bad flags): a closed
/// pipe is not the test's failure.
pub fn run_with_stdin(cmd: &mut Command, stdin: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("airlock starts");
    match child.stdin.take().unwrap().write_all(stdin.as_bytes()) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        Err(e) => panic!("writing standard input to airlock: {e}"),
    }
    child.wait_with_output().unwrap()
}

/// A running `airlock serve --http` and the lines it writes to stderr.
pub struct Server {
    pub child: Child,
    pub url: String,
    lines: mpsc::Receiver<String>,
    /// Every line `wait_for` has read so far.
    read: std::sync::Mutex<Vec<String>>,
    pub enrollment: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Starts the demo on a free loopback port with `alice` (read-write)
    /// and `rita` (read-only) enrolled; returns their keys too.
    pub fn start(extra: &[&str]) -> (Server, String, String) {
        let dir = tempfile::tempdir().unwrap();
        let enrollment = dir.path().join(ENROLLMENT);
        let alice = enroll(&enrollment, "alice");
        let rita = enroll(&enrollment, "rita");
        let mut args: Vec<OsString> = ["serve", "--demo", "--http", "127.0.0.1:0", "--enrollment"]
            .map(OsString::from)
            .into();
        args.push(enrollment.into());
        args.extend(extra.iter().map(OsString::from));
        (Server::spawn(dir, &args), alice, rita)
    }

    /// Runs `airlock ARGS`, which must serve MCP over HTTP, with `dir` as
    /// its state directory (kept until the server is dropped) and
    /// `dir/clients.toml` as the enrollment file tests add keys to; waits
    /// until it says where it serves.
    pub fn spawn(dir: tempfile::TempDir, args: &[OsString]) -> Server {
        let child = Command::new(env!("CARGO_BIN_EXE_airlock"))
            .args(args)
            .env("AIRLOCK_STATE_DIR", dir.path())
            // Drop kills the server (SIGKILL): temporary files it makes
            // (the simulated cluster's token files) go where the test
            // removes them, not into /tmp for good.
            .env("TMPDIR", dir.path())
            .env_remove("AIRLOCK_CONFIG")
            .env("AIRLOCK_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let enrollment = dir.path().join(ENROLLMENT);
        Server::adopt(child, enrollment, dir)
    }

    /// A server already started (its stderr piped), with `enrollment` as
    /// its key file and `dir` kept until it is dropped; waits until it
    /// says where it serves, in text or JSON diagnostics.
    pub fn adopt(mut child: Child, enrollment: PathBuf, dir: tempfile::TempDir) -> Server {
        // reqwest is built without a default TLS provider in this workspace.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let (tx, lines) = mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut server = Server {
            child,
            url: String::new(),
            lines,
            read: Default::default(),
            enrollment,
            _dir: dir,
        };
        let line = server.wait_for("serving MCP at ");
        server.url = line
            .split("serving MCP at ")
            .nth(1)
            .unwrap()
            .split(|c: char| c == '"' || c.is_whitespace())
            .next()
            .unwrap()
            .to_string();
        server
    }

    /// Blocks until the server writes a line containing `needle`.
    pub fn wait_for(&self, needle: &str) -> String {
        loop {
            match self.lines.recv_timeout(Duration::from_secs(120)) {
                Ok(line) => {
                    self.read.lock().unwrap().push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(e) => panic!("the server never said `{needle}`: {e}"),
            }
        }
    }

    /// The first line read so far (by `wait_for`) containing `needle`.
    pub fn said(&self, needle: &str) -> Option<String> {
        self.read
            .lock()
            .unwrap()
            .iter()
            .find(|l| l.contains(needle))
            .cloned()
    }

    /// Whether the server process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn base(&self) -> String {
        self.url.trim_end_matches("/mcp").to_string()
    }

    pub async fn connect(&self, key: &str) -> RunningService<RoleClient, ()> {
        let config = StreamableHttpClientTransportConfig::with_uri(self.url.as_str())
            .auth_header(key.to_string());
        ().serve(StreamableHttpClientTransport::from_config(config))
            .await
            .unwrap()
    }
}

pub fn enroll(file: &std::path::Path, identity: &str) -> String {
    enroll_as(file, identity, false)
}

/// A person's key for the operator console (`airlock enroll --console`).
pub fn enroll_console(file: &std::path::Path, identity: &str) -> String {
    enroll_as(file, identity, true)
}

fn enroll_as(file: &std::path::Path, identity: &str, console: bool) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_airlock"));
    cmd.args(["enroll", identity, "--file"]).arg(file);
    if console {
        cmd.arg("--console");
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let key = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let prefix = if console { "alc_" } else { "alk_" };
    assert!(key.starts_with(prefix) && key.len() == 68, "{key}");
    key
}

/// A simulated cluster in this process (tasks taking `task_delay`) and a
/// configuration for it, with `extra_toml` appended, in a state directory
/// of its own (so the audit log, `DIR/audit.jsonl`, outlives a server).
pub async fn configured(
    task_delay: Duration,
    extra_toml: &str,
) -> (airlock_sim::Simulator, tempfile::TempDir, PathBuf) {
    let (sim, sim_config) = airlock::demo::start(task_delay, 0).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let proxmox =
        airlock::demo::proxmox_section(&sim, &sim_config, &dir.path().join("tokens")).unwrap();
    let config = dir.path().join("airlock.toml");
    std::fs::write(
        &config,
        airlock::demo::config_toml(&proxmox, dir.path()) + extra_toml,
    )
    .unwrap();
    (sim, dir, config)
}

/// `airlock serve --http` (plus `extra_args`) on a [`configured`]
/// simulated cluster, with `alice` enrolled: the simulator, the server,
/// alice's key and the audit log's path.
pub async fn serve_configured(
    task_delay: Duration,
    extra_toml: &str,
    extra_args: &[&str],
) -> (airlock_sim::Simulator, Server, String, PathBuf) {
    let (sim, server, mut keys, audit) =
        serve_enrolled(task_delay, extra_toml, extra_args, &["alice"], &[]).await;
    let alice = keys.agents.remove("alice").unwrap();
    (sim, server, alice, audit)
}

/// The keys enrolled before a server started, by identity.
pub struct Enrolled {
    /// Agents' keys (`alk_…`).
    pub agents: std::collections::HashMap<String, String>,
    /// People's console keys (`alc_…`).
    pub people: std::collections::HashMap<String, String>,
}

/// [`serve_configured`] with agents' keys for `agents` and console keys
/// for `people` enrolled.
pub async fn serve_enrolled(
    task_delay: Duration,
    extra_toml: &str,
    extra_args: &[&str],
    agents: &[&str],
    people: &[&str],
) -> (airlock_sim::Simulator, Server, Enrolled, PathBuf) {
    serve_enrolled_on(
        "127.0.0.1:0",
        task_delay,
        extra_toml,
        extra_args,
        agents,
        people,
    )
    .await
}

/// [`serve_enrolled`] listening on `http` (`HOST:PORT`), for a test that
/// must write the server's address into its configuration (a sign-in's
/// redirect URI) before it starts.
pub async fn serve_enrolled_on(
    http: &str,
    task_delay: Duration,
    extra_toml: &str,
    extra_args: &[&str],
    agents: &[&str],
    people: &[&str],
) -> (airlock_sim::Simulator, Server, Enrolled, PathBuf) {
    let (sim, dir, config) = configured(task_delay, extra_toml).await;
    let audit = dir.path().join("audit.jsonl");
    let enrollment = dir.path().join(ENROLLMENT);
    let keys = Enrolled {
        agents: agents
            .iter()
            .map(|who| (who.to_string(), enroll(&enrollment, who)))
            .collect(),
        people: people
            .iter()
            .map(|who| (who.to_string(), enroll_console(&enrollment, who)))
            .collect(),
    };
    let mut args: Vec<OsString> = vec!["--config".into(), config.into()];
    args.extend(["serve", "--http", http, "--enrollment"].map(OsString::from));
    args.push(enrollment.into());
    args.extend(extra_args.iter().map(OsString::from));
    let server = tokio::task::spawn_blocking(move || Server::spawn(dir, &args))
        .await
        .unwrap();
    (sim, server, keys, audit)
}

/// Calls one of Airlock's three tools with a JSON object of arguments.
pub async fn call<H: Service<RoleClient>>(
    client: &RunningService<RoleClient, H>,
    tool: &str,
    args: serde_json::Value,
) -> CallToolResult {
    let serde_json::Value::Object(args) = args else {
        panic!("tool arguments are an object: {args}")
    };
    client
        .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(args))
        .await
        .unwrap()
}

/// The result's text content, joined.
pub fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

/// The npm packages the OpenID provider runs from, installed if missing;
/// `None` (the test says SKIPPED) without npm, as for the other npm-based
/// tests (mcp-clients/README.md).
pub fn oidc_packages() -> Option<PathBuf> {
    match airlock_testkit::TempOidcProvider::install_packages() {
        Ok(p) => Some(p),
        Err(e) if e.contains("npm is not on PATH") => {
            eprintln!("SKIPPED: {e}");
            None
        }
        Err(e) => panic!("{e}"),
    }
}

/// The Python of `target/test-venv`, with the pinned packages of
/// `scripts/requirements-test.txt` (made by `scripts/test-venv.sh`).
pub fn test_python() -> PathBuf {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let venv = repo.join("target/test-venv");
    let out = Command::new(repo.join("scripts/test-venv.sh"))
        .arg(&venv)
        .output()
        .expect("scripts/test-venv.sh runs");
    assert!(
        out.status.success(),
        "scripts/test-venv.sh failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    venv.join("bin/python")
}

/// The Node 22 the npm packages of `mcp-clients/` bring, and the folder
/// they are installed in (`target/mcp-clients`); `None` (SKIPPED) without
/// npm.
pub fn node_packages() -> Option<(PathBuf, PathBuf)> {
    let dir = oidc_packages()?;
    let arch = match std::env::consts::ARCH {
        "x86_64" => "x64",
        "aarch64" => "arm64",
        other => other,
    };
    let node = dir.join(format!("node_modules/node-linux-{arch}/bin/node"));
    Some((
        if node.exists() {
            node
        } else {
            PathBuf::from("node")
        },
        dir,
    ))
}

/// A browser's worth of HTTP for one person: no redirects followed, the
/// console's cookie kept by hand.
pub struct ConsoleUser {
    http: reqwest::Client,
    pub base: String,
    pub cookie: Option<String>,
}

impl ConsoleUser {
    pub fn new(base: &str) -> Self {
        Self {
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            base: base.to_string(),
            cookie: None,
        }
    }

    pub async fn sign_in(&mut self, key: &str) -> reqwest::Response {
        let r = self
            .http
            .post(format!("{}/console/login", self.base))
            .form(&[("key", key)])
            .send()
            .await
            .unwrap();
        if let Some(set) = r.headers().get(reqwest::header::SET_COOKIE) {
            let set = set.to_str().unwrap();
            for part in [
                "__Host-airlock_console=",
                "HttpOnly",
                "Secure",
                "SameSite=Strict",
                "Path=/;",
            ] {
                assert!(set.contains(part), "{set}");
            }
            self.cookie = Some(set.split(';').next().unwrap().to_string());
        }
        r
    }

    pub async fn get(&self, path: &str) -> (reqwest::StatusCode, String) {
        let mut req = self.http.get(format!("{}{path}", self.base));
        if let Some(c) = &self.cookie {
            req = req.header(reqwest::header::COOKIE, c);
        }
        let r = req.send().await.unwrap();
        let csp = r
            .headers()
            .get(reqwest::header::CONTENT_SECURITY_POLICY)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        assert!(
            csp.contains("default-src 'none'") && !csp.contains("script-src"),
            "{path}: {csp}"
        );
        (r.status(), r.text().await.unwrap())
    }

    pub async fn post(&self, path: &str, form: &[(&str, &str)]) -> (reqwest::StatusCode, String) {
        let mut req = self.http.post(format!("{}{path}", self.base)).form(form);
        if let Some(c) = &self.cookie {
            req = req.header(reqwest::header::COOKIE, c);
        }
        let r = req.send().await.unwrap();
        (r.status(), r.text().await.unwrap())
    }

    /// The CSRF token on a page the person was shown.
    pub fn csrf(page: &str) -> String {
        let at = page
            .find("name=\"csrf\" value=\"")
            .expect("a form with a token")
            + 19;
        page[at..at + 64].to_string()
    }

    pub async fn decide(
        &self,
        id: &str,
        decision: &str,
        reason: &str,
    ) -> (reqwest::StatusCode, String) {
        let (_, page) = self.get(&format!("/console/requests/{id}")).await;
        let csrf = Self::csrf(&page);
        self.post(
            &format!("/console/requests/{id}/decide"),
            &[("csrf", &csrf), ("decision", decision), ("reason", reason)],
        )
        .await
    }
}

/// The repository's root.
/// Runs `cmd`, which must succeed (its output is in the panic when it
/// does not); its standard output.
pub fn stdout_of(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    succeeded(&format!("{cmd:?}"), out)
}

/// The standard output of `what`, which must have succeeded (its output
/// is in the panic when it did not).
pub fn succeeded(what: &str, out: std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

pub fn repo() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// What a client program printed as its last line, as JSON; its stderr
/// in the panic when it failed.
pub fn client_answer(client: &str, out: std::process::Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the {client} client failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{client}: {e}: {stdout}"))
}

/// The simulated cluster's audit chain of a configuration whose
/// `state_dir` is `state` beside it.
pub fn simulated_audit(config: &std::path::Path) -> Vec<serde_json::Value> {
    let text =
        std::fs::read_to_string(config.parent().unwrap().join("state/simulated/audit.jsonl"))
            .unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `host/tests/clients/modern.mjs ARGS` on the Node the npm packages
/// bring; `None` (SKIPPED) without npm.
pub fn modern(args: &[&str]) -> Option<serde_json::Value> {
    let Some((node, packages)) = node_packages() else {
        eprintln!("SKIPPED: npm is not available for the TypeScript SDK 2.x client");
        return None;
    };
    let program = packages.join("modern.mjs");
    std::fs::copy(repo().join("host/tests/clients/modern.mjs"), &program).unwrap();
    let out = tokio::task::block_in_place(|| {
        Command::new(node).arg(program).args(args).output().unwrap()
    });
    Some(client_answer("typescript 2026", out))
}

/// Lets `identity` (its section written as the demo writes it, `mode =
/// "operator"` and so on) approve its own calls in its client, in the
/// configuration file `config`.
pub fn approves_own(config: &std::path::Path, identity: &str, mode: &str) {
    let text = std::fs::read_to_string(config).unwrap();
    let section = format!("[identities.{identity}]\nmode = \"{mode}\"\n");
    assert!(text.contains(&section), "{text}");
    std::fs::write(
        config,
        text.replace(&section, &format!("{section}approve_own = true\n")),
    )
    .unwrap();
}

/// How many guest shutdowns the simulated cluster was asked for.
pub async fn shutdowns(sim: &airlock_sim::Simulator) -> usize {
    sim.requests()
        .await
        .iter()
        .filter(|(method, path, _)| method == "POST" && path.contains("/status/shutdown"))
        .count()
}

/// Asserts the audit has one end line for `execution`, `Cancelled` by
/// `by`.
pub fn cancelled_once_by(lines: &[serde_json::Value], execution: &serde_json::Value, by: &str) {
    let ends: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["event"] == "execution_end" && &l["execution"] == execution)
        .collect();
    assert_eq!(ends.len(), 1, "{ends:?}");
    assert_eq!(
        (&ends[0]["outcome"], &ends[0]["cancelled_by"]),
        (&serde_json::json!("Cancelled"), &serde_json::json!(by))
    );
}
