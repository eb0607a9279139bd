//! The systems Airlock talks to, simulated on loopback: a Proxmox VE
//! cluster (`pve`), a QuoxCORE collector (`collector`), and a server that
//! misbehaves on purpose (`hostile`). The demo runs on
//! them and the backends are tested against them, so they speak the wire
//! protocols as the real systems do and share no code with Airlock's
//! clients: a bug in a client cannot be hidden by the same bug here.

pub mod collector;
pub mod hostile;
pub mod pve;

pub use pve::{api::Role, SimConfig, SimError, SimToken, Simulator};
