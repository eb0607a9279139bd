//! A throwaway, real nginx load balancer for tests.
//!
//! Tests of several replicas behind one address (session affinity, a
//! replica going away, Server-Sent Events passing through a proxy) need the
//! proxy a deployment would really use: an imitation would hide its
//! buffering, its retries and its hashing. Each [`TempNginx`] is an nginx
//! master of its own, started in the foreground as a child process from a
//! config written into a fresh temporary directory, listening on 127.0.0.1
//! only, on a free port, with every file it writes kept in that directory.
//!
//! Only the `nginx` binary is used; no HTTP client crate is needed here.

use std::fs;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::{is_executable, log_tail, read_from, watchdog::Watchdog};

/// How many free ports to try when another process takes the one picked
/// between choosing it and nginx binding it.
const START_ATTEMPTS: usize = 5;
/// How long nginx may take to accept connections once started. nginx
/// itself retries a taken port for about 2.5 s before giving up, so this
/// leaves room for that and a loaded machine.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between readiness checks.
const READY_POLL: Duration = Duration::from_millis(10);
/// How long a connection attempt in the readiness check may take.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(200);
/// How long the master gets to finish after SIGQUIT before its whole
/// process group is killed. The config's `worker_shutdown_timeout` (1 s)
/// makes workers drop streams that are still open, so this is rarely hit.
const STOP_GRACE: Duration = Duration::from_secs(3);
/// Lines of the install script's output quoted when it fails.
const INSTALL_OUTPUT_LINES: usize = 30;
/// The upstream block's name, used by `proxy_pass`.
const UPSTREAM: &str = "airlock";
/// Where nginx is looked for after PATH, in this order; the same list as
/// scripts/install-nginx.sh. /usr/sbin (Debian's place) is often not on a
/// normal user's PATH.
const SBIN_CANDIDATES: [&str; 3] = [
    "/usr/sbin/nginx",
    "/usr/local/sbin/nginx",
    "/usr/local/nginx/sbin/nginx",
];

/// An nginx load balancer of its own for a test, stopped and deleted on
/// drop.
///
/// Dropping it sends SIGQUIT to the master (a graceful stop, bounded by the
/// config's `worker_shutdown_timeout`), then, if the master is not gone
/// after a few seconds, SIGKILL to its whole process group, workers
/// included; then the directory is removed. Because a test process can
/// also end without dropping it (a value kept in a `static`, a kill,
/// Ctrl-C, a harness timeout), a small watchdog process holds the read end
/// of a pipe whose write end only this value holds: when the test process
/// ends in any way, the kernel closes that end and the watchdog stops
/// nginx's process group and removes the directory.
pub struct TempNginx {
    /// The master process, in a process group of its own (its workers
    /// share it). `None` only while starting and after drop.
    master: Option<Child>,
    port: u16,
    config: String,
    access_log: PathBuf,
    watchdog: Option<Watchdog>,
    /// Declared last so it is removed after nginx is stopped.
    dir: TempDir,
}

impl TempNginx {
    /// Installs nginx if missing, writes a config into a fresh temporary
    /// directory and starts nginx in the foreground (`daemon off`, so the
    /// child process is the master) as a load balancer in front of
    /// `upstreams`, returning once it accepts connections.
    ///
    /// Installing runs `scripts/install-nginx.sh` (found from this crate's
    /// source directory), so a fresh CI machine needs no setup step of its
    /// own. `upstreams` are `host:port` strings, each becoming
    /// `server HOST:PORT max_fails=1 fail_timeout=30s;` in an upstream
    /// block named `airlock`; `upstream_block_extra` goes into that block
    /// as given (say, `hash $http_x_route consistent;`) and `http_extra`
    /// into the `http` block (say, a `map` defining the variable hashed
    /// on). One server on 127.0.0.1, on a port that was free (retried when
    /// another process takes it first), passes every request to the
    /// upstreams with buffering off both ways, as Server-Sent Events need,
    /// and retries the next upstream only when one cannot be reached. See
    /// [`config_text`](Self::config_text) for the whole config.
    ///
    /// The pid file, logs and temporary files all live in the temporary
    /// directory. As root, worker processes run as root too (`user`), so
    /// they can write in that 0700 directory; as anyone else they run as
    /// the current user, as nginx does when not started as root. If nginx
    /// fails to start, the error quotes the last lines of its error log.
    pub fn start(
        upstreams: &[String],
        upstream_block_extra: &str,
        http_extra: &str,
    ) -> Result<TempNginx, String> {
        check_upstreams(upstreams)?;
        let bin = match find_nginx() {
            Some(bin) => bin,
            None => {
                install()?;
                find_nginx().ok_or_else(|| {
                    "nginx: scripts/install-nginx.sh succeeded but nginx is still not found \
                     (PATH, /usr/sbin, /usr/local/sbin, /usr/local/nginx/sbin); install nginx"
                        .to_string()
                })?
            }
        };
        let build = Build::probe(&bin)?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let user = if unsafe { libc::geteuid() } == 0 {
            Some(current_user_and_group()?)
        } else {
            None
        };

        let dir = tempfile::Builder::new()
            .prefix("airlock-nginx-")
            .tempdir()
            .map_err(|e| {
                format!("nginx: cannot create a temporary directory: {e}; check TMPDIR")
            })?;
        check_plain_path(dir.path())?;
        let conf = dir.path().join("nginx.conf");
        let error_log = dir.path().join("error.log");
        let output_log = dir.path().join("output.log");
        let pid_file = dir.path().join("nginx.pid");

        let mut nginx = TempNginx {
            master: None,
            port: 0,
            config: String::new(),
            access_log: dir.path().join("access.log"),
            watchdog: None,
            dir,
        };
        // Before the first start, so there is no moment when an nginx runs
        // that nothing would stop.
        nginx.watchdog = Some(nginx.spawn_watchdog()?);

        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            nginx.port = free_port()?;
            nginx.config = render_config(
                nginx.dir.path(),
                nginx.port,
                user.as_ref(),
                &build,
                upstreams,
                upstream_block_extra,
                http_extra,
            );
            fs::write(&conf, &nginx.config)
                .map_err(|e| format!("nginx: cannot write {}: {e}", conf.display()))?;
            let error_before = file_len(&error_log);
            let output_before = file_len(&output_log);

            let mut master = spawn_master(&bin, &build, nginx.dir.path(), &conf, &output_log)?;
            if let Err(e) = nginx.tell_watchdog(&master.id().to_string()) {
                stop(&mut master, Duration::ZERO);
                return Err(e);
            }
            let failure = match wait_ready(&master, nginx.port, &pid_file) {
                Ok(()) => {
                    nginx.master = Some(master);
                    return Ok(nginx);
                }
                Err(failure) => failure,
            };
            stop(&mut master, Duration::ZERO);
            nginx.tell_watchdog("stopped")?;

            let new_text = format!(
                "{}{}",
                read_from(&error_log, error_before),
                read_from(&output_log, output_before)
            );
            let error = format!(
                "nginx: {failure} (127.0.0.1:{}, config {})\nlast lines of the error log {}:\n{}\
                 \nlast lines of its output {}:\n{}",
                nginx.port,
                conf.display(),
                error_log.display(),
                log_tail(&error_log),
                output_log.display(),
                log_tail(&output_log),
            );
            if !new_text.contains("Address already in use") {
                return Err(error);
            }
            last = error;
        }
        Err(format!(
            "nginx: every one of {START_ATTEMPTS} free ports was taken before nginx could bind \
             it; is something grabbing loopback ports? Last error: {last}"
        ))
    }

    /// The TCP port on 127.0.0.1 nginx listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT{path}`; `path` goes in as given, so start it
    /// with `/`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// The access log so far, one line per finished request:
    /// `TIME STATUS "REQUEST" upstream=ADDR upstream_status=S session=ID
    /// request_time=T`, where `session` is the `Mcp-Session-Id` request
    /// header (`-` when absent) and `upstream` the replica that served it
    /// (several, comma-separated, when nginx moved on after a failure).
    /// nginx writes a line when it finishes a request, just before it
    /// closes a connection that is not kept alive: a client that read its
    /// response to end-of-file will find the line here.
    pub fn access_log(&self) -> String {
        read_from(&self.access_log, 0)
    }

    /// The nginx.conf this nginx runs with.
    pub fn config_text(&self) -> String {
        self.config.clone()
    }

    /// A process that reads nginx master pids, one a line, until
    /// end-of-file, then stops the process group of the last one (`stopped`
    /// when there is none to stop) and removes the directory. Its own
    /// process group, so a Ctrl-C meant for the tests does not end it
    /// before it has done so.
    fn spawn_watchdog(&self) -> Result<Watchdog, String> {
        // QUIT to the group lets nginx finish gracefully; `kill -0` on the
        // group finds any process of it still there (the master's group id
        // cannot be handed to another process while one is), and KILL ends
        // what QUIT did not in about 3 s.
        let script = r#"
pid=
while read -r line; do pid=$line; done
case $pid in
''|*[!0-9]*) ;;
*)
    kill -s QUIT -- "-$pid" 2>/dev/null
    n=0
    while [ "$n" -lt 30 ] && kill -s 0 -- "-$pid" 2>/dev/null; do
        sleep 0.1
        n=$((n + 1))
    done
    kill -s KILL -- "-$pid" 2>/dev/null
    ;;
esac
rm -rf "$1"
"#;
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(script)
            .arg("airlock-nginx-watchdog")
            .arg(self.dir.path())
            .current_dir("/");
        Watchdog::spawn(cmd, "nginx")
    }

    /// Hands the watchdog a line: the pid of a master it must stop if the
    /// test process dies, or `stopped` once there is none.
    fn tell_watchdog(&mut self, line: &str) -> Result<(), String> {
        match self.watchdog.as_mut() {
            Some(w) => w.tell(line),
            None => Err("nginx: the watchdog is gone".into()),
        }
    }
}

impl Drop for TempNginx {
    /// Stops nginx, then tells the watchdog there is nothing left to stop
    /// and waits for it, which removes the directory; the `TempDir`
    /// removal after that finds nothing left.
    fn drop(&mut self) {
        if let Some(mut master) = self.master.take() {
            stop(&mut master, STOP_GRACE);
            let _ = self.tell_watchdog("stopped");
        }
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.release();
        }
    }
}

/// What this nginx binary was built with, as far as the config cares.
struct Build {
    /// `-e FILE` (nginx 1.19.5 and later): the error log from the very
    /// start, instead of the compiled-in path before the config is read
    /// (which a normal user cannot open: an alert on every start).
    error_log_flag: bool,
    /// Modules whose `*_temp_path` directive exists; a binary built
    /// without one (`--without-http_uwsgi_module`, as small builds are)
    /// knows no such directive and never writes such files.
    fastcgi: bool,
    uwsgi: bool,
    scgi: bool,
}

impl Build {
    /// Reads `nginx -V` (version and configure arguments, on stderr).
    fn probe(bin: &Path) -> Result<Build, String> {
        let out = Command::new(bin)
            .arg("-V")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("nginx: cannot run {} -V: {e}", bin.display()))?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        if !out.status.success() {
            return Err(format!(
                "nginx: {} -V failed ({}): {}",
                bin.display(),
                out.status,
                text.trim()
            ));
        }
        let version = text
            .split_once("nginx/")
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .and_then(|v| {
                v.split('.')
                    .map(|part| part.parse::<u32>().ok())
                    .collect::<Option<Vec<u32>>>()
            })
            .unwrap_or_default();
        let without = |module: &str| text.contains(&format!("--without-http_{module}_module"));
        Ok(Build {
            error_log_flag: version >= vec![1, 19, 5],
            fastcgi: !without("fastcgi"),
            uwsgi: !without("uwsgi"),
            scgi: !without("scgi"),
        })
    }
}

/// The whole nginx.conf. `dir` is plain (check_plain_path), so paths need
/// no quoting.
fn render_config(
    dir: &Path,
    port: u16,
    user: Option<&(String, String)>,
    build: &Build,
    upstreams: &[String],
    upstream_block_extra: &str,
    http_extra: &str,
) -> String {
    let dir = dir.display();
    let mut c = String::new();
    c.push_str("# Written by airlock-testkit (TempNginx) for one test run; every file\n");
    c.push_str("# nginx writes is in this directory, and it is removed afterwards.\n");
    if let Some((user, group)) = user {
        c.push_str("# Started as root: workers stay root so they can write in this 0700\n");
        c.push_str("# directory.\n");
        c.push_str(&format!("user {user} {group};\n"));
    }
    c.push_str("worker_processes 1;\n");
    c.push_str(&format!("pid {dir}/nginx.pid;\n"));
    c.push_str(&format!("error_log {dir}/error.log notice;\n"));
    c.push_str("# Open streams (SSE) must not hold up a stop.\n");
    c.push_str("worker_shutdown_timeout 1s;\n");
    c.push_str("\nevents {\n    worker_connections 1024;\n}\n\nhttp {\n");
    c.push_str(
        "    log_format airlock '$time_iso8601 $status \"$request\" \
         upstream=$upstream_addr upstream_status=$upstream_status \
         session=$http_mcp_session_id request_time=$request_time';\n",
    );
    c.push_str(&format!("    access_log {dir}/access.log airlock;\n"));
    c.push_str(&format!(
        "    client_body_temp_path {dir}/client_body_temp;\n"
    ));
    c.push_str(&format!("    proxy_temp_path {dir}/proxy_temp;\n"));
    for (present, module) in [
        (build.fastcgi, "fastcgi"),
        (build.uwsgi, "uwsgi"),
        (build.scgi, "scgi"),
    ] {
        if present {
            c.push_str(&format!("    {module}_temp_path {dir}/{module}_temp;\n"));
        }
    }
    push_indented(&mut c, http_extra, "    ");
    c.push_str(&format!("\n    upstream {UPSTREAM} {{\n"));
    push_indented(&mut c, upstream_block_extra, "        ");
    for upstream in upstreams {
        c.push_str(&format!(
            "        server {upstream} max_fails=1 fail_timeout=30s;\n"
        ));
    }
    c.push_str("    }\n\n    server {\n");
    c.push_str(&format!("        listen 127.0.0.1:{port};\n"));
    c.push_str("        location / {\n");
    for line in [
        &format!("proxy_pass http://{UPSTREAM};"),
        "proxy_http_version 1.1;",
        "proxy_set_header Connection \"\";",
        "proxy_set_header Host $http_host;",
        "# Streamable HTTP answers with Server-Sent Events: pass every byte",
        "# on as it comes, both ways.",
        "proxy_buffering off;",
        "proxy_request_buffering off;",
        "proxy_read_timeout 300s;",
        "proxy_send_timeout 300s;",
        "proxy_next_upstream error timeout;",
    ] {
        c.push_str(&format!("            {line}\n"));
    }
    c.push_str("        }\n    }\n}\n");
    c
}

/// Appends `text`'s lines with `indent` before each non-blank one; nothing
/// for blank text.
fn push_indented(out: &mut String, text: &str, indent: &str) {
    for line in text.trim_matches('\n').lines() {
        if line.trim().is_empty() {
            out.push('\n');
        } else {
            out.push_str(indent);
            out.push_str(line.trim_end());
            out.push('\n');
        }
    }
}

/// Starts `nginx -p DIR -c CONF -g 'daemon off;'` (and `-e`, when it has
/// it) in a process group of its own, so its workers can be stopped with
/// it, with its output appended to `output`.
fn spawn_master(
    bin: &Path,
    build: &Build,
    dir: &Path,
    conf: &Path,
    output: &Path,
) -> Result<Child, String> {
    let out = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(output)
        .map_err(|e| format!("nginx: cannot open {}: {e}", output.display()))?;
    let err = out
        .try_clone()
        .map_err(|e| format!("nginx: cannot open {}: {e}", output.display()))?;
    let mut cmd = Command::new(bin);
    cmd.arg("-p").arg(dir).arg("-c").arg(conf);
    if build.error_log_flag {
        cmd.arg("-e").arg(dir.join("error.log"));
    }
    cmd.args(["-g", "daemon off;"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0);
    cmd.spawn()
        .map_err(|e| format!("nginx: cannot start {}: {e}", bin.display()))
}

/// Waits until the master has written its pid file (nginx does that only
/// after binding its port, so a connection is then surely to this nginx
/// and not to whatever else may have taken the port) and a connection to
/// the port succeeds. The error says why not: the master exited, or time
/// ran out.
fn wait_ready(master: &Child, port: u16, pid_file: &Path) -> Result<(), String> {
    let pid = master.id();
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if has_exited(pid) {
            return Err("nginx exited while starting".to_string());
        }
        let pid_written =
            fs::read_to_string(pid_file).is_ok_and(|text| text.trim() == pid.to_string());
        if pid_written
            && TcpStream::connect_timeout(&(Ipv4Addr::LOCALHOST, port).into(), CONNECT_TIMEOUT)
                .is_ok()
        {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "nginx did not accept connections within {} s",
                READY_TIMEOUT.as_secs()
            ));
        }
        std::thread::sleep(READY_POLL);
    }
}

/// True once the child `pid` has exited, without reaping it: while it is
/// unreaped its pid, and so its process group's id, cannot go to another
/// process, which makes the group kill in `stop` safe.
fn has_exited(pid: u32) -> bool {
    // SAFETY: an all-zero siginfo_t is valid; waitid only writes to it.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is a valid siginfo_t to write to.
    let rc = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // With WNOHANG, si_pid stays 0 while the child runs. An error means it
    // is not our child any more: nothing left to wait for.
    // SAFETY: waitid filled `info` in (or left it zeroed).
    rc != 0 || unsafe { info.si_pid() } != 0
}

/// SIGQUIT to the master (graceful stop), up to `grace` for it to exit,
/// then SIGKILL to its whole process group, which also ends any worker
/// left behind (nginx workers outlive a master that was killed), then
/// reaps the master. The group is killed before the master is reaped, so
/// its id cannot belong to anyone else yet.
fn stop(master: &mut Child, grace: Duration) {
    let pid = master.id();
    if !has_exited(pid) && !grace.is_zero() {
        // SAFETY: kill has no memory-safety preconditions; pid is our
        // unreaped child.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGQUIT) };
        let deadline = Instant::now() + grace;
        while !has_exited(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    // SAFETY: as above; the unreaped master keeps the group id ours.
    unsafe { libc::kill(-(pid as libc::pid_t), libc::SIGKILL) };
    let _ = master.wait();
}

/// Each upstream must be a plain `host:port` that cannot break the config.
fn check_upstreams(upstreams: &[String]) -> Result<(), String> {
    if upstreams.is_empty() {
        return Err("nginx: no upstreams given; pass at least one host:port".to_string());
    }
    for upstream in upstreams {
        if upstream.contains("://") {
            return Err(format!(
                "nginx: upstream {upstream:?} is a URL; give host:port, such as 127.0.0.1:8080"
            ));
        }
        let plain = !upstream.is_empty()
            && upstream
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-:[]".contains(c));
        if !plain || !upstream.contains(':') {
            return Err(format!(
                "nginx: upstream {upstream:?} is not a plain host:port, such as 127.0.0.1:8080"
            ));
        }
    }
    Ok(())
}

/// The temporary directory is named in the config unquoted, where `$`
/// would start a variable and `;` or a space would end a value.
fn check_plain_path(dir: &Path) -> Result<(), String> {
    let text = dir.to_string_lossy();
    if !text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c))
    {
        return Err(format!(
            "nginx: the temporary directory {text} has characters an nginx config would need \
             quoted; set TMPDIR to a plain path such as /tmp"
        ));
    }
    Ok(())
}

/// The user and group nginx's workers run as when we are root: ours, so
/// they can write in the 0700 temporary directory.
fn current_user_and_group() -> Result<(String, String), String> {
    let id = |flag: &str| -> Result<String, String> {
        let out = Command::new("id")
            .arg(flag)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("nginx: cannot run id {flag}: {e}"))?;
        let name = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !out.status.success() || name.is_empty() || name.contains(char::is_whitespace) {
            return Err(format!(
                "nginx: `id {flag}` gave no usable name ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(name)
    };
    Ok((id("-un")?, id("-gn")?))
}

/// nginx on PATH, else in the sbin directories it usually lives in.
fn find_nginx() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("nginx"))
            .find(|nginx| is_executable(nginx))
    });
    on_path.or_else(|| {
        SBIN_CANDIDATES
            .iter()
            .map(PathBuf::from)
            .find(|nginx| is_executable(nginx))
    })
}

/// Runs scripts/install-nginx.sh, which installs nginx from the
/// distribution's packages and makes concurrent callers wait for one
/// install.
fn install() -> Result<(), String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/install-nginx.sh");
    if !script.is_file() {
        return Err(format!(
            "nginx is not installed and {} is missing; install nginx (Debian: apt-get install \
             nginx)",
            script.display()
        ));
    }
    let out = Command::new("sh")
        .arg(&script)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("nginx: cannot run {}: {e}", script.display()))?;
    if !out.status.success() {
        // apt-get's whole output is long; its last lines say what failed.
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = stderr.trim().lines().collect();
        return Err(format!(
            "nginx: {} (installing nginx) failed ({}):\n{}",
            script.display(),
            out.status,
            lines[lines.len().saturating_sub(INSTALL_OUTPUT_LINES)..].join("\n")
        ));
    }
    Ok(())
}

/// A port that was free on 127.0.0.1 a moment ago. Another process may
/// take it before nginx binds it; `start` retries then.
fn free_port() -> Result<u16, String> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|e| format!("nginx: cannot find a free port on 127.0.0.1: {e}"))
}

fn file_len(path: &Path) -> u64 {
    fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}
