//! The Proxmox VE backend: the API schema (API-viewer format) and its
//! conversion into tools (the curated catalog and the full one), tier
//! rules, task ids, and the client that calls a cluster over verified TLS
//! with each person's API token.
//!
//! It implements the gateway's `Backend` trait and knows nothing of the
//! collector, MCP or the simulator (which it is tested against).

pub mod apidata;
pub mod backend;
pub mod body;
pub mod client;
pub mod curated;
pub mod full;
pub mod glossary;
pub mod naming;
pub mod route;
pub mod schema;
pub mod secrets;
pub mod tiers;
pub mod transport;
pub mod upid;
pub mod viewer;
pub mod vocabulary;
