//! The audit file holds whatever a disk, an editor or an attacker left
//! there. Two properties: any bytes give a verdict (never a panic), and
//! any one-byte change to a real chain is caught — a line must be byte
//! for byte what the writer makes of its record, so not even a space or
//! an escaped letter that leaves the JSON content as it was gets through.
#![no_main]

use std::sync::OnceLock;

use airlock_gateway::audit::verify_lines;
use airlock_state::local::AuditLog;
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};

/// Three real lines written by the real writer, once.
fn chain() -> &'static Vec<u8> {
    static CHAIN: OnceLock<Vec<u8>> = OnceLock::new();
    CHAIN.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("airlock-fuzz-audit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("audit.jsonl");
        let log = AuditLog::open(&path).expect("open");
        for (i, tool) in ["node_list", "guest_stop", "quox_fleet_status"]
            .iter()
            .enumerate()
        {
            let Value::Object(fields) =
                json!({"identity": "agent", "tool": tool, "status": "ok", "i": i})
            else {
                unreachable!()
            };
            log.append("call", fields).expect("append");
        }
        let bytes = std::fs::read(&path).expect("read");
        let _ = std::fs::remove_dir_all(&dir);
        bytes
    })
}

fuzz_target!(|data: &[u8]| {
    // Any bytes: a verdict, and never more good lines than lines.
    let verdict = verify_lines(data).expect("reading a slice cannot fail");
    let lines = data.iter().filter(|b| **b == b'\n').count() as u64;
    assert!(verdict.good_lines <= lines);
    if verdict.ok() {
        assert_eq!(verdict.good_lines, lines);
    }

    // One byte of a real chain changed.
    let [hi, lo, byte, ..] = *data else { return };
    let original = chain();
    let at = usize::from(u16::from_le_bytes([hi, lo])) % original.len();
    if original[at] == byte {
        return;
    }
    let mut tampered = original.clone();
    tampered[at] = byte;
    let verdict = verify_lines(&tampered[..]).expect("slice");
    assert!(
        !verdict.ok(),
        "byte {at} changed to {byte:#04x} and the chain still verifies"
    );
});
