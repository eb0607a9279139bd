//! The Proxmox VE backend's room: the API schema (API-viewer format) and
//! its conversion into tools, tier rules, task ids.

pub mod apidata;
pub mod backend;
pub mod body;
pub mod client;
pub mod curated;
pub mod full;
pub mod naming;
pub mod route;
pub mod schema;
pub mod secrets;
pub mod tiers;
pub mod tls;
pub mod transport;
pub mod upid;
pub mod vocabulary;
