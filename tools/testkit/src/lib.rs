//! Throwaway, real PostgreSQL servers for tests.
//!
//! Tests of code that keeps its state in PostgreSQL need a real server: an
//! imitation would hide exactly the behaviour (transactions, constraint
//! errors, a server that goes away mid-run) those tests are about. Each
//! [`TempPostgres`] is a fresh cluster in its own temporary directory,
//! listening on 127.0.0.1 only, on a free port, with a random password, so
//! tests can run side by side and leave nothing behind.
//!
//! Only PostgreSQL's own programs are used (initdb, pg_ctl, createdb, psql):
//! no client crate and no async runtime, so any crate can take this as a
//! dev-dependency without sharing code with what it tests.
//!
//! The crate also starts throwaway nginx load balancers ([`TempNginx`]) and
//! OpenID providers ([`TempOidcProvider`]: the `oidc-provider` npm package
//! on Node, issuing ES256 JWT access tokens to client-credentials clients).

use std::ffi::OsStr;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tempfile::TempDir;

mod nginx;
pub mod structure;
mod watchdog;
pub use nginx::TempNginx;
mod oidc;
pub use oidc::{OidcClient, OidcPerson, TempOidcProvider};

/// The superuser initdb creates; every connection uses it.
const SUPERUSER: &str = "airlock";
/// How many free ports to try when another process takes the one picked
/// between choosing it and the server binding it.
const START_ATTEMPTS: usize = 5;
/// pg_ctl's wait for start and stop; a loaded CI machine can be slow.
const WAIT_SECS: &str = "60";
/// Server log lines quoted in an error when the server fails to start.
const LOG_TAIL_LINES: usize = 20;
/// A unix socket path (with its NUL) must fit in `sun_path`, 108 bytes.
const MAX_SOCKET_PATH: usize = 107;

/// A PostgreSQL server of its own for a test, stopped and deleted on drop.
///
/// Dropping it stops the server (`pg_ctl stop -m fast`) and removes its
/// directory. Because a test process can also end without dropping it (a
/// value kept in a `static`, a kill, Ctrl-C, a harness timeout), a small
/// watchdog process holds the read end of a pipe whose write end only this
/// value holds: when the test process ends in any way, the kernel closes
/// that end and the watchdog stops the server and removes the directory.
pub struct TempPostgres {
    /// PostgreSQL's bin directory (initdb, pg_ctl, createdb, psql).
    bin: PathBuf,
    /// True when we are root: PostgreSQL refuses to run as root, so its
    /// programs run as the `postgres` user instead.
    as_postgres: bool,
    port: u16,
    password: String,
    password_file: PathBuf,
    data: PathBuf,
    log: PathBuf,
    watchdog: Option<watchdog::Watchdog>,
    /// Holds the password file, ours alone; removed by the watchdog too.
    secrets: TempDir,
    /// Declared last so it is removed after the server is stopped.
    dir: TempDir,
}

impl TempPostgres {
    /// Installs PostgreSQL if missing, creates a fresh cluster in a new
    /// temporary directory and starts it, returning once it accepts
    /// connections.
    ///
    /// Installing runs `scripts/install-postgres.sh` (found from this
    /// crate's source directory), so a fresh CI machine needs no setup
    /// step of its own. The cluster has one superuser, `airlock`, with a
    /// random password (scram-sha-256), written to a 0600 file owned by
    /// the current user so the test can hand it to code that reads a
    /// password file. The server listens on 127.0.0.1 only, on a port that
    /// was free (retried when another process takes it first), with its
    /// unix socket inside the temporary directory so it never meets a
    /// system server's socket. Its log is kept in the temporary directory
    /// and quoted in the error when it fails to start.
    ///
    /// As root, the directory is given to the `postgres` user and every
    /// PostgreSQL program runs as that user through `runuser`.
    pub fn start() -> Result<TempPostgres, String> {
        let bin = match find_bindir() {
            Some(bin) => bin,
            None => {
                install()?;
                find_bindir().ok_or_else(|| {
                    "PostgreSQL: scripts/install-postgres.sh succeeded but initdb is still not found \
                     (pg_config --bindir, /usr/lib/postgresql/*/bin, PATH); install PostgreSQL's \
                     server programs"
                        .to_string()
                })?
            }
        };
        for program in ["initdb", "pg_ctl", "postgres", "createdb", "psql"] {
            if !is_executable(&bin.join(program)) {
                return Err(format!(
                    "PostgreSQL: {program} is missing from {}; install PostgreSQL's server and \
                     client programs (Debian: apt-get install postgresql)",
                    bin.display()
                ));
            }
        }

        // SAFETY: geteuid has no preconditions and cannot fail.
        let as_postgres = unsafe { libc::geteuid() } == 0;
        let dir = tempfile::Builder::new()
            .prefix("airlock-pg-")
            .tempdir()
            .map_err(|e| {
                format!("PostgreSQL: cannot create a temporary directory: {e}; check TMPDIR")
            })?;
        check_socket_dir(dir.path())?;
        let owner = if as_postgres {
            let owner = postgres_ids()?;
            check_traversable(dir.path(), owner.0)?;
            std::os::unix::fs::chown(dir.path(), Some(owner.0), Some(owner.1)).map_err(|e| {
                format!(
                    "PostgreSQL: cannot give {} to the postgres user: {e}",
                    dir.path().display()
                )
            })?;
            Some(owner)
        } else {
            None
        };

        let password = random_hex()?;
        // In a directory of our own: the server's belongs to postgres, who
        // could swap a file in it, so a client checking where its
        // password comes from would rightly refuse it there.
        let secrets = tempfile::Builder::new()
            .prefix("airlock-pg-secret-")
            .tempdir()
            .map_err(|e| {
                format!("PostgreSQL: cannot create a temporary directory: {e}; check TMPDIR")
            })?;
        let password_file = secrets.path().join("password");
        write_secret(&password_file, &password)?;

        let mut pg = TempPostgres {
            bin,
            as_postgres,
            port: 0,
            password,
            password_file,
            data: dir.path().join("data"),
            log: dir.path().join("server.log"),
            watchdog: None,
            secrets,
            dir,
        };
        pg.initdb(owner)?;
        // Before the first start, so there is no moment when a server runs
        // that nothing would stop.
        pg.watchdog = Some(pg.spawn_watchdog()?);
        pg.start_on_free_port()?;
        Ok(pg)
    }

    /// The TCP port on 127.0.0.1; it stays the same across `restart`.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The superuser's password: 32 hex characters, fresh for each server.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// A 0600 file, owned by the current user, holding only the password
    /// (no newline), for code under test that reads its password from a
    /// file.
    pub fn password_file(&self) -> &Path {
        &self.password_file
    }

    /// `postgres://airlock@127.0.0.1:PORT/DB`, without the password, for
    /// code that takes the password separately (or to show in output).
    /// `db` goes in as given: use plain names.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://{SUPERUSER}@127.0.0.1:{}/{db}", self.port)
    }

    /// The same URL with the password in it, for code that takes a single
    /// connection string (an `AIRLOCK_STATE_URL`-style setting). The
    /// password is hex, so it needs no escaping.
    pub fn url_with_password(&self, db: &str) -> String {
        format!(
            "postgres://{SUPERUSER}:{}@127.0.0.1:{}/{db}",
            self.password, self.port
        )
    }

    /// Creates database `db` with the `createdb` program and returns
    /// [`url`](Self::url)`(db)`. Names unique per test are the caller's
    /// job: several tests may share one server.
    pub fn create_database(&self, db: &str) -> Result<String, String> {
        let mut cmd = self.client("createdb");
        cmd.arg("--").arg(db);
        run(cmd, &format!("createdb {db}"))?;
        Ok(self.url(db))
    }

    /// Stops the server at once (`pg_ctl stop -m immediate`, as if it had
    /// crashed) and keeps its data, for tests of the database going down
    /// mid-run. [`restart`](Self::restart) brings it back.
    pub fn stop_now(&self) -> Result<(), String> {
        let mut cmd = self.pg("pg_ctl");
        cmd.args(["stop", "-s", "-w", "-t", WAIT_SECS, "-m", "immediate", "-D"])
            .arg(&self.data);
        run(cmd, "pg_ctl stop -m immediate").map(drop)
    }

    /// Starts the server again after [`stop_now`](Self::stop_now), on the
    /// same port so URLs handed out stay valid; returns once it accepts
    /// connections (after crash recovery). Fails if another process took
    /// the port meanwhile.
    pub fn restart(&self) -> Result<(), String> {
        self.pg_ctl_start()
    }

    /// Runs `sql` in database `db` with `psql -tA` (tuples only, unaligned,
    /// stopping at the first error) and returns its output less the final
    /// newline: rows one a line, columns split by `|`. For tests that
    /// inspect or sabotage tables behind the code under test.
    pub fn psql(&self, db: &str, sql: &str) -> Result<String, String> {
        let mut cmd = self.client("psql");
        cmd.args([
            "-X",
            "-q",
            "-t",
            "-A",
            "-v",
            "ON_ERROR_STOP=1",
            "-d",
            db,
            "-c",
            sql,
        ]);
        let out = run(cmd, &format!("psql -d {db} -c {sql:?}"))?;
        Ok(out.strip_suffix('\n').unwrap_or(&out).to_string())
    }

    /// A PostgreSQL program (or any program, for the watchdog's `sh`), as
    /// the `postgres` user when we are root, run in the temporary directory
    /// (which that user owns) with no `PG*` variables from the caller's
    /// environment, so a developer's PGHOST or PGDATABASE cannot redirect
    /// it to another server.
    fn as_pg_user(&self, program: impl AsRef<OsStr>) -> Command {
        let cmd = if self.as_postgres {
            let mut cmd = Command::new("runuser");
            cmd.args(["-u", "postgres", "--"]).arg(program);
            cmd
        } else {
            Command::new(program)
        };
        self.in_dir(cmd)
    }

    /// `cmd` run in the temporary directory, without the caller's `PG*`
    /// variables.
    fn in_dir(&self, mut cmd: Command) -> Command {
        cmd.current_dir(self.dir.path()).stdin(Stdio::null());
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("PG") {
                cmd.env_remove(name);
            }
        }
        cmd
    }

    /// A program from PostgreSQL's bin directory.
    fn pg(&self, program: &str) -> Command {
        self.as_pg_user(self.bin.join(program))
    }

    /// A client program connected over TCP as the superuser. TCP, not the
    /// socket, so the password is checked the way the code under test
    /// will have it checked.
    fn client(&self, program: &str) -> Command {
        let mut cmd = self.pg(program);
        cmd.args([
            "-h",
            "127.0.0.1",
            "-p",
            &self.port.to_string(),
            "-U",
            SUPERUSER,
        ])
        .env("PGPASSWORD", &self.password)
        .env("PGCONNECT_TIMEOUT", "10");
        cmd
    }

    /// Creates the cluster. `owner` is the postgres user's (uid, gid) when
    /// we are root: initdb then runs as that user and cannot read our
    /// 0600 password file, so it gets a copy of its own, removed after.
    fn initdb(&self, owner: Option<(u32, u32)>) -> Result<(), String> {
        let pwfile = match owner {
            None => self.password_file.clone(),
            Some((uid, gid)) => {
                let copy = self.dir.path().join("initdb-password");
                write_secret(&copy, &self.password)?;
                std::os::unix::fs::chown(&copy, Some(uid), Some(gid)).map_err(|e| {
                    format!("PostgreSQL: cannot give the password file to postgres: {e}")
                })?;
                copy
            }
        };
        let mut cmd = self.pg("initdb");
        cmd.arg("-D")
            .arg(&self.data)
            .args(["-U", SUPERUSER, "--auth=scram-sha-256"])
            .arg(format!("--pwfile={}", pwfile.display()))
            // C locale: no dependence on the machine's locales, and
            // faster. --no-sync: the cluster is thrown away anyway.
            .args(["--encoding=UTF8", "--locale=C", "--no-sync"]);
        let result = run(cmd, "initdb");
        if owner.is_some() {
            let _ = fs::remove_file(&pwfile);
        }
        result.map(drop)
    }

    /// Starts the server, choosing a new free port and trying again when
    /// the one chosen was taken before the server could bind it.
    fn start_on_free_port(&mut self) -> Result<(), String> {
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            self.port = free_port()?;
            let log_before = fs::metadata(&self.log).map(|m| m.len()).unwrap_or(0);
            match self.pg_ctl_start() {
                Ok(()) => return Ok(()),
                Err(e) => {
                    let new_log = read_from(&self.log, log_before);
                    if !new_log.contains("could not bind")
                        && !new_log.contains("Address already in use")
                    {
                        return Err(e);
                    }
                    last = e;
                }
            }
        }
        Err(format!(
            "PostgreSQL: every one of {START_ATTEMPTS} free ports was taken before the server \
             could bind it; is something grabbing loopback ports? Last error: {last}"
        ))
    }

    /// `pg_ctl start -w` on `self.port`: returns once the server accepts
    /// connections. fsync=off because the data is thrown away, and it
    /// makes schema setup much faster; it loses nothing when only the
    /// server (not the machine) stops, so `stop_now` tests stay honest.
    /// max_connections=200 because tests run several replicas with pools.
    fn pg_ctl_start(&self) -> Result<(), String> {
        // pg_ctl hands -o to a shell; check_socket_dir made sure the path
        // needs no quoting.
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} \
             -c max_connections=200 -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        let mut cmd = self.pg("pg_ctl");
        cmd.args(["start", "-s", "-w", "-t", WAIT_SECS, "-D"])
            .arg(&self.data)
            .arg("-l")
            .arg(&self.log)
            .arg("-o")
            .arg(options);
        run(cmd, &format!("pg_ctl start on 127.0.0.1:{}", self.port)).map_err(|e| {
            format!(
                "{e}\nlast lines of the server log {}:\n{}",
                self.log.display(),
                log_tail(&self.log)
            )
        })?;
        Ok(())
    }

    /// A process that waits for end-of-file on its stdin, then stops the
    /// server (as its user) and removes both directories (as ours: the
    /// password's is ours alone). Its own process group, so a Ctrl-C meant
    /// for the tests does not end it before it has done so.
    fn spawn_watchdog(&self) -> Result<watchdog::Watchdog, String> {
        let script = r#"dir=$1; secrets=$2; shift 2; read -r _ignored; "$@" >/dev/null 2>&1; rm -rf "$dir" "$secrets""#;
        let mut cmd = self.in_dir(Command::new("sh"));
        cmd.arg("-c")
            .arg(script)
            .arg("airlock-pg-watchdog")
            .arg(self.dir.path())
            .arg(self.secrets.path());
        if self.as_postgres {
            cmd.args(["runuser", "-u", "postgres", "--"]);
        }
        cmd.arg(self.bin.join("pg_ctl"))
            .args(["stop", "-s", "-m", "immediate", "-D"])
            .arg(&self.data);
        watchdog::Watchdog::spawn(cmd, "PostgreSQL")
    }
}

impl Drop for TempPostgres {
    /// Stops the server (fast: clients are disconnected, no waiting for
    /// them), then lets the watchdog go and waits for it, which removes
    /// the directory; the `TempDir` removal after that finds nothing left.
    fn drop(&mut self) {
        if self.data.join("postmaster.pid").exists() {
            let mut cmd = self.pg("pg_ctl");
            cmd.args(["stop", "-s", "-w", "-t", WAIT_SECS, "-m", "fast", "-D"])
                .arg(&self.data)
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let _ = cmd.status();
        }
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.release();
        }
    }
}

/// Runs `cmd`, returning its stdout, or an error naming `what` with its
/// exit status and stderr.
fn run(mut cmd: Command, what: &str) -> Result<String, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("PostgreSQL: cannot run {what}: {e}"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        return Err(format!(
            "PostgreSQL: {what} failed ({}): {}{}",
            out.status,
            stderr.trim(),
            if stdout.trim().is_empty() {
                String::new()
            } else {
                format!("\n{}", stdout.trim())
            }
        ));
    }
    String::from_utf8(out.stdout).map_err(|e| format!("PostgreSQL: {what} printed non-UTF-8: {e}"))
}

/// PostgreSQL's bin directory: `pg_config --bindir` when it has initdb,
/// else the newest `/usr/lib/postgresql/*/bin` with initdb (Debian keeps
/// the server programs off PATH there), else wherever `initdb` on PATH
/// really lives.
fn find_bindir() -> Option<PathBuf> {
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        if out.status.success() {
            let bin = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            if is_executable(&bin.join("initdb")) {
                return Some(bin);
            }
        }
    }
    let mut newest: Option<(Vec<u32>, PathBuf)> = None;
    for entry in fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(version) = parse_version(&name) else {
            continue;
        };
        let bin = entry.path().join("bin");
        if is_executable(&bin.join("initdb"))
            && newest.as_ref().is_none_or(|(best, _)| version > *best)
        {
            newest = Some((version, bin));
        }
    }
    if let Some((_, bin)) = newest {
        return Some(bin);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("initdb"))
        .find(|initdb| is_executable(initdb))
        // A symlink (as in /usr/local/bin) points into the real bin
        // directory, which also has pg_ctl, createdb and psql.
        .and_then(|initdb| fs::canonicalize(initdb).ok())
        .and_then(|initdb| initdb.parent().map(Path::to_path_buf))
}

/// "15" or "9.6" as numbers, so 10 sorts after 9.6.
fn parse_version(name: &str) -> Option<Vec<u32>> {
    name.split('.').map(|part| part.parse().ok()).collect()
}

pub(crate) fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Runs scripts/install-postgres.sh, which installs PostgreSQL from the
/// distribution's packages and makes concurrent callers wait for one
/// install.
fn install() -> Result<(), String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/install-postgres.sh");
    if !script.is_file() {
        return Err(format!(
            "PostgreSQL is not installed and {} is missing; install PostgreSQL's server and \
             client programs (Debian: apt-get install postgresql)",
            script.display()
        ));
    }
    let mut cmd = Command::new("sh");
    cmd.arg(&script).stdin(Stdio::null());
    run(
        cmd,
        &format!("{} (installing PostgreSQL)", script.display()),
    )
    .map(drop)
}

/// The postgres user's uid and gid, for running PostgreSQL as root.
fn postgres_ids() -> Result<(u32, u32), String> {
    let id = |flag: &str| -> Result<u32, String> {
        let mut cmd = Command::new("id");
        cmd.args([flag, "postgres"]);
        run(cmd, &format!("id {flag} postgres"))
            .map_err(|e| {
                format!(
                    "{e}; PostgreSQL refuses to run as root and there is no `postgres` user to run \
                     it as: install Debian's postgresql package (it creates the user) or run the \
                     tests as a non-root user"
                )
            })?
            .trim()
            .parse()
            .map_err(|e| format!("PostgreSQL: `id {flag} postgres` printed no number: {e}"))
    };
    Ok((id("-u")?, id("-g")?))
}

/// Every directory above `dir` must let the postgres user through, or it
/// cannot reach its own data directory.
fn check_traversable(dir: &Path, postgres_uid: u32) -> Result<(), String> {
    for ancestor in dir.ancestors().skip(1) {
        let meta = fs::metadata(ancestor)
            .map_err(|e| format!("PostgreSQL: cannot stat {}: {e}", ancestor.display()))?;
        if meta.mode() & 0o001 == 0 && meta.uid() != postgres_uid {
            return Err(format!(
                "PostgreSQL runs as the postgres user here (we are root) and cannot get through \
                 {} (mode {:o}); set TMPDIR to a directory every user can reach, such as /tmp",
                ancestor.display(),
                meta.mode() & 0o7777
            ));
        }
    }
    Ok(())
}

/// The temporary directory is also the server's socket directory, named
/// on a command line that pg_ctl hands to a shell: it must need no quoting
/// and leave room for `/.s.PGSQL.NNNNN.lock` in a socket path.
fn check_socket_dir(dir: &Path) -> Result<(), String> {
    let text = dir.to_string_lossy();
    let plain = text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c));
    if !plain || text.len() + "/.s.PGSQL.65535.lock".len() > MAX_SOCKET_PATH {
        return Err(format!(
            "PostgreSQL: the temporary directory {text} is too long or has characters a socket \
             path cannot take; set TMPDIR to a short plain path such as /tmp"
        ));
    }
    Ok(())
}

/// 16 random bytes as 32 hex characters: safe in a URL without escaping.
fn random_hex() -> Result<String, String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| format!("PostgreSQL: no randomness for the password: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Creates `path` with mode 0600 from the start, so the secret is never
/// readable by others even for a moment.
fn write_secret(path: &Path, secret: &str) -> Result<(), String> {
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(secret.as_bytes()))
        .map_err(|e| format!("PostgreSQL: cannot write {}: {e}", path.display()))
}

/// A port that was free on 127.0.0.1 a moment ago. Another process may
/// take it before the server binds it; start_on_free_port retries then.
fn free_port() -> Result<u16, String> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|e| format!("PostgreSQL: cannot find a free port on 127.0.0.1: {e}"))
}

/// The file's text from byte `offset` on (empty if unreadable).
pub(crate) fn read_from(path: &Path, offset: u64) -> String {
    let mut text = Vec::new();
    if let Ok(mut file) = fs::File::open(path) {
        if file.seek(SeekFrom::Start(offset)).is_ok() {
            let _ = file.read_to_end(&mut text);
        }
    }
    String::from_utf8_lossy(&text).into_owned()
}

pub(crate) fn log_tail(path: &Path) -> String {
    let text = read_from(path, 0);
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n");
    if tail.is_empty() {
        "(empty)".to_string()
    } else {
        tail
    }
}
