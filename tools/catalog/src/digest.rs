//! Canonical JSON and its SHA-256: what an approval binds to and what the
//! audit chain hashes. Canonical means object keys sorted, no whitespace,
//! so the same value always hashes the same whatever order it was built in.

use serde_json::Value;
use sha2::{Digest, Sha256};

pub fn canonical_json(v: &Value) -> String {
    let mut out = Vec::new();
    write(v, &mut |bytes: &[u8]| out.extend_from_slice(bytes));
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// Hands `io::Write`'s bytes to a sink.
struct Sink<'a, F: FnMut(&[u8])>(&'a mut F);

impl<F: FnMut(&[u8])> std::io::Write for Sink<'_, F> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        (self.0)(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Writes `v`'s canonical JSON to `out` piece by piece: nothing the size
/// of `v` is built.
pub fn write(v: &Value, out: &mut impl FnMut(&[u8])) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_unstable(); // keys are unique
            out(b"{");
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out(b",");
                }
                let _ = serde_json::to_writer(Sink(out), k);
                out(b":");
                write(&map[k], out);
            }
            out(b"}");
        }
        Value::Array(items) => {
            out(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out(b",");
                }
                write(item, out);
            }
            out(b"]");
        }
        scalar => {
            let _ = serde_json::to_writer(Sink(out), scalar);
        }
    }
}

/// Hex SHA-256 of the canonical JSON of `v`, hashed as it is written.
pub fn sha256_json(v: &Value) -> String {
    let mut hasher = Sha256::new();
    write(v, &mut |bytes: &[u8]| hasher.update(bytes));
    hex::encode(hasher.finalize())
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_does_not_matter() {
        let a: Value = serde_json::from_str(r#"{"b":1,"a":{"y":[1,2],"x":"s"}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":{"x":"s","y":[1,2]},"b":1}"#).unwrap();
        assert_eq!(canonical_json(&a), r#"{"a":{"x":"s","y":[1,2]},"b":1}"#);
        assert_eq!(sha256_json(&a), sha256_json(&b));
        assert_ne!(sha256_json(&json!({"a": 1})), sha256_json(&json!({"a": 2})));
    }

    #[test]
    fn hashing_as_written_hashes_the_same_bytes() {
        let v = json!({"z\u{1}\"": ["é\n", -1.5, 1e300, null, true, {"b": "\u{2028}", "a": {}}], "": []});
        let text = canonical_json(&v);
        assert_eq!(
            text,
            "{\"\":[],\"z\\u0001\\\"\":[\"é\\n\",-1.5,1e+300,null,true,{\"a\":{},\"b\":\"\u{2028}\"}]}"
        );
        assert_eq!(sha256_json(&v), sha256_hex(text.as_bytes()));
        // Pinned: approvals filed before keep matching their arguments.
        assert_eq!(
            sha256_json(&json!({"node": "pve1", "vmid": 101})),
            sha256_hex(br#"{"node":"pve1","vmid":101}"#)
        );
    }
}
