//! What a backend's reply costs the host once parsed, checked before it
//! is parsed. A body within its byte cap can still be expensive:
//! `serde_json::Value` (with `preserve_order`) takes 72 bytes for a number
//! that took one byte on the wire, and an object or array with contents
//! takes a few hundred (its own allocation), so 16 MiB of `[{"":0},…]`
//! parsed into 1.2 GB. A cheap structural scan of the bytes counts what
//! the parser would build, without allocating, and a reply with more than
//! one counted value per [`BYTES_PER_VALUE`] bytes of its cap is refused
//! unparsed.
//!
//! What is counted ("values"): every string (a key too: the parser keeps
//! it), every number, `true`, `false` and `null` once, and every object or
//! array [`CONTAINER_WEIGHT`] times. Measured, that makes a counted value
//! cost at most about 76 bytes parsed whatever the shape (`[0]`, `{"":0}`,
//! one object of half a million keys, a flat array of numbers: 72–76 MB
//! at 1,048,576 values), so a parsed reply takes at most about 4.5 times
//! its byte cap in memory, besides the body itself.
//!
//! Large replies are parsed on a blocking thread, so the task running the
//! call (and the execution's wall clock) never waits on a parse it cannot
//! interrupt.

use serde_json::Value;

/// A reply may hold at most one counted value per this many bytes of its
/// byte cap: 1,048,576 at Proxmox's 16 MiB, 262,144 at the collector's
/// 4 MiB.
pub const BYTES_PER_VALUE: u64 = 16;

/// An object or array counts as this many values: parsed, one with
/// contents takes a few hundred bytes for its own allocation.
pub const CONTAINER_WEIGHT: u64 = 4;

/// A body larger than this is scanned and parsed on a blocking thread.
pub const PARSE_INLINE_BYTES: usize = 1 << 20;

/// The most values a reply under a cap of `cap_bytes` may hold.
pub fn max_values(cap_bytes: u64) -> u64 {
    (cap_bytes / BYTES_PER_VALUE).max(1)
}

/// Counts the values of the JSON text `bytes` (as the module says), and
/// stops as soon as the count passes `limit` (the result is then above
/// `limit`, not the whole count). Allocates nothing. For JSON it is what
/// the parser builds (more where a key repeats: the parser keeps one).
/// On text that is not JSON the count is meaningless but the parser
/// refuses it anyway; on any prefix that is valid JSON it counts at least
/// what the parser builds for that prefix before failing. Fuzzed
/// (`fuzz/fuzz_targets/json_budget.rs`).
pub fn count_values(bytes: &[u8], limit: u64) -> u64 {
    // Bytes a number or a literal is made of: a scalar starts where one
    // of them follows anything else.
    fn scalar(b: u8) -> bool {
        b.is_ascii_alphanumeric() || matches!(b, b'-' | b'+' | b'.')
    }
    let mut count = 0u64;
    let mut previous = b' ';
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'"' => {
                count += 1;
                // Skip the string: only `\` and `"` matter inside it.
                i += 1;
                while i < bytes.len() {
                    match bytes[i] {
                        b'\\' => i += 2,
                        b'"' => break,
                        _ => i += 1,
                    }
                }
            }
            b'{' | b'[' => count += CONTAINER_WEIGHT,
            _ if scalar(b) && !scalar(previous) => count += 1,
            _ => {}
        }
        if count > limit {
            return count;
        }
        previous = b;
        i += 1;
    }
    count
}

/// Why a reply was not parsed.
#[derive(Debug)]
pub enum ParseError {
    /// It holds more than `limit` values.
    TooManyValues { limit: u64 },
    /// It is not JSON.
    Malformed(String),
}

/// Counts, then parses: synchronous, for small bodies and blocking
/// threads.
pub fn parse_now(body: &[u8], max_values: u64) -> Result<Value, ParseError> {
    if count_values(body, max_values) > max_values {
        return Err(ParseError::TooManyValues { limit: max_values });
    }
    serde_json::from_slice(body).map_err(|e| ParseError::Malformed(e.to_string()))
}

/// [`parse_now`], on a blocking thread when `body` is over
/// [`PARSE_INLINE_BYTES`]: if the caller is dropped meanwhile (the
/// execution hit its wall clock), it does not wait for the parse.
pub async fn parse(body: Vec<u8>, max_values: u64) -> Result<Value, ParseError> {
    if body.len() <= PARSE_INLINE_BYTES {
        return parse_now(&body, max_values);
    }
    tokio::task::spawn_blocking(move || parse_now(&body, max_values))
        .await
        .unwrap_or_else(|e| Err(ParseError::Malformed(format!("the parse failed: {e}"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the scan should say, counted on the parsed value.
    fn counted(v: &Value) -> u64 {
        match v {
            Value::Array(items) => CONTAINER_WEIGHT + items.iter().map(counted).sum::<u64>(),
            Value::Object(map) => {
                CONTAINER_WEIGHT + map.values().map(|v| 1 + counted(v)).sum::<u64>()
            }
            _ => 1,
        }
    }

    #[test]
    fn the_scan_counts_what_the_parser_builds() {
        for text in [
            "0",
            "-1.5e+10",
            "true",
            " null ",
            "\"a\"",
            "[]",
            "{}",
            "[0,1,2]",
            "[true,false,null,-0.0,1E5]",
            r#"{"a":1,"b":[1,2,{"c":null}],"d":{}}"#,
            r#"{"data":[{"":0},{"":0}]}"#,
            r#"["\"[{,:", "\\", "\\\"", "]}", "tru\u0065"]"#,
            "{ \"k\" : [ 1 , 2 ] ,\n\t\"z\" : \"{[\" }",
        ] {
            let v: Value = serde_json::from_str(text).unwrap();
            assert_eq!(
                count_values(text.as_bytes(), u64::MAX),
                counted(&v),
                "{text}"
            );
        }
    }

    #[test]
    fn the_scan_stops_past_the_limit() {
        let text = format!("[{}0]", "0,".repeat(1000));
        assert_eq!(
            count_values(text.as_bytes(), u64::MAX),
            1001 + CONTAINER_WEIGHT
        );
        let stopped = count_values(text.as_bytes(), 10);
        assert!(
            stopped > 10 && stopped <= 10 + CONTAINER_WEIGHT,
            "{stopped}"
        );
    }

    #[test]
    fn a_reply_of_tiny_values_is_refused_unparsed_and_others_are_parsed() {
        let cap = 1 << 16;
        let limit = max_values(cap);
        assert_eq!(limit, 4096);
        // 64 KiB of `{"":0}`: 9,362 small objects, 56,000 values.
        let tiny = format!("{{\"data\":[{}{{\"\":0}}]}}", "{\"\":0},".repeat(9_000));
        assert!(tiny.len() as u64 <= cap);
        match parse_now(tiny.as_bytes(), limit) {
            Err(ParseError::TooManyValues { limit: l }) => assert_eq!(l, 4096),
            other => panic!("{other:?}"),
        }
        let fine =
            serde_json::json!({"data": [{"vmid": 100, "name": "web-1", "status": "running"}]});
        assert_eq!(parse_now(fine.to_string().as_bytes(), limit).unwrap(), fine);
        assert!(matches!(
            parse_now(b"{\"data\":", limit),
            Err(ParseError::Malformed(_))
        ));
    }

    #[tokio::test]
    async fn large_bodies_are_parsed_off_the_task() {
        let body = format!("[{}\"{}\"]", "1,".repeat(10), "x".repeat(2 << 20)).into_bytes();
        let v = parse(body, max_values(16 << 20)).await.unwrap();
        assert_eq!(v.as_array().unwrap().len(), 11);
    }
}
