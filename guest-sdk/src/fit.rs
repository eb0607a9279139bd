//! Making what the guest hands over fit its limits: a result cut down to
//! valid JSON of at most `result_bytes`, and texts (error messages,
//! stacks) cut to [`MESSAGE_CHARS`] characters.
//!
//! The guest applies both before it calls `finish`, so the work is paid
//! from the guest's own memory and clock, which the host can interrupt;
//! the host applies the text cap again and refuses an outcome larger than
//! the limit allows instead of parsing it (see `abi::FINISH_SLACK`).
//!
//! A string cut mid-way would be useless to a client that parses the
//! result; instead arrays and objects keep their first entries, long
//! strings keep their beginning, and each cut leaves a marker saying how
//! much was dropped.

use serde_json::{Map, Value};

/// The most characters of a guest-written message, stack or unknown
/// object kept: a script can make an error text as long as it likes (a
/// path 100,000 levels deep), and it goes straight into the agent's
/// context.
pub const MESSAGE_CHARS: usize = 2_000;

/// `s` cut to [`MESSAGE_CHARS`] characters, saying how many were left out.
pub fn capped(s: &str) -> String {
    match s.char_indices().nth(MESSAGE_CHARS) {
        None => s.to_string(),
        Some((cut, _)) => format!(
            "{}… ({} more characters)",
            &s[..cut],
            s[cut..].chars().count()
        ),
    }
}

/// Returns a value whose JSON text is at most `limit` bytes.
pub fn truncate(value: &Value, limit: usize) -> Value {
    let mut budget = limit.saturating_sub(limit / 8).max(1) as isize;
    for _ in 0..16 {
        let mut left = budget;
        let out = shrink(value, &mut left);
        if json_len(&out) <= limit {
            return out;
        }
        budget /= 2;
    }
    Value::Null
}

pub fn json_len(v: &Value) -> usize {
    serde_json::to_vec(v).map(|b| b.len()).unwrap_or(usize::MAX)
}

/// Bytes held back in every container for its "more entries" marker.
const MARKER: isize = 48;

fn shrink(v: &Value, budget: &mut isize) -> Value {
    match v {
        Value::String(s) => {
            let cost = s.len() as isize + 2;
            if cost <= *budget {
                *budget -= cost;
                return v.clone();
            }
            let keep = (*budget - MARKER).max(0) as usize;
            let mut cut = keep.min(s.len());
            while !s.is_char_boundary(cut) {
                cut -= 1;
            }
            *budget = 0;
            Value::String(format!(
                "{}…[{} more bytes truncated]",
                &s[..cut],
                s.len() - cut
            ))
        }
        Value::Array(items) => {
            *budget -= 2;
            let mut out = Vec::new();
            for (i, item) in items.iter().enumerate() {
                if *budget <= MARKER {
                    out.push(Value::String(format!(
                        "…[{} more items truncated]",
                        items.len() - i
                    )));
                    break;
                }
                out.push(shrink(item, budget));
                *budget -= 1;
            }
            Value::Array(out)
        }
        Value::Object(map) => {
            // Fields are different things, so each gets a fair share of
            // what is left (unused share flows on) rather than the first
            // big field starving the rest.
            *budget -= 2;
            let mut out = Map::new();
            let n = map.len();
            for (i, (k, item)) in map.iter().enumerate() {
                if *budget <= MARKER {
                    out.insert(
                        "…".into(),
                        Value::String(format!("{} more keys truncated", n - i)),
                    );
                    break;
                }
                *budget -= k.len() as isize + 4;
                let share = (*budget / (n - i) as isize).max(2 * MARKER).min(*budget);
                let mut left = share;
                out.insert(k.clone(), shrink(item, &mut left));
                *budget -= share - left;
            }
            Value::Object(out)
        }
        scalar => {
            *budget -= json_len(scalar) as isize;
            scalar.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fits_and_stays_valid() {
        let big = json!({
            "vms": (0..2000).map(|i| json!({"vmid": i, "name": format!("vm-{i}"), "status": "running"})).collect::<Vec<_>>(),
            "note": "x".repeat(10_000),
        });
        for limit in [64usize, 200, 1000, 4096, 50_000] {
            let out = truncate(&big, limit);
            let text = serde_json::to_string(&out).unwrap();
            assert!(
                text.len() <= limit,
                "limit {limit}: got {} bytes",
                text.len()
            );
            let back: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(back, out);
        }
        let out = truncate(&big, 4096);
        let vms = out["vms"].as_array().unwrap();
        assert_eq!(vms[0]["name"], "vm-0", "keeps the first entries intact");
        assert!(vms
            .last()
            .unwrap()
            .as_str()
            .unwrap()
            .contains("more items truncated"));
    }

    #[test]
    fn capped_texts_end_on_a_character_boundary() {
        let long = "é".repeat(MESSAGE_CHARS + 10);
        let cut = capped(&long);
        assert!(cut.ends_with("… (10 more characters)"), "{cut}");
        assert_eq!(capped("short"), "short");
    }

    #[test]
    fn cuts_strings_on_char_boundaries() {
        let s = Value::String("é".repeat(1000));
        let out = truncate(&s, 300);
        assert!(json_len(&out) <= 300);
        assert!(out.as_str().unwrap().starts_with("éé"));
    }
}
