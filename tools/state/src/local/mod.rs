//! One machine's state: approvals in a SQLite file and the audit chain in
//! a JSONL file, both in the state directory (private to this user, see
//! `airlock_edge::private_files`); bearer keys in an enrollment file;
//! parked executions in a SQLite file of their own;
//! rate buckets and places of executions in this process's memory.

mod approvals;
mod audit;
mod keys;
mod parked;
mod rate;
mod runbooks;
mod shares;
mod sqlite_file;
mod state_dir;

pub use approvals::SqliteApprovals;
pub use audit::{AuditLog, LOCK_WAIT};
pub use keys::EnrollmentFile;
pub use parked::SqliteParked;
pub use rate::LocalRate;
pub use runbooks::SqliteRunbooks;
pub use shares::LocalShares;
pub use state_dir::{default_state_dir, state_dir_from, NoStateDir};
