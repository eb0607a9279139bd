//! Cutting an oversized result down to valid JSON that fits.
//!
//! A string cut mid-way would be useless to a client that parses the
//! result; instead arrays and objects keep their first entries, long
//! strings keep their beginning, and each cut leaves a marker saying how
//! much was dropped.

use serde_json::{Map, Value};

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
    fn cuts_strings_on_char_boundaries() {
        let s = Value::String("é".repeat(1000));
        let out = truncate(&s, 300);
        assert!(json_len(&out) <= 300);
        assert!(out.as_str().unwrap().starts_with("éé"));
    }
}
