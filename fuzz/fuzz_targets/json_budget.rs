//! The count `json_budget` makes of a backend's answer before parsing it.
//! Whatever the bytes, the scan ends, and it stops just past any limit it
//! is given; for bytes that parse as JSON it counts at least what the
//! parser built (a string or scalar one, an object or array four; exactly
//! that unless a key repeats), so an answer let through costs no more
//! than the limit allows. `parse_now` agrees with both.
#![no_main]

use airlock_edge::json_budget::{count_values, parse_now, ParseError, CONTAINER_WEIGHT};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn counted(v: &Value) -> u64 {
    match v {
        Value::Array(items) => CONTAINER_WEIGHT + items.iter().map(counted).sum::<u64>(),
        Value::Object(map) => CONTAINER_WEIGHT + map.values().map(|v| 1 + counted(v)).sum::<u64>(),
        _ => 1,
    }
}

fuzz_target!(|data: &[u8]| {
    let whole = count_values(data, u64::MAX);
    let limit = whole / 2;
    let stopped = count_values(data, limit);
    if whole > limit {
        assert!(
            stopped > limit && stopped <= limit + CONTAINER_WEIGHT && stopped <= whole,
            "stopped at {stopped} for a limit of {limit} (whole: {whole})"
        );
    }
    match serde_json::from_slice::<Value>(data) {
        Ok(v) => {
            let built = counted(&v);
            assert!(
                whole >= built,
                "the scan counted {whole}, the parser built {built}"
            );
            assert!(parse_now(data, whole).is_ok());
            if whole > 0 {
                assert!(matches!(
                    parse_now(data, whole - 1),
                    Err(ParseError::TooManyValues { .. })
                ));
            }
        }
        Err(_) => assert!(parse_now(data, u64::MAX).is_err()),
    }
});
