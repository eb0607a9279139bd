//! Execution places every replica counts: a row per execution running,
//! taken under a per-identity advisory lock so that two replicas cannot
//! both take the last place. Rows past their hold time (a replica that
//! died mid-execution) are deleted when their identity next takes one.

use std::sync::Arc;

use super::{connection, lock_key, unavailable, PgError, Postgres, LOCK_CLASS};
use airlock_gateway::{rate::RateUnavailable, shares::ExecutionShares};

/// Places lock per identity, in a class of their own.
const LOCK_CLASS_SHARES: i32 = LOCK_CLASS + 2;

pub struct PgShares {
    db: Arc<Postgres>,
}

impl PgShares {
    pub fn new(db: Arc<Postgres>) -> Self {
        Self { db }
    }
}

impl ExecutionShares for PgShares {
    fn take(
        &self,
        identity: &str,
        execution: &str,
        max: u32,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<bool, RateUnavailable> {
        let (identity, execution, max) = (identity.to_string(), execution.to_string(), max as i64);
        Ok(self
            .db
            .run::<_, PgError, _, _>("taking an execution's place", move |pool, at| async move {
                let e = |e: tokio_postgres::Error| unavailable(&at, e);
                let mut conn = connection(&pool, &at).await?;
                let tx = conn.transaction().await.map_err(e)?;
                lock_key(&tx, LOCK_CLASS_SHARES, &identity)
                    .await
                    .map_err(e)?;
                tx.execute(
                    "DELETE FROM airlock_shares WHERE identity = $1 AND until_ms < $2",
                    &[&identity, &now_ms],
                )
                .await
                .map_err(e)?;
                let held: i64 = tx
                    .query_one(
                        "SELECT count(*) FROM airlock_shares WHERE identity = $1",
                        &[&identity],
                    )
                    .await
                    .map_err(e)?
                    .get(0);
                if held >= max {
                    return Ok(false);
                }
                tx.execute(
                    "INSERT INTO airlock_shares (execution, identity, until_ms) VALUES ($1, $2, $3) \
                     ON CONFLICT (execution) DO NOTHING",
                    &[&execution, &identity, &until_ms],
                )
                .await
                .map_err(e)?;
                tx.commit().await.map_err(e)?;
                Ok(true)
            })?)
    }

    fn give_back(&self, _identity: &str, execution: &str) -> Result<(), RateUnavailable> {
        let execution = execution.to_string();
        self.db.run::<_, PgError, _, _>(
            "giving an execution's place back",
            move |pool, at| async move {
                let conn = connection(&pool, &at).await?;
                conn.execute(
                    "DELETE FROM airlock_shares WHERE execution = $1",
                    &[&execution],
                )
                .await
                .map_err(|e| unavailable(&at, e))?;
                Ok(())
            },
        )?;
        Ok(())
    }
}
