//! One machine's parked executions, in a SQLite file beside the approvals
//! (`executions.db`), private as they are: a restart of `airlock serve`
//! finds them, and `airlock executions` reads them beside a running
//! server. Each step is one `BEGIN IMMEDIATE` transaction.

use std::{path::Path, sync::Mutex};

use airlock_gateway::parked::{
    waiting_from_text, waiting_to_text, ParkCaps, ParkRefusal, ParkedInfo, ParkedRow, ParkedStore,
    ParkedUnavailable, Take,
};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

fn sqlite(e: impl std::fmt::Display) -> ParkedUnavailable {
    ParkedUnavailable(e.to_string())
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS parked (
    execution       TEXT PRIMARY KEY,
    identity        TEXT NOT NULL,
    born_ms         INTEGER NOT NULL,
    parked_ms       INTEGER NOT NULL,
    bytes           INTEGER NOT NULL,
    waiting         TEXT NOT NULL,
    body            TEXT NOT NULL,
    asked           INTEGER NOT NULL DEFAULT 0,
    declined        INTEGER NOT NULL DEFAULT 0,
    ready           INTEGER NOT NULL DEFAULT 0,
    holder          TEXT,
    lease_until_ms  INTEGER,
    orphan          INTEGER NOT NULL DEFAULT 0,
    calls           INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS parked_identity ON parked (identity);
CREATE INDEX IF NOT EXISTS parked_born ON parked (born_ms);
";

const SCHEMA_VERSION: i64 = 1;

const ROW: &str = "execution, identity, born_ms, bytes, waiting, body, asked, declined, calls";
const INFO: &str = "execution, identity, born_ms, parked_ms, bytes, waiting, calls, \
     (holder IS NOT NULL AND lease_until_ms >= ?1)";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ParkedRow> {
    Ok(ParkedRow {
        execution: r.get(0)?,
        identity: r.get(1)?,
        born_ms: r.get(2)?,
        bytes: r.get(3)?,
        waiting: waiting_from_text(&r.get::<_, String>(4)?),
        body: r.get(5)?,
        asked: r.get(6)?,
        declined: r.get(7)?,
        calls: r.get(8)?,
    })
}

fn info(r: &rusqlite::Row<'_>) -> rusqlite::Result<ParkedInfo> {
    Ok(ParkedInfo {
        execution: r.get(0)?,
        identity: r.get(1)?,
        born_ms: r.get(2)?,
        parked_ms: r.get(3)?,
        bytes: r.get(4)?,
        waiting: waiting_from_text(&r.get::<_, String>(5)?),
        calls: r.get(6)?,
        held: r.get(7)?,
    })
}

/// Parked executions in one SQLite file.
pub struct SqliteParked {
    conn: Mutex<Connection>,
}

impl SqliteParked {
    /// Opens (creating if needed) the store at `path`, private to this
    /// user as the approvals are.
    pub fn open(path: &Path) -> Result<Self, ParkedUnavailable> {
        let conn = super::sqlite_file::open(path, "executions", SCHEMA, SCHEMA_VERSION)
            .map_err(ParkedUnavailable)?;
        Ok(Self {
            conn: Mutex::new(conn),
        })
    }

    /// One step in one immediate transaction.
    fn step<T>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> rusqlite::Result<T>,
    ) -> Result<T, ParkedUnavailable> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sqlite)?;
        let out = f(&tx).map_err(sqlite)?;
        tx.commit().map_err(sqlite)?;
        Ok(out)
    }
}

/// Which cap, if any, `row` passes, the rows other than its own counted.
fn over_cap(
    tx: &rusqlite::Transaction<'_>,
    row: &ParkedRow,
    caps: &ParkCaps,
) -> rusqlite::Result<Option<ParkRefusal>> {
    let (all, all_bytes): (i64, i64) = tx.query_row(
        "SELECT count(*), COALESCE(SUM(bytes), 0) FROM parked WHERE execution != ?1",
        params![row.execution],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let (own, own_bytes): (i64, i64) = tx.query_row(
        "SELECT count(*), COALESCE(SUM(bytes), 0) FROM parked WHERE identity = ?1 AND execution != ?2",
        params![row.identity, row.execution],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    Ok(airlock_gateway::parked::cap_hit(
        caps,
        (own, own_bytes),
        (all, all_bytes),
        row.bytes,
    ))
}

/// Adds `row`: parked (not ready until its line is written), or `held`
/// by a running execution's holder until its lease ends (ready at once).
fn insert(
    tx: &rusqlite::Transaction<'_>,
    row: &ParkedRow,
    now_ms: i64,
    held: Option<(&str, i64)>,
) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO parked (execution, identity, born_ms, parked_ms, bytes, \
         waiting, body, asked, declined, calls, ready, holder, lease_until_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
        params![
            row.execution,
            row.identity,
            row.born_ms,
            now_ms,
            row.bytes,
            waiting_to_text(&row.waiting),
            row.body,
            row.asked,
            row.declined,
            row.calls,
            held.is_some(),
            held.map(|h| h.0),
            held.map(|h| h.1)
        ],
    )?;
    Ok(())
}

impl ParkedStore for SqliteParked {
    fn park(
        &self,
        row: &ParkedRow,
        holder: Option<&str>,
        caps: &ParkCaps,
        now_ms: i64,
    ) -> Result<Result<(), ParkRefusal>, ParkedUnavailable> {
        self.step(|tx| {
            if let Some(refused) = over_cap(tx, row, caps)? {
                return Ok(Err(refused));
            }
            let waiting = waiting_to_text(&row.waiting);
            match holder {
                Some(holder) => {
                    let n = tx.execute(
                        "UPDATE parked SET waiting = ?2, body = ?3, bytes = ?4, asked = ?5, \
                         declined = ?6, parked_ms = ?7, ready = 0, holder = NULL, \
                         lease_until_ms = NULL, orphan = 0, calls = ?9 \
                         WHERE execution = ?1 AND holder = ?8",
                        params![
                            row.execution,
                            waiting,
                            row.body,
                            row.bytes,
                            row.asked,
                            row.declined,
                            now_ms,
                            holder,
                            row.calls
                        ],
                    )?;
                    Ok(if n == 1 {
                        Ok(())
                    } else {
                        Err(ParkRefusal::LeaseLost)
                    })
                }
                None => {
                    insert(tx, row, now_ms, None)?;
                    Ok(Ok(()))
                }
            }
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
        self.step(|tx| {
            if let Some(refused) = over_cap(tx, row, caps)? {
                return Ok(Err(refused));
            }
            if new {
                insert(tx, row, now_ms, Some((holder, lease_until_ms)))?;
                return Ok(Ok(()));
            }
            let waiting = waiting_to_text(&row.waiting);
            let n = tx.execute(
                "UPDATE parked SET waiting = ?2, body = ?3, bytes = ?4, calls = ?5, \
                 lease_until_ms = ?6, parked_ms = ?8 WHERE execution = ?1 AND holder = ?7",
                params![
                    row.execution,
                    waiting,
                    row.body,
                    row.bytes,
                    row.calls,
                    lease_until_ms,
                    holder,
                    now_ms
                ],
            )?;
            Ok(if n == 1 {
                Ok(())
            } else {
                Err(ParkRefusal::LeaseLost)
            })
        })
    }

    fn ready(&self, execution: &str) -> Result<(), ParkedUnavailable> {
        self.step(|tx| {
            tx.execute(
                "UPDATE parked SET ready = 1 WHERE execution = ?1",
                params![execution],
            )
            .map(|_| ())
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
        self.step(|tx| {
            let found: Option<(bool, Option<i64>)> = tx
                .query_row(
                    "SELECT ready, CASE WHEN holder IS NULL THEN NULL ELSE lease_until_ms END \
                     FROM parked WHERE execution = ?1 AND identity = ?2",
                    params![execution, identity],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            let Some((ready, lease)) = found else {
                return Ok(Take::Unknown);
            };
            if !ready || lease.is_some_and(|until| until >= now_ms) {
                return Ok(Take::Busy);
            }
            // A lease that ran out: its holder died mid-resume.
            let orphaned_now = lease.is_some();
            tx.execute(
                "UPDATE parked SET holder = ?2, lease_until_ms = ?3, orphan = (orphan OR ?4) \
                 WHERE execution = ?1",
                params![execution, holder, lease_until_ms, orphaned_now],
            )?;
            let (row, orphan) = tx.query_row(
                &format!("SELECT {ROW}, orphan FROM parked WHERE execution = ?1"),
                params![execution],
                |r| Ok((row(r)?, r.get::<_, bool>(9)?)),
            )?;
            Ok(Take::Taken { row, orphan })
        })
    }

    fn put_back(&self, execution: &str, holder: &str) -> Result<(), ParkedUnavailable> {
        self.step(|tx| {
            tx.execute(
                "UPDATE parked SET holder = NULL, lease_until_ms = NULL \
                 WHERE execution = ?1 AND holder = ?2",
                params![execution, holder],
            )
            .map(|_| ())
        })
    }

    fn let_go(&self, execution: &str, holder: &str) -> Result<(), ParkedUnavailable> {
        self.step(|tx| {
            tx.execute(
                "UPDATE parked SET holder = 'gone:' || holder, lease_until_ms = 0 \
                 WHERE execution = ?1 AND holder = ?2",
                params![execution, holder],
            )
            .map(|_| ())
        })
    }

    fn ended(&self, execution: &str, holder: &str) -> Result<(), ParkedUnavailable> {
        self.step(|tx| {
            tx.execute(
                "DELETE FROM parked WHERE execution = ?1 AND holder = ?2",
                params![execution, holder],
            )
            .map(|_| ())
        })
    }

    fn expired(
        &self,
        born_before_ms: i64,
        now_ms: i64,
    ) -> Result<Vec<ParkedInfo>, ParkedUnavailable> {
        self.step(|tx| {
            let gone = {
                let mut q = tx.prepare(&format!(
                    "SELECT {INFO} FROM parked WHERE born_ms < ?2 \
                     AND NOT (holder IS NOT NULL AND lease_until_ms >= ?1)"
                ))?;
                let rows = q.query_map(params![now_ms, born_before_ms], info)?;
                rows.collect::<rusqlite::Result<Vec<_>>>()?
            };
            for g in &gone {
                tx.execute(
                    "DELETE FROM parked WHERE execution = ?1",
                    params![g.execution],
                )?;
            }
            Ok(gone)
        })
    }

    fn get(
        &self,
        execution: &str,
        identity: &str,
        now_ms: i64,
    ) -> Result<Option<ParkedRow>, ParkedUnavailable> {
        self.step(|tx| {
            tx.query_row(
                &format!(
                    "SELECT {ROW} FROM parked WHERE execution = ?1 AND identity = ?2 AND ready = 1 \
                     AND NOT (holder IS NOT NULL AND lease_until_ms >= ?3)"
                ),
                params![execution, identity, now_ms],
                row,
            )
            .optional()
        })
    }

    fn prompted(
        &self,
        execution: &str,
        identity: &str,
        asked: u32,
        declined: bool,
    ) -> Result<(), ParkedUnavailable> {
        self.step(|tx| {
            tx.execute(
                "UPDATE parked SET asked = asked + ?2, declined = (declined OR ?3) \
                 WHERE execution = ?1 AND identity = ?4",
                params![execution, asked, declined, identity],
            )
            .map(|_| ())
        })
    }

    fn list(
        &self,
        identity: Option<&str>,
        now_ms: i64,
        limit: u32,
    ) -> Result<Vec<ParkedInfo>, ParkedUnavailable> {
        self.step(|tx| {
            let mut q = tx.prepare(&format!(
                "SELECT {INFO} FROM parked WHERE (?2 IS NULL OR identity = ?2) \
                 ORDER BY born_ms, execution LIMIT ?3"
            ))?;
            let rows = q.query_map(params![now_ms, identity, limit], info)?;
            rows.collect()
        })
    }

    fn count(&self) -> Result<u64, ParkedUnavailable> {
        self.step(|tx| {
            tx.query_row("SELECT count(*) FROM parked", [], |r| r.get::<_, i64>(0))
                .map(|n| n.max(0) as u64)
        })
    }

    fn cancel(
        &self,
        execution: &str,
        now_ms: i64,
    ) -> Result<Option<ParkedInfo>, ParkedUnavailable> {
        self.step(|tx| {
            let found = tx
                .query_row(
                    &format!(
                        "SELECT {INFO} FROM parked WHERE execution = ?2 AND ready = 1 \
                         AND NOT (holder IS NOT NULL AND lease_until_ms >= ?1)"
                    ),
                    params![now_ms, execution],
                    info,
                )
                .optional()?;
            if found.is_some() {
                tx.execute(
                    "DELETE FROM parked WHERE execution = ?1",
                    params![execution],
                )?;
            }
            Ok(found)
        })
    }
}
