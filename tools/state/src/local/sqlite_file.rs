//! How a SQLite store of its own opens on one machine (the runbooks,
//! the waiting executions): a private file, a 5 s wait for the other
//! process writing beside it, write-ahead logging, and a schema version
//! this build knows. (The approvals file migrates older versions, so it
//! opens its own way.)

use std::path::Path;

use airlock_edge::private_files::{parent_of, private_dir, private_file};
use rusqlite::Connection;

/// Opens (creating if needed) the file at `path`, private to this user,
/// with `schema` applied at `version`; refused when a newer Airlock wrote
/// it. `what` names the store in that refusal.
pub(crate) fn open(
    path: &Path,
    what: &str,
    schema: &str,
    version: i64,
) -> Result<Connection, String> {
    private_dir(parent_of(path)).map_err(|e| e.to_string())?;
    private_file(path).map_err(|e| e.to_string())?;
    let conn = Connection::open(path).map_err(|e| e.to_string())?;
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(|e| e.to_string())?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(|e| e.to_string())?;
    let found: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(|e| e.to_string())?;
    if found > version {
        return Err(format!(
            "the {what} database {} has schema version {found}, newer than the {version} this Airlock knows; run the newer Airlock",
            path.display()
        ));
    }
    conn.execute_batch(schema).map_err(|e| e.to_string())?;
    conn.pragma_update(None, "user_version", version)
        .map_err(|e| e.to_string())?;
    Ok(conn)
}
