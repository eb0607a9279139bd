//! The schema, as numbered migrations applied in order at start. Each is
//! applied once, in one transaction, under an advisory lock, and recorded
//! in `airlock_schema`; a database a newer Airlock migrated further is
//! refused rather than guessed at.

use super::{connection, unavailable, Conns, PgError, LOCK_CLASS, LOCK_MIGRATE};

/// (version, what it adds, SQL). Append only: a released migration never
/// changes, a change is a new one.
const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "approvals, the audit chain, rate buckets",
        "
    CREATE TABLE airlock_approvals (
        id          TEXT PRIMARY KEY,
        identity    TEXT NOT NULL,
        tool        TEXT NOT NULL,
        args_hash   TEXT NOT NULL,
        summary     TEXT NOT NULL,
        status      TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'used')),
        created_ms  BIGINT NOT NULL,
        expires_ms  BIGINT NOT NULL,
        decided_by  TEXT,
        decided_ms  BIGINT,
        used_ms     BIGINT
    );
    CREATE INDEX airlock_approvals_binding
        ON airlock_approvals (identity, tool, args_hash, status);
    CREATE INDEX airlock_approvals_expiry ON airlock_approvals (expires_ms);

    -- One row per audit line, exactly the bytes a file would hold (less
    -- the newline); seq is the line's own seq, hash its own hash.
    CREATE TABLE airlock_audit (
        seq   BIGINT PRIMARY KEY CHECK (seq > 0),
        hash  TEXT NOT NULL,
        line  TEXT NOT NULL
    );

    CREATE TABLE airlock_rate (
        identity  TEXT PRIMARY KEY,
        tokens    DOUBLE PRECISION NOT NULL,
        at_ms     BIGINT NOT NULL,
        took      BOOLEAN NOT NULL
    );
    ",
    ),
    (
        2,
        "bearer keys",
        "
    CREATE TABLE airlock_keys (
        key_sha256  TEXT PRIMARY KEY CHECK (key_sha256 ~ '^[0-9a-f]{64}$'),
        identity    TEXT NOT NULL,
        created_ms  BIGINT NOT NULL
    );
    ",
    ),
    (
        3,
        "transport sessions any replica can pick up",
        "
    CREATE TABLE airlock_sessions (
        id         TEXT PRIMARY KEY,
        record     TEXT NOT NULL,
        stored_ms  BIGINT NOT NULL
    );
    CREATE INDEX airlock_sessions_stored ON airlock_sessions (stored_ms);
    ",
    ),
    (
        4,
        "who opened each session",
        "ALTER TABLE airlock_sessions ADD COLUMN identity TEXT;",
    ),
    (
        5,
        "change plans: a plan's changes on its approval row",
        "ALTER TABLE airlock_approvals ADD COLUMN plan TEXT;",
    ),
    (
        6,
        "approvals bound to tools' stable keys, full arguments, decision channels",
        "
    ALTER TABLE airlock_approvals ADD COLUMN tool_key TEXT;
    ALTER TABLE airlock_approvals ADD COLUMN detail TEXT;
    ALTER TABLE airlock_approvals ADD COLUMN decided_via TEXT;
    CREATE INDEX airlock_approvals_key_binding
        ON airlock_approvals (identity, tool_key, args_hash, status);
    ",
    ),
    (
        7,
        "the key of the short hashes approvers see secrets by",
        "
    CREATE TABLE airlock_meta (
        name   TEXT PRIMARY KEY,
        value  BYTEA NOT NULL
    );
    ",
    ),
    (
        8,
        "rate buckets found by age, so full ones can be deleted",
        "CREATE INDEX airlock_rate_at ON airlock_rate (at_ms);",
    ),
    (
        9,
        "sessions found by owner, so one identity's oldest can be trimmed",
        "CREATE INDEX airlock_sessions_identity ON airlock_sessions (identity, stored_ms DESC, id);",
    ),
    (
        10,
        "places of executions running, per identity, across replicas",
        "
    CREATE TABLE airlock_shares (
        execution  TEXT PRIMARY KEY,
        identity   TEXT NOT NULL,
        until_ms   BIGINT NOT NULL
    );
    CREATE INDEX airlock_shares_identity ON airlock_shares (identity, until_ms);
    ",
    ),
    (
        11,
        "the reason a decision was given",
        "ALTER TABLE airlock_approvals ADD COLUMN reason TEXT;",
    ),
    (
        12,
        "sign-ins to the operator console, by the SHA-256 of their id",
        "
    CREATE TABLE airlock_console_sessions (
        id_sha256   TEXT PRIMARY KEY,
        identity    TEXT NOT NULL,
        record      TEXT NOT NULL,
        expires_ms  BIGINT NOT NULL
    );
    CREATE INDEX airlock_console_sessions_expiry ON airlock_console_sessions (expires_ms);
    CREATE INDEX airlock_console_sessions_identity
        ON airlock_console_sessions (identity, expires_ms);
    ",
    ),
    (
        13,
        "runbook versions and their approvals",
        "
    CREATE SEQUENCE airlock_runbooks_seq;
    CREATE TABLE airlock_runbooks (
        name         TEXT NOT NULL,
        version      TEXT NOT NULL CHECK (version ~ '^[0-9a-f]{64}$'),
        text         TEXT NOT NULL,
        author       TEXT NOT NULL,
        added_ms     BIGINT NOT NULL,
        approved_by  TEXT,
        approved_ms  BIGINT,
        retired_ms   BIGINT,
        seq          BIGINT NOT NULL DEFAULT nextval('airlock_runbooks_seq'),
        PRIMARY KEY (name, version)
    );
    CREATE INDEX airlock_runbooks_current ON airlock_runbooks (name, seq DESC);
    ",
    ),
    (
        14,
        "durable executions parked, waiting for decisions",
        "
    CREATE TABLE airlock_parked (
        execution       TEXT PRIMARY KEY,
        identity        TEXT NOT NULL,
        born_ms         BIGINT NOT NULL,
        parked_ms       BIGINT NOT NULL,
        bytes           BIGINT NOT NULL CHECK (bytes >= 0),
        waiting         TEXT NOT NULL,
        body            TEXT NOT NULL,
        asked           BIGINT NOT NULL DEFAULT 0,
        declined        BOOLEAN NOT NULL DEFAULT false,
        ready           BOOLEAN NOT NULL DEFAULT false,
        holder          TEXT,
        lease_until_ms  BIGINT,
        orphan          BOOLEAN NOT NULL DEFAULT false,
        calls           BIGINT NOT NULL DEFAULT 0
    );
    CREATE INDEX airlock_parked_identity ON airlock_parked (identity);
    CREATE INDEX airlock_parked_born ON airlock_parked (born_ms);
    ",
    ),
];

/// The newest version this build knows.
pub(crate) fn latest() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.0)
}

/// Applies what is missing; returns the version the database is at.
pub(crate) async fn apply(pool: &Conns, at: &str) -> Result<i32, PgError> {
    let mut conn = connection(pool, at).await?;
    let tx = conn.transaction().await.map_err(|e| unavailable(at, e))?;
    tx.execute(
        "SELECT pg_advisory_xact_lock($1, $2)",
        &[&LOCK_CLASS, &LOCK_MIGRATE],
    )
    .await
    .map_err(|e| unavailable(at, e))?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS airlock_schema (
            version     INTEGER PRIMARY KEY,
            description TEXT NOT NULL,
            applied_at  TIMESTAMPTZ NOT NULL DEFAULT now()
        )",
    )
    .await
    .map_err(|e| unavailable(at, e))?;
    let current: i32 = tx
        .query_one("SELECT COALESCE(MAX(version), 0) FROM airlock_schema", &[])
        .await
        .map_err(|e| unavailable(at, e))?
        .get(0);
    if current > latest() {
        return Err(PgError::Schema(format!(
            "the database at {at} has Airlock schema version {current}, newer than the {} this Airlock knows; upgrade this replica",
            latest()
        )));
    }
    for (version, description, sql) in MIGRATIONS.iter().filter(|m| m.0 > current) {
        tx.batch_execute(sql).await.map_err(|e| {
            PgError::Schema(format!(
                "migration {version} ({description}) failed on {at}: {e}"
            ))
        })?;
        tx.execute(
            "INSERT INTO airlock_schema (version, description) VALUES ($1, $2)",
            &[version, description],
        )
        .await
        .map_err(|e| unavailable(at, e))?;
        tracing::info!(version, description, "applied a state migration");
    }
    tx.commit().await.map_err(|e| unavailable(at, e))?;
    Ok(latest().max(current))
}
