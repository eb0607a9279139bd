//! The state of a deployment in one PostgreSQL database, shared by every
//! replica: approvals ([`approvals`]), the audit chain ([`audit`]), the
//! rate buckets ([`rate`]), bearer keys ([`keys`]), transport sessions
//! ([`sessions`]) and sign-ins to the operator console ([`console`]).
//!
//! The gateway's call path is synchronous (an audit line is written before
//! a call goes on, and again when a dropped call is cleaned up in `Drop`),
//! so every store method blocks. The connections live on a small runtime
//! of their own; a method sends its work there and waits for the answer.
//! Every wait is bounded: connecting and taking a pooled connection by
//! `timeout`, every statement and lock wait by the server's
//! `statement_timeout` and `lock_timeout` (set to `timeout` on each
//! connection), and the whole round by three times `timeout`, so a
//! database that hangs costs a caller seconds, never forever.

pub mod approvals;
pub mod audit;
pub mod console;
pub mod keys;
mod migrations;
pub mod parked;
pub mod rate;
pub mod runbooks;
pub mod sessions;
pub mod shares;

use std::{
    future::Future,
    path::PathBuf,
    str::FromStr,
    sync::{
        atomic::{AtomicI64, Ordering},
        Arc,
    },
    time::Duration,
};

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::{config::Host, NoTls};

/// `[state] backend = "postgres"`, as the gateway receives it.
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresConfig {
    /// A libpq connection URL or key=value string. May carry a password
    /// only when it came from the environment (`AIRLOCK_STATE_URL`);
    /// [`PostgresConfig::describe`] never shows one.
    pub url: String,
    /// A file holding the password (its first line), read at start.
    pub password_file: Option<PathBuf>,
    /// Connections this process keeps open at most.
    pub pool_size: usize,
    /// The bound on connecting, on waiting for a pooled connection, and
    /// on every statement and lock wait.
    pub timeout: Duration,
}

impl std::fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresConfig")
            .field("url", &self.describe())
            .field("password_file", &self.password_file)
            .field("pool_size", &self.pool_size)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// Default connections per process: the gateway's calls hold one for a
/// few round trips each.
pub const DEFAULT_POOL_SIZE: usize = 8;

/// Default bound on connecting and on each statement.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

impl PostgresConfig {
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            password_file: None,
            pool_size: DEFAULT_POOL_SIZE,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Whether `url` has a password written into it.
    pub fn url_has_password(url: &str) -> bool {
        tokio_postgres::Config::from_str(url).is_ok_and(|c| c.get_password().is_some())
    }

    /// `postgresql://user@host:port/db`, without the password, for logs
    /// and messages; the URL's own text is never shown, since a password
    /// may sit anywhere in it.
    pub fn describe(&self) -> String {
        match tokio_postgres::Config::from_str(&self.url) {
            Ok(c) => describe(&c),
            Err(_) => "postgresql (an unreadable url)".into(),
        }
    }

    /// The parsed configuration, password from the file if one is named.
    fn parse(&self) -> Result<tokio_postgres::Config, PgError> {
        let mut config = tokio_postgres::Config::from_str(&self.url).map_err(|e| {
            // The parser's message never quotes the input.
            PgError::Config(format!(
                "[state] url is not a PostgreSQL connection URL ({e}); write postgres://USER@HOST:PORT/DATABASE"
            ))
        })?;
        if let Some(path) = &self.password_file {
            let text = airlock_edge::credential_file::read(path)
                .map_err(|e| PgError::Config(format!("[state] password_file: {e}")))?;
            let password = text.lines().next().unwrap_or("").trim_end_matches('\r');
            if password.is_empty() {
                return Err(PgError::Config(format!(
                    "[state] password_file {} is empty; put the password on its first line",
                    path.display()
                )));
            }
            config.password(password);
        }
        if config.get_ssl_mode() == tokio_postgres::config::SslMode::Require {
            return Err(PgError::Config(
                "[state] url asks for sslmode=require, and this Airlock connects to PostgreSQL without TLS; reach it over loopback, a Unix socket or a private network, or drop sslmode".into(),
            ));
        }
        let ms = self.timeout.as_millis().max(1);
        config
            .connect_timeout(self.timeout)
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(30))
            .application_name("airlock")
            .options(format!(
                "-c statement_timeout={ms} -c lock_timeout={ms} -c idle_in_transaction_session_timeout={} \
                 -c client_min_messages=warning",
                ms * 2
            ));
        Ok(config)
    }
}

fn describe(c: &tokio_postgres::Config) -> String {
    let user = c.get_user().unwrap_or("(default user)");
    let host = match c.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        #[cfg(unix)]
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = c.get_ports().first().copied().unwrap_or(5432);
    let db = c.get_dbname().unwrap_or(user);
    format!("postgresql://{user}@{host}:{port}/{db}")
}

/// What went wrong talking to PostgreSQL. The texts name the server and
/// the statement's purpose, never the password.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PgError {
    #[error("{0}")]
    Config(String),
    #[error("PostgreSQL at {at} is unavailable: {message}")]
    Unavailable { at: String, message: String },
    #[error("PostgreSQL at {at} did not answer within {} s while {what}", .waited.as_secs())]
    TimedOut {
        at: String,
        what: &'static str,
        waited: Duration,
    },
    #[error("{0}")]
    Schema(String),
}

/// A pool of connections on a runtime of its own.
pub struct Postgres {
    runtime: Option<tokio::runtime::Runtime>,
    pool: Conns,
    at: String,
    /// The bound on one whole round (see the module docs).
    backstop: Duration,
}

/// The pool, with the mark of when the database last failed to accept a
/// connection or answer (shared by every clone).
#[derive(Clone)]
pub(crate) struct Conns {
    pool: Pool,
    /// Until when calls are refused without trying (see [`Postgres::trip`]).
    down_until_ms: Arc<AtomicI64>,
}

/// How long calls are refused at once after the database failed to
/// answer: long enough that a stalled database does not hold every
/// caller for its timeout, short enough that service resumes at once.
pub const REST_MS: i64 = 1000;

/// The wall clock, in ms since the epoch, as rows store it.
pub(crate) fn epoch_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Advisory lock keys: the class (ASCII "ARLK") and what it guards.
pub(crate) const LOCK_CLASS: i32 = 0x4152_4c4b;
pub(crate) const LOCK_MIGRATE: i32 = 1;
/// Approvals lock per identity, in a class of their own.
pub(crate) const LOCK_CLASS_APPROVALS: i32 = LOCK_CLASS + 1;

impl Postgres {
    /// Connects, checks the server answers, and brings the schema up to
    /// date (under an advisory lock, so replicas starting together apply
    /// each migration once). Fails when the database cannot be reached:
    /// a replica must not start without the state it shares.
    pub fn connect(config: &PostgresConfig) -> Result<Arc<Self>, PgError> {
        let pg = config.parse()?;
        let at = describe(&pg);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("airlock-state")
            .enable_all()
            .build()
            .map_err(|e| PgError::Unavailable {
                at: at.clone(),
                message: format!("no runtime for its connections: {e}"),
            })?;
        let manager = Manager::from_config(
            pg,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = {
            // The pool's timers need the runtime it will run on.
            let _entered = runtime.enter();
            Pool::builder(manager)
                .max_size(config.pool_size.max(1))
                .runtime(deadpool_postgres::Runtime::Tokio1)
                .wait_timeout(Some(config.timeout))
                .create_timeout(Some(config.timeout))
                .recycle_timeout(Some(config.timeout))
                .build()
                .map_err(|e| PgError::Config(format!("[state] pool: {e}")))?
        };
        let this = Arc::new(Self {
            runtime: Some(runtime),
            pool: Conns {
                pool,
                down_until_ms: Arc::new(AtomicI64::new(0)),
            },
            at,
            backstop: config.timeout * 3,
        });
        this.run("applying its migrations", |pool, at| async move {
            migrations::apply(&pool, &at).await
        })?;
        tracing::debug!(at = %this.at, "state in PostgreSQL");
        Ok(this)
    }

    /// Where the database is, without a password.
    pub fn at(&self) -> &str {
        &self.at
    }

    /// Runs `work` on the store's runtime and waits for it, at most the
    /// backstop. `what` names the work in a timeout's message.
    pub(crate) fn run<T, E, F, Fut>(&self, what: &'static str, work: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<PgError> + Send + 'static,
        F: FnOnce(Conns, String) -> Fut,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
    {
        let now = epoch_ms();
        let until = self.pool.down_until_ms.load(Ordering::Relaxed);
        if now < until {
            return Err(E::from(PgError::Unavailable {
                at: self.at.clone(),
                message: format!(
                    "it did not answer a moment ago; trying again in {} ms",
                    until - now
                ),
            }));
        }
        let runtime = self.runtime.as_ref().expect("the runtime lives until drop");
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let fut = work(self.pool.clone(), self.at.clone());
        let task = runtime.spawn(async move {
            let _ = tx.send(fut.await);
        });
        let wait = || rx.recv_timeout(self.backstop);
        // On a worker of a multi-threaded runtime, say this thread blocks,
        // so its other tasks (timers, other sessions) move to another
        // worker instead of waiting for the database too.
        let answer = match tokio::runtime::Handle::try_current() {
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(wait)
            }
            _ => wait(),
        };
        match answer {
            Ok(result) => result,
            Err(_) => {
                task.abort();
                self.trip();
                Err(E::from(PgError::TimedOut {
                    at: self.at.clone(),
                    what,
                    waited: self.backstop,
                }))
            }
        }
    }

    /// After the database failed to answer or to accept a connection,
    /// refuse at once for [`REST_MS`] instead of making every caller wait
    /// out its own timeout.
    pub(crate) fn trip(&self) {
        self.pool.trip();
    }
}

impl Drop for Postgres {
    /// Dropping a runtime blocks, which panics inside another runtime (a
    /// gateway dropped in an async test or handler); let it wind down in
    /// the background instead.
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// Maps a driver or pool error to one that names the server and never the
/// password. The driver's own text for a server error is just "db
/// error"; the server's message (e.g. "password authentication failed
/// for user …") is in the error's sources, so they are spelled out too.
pub(crate) fn unavailable(at: &str, e: impl std::error::Error) -> PgError {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = s.source();
    }
    PgError::Unavailable {
        at: at.to_string(),
        message,
    }
}

impl Conns {
    fn trip(&self) {
        self.down_until_ms
            .store(epoch_ms() + REST_MS, Ordering::Relaxed);
    }
}

/// Takes `key`'s advisory lock in `class` until the transaction ends, so
/// the steps of one identity's approvals, or one runbook's versions, never
/// interleave across replicas. Prepared once per connection: the approval
/// check takes it on every call.
pub(crate) async fn lock_key(
    tx: &deadpool_postgres::Transaction<'_>,
    class: i32,
    key: &str,
) -> Result<(), tokio_postgres::Error> {
    let lock = tx
        .prepare_cached("SELECT pg_advisory_xact_lock($1, hashtext($2))")
        .await?;
    tx.execute(&lock, &[&class, &key]).await.map(|_| ())
}

/// A pooled connection, or why there is none (and then calls rest a
/// moment: see [`Postgres::trip`]).
pub(crate) async fn connection(
    conns: &Conns,
    at: &str,
) -> Result<deadpool_postgres::Object, PgError> {
    conns.pool.get().await.map_err(|e| {
        conns.trip();
        unavailable(at, e)
    })
}
