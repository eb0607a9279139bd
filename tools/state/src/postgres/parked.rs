//! Parked executions every replica finds: one row each, parked under one
//! deployment-wide advisory lock (the caps count every identity's rows),
//! taken with the row locked, so two replicas following one execution
//! cannot both resume it.

use std::sync::Arc;

use super::{connection, lock_key, unavailable, PgError, Postgres, LOCK_CLASS};
use airlock_gateway::parked::{
    cap_hit, waiting_from_text, waiting_to_text, ParkCaps, ParkRefusal, ParkedInfo, ParkedRow,
    ParkedStore, ParkedUnavailable, Take,
};

/// Parking locks in a class of its own, one key for the deployment.
const LOCK_CLASS_PARKED: i32 = LOCK_CLASS + 4;

impl From<PgError> for ParkedUnavailable {
    fn from(e: PgError) -> Self {
        ParkedUnavailable(e.to_string())
    }
}

const ROW: &str = "execution, identity, born_ms, bytes, waiting, body, asked, declined, calls";
const INFO: &str = "execution, identity, born_ms, parked_ms, bytes, waiting, calls, \
     (holder IS NOT NULL AND lease_until_ms >= $1)";

fn row(r: &tokio_postgres::Row) -> ParkedRow {
    ParkedRow {
        execution: r.get(0),
        identity: r.get(1),
        born_ms: r.get(2),
        bytes: r.get(3),
        waiting: waiting_from_text(r.get(4)),
        body: r.get(5),
        asked: r.get::<_, i64>(6).clamp(0, u32::MAX as i64) as u32,
        declined: r.get(7),
        calls: r.get::<_, i64>(8).clamp(0, u32::MAX as i64) as u32,
    }
}

fn info(r: &tokio_postgres::Row) -> ParkedInfo {
    ParkedInfo {
        execution: r.get(0),
        identity: r.get(1),
        born_ms: r.get(2),
        parked_ms: r.get(3),
        bytes: r.get(4),
        waiting: waiting_from_text(r.get(5)),
        calls: r.get::<_, i64>(6).clamp(0, u32::MAX as i64) as u32,
        held: r.get(7),
    }
}

/// Which cap, if any, `row` passes, the rows other than its own counted
/// (under the parking lock).
async fn over_cap(
    tx: &tokio_postgres::Transaction<'_>,
    row: &ParkedRow,
    caps: &ParkCaps,
) -> Result<Option<ParkRefusal>, tokio_postgres::Error> {
    let sums = tx
        .query_one(
            "SELECT count(*), COALESCE(SUM(bytes), 0)::BIGINT, \
             count(*) FILTER (WHERE identity = $2), \
             COALESCE(SUM(bytes) FILTER (WHERE identity = $2), 0)::BIGINT \
             FROM airlock_parked WHERE execution != $1",
            &[&row.execution, &row.identity],
        )
        .await?;
    let all = (sums.get::<_, i64>(0), sums.get::<_, i64>(1));
    let own = (sums.get::<_, i64>(2), sums.get::<_, i64>(3));
    Ok(cap_hit(caps, own, all, row.bytes))
}

/// Adds `row`: parked (not ready until its line is written), or `held`
/// by a running execution's holder until its lease ends (ready at once).
async fn insert(
    tx: &tokio_postgres::Transaction<'_>,
    row: &ParkedRow,
    now_ms: i64,
    held: Option<(&str, i64)>,
) -> Result<u64, tokio_postgres::Error> {
    let (asked, calls) = (row.asked as i64, row.calls as i64);
    let (holder, lease_until_ms) = (held.map(|h| h.0), held.map(|h| h.1));
    tx.execute(
        "INSERT INTO airlock_parked (execution, identity, born_ms, parked_ms, bytes, \
         waiting, body, asked, declined, calls, ready, holder, lease_until_ms) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
        &[
            &row.execution,
            &row.identity,
            &row.born_ms,
            &now_ms,
            &row.bytes,
            &waiting_to_text(&row.waiting),
            &row.body,
            &asked,
            &row.declined,
            &calls,
            &held.is_some(),
            &holder,
            &lease_until_ms,
        ],
    )
    .await
}

pub struct PgParked {
    db: Arc<Postgres>,
}

impl PgParked {
    pub fn new(db: Arc<Postgres>) -> Self {
        Self { db }
    }
}

impl ParkedStore for PgParked {
    fn park(
        &self,
        row: &ParkedRow,
        holder: Option<&str>,
        caps: &ParkCaps,
        now_ms: i64,
    ) -> Result<Result<(), ParkRefusal>, ParkedUnavailable> {
        let (row, holder, caps) = (row.clone(), holder.map(str::to_string), *caps);
        self.db
            .run("parking an execution", move |pool, at| async move {
                let e = |e| ParkedUnavailable::from(unavailable(&at, e));
                let mut conn = connection(&pool, &at).await?;
                let tx = conn.transaction().await.map_err(e)?;
                lock_key(&tx, LOCK_CLASS_PARKED, "parked")
                    .await
                    .map_err(e)?;
                if let Some(refused) = over_cap(&tx, &row, &caps).await.map_err(e)? {
                    return Ok(Err(refused));
                }
                let waiting = waiting_to_text(&row.waiting);
                let (asked, calls) = (row.asked as i64, row.calls as i64);
                let done = match &holder {
                    Some(holder) => {
                        let n = tx
                            .execute(
                                "UPDATE airlock_parked SET waiting = $2, body = $3, bytes = $4, \
                             asked = $5, declined = $6, parked_ms = $7, ready = false, \
                             holder = NULL, lease_until_ms = NULL, orphan = false, calls = $9 \
                             WHERE execution = $1 AND holder = $8",
                                &[
                                    &row.execution,
                                    &waiting,
                                    &row.body,
                                    &row.bytes,
                                    &asked,
                                    &row.declined,
                                    &now_ms,
                                    holder,
                                    &calls,
                                ],
                            )
                            .await
                            .map_err(e)?;
                        if n == 1 {
                            Ok(())
                        } else {
                            Err(ParkRefusal::LeaseLost)
                        }
                    }
                    None => {
                        insert(&tx, &row, now_ms, None).await.map_err(e)?;
                        Ok(())
                    }
                };
                tx.commit().await.map_err(e)?;
                Ok(done)
            })
    }

    fn checkpoint(
        &self,
        row: &ParkedRow,
        holder: &str,
        new: bool,
        lease_until_ms: i64,
        caps: &ParkCaps,
        now_ms: i64,
    ) -> Result<Result<(), ParkRefusal>, ParkedUnavailable> {
        let (row, holder, caps) = (row.clone(), holder.to_string(), *caps);
        self.db.run(
            "journaling a running execution",
            move |pool, at| async move {
                let e = |e| ParkedUnavailable::from(unavailable(&at, e));
                let mut conn = connection(&pool, &at).await?;
                let tx = conn.transaction().await.map_err(e)?;
                lock_key(&tx, LOCK_CLASS_PARKED, "parked")
                    .await
                    .map_err(e)?;
                if let Some(refused) = over_cap(&tx, &row, &caps).await.map_err(e)? {
                    return Ok(Err(refused));
                }
                let n = if new {
                    insert(&tx, &row, now_ms, Some((&holder, lease_until_ms)))
                        .await
                        .map_err(e)?
                } else {
                    let (waiting, calls) = (waiting_to_text(&row.waiting), row.calls as i64);
                    tx.execute(
                        "UPDATE airlock_parked SET waiting = $2, body = $3, bytes = $4, \
                         calls = $5, lease_until_ms = $6, parked_ms = $8 \
                         WHERE execution = $1 AND holder = $7",
                        &[
                            &row.execution,
                            &waiting,
                            &row.body,
                            &row.bytes,
                            &calls,
                            &lease_until_ms,
                            &holder,
                            &now_ms,
                        ],
                    )
                    .await
                    .map_err(e)?
                };
                tx.commit().await.map_err(e)?;
                Ok(if n == 1 {
                    Ok(())
                } else {
                    Err(ParkRefusal::LeaseLost)
                })
            },
        )
    }

    fn ready(&self, execution: &str) -> Result<(), ParkedUnavailable> {
        let execution = execution.to_string();
        self.db
            .run("readying a parked execution", move |pool, at| async move {
                let conn = connection(&pool, &at).await?;
                conn.execute(
                    "UPDATE airlock_parked SET ready = true WHERE execution = $1",
                    &[&execution],
                )
                .await
                .map_err(|e| ParkedUnavailable::from(unavailable(&at, e)))?;
                Ok(())
            })
    }

    fn take(
        &self,
        execution: &str,
        identity: &str,
        holder: &str,
        now_ms: i64,
        lease_until_ms: i64,
    ) -> Result<Take, ParkedUnavailable> {
        let (execution, identity, holder) = (
            execution.to_string(),
            identity.to_string(),
            holder.to_string(),
        );
        self.db
            .run("taking a parked execution", move |pool, at| async move {
                let e = |e| ParkedUnavailable::from(unavailable(&at, e));
                let mut conn = connection(&pool, &at).await?;
                let tx = conn.transaction().await.map_err(e)?;
                let found = tx
                    .query_opt(
                        "SELECT ready, CASE WHEN holder IS NULL THEN NULL ELSE lease_until_ms END \
                         FROM airlock_parked WHERE execution = $1 AND identity = $2 FOR UPDATE",
                        &[&execution, &identity],
                    )
                    .await
                    .map_err(e)?;
                let Some(found) = found else {
                    return Ok(Take::Unknown);
                };
                let (ready, lease): (bool, Option<i64>) = (found.get(0), found.get(1));
                if !ready || lease.is_some_and(|until| until >= now_ms) {
                    return Ok(Take::Busy);
                }
                // A lease that ran out: its holder died mid-resume.
                let orphaned_now = lease.is_some();
                let r = tx
                    .query_one(
                        &format!(
                            "UPDATE airlock_parked SET holder = $2, lease_until_ms = $3, \
                             orphan = (orphan OR $4) WHERE execution = $1 RETURNING {ROW}, orphan"
                        ),
                        &[&execution, &holder, &lease_until_ms, &orphaned_now],
                    )
                    .await
                    .map_err(e)?;
                tx.commit().await.map_err(e)?;
                Ok(Take::Taken {
                    row: row(&r),
                    orphan: r.get(9),
                })
            })
    }

    fn let_go(&self, execution: &str, holder: &str) -> Result<(), ParkedUnavailable> {
        let (execution, holder) = (execution.to_string(), holder.to_string());
        self.db.run(
            "letting go of a running execution",
            move |pool, at| async move {
                let conn = connection(&pool, &at).await?;
                conn.execute(
                    "UPDATE airlock_parked SET holder = 'gone:' || holder, lease_until_ms = 0 \
                     WHERE execution = $1 AND holder = $2",
                    &[&execution, &holder],
                )
                .await
                .map_err(|e| ParkedUnavailable::from(unavailable(&at, e)))?;
                Ok(())
            },
        )
    }

    fn put_back(&self, execution: &str, holder: &str) -> Result<(), ParkedUnavailable> {
        let (execution, holder) = (execution.to_string(), holder.to_string());
        self.db.run(
            "putting a parked execution back",
            move |pool, at| async move {
                let conn = connection(&pool, &at).await?;
                conn.execute(
                    "UPDATE airlock_parked SET holder = NULL, lease_until_ms = NULL \
                     WHERE execution = $1 AND holder = $2",
                    &[&execution, &holder],
                )
                .await
                .map_err(|e| ParkedUnavailable::from(unavailable(&at, e)))?;
                Ok(())
            },
        )
    }

    fn ended(&self, execution: &str, holder: &str) -> Result<(), ParkedUnavailable> {
        let (execution, holder) = (execution.to_string(), holder.to_string());
        self.db
            .run("ending a parked execution", move |pool, at| async move {
                let conn = connection(&pool, &at).await?;
                conn.execute(
                    "DELETE FROM airlock_parked WHERE execution = $1 AND holder = $2",
                    &[&execution, &holder],
                )
                .await
                .map_err(|e| ParkedUnavailable::from(unavailable(&at, e)))?;
                Ok(())
            })
    }

    fn expired(
        &self,
        born_before_ms: i64,
        now_ms: i64,
    ) -> Result<Vec<ParkedInfo>, ParkedUnavailable> {
        self.db.run(
            "ending parked executions past their lifetime",
            move |pool, at| async move {
                let conn = connection(&pool, &at).await?;
                let rows = conn
                    .query(
                        &format!(
                            "DELETE FROM airlock_parked WHERE born_ms < $2 \
                             AND NOT (holder IS NOT NULL AND lease_until_ms >= $1) RETURNING {INFO}"
                        ),
                        &[&now_ms, &born_before_ms],
                    )
                    .await
                    .map_err(|e| ParkedUnavailable::from(unavailable(&at, e)))?;
                Ok(rows.iter().map(info).collect())
            },
        )
    }

    fn get(
        &self,
        execution: &str,
        identity: &str,
        now_ms: i64,
    ) -> Result<Option<ParkedRow>, ParkedUnavailable> {
        let (execution, identity) = (execution.to_string(), identity.to_string());
        self.db
            .run("reading a parked execution", move |pool, at| async move {
                let conn = connection(&pool, &at).await?;
                let r = conn
                    .query_opt(
                        &format!(
                            "SELECT {ROW} FROM airlock_parked WHERE execution = $1 \
                             AND identity = $2 AND ready \
                             AND NOT (holder IS NOT NULL AND lease_until_ms >= $3)"
                        ),
                        &[&execution, &identity, &now_ms],
                    )
                    .await
                    .map_err(|e| ParkedUnavailable::from(unavailable(&at, e)))?;
                Ok(r.as_ref().map(row))
            })
    }

    fn prompted(
        &self,
        execution: &str,
        identity: &str,
        asked: u32,
        declined: bool,
    ) -> Result<(), ParkedUnavailable> {
        let (execution, identity) = (execution.to_string(), identity.to_string());
        let asked = asked as i64;
        self.db
            .run("counting a question put", move |pool, at| async move {
                let conn = connection(&pool, &at).await?;
                conn.execute(
                    "UPDATE airlock_parked SET asked = asked + $2, declined = (declined OR $3) \
                     WHERE execution = $1 AND identity = $4",
                    &[&execution, &asked, &declined, &identity],
                )
                .await
                .map_err(|e| ParkedUnavailable::from(unavailable(&at, e)))?;
                Ok(())
            })
    }

    fn list(
        &self,
        identity: Option<&str>,
        now_ms: i64,
        limit: u32,
    ) -> Result<Vec<ParkedInfo>, ParkedUnavailable> {
        let identity = identity.map(str::to_string);
        let limit = limit as i64;
        self.db
            .run("listing parked executions", move |pool, at| async move {
                let conn = connection(&pool, &at).await?;
                let rows = conn
                    .query(
                        &format!(
                            "SELECT {INFO} FROM airlock_parked \
                             WHERE ($2::TEXT IS NULL OR identity = $2) \
                             ORDER BY born_ms, execution LIMIT $3"
                        ),
                        &[&now_ms, &identity, &limit],
                    )
                    .await
                    .map_err(|e| ParkedUnavailable::from(unavailable(&at, e)))?;
                Ok(rows.iter().map(info).collect())
            })
    }

    fn count(&self) -> Result<u64, ParkedUnavailable> {
        self.db
            .run("counting parked executions", move |pool, at| async move {
                let conn = connection(&pool, &at).await?;
                let r = conn
                    .query_one("SELECT count(*) FROM airlock_parked", &[])
                    .await
                    .map_err(|e| ParkedUnavailable::from(unavailable(&at, e)))?;
                Ok(r.get::<_, i64>(0).max(0) as u64)
            })
    }

    fn cancel(
        &self,
        execution: &str,
        now_ms: i64,
    ) -> Result<Option<ParkedInfo>, ParkedUnavailable> {
        let execution = execution.to_string();
        self.db.run(
            "cancelling a parked execution",
            move |pool, at| async move {
                let conn = connection(&pool, &at).await?;
                let r = conn
                    .query_opt(
                        &format!(
                            "DELETE FROM airlock_parked WHERE execution = $2 AND ready \
                             AND NOT (holder IS NOT NULL AND lease_until_ms >= $1) RETURNING {INFO}"
                        ),
                        &[&now_ms, &execution],
                    )
                    .await
                    .map_err(|e| ParkedUnavailable::from(unavailable(&at, e)))?;
                Ok(r.as_ref().map(info))
            },
        )
    }
}
