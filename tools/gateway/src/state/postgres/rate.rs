//! Rate buckets every replica shares: one row per identity, refilled and
//! taken in a single `INSERT … ON CONFLICT DO UPDATE`, which PostgreSQL
//! runs atomically per row. The arithmetic is `rate::Bucket::take`'s,
//! written in SQL.

use std::sync::Arc;

use super::{connection, unavailable, PgError, Postgres};
use crate::rate::{RateLimits, RateUnavailable};

impl From<PgError> for RateUnavailable {
    fn from(e: PgError) -> Self {
        RateUnavailable(e.to_string())
    }
}

pub struct PgRate {
    db: Arc<Postgres>,
}

impl PgRate {
    pub fn new(db: Arc<Postgres>) -> Self {
        Self { db }
    }
}

/// The bucket refilled up to now: `LEAST(per_minute, tokens + elapsed ×
/// per_minute / 60 000)`, a clock set back refilling nothing.
const REFILLED: &str =
    "LEAST($2::float8, r.tokens + GREATEST($3::int8 - r.at_ms, 0)::float8 / 60000.0 * $2::float8)";

impl RateLimits for PgRate {
    fn take(&self, identity: &str, per_minute: u32, now_ms: i64) -> Result<bool, RateUnavailable> {
        let identity = identity.to_string();
        let per_minute = per_minute as f64;
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
                 RETURNING took"
                );
                let statement = conn
                    .prepare_cached(&sql)
                    .await
                    .map_err(|e| unavailable(&at, e))?;
                let row = conn
                    .query_one(&statement, &[&identity, &per_minute, &now_ms])
                    .await
                    .map_err(|e| unavailable(&at, e))?;
                Ok(row.get::<_, bool>(0))
            })
    }
}
