//! Approvals every replica shares. `check` runs in one transaction under
//! an advisory lock per identity, so two replicas checking the same call
//! at once see each other's work: an approval is used once, a request is
//! filed once, and `max_open` counts every replica's requests. Deciding
//! is one conditional `UPDATE`, so it needs no lock.

use std::sync::{
    atomic::{AtomicI64, Ordering},
    Arc,
};

use tokio_postgres::Row;

use super::{connection, lock_key, unavailable, PgError, Postgres, LOCK_CLASS_APPROVALS};
use crate::APPROVAL_COLUMNS as COLUMNS;
use airlock_gateway::{
    approval::{
        changes_text, key_of, new_id, new_key, parse_changes, plan_request, refusal,
        single_request, undecidable, untakeable, ApprovalError, ApprovalStore, Asked, Check,
        Decider, Request, Status, DEFAULT_MAX_OPEN, PURGE_EVERY_MS,
    },
    plan::{PlanError, PlannedChange},
};

fn request(r: &Row) -> Request {
    Request {
        id: r.get(0),
        identity: r.get(1),
        tool: r.get(2),
        args_hash: r.get(3),
        summary: r.get(4),
        status: Status::parse(r.get(5)),
        created_ms: r.get(6),
        expires_ms: r.get(7),
        decided_by: r.get(8),
        changes: parse_changes(r.get(9)),
        tool_key: r.get(10),
        detail: r.get(11),
        decided_via: r.get(12),
        reason: r.get(13),
    }
}

/// Files `request` (a single call's or a plan's) as pending.
async fn file(
    tx: &deadpool_postgres::Transaction<'_>,
    request: &Request,
) -> Result<(), tokio_postgres::Error> {
    let insert = tx
        .prepare_cached(
            "INSERT INTO airlock_approvals \
             (id, identity, tool, args_hash, summary, status, created_ms, expires_ms, plan, \
              tool_key, detail) \
             VALUES ($1, $2, $3, $4, $5, 'pending', $6, $7, $8, $9, $10)",
        )
        .await?;
    tx.execute(
        &insert,
        &[
            &request.id,
            &request.identity,
            &request.tool,
            &request.args_hash,
            &request.summary,
            &request.created_ms,
            &request.expires_ms,
            &changes_text(request),
            &request.tool_key,
            &request.detail,
        ],
    )
    .await?;
    Ok(())
}

/// Requests `identity` has waiting for a decision, every replica's: what
/// `max_open` caps, single calls and plans alike.
async fn waiting(
    tx: &deadpool_postgres::Transaction<'_>,
    identity: &str,
    now_ms: i64,
) -> Result<i64, tokio_postgres::Error> {
    let count = tx
        .prepare_cached(
            "SELECT COUNT(*) FROM airlock_approvals WHERE identity = $1 \
             AND status = 'pending' AND expires_ms > $2",
        )
        .await?;
    Ok(tx.query_one(&count, &[&identity, &now_ms]).await?.get(0))
}

impl From<PgError> for ApprovalError {
    fn from(e: PgError) -> Self {
        ApprovalError::Storage(e.to_string())
    }
}

pub struct PgApprovals {
    db: Arc<Postgres>,
    ttl_ms: i64,
    max_open: u32,
    purged_ms: AtomicI64,
}

impl PgApprovals {
    pub fn new(db: Arc<Postgres>, ttl_ms: i64) -> Self {
        Self {
            db,
            ttl_ms,
            max_open: DEFAULT_MAX_OPEN,
            purged_ms: AtomicI64::new(i64::MIN),
        }
    }

    /// Caps the requests one identity may have waiting at once, across
    /// every replica.
    pub fn with_max_open(mut self, max_open: u32) -> Self {
        self.max_open = max_open;
        self
    }
}

impl ApprovalStore for PgApprovals {
    fn check(&self, asked: &Asked<'_>, now_ms: i64) -> Result<Check, ApprovalError> {
        if self.purged_ms.load(Ordering::Relaxed).abs_diff(now_ms) >= PURGE_EVERY_MS as u64 {
            self.purge(now_ms)?;
        }
        let (ttl_ms, max_open) = (self.ttl_ms, self.max_open);
        // The request this call would file, made before the database is
        // asked (its id needs randomness, its fields are owned).
        let new = single_request(new_id()?, asked, now_ms, ttl_ms);
        Ok(self.db.run::<_, PgError, _, _>("checking an approval", move |pool, at| async move {
            let e = |e: tokio_postgres::Error| unavailable(&at, e);
            let (identity, key, args_hash) = (
                new.identity.clone(),
                new.tool_key.clone().unwrap_or_default(),
                new.args_hash.clone(),
            );
            let mut conn = connection(&pool, &at).await?;
            let tx = conn.transaction().await.map_err(e)?;
            lock_key(&tx, LOCK_CLASS_APPROVALS, &identity)
                .await
                .map_err(e)?;
            let used = tx
                .query_opt(
                    &tx.prepare_cached("UPDATE airlock_approvals SET status = 'used', used_ms = $4 WHERE id = (\
                       SELECT id FROM airlock_approvals WHERE identity = $1 AND tool_key = $2 \
                       AND args_hash = $3 AND status = 'approved' AND expires_ms > $4 \
                       ORDER BY created_ms LIMIT 1) \
                     AND status = 'approved' RETURNING id, decided_by, decided_via").await.map_err(e)?,
                    &[&identity, &key, &args_hash, &now_ms],
                )
                .await
                .map_err(e)?;
            if let Some(row) = used {
                tx.commit().await.map_err(e)?;
                let decided_by: Option<String> = row.get(1);
                return Ok(Check::Proceed {
                    request_id: row.get(0),
                    own: decided_by
                        .as_deref()
                        .is_some_and(|by| airlock_approver::person::same(by, &identity)),
                    decided_by,
                    decided_via: row.get(2),
                });
            }
            for (status, answer) in [
                ("denied", Check::Denied as fn(Request) -> Check),
                ("pending", Check::Required),
            ] {
                let open = tx
                .query_opt(
                    &tx.prepare_cached(&format!(
                            "SELECT {COLUMNS} FROM airlock_approvals WHERE identity = $1 AND tool_key = $2 \
                             AND args_hash = $3 AND status = '{status}' AND expires_ms > $4 \
                             ORDER BY created_ms DESC LIMIT 1"
                        )).await.map_err(e)?,
                        &[&identity, &key, &args_hash, &now_ms],
                    )
                    .await
                    .map_err(e)?;
                if let Some(row) = open {
                    return Ok(answer(request(&row)));
                }
            }
            if waiting(&tx, &identity, now_ms).await.map_err(e)? >= max_open as i64 {
                return Ok(Check::TooManyOpen { limit: max_open });
            }
            file(&tx, &new).await.map_err(e)?;
            tx.commit().await.map_err(e)?;
            Ok(Check::Required(new))
        })?)
    }

    fn file_plan(
        &self,
        id: &str,
        identity: &str,
        changes: &[PlannedChange],
        now_ms: i64,
    ) -> Result<Check, ApprovalError> {
        let request = plan_request(id, identity, changes, now_ms, self.ttl_ms);
        let max_open = self.max_open;
        Ok(self
            .db
            .run::<_, PgError, _, _>("filing a plan", move |pool, at| async move {
                let e = |e: tokio_postgres::Error| unavailable(&at, e);
                let mut conn = connection(&pool, &at).await?;
                let tx = conn.transaction().await.map_err(e)?;
                // The same lock as `check`: the cap counts both.
                lock_key(&tx, LOCK_CLASS_APPROVALS, &request.identity)
                    .await
                    .map_err(e)?;
                if waiting(&tx, &request.identity, now_ms).await.map_err(e)? >= max_open as i64 {
                    return Ok(Check::TooManyOpen { limit: max_open });
                }
                file(&tx, &request).await.map_err(e)?;
                tx.commit().await.map_err(e)?;
                Ok(Check::Required(request))
            })?)
    }

    fn take_plan(&self, id: &str, identity: &str, now_ms: i64) -> Result<Request, PlanError> {
        let (id, identity) = (id.to_string(), identity.to_string());
        let taken = self
            .db
            .run::<_, PgError, _, _>("taking a plan", move |pool, at| async move {
                let e = |e: tokio_postgres::Error| unavailable(&at, e);
                let mut conn = connection(&pool, &at).await?;
                let tx = conn.transaction().await.map_err(e)?;
                // FOR UPDATE: a replica taking it at the same time waits,
                // then sees it used.
                let row = tx
                    .query_opt(
                        &format!(
                            "SELECT {COLUMNS} FROM airlock_approvals WHERE id = $1 FOR UPDATE"
                        ),
                        &[&id],
                    )
                    .await
                    .map_err(e)?;
                let Some(current) = row.as_ref().map(request) else {
                    return Ok(Err(PlanError::NotFound(id)));
                };
                if let Some(refused) = untakeable(&current, &identity, now_ms) {
                    return Ok(Err(refused));
                }
                tx.execute(
                    "UPDATE airlock_approvals SET status = 'used', used_ms = $2 WHERE id = $1",
                    &[&id, &now_ms],
                )
                .await
                .map_err(e)?;
                tx.commit().await.map_err(e)?;
                Ok(Ok(Request {
                    status: Status::Used,
                    ..current
                }))
            })
            .map_err(ApprovalError::from)?;
        taken
    }

    fn list(&self, now_ms: i64, all: bool) -> Result<Vec<Request>, ApprovalError> {
        Ok(self.db.run::<_, PgError, _, _>("listing approvals", move |pool, at| async move {
            let conn = connection(&pool, &at).await?;
            let rows = if all {
                conn.query(
                    &format!("SELECT {COLUMNS} FROM airlock_approvals ORDER BY created_ms DESC"),
                    &[],
                )
                .await
            } else {
                conn.query(
                    &format!(
                        "SELECT {COLUMNS} FROM airlock_approvals WHERE status IN ('pending', 'approved') \
                         AND expires_ms > $1 ORDER BY created_ms DESC"
                    ),
                    &[&now_ms],
                )
                .await
            }
            .map_err(|e| unavailable(&at, e))?;
            Ok(rows.iter().map(request).collect())
        })?)
    }

    fn get(&self, id: &str) -> Result<Request, ApprovalError> {
        let id = id.to_string();
        let found = {
            let id = id.clone();
            self.db
                .run::<_, PgError, _, _>("reading an approval", move |pool, at| async move {
                    let conn = connection(&pool, &at).await?;
                    let row = conn
                        .query_opt(
                            &format!("SELECT {COLUMNS} FROM airlock_approvals WHERE id = $1"),
                            &[&id],
                        )
                        .await
                        .map_err(|e| unavailable(&at, e))?;
                    Ok(row.as_ref().map(request))
                })?
        };
        found.ok_or(ApprovalError::NotFound(id))
    }

    fn decide(
        &self,
        id: &str,
        decider: &Decider,
        now_ms: i64,
        to: Status,
    ) -> Result<Request, ApprovalError> {
        // Who asked never changes: the four-eyes rule is checked on the
        // row as it is, before the conditional update.
        if let Some(refused) = refusal(&self.get(id)?, decider, to) {
            return Err(refused);
        }
        let (owned_id, by) = (id.to_string(), decider.who.clone());
        let via = decider.channel.as_str();
        let reason = decider.reason.clone();
        let expires_ms = now_ms + self.ttl_ms;
        let decided = self.db.run::<_, PgError, _, _>("deciding an approval", move |pool, at| async move {
            let conn = connection(&pool, &at).await?;
            let row = conn
                .query_opt(
                    &format!(
                        "UPDATE airlock_approvals SET status = $2, decided_by = $3, decided_ms = $4, \
                         expires_ms = $5, decided_via = $6, reason = $7 WHERE id = $1 \
                         AND status = 'pending' AND expires_ms > $4 RETURNING {COLUMNS}"
                    ),
                    &[&owned_id, &to.as_str(), &by, &now_ms, &expires_ms, &via, &reason],
                )
                .await
                .map_err(|e| unavailable(&at, e))?;
            Ok(row.as_ref().map(request))
        })?;
        match decided {
            Some(r) => Ok(r),
            // Not decided: say why, from the row as it is now.
            None => Err(undecidable(&self.get(id)?, decider, now_ms, to).unwrap_or(
                ApprovalError::NotPending {
                    id: id.into(),
                    status: "decided",
                },
            )),
        }
    }

    fn purge(&self, now_ms: i64) -> Result<usize, ApprovalError> {
        let before = now_ms.saturating_sub(self.ttl_ms);
        let n =
            self.db
                .run::<_, PgError, _, _>("purging approvals", move |pool, at| async move {
                    let conn = connection(&pool, &at).await?;
                    conn.execute(
                        "DELETE FROM airlock_approvals WHERE expires_ms < $1",
                        &[&before],
                    )
                    .await
                    .map_err(|e| unavailable(&at, e))
                })?;
        self.purged_ms.store(now_ms, Ordering::Relaxed);
        Ok(n as usize)
    }

    fn rows(&self) -> Result<u64, ApprovalError> {
        let n: i64 =
            self.db
                .run::<_, PgError, _, _>("counting approvals", move |pool, at| async move {
                    let conn = connection(&pool, &at).await?;
                    Ok(conn
                        .query_one("SELECT COUNT(*) FROM airlock_approvals", &[])
                        .await
                        .map_err(|e| unavailable(&at, e))?
                        .get(0))
                })?;
        Ok(n.max(0) as u64)
    }

    fn ttl_ms(&self) -> i64 {
        self.ttl_ms
    }

    fn summary_key(&self) -> Result<[u8; 32], ApprovalError> {
        let new = new_key()?.to_vec();
        let stored: Vec<u8> = self.db.run::<_, PgError, _, _>(
            "reading the summary key",
            move |pool, at| async move {
                let e = |e: tokio_postgres::Error| unavailable(&at, e);
                let conn = connection(&pool, &at).await?;
                // The first replica to ask makes it; every other finds it.
                conn.execute(
                    "INSERT INTO airlock_meta (name, value) VALUES ('summary_key', $1) \
                         ON CONFLICT (name) DO NOTHING",
                    &[&new],
                )
                .await
                .map_err(e)?;
                Ok(conn
                    .query_one(
                        "SELECT value FROM airlock_meta WHERE name = 'summary_key'",
                        &[],
                    )
                    .await
                    .map_err(e)?
                    .get(0))
            },
        )?;
        key_of(&stored)
    }
}
