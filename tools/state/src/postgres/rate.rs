//! Rate buckets every replica shares: one row per identity, refilled and
//! taken in a single `INSERT … ON CONFLICT DO UPDATE`, which PostgreSQL
//! runs atomically per row. The arithmetic is `rate::Bucket::take`'s,
//! written in SQL.
//!
//! An empty bucket answers how long until its next token; until then this
//! replica refuses the identity's calls itself. Other replicas can only
//! take tokens, never add them, so that refusal is always right, and a
//! script looping on refused calls costs no database writes.

use std::sync::{
    atomic::{AtomicI64, Ordering},
    Arc, Mutex,
};

use super::{connection, unavailable, PgError, Postgres};
use airlock_gateway::rate::{RateLimits, RateUnavailable, Swept, REFILLED_AFTER_MS};

impl From<PgError> for RateUnavailable {
    fn from(e: PgError) -> Self {
        RateUnavailable(e.to_string())
    }
}

pub struct PgRate {
    db: Arc<Postgres>,
    /// Per identity: no token before this time (ms), as the database said.
    /// Entries whose time has passed are swept out as new ones come.
    empty_until: Mutex<Swept<i64>>,
    /// When this replica last deleted the rows of full buckets.
    purged_ms: AtomicI64,
}

impl PgRate {
    pub fn new(db: Arc<Postgres>) -> Self {
        Self {
            db,
            empty_until: Mutex::new(Swept::new()),
            purged_ms: AtomicI64::new(i64::MIN),
        }
    }

    /// Identities this replica remembers as refused (for tests).
    pub fn remembered(&self) -> usize {
        self.empty_until
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map
            .len()
    }
}

/// How often each replica deletes the rows of buckets that are full again
/// (a full bucket and no row answer alike), so the table holds the
/// identities of about the last minutes, however many there were.
pub const PURGE_EVERY_MS: i64 = 60_000;

/// Rows are deleted only once untouched for twice the refill time: a
/// replica whose clock runs up to a minute ahead of the one that wrote a
/// row still deletes only a full bucket.
pub const PURGE_AFTER_MS: i64 = 2 * REFILLED_AFTER_MS;

/// Most rows one purge deletes, so that it never nears a statement
/// timeout; a larger backlog goes over the next purges.
pub const PURGE_BATCH: i64 = 50_000;

/// The bucket refilled up to now: `LEAST(per_minute, tokens + elapsed ×
/// per_minute / 60 000)`, a clock set back refilling nothing.
const REFILLED: &str =
    "LEAST($2::float8, r.tokens + GREATEST($3::int8 - r.at_ms, 0)::float8 / 60000.0 * $2::float8)";

impl RateLimits for PgRate {
    fn take(&self, identity: &str, per_minute: u32, now_ms: i64) -> Result<bool, RateUnavailable> {
        {
            let empty = self.empty_until.lock().unwrap_or_else(|p| p.into_inner());
            // (A wait longer than a token's time is a clock set back: ask.)
            if let Some(until) = empty.map.get(identity) {
                let wait = until - now_ms;
                if wait > 0 && wait <= 60_000 / per_minute.max(1) as i64 + 1 {
                    return Ok(false);
                }
            }
        }
        let owned = identity.to_string();
        let per = per_minute as f64;
        // Each replica about once a minute, after its take, on the same
        // connection.
        let last = self.purged_ms.load(Ordering::Relaxed);
        let purge = now_ms.saturating_sub(last) >= PURGE_EVERY_MS
            && self
                .purged_ms
                .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok();
        self.db
            .run("taking a rate token", move |pool, at| async move {
                let conn = connection(&pool, &at).await?;
                let sql = format!(
                    "INSERT INTO airlock_rate AS r (identity, tokens, at_ms, took) \
                 VALUES ($1, $2::float8 - 1, $3::int8, $2::float8 >= 1) \
                 ON CONFLICT (identity) DO UPDATE SET \
                   tokens = CASE WHEN {REFILLED} >= 1 THEN {REFILLED} - 1 ELSE {REFILLED} END, \
                   at_ms = GREATEST(r.at_ms, $3::int8), \
                   took = {REFILLED} >= 1 \
                 RETURNING took, tokens"
                );
                let statement = conn
                    .prepare_cached(&sql)
                    .await
                    .map_err(|e| unavailable(&at, e))?;
                let row = conn
                    .query_one(&statement, &[&owned, &per, &now_ms])
                    .await
                    .map_err(|e| unavailable(&at, e))?;
                let taken = (row.get::<_, bool>(0), row.get::<_, f64>(1));
                if purge {
                    // A full bucket's row says nothing a missing row does
                    // not. The token is already taken: a purge that fails
                    // is logged, and the next one tries again.
                    let purged = async {
                        let statement = conn
                            .prepare_cached(
                                "DELETE FROM airlock_rate WHERE identity IN \
                                 (SELECT identity FROM airlock_rate WHERE at_ms < $1 LIMIT $2)",
                            )
                            .await?;
                        conn.execute(&statement, &[&(now_ms - PURGE_AFTER_MS), &PURGE_BATCH])
                            .await
                    }
                    .await;
                    if let Err(e) = purged {
                        tracing::warn!(error = %unavailable(&at, e), "could not delete the rate rows of full buckets; the next purge tries again");
                    }
                }
                Ok::<_, RateUnavailable>(taken)
            })
            .map(|(took, tokens)| {
                let mut empty = self.empty_until.lock().unwrap_or_else(|p| p.into_inner());
                if took {
                    empty.map.remove(identity);
                } else {
                    // Tokens come at per_minute a minute: the next one in
                    // (1 - tokens) of a token's time.
                    let wait = ((1.0 - tokens).max(0.0) * 60_000.0 / per).ceil() as i64;
                    if !empty.map.contains_key(identity) {
                        empty.make_room(now_ms, |until| *until > now_ms);
                    }
                    empty.map.insert(identity.to_string(), now_ms + wait.max(1));
                }
                took
            })
    }
}
