//! What the tools are, for everyone who needs to know: each backend's
//! tools under one namespace, their tiers and stable keys, the ranked
//! search and `catalog.search` inside scripts, their schemas as
//! TypeScript, the check of a call's arguments against its schema, and
//! the small rules for showing values (made visible, secrets named,
//! digested in one canonical form).
//!
//! This crate knows tool specs and JSON. It does not know identities,
//! policy, approvals, the audit or any backend: the gateway asks it what
//! a tool is and whether arguments fit, then decides what to do with the
//! call itself.

pub mod catalog;
pub mod digest;
pub mod discovery;
pub mod redact;
pub mod search;
pub mod spec;
pub mod typescript;
pub mod validate;
pub mod visible;

pub use catalog::{Catalog, Clash, SchemaAnswer};
pub use spec::{Hints, Tier, ToolSpec};
