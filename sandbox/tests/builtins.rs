//! The built-ins agents reach for beyond the language: `Intl` and the
//! `toLocale*String` methods, `URL` and `URLSearchParams`, `crypto`. Each
//! expression in `data/builtins-node20.json` was evaluated by Node 20
//! (ICU 78) and must give here what it gave there; dates are formatted in
//! UTC or a fixed offset, the only time zones a sandbox without time-zone
//! data knows.

mod common;

use airlock_sandbox::ExecError;
use common::{ok, run};
use serde_json::{json, Value};

#[derive(serde::Deserialize)]
struct Case {
    expression: String,
    node20: String,
}

#[tokio::test]
async fn what_node_gives_for_the_formats_agents_print_reports_with() {
    let cases: Vec<Case> = serde_json::from_str(include_str!("data/builtins-node20.json")).unwrap();
    assert!(cases.len() >= 100, "{}", cases.len());
    let mut script =
        String::from("const D = new Date(Date.UTC(2026, 11, 7, 8, 5, 7, 123));\nconst cases = [\n");
    for c in &cases {
        script.push_str(&format!("  () => ({}),\n", c.expression));
    }
    script.push_str(
        "];\ncases.map((c) => { try { return String(c()); } \
         catch (e) { return 'THROWS ' + e.name + ': ' + e.message; } })",
    );
    let out = run(&script).await;
    let got = ok(&out).as_array().expect("an array").clone();
    let wrong: Vec<String> = cases
        .iter()
        .zip(&got)
        .filter(|(c, g)| g.as_str() != Some(c.node20.as_str()))
        .map(|(c, g)| format!("{}\n  node: {:?}\n  here: {g}", c.expression, c.node20))
        .collect();
    assert!(
        wrong.is_empty(),
        "{} differ:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// What cannot be formatted here says so, and what to use instead.
#[tokio::test]
async fn what_has_no_data_here_is_refused_by_name() {
    let script = r#"
const errors = [];
const attempt = (f) => { try { f(); errors.push(null); } catch (e) { errors.push(e.name + ': ' + e.message); } };
attempt(() => new Date(0).toLocaleString('en-US', { timeZone: 'Europe/Berlin' }));
attempt(() => (5).toLocaleString('en_US'));
attempt(() => (5).toLocaleString('en-US', { style: 'currency' }));
attempt(() => (5).toLocaleString('en-US', { style: 'unit', unit: 'parsec' }));
attempt(() => (5).toLocaleString('en-US', { maximumFractionDigits: 101 }));
attempt(() => new URL('/api2/json'));
attempt(() => crypto.getRandomValues(new Uint8Array(65537)));
attempt(() => crypto.getRandomValues(new Float64Array(2)));
attempt(() => new Intl.DateTimeFormat('en-US', { dateStyle: 'short', hour: 'numeric' }));
attempt(() => (16384).toLocaleString('de-DE'));
attempt(() => new Date(0).toLocaleDateString('en-GB'));
attempt(() => new Date(0).toLocaleDateString('sv-SE'));
attempt(() => (5).toLocaleString('en-US', { roundingIncrement: 5, maximumFractionDigits: 0 }));
attempt(() => new Intl.NumberFormat({ length: 2, 0: 'en-US', 1: 'en_US' }));
errors.push(Intl.NumberFormat.supportedLocalesOf(['en-GB', 'en-US', 'en', 'de', 'und']).join());
errors"#;
    let out = run(script).await;
    let errors = ok(&out).as_array().unwrap().clone();
    let says = |i: usize, words: &[&str]| {
        let e = errors[i]
            .as_str()
            .unwrap_or_else(|| panic!("case {i} threw nothing"));
        for w in words {
            assert!(e.contains(w), "case {i}: {e:?} lacks {w:?}");
        }
    };
    says(0, &["RangeError", "Europe/Berlin", "UTC", "+01:00"]);
    says(1, &["RangeError", "en_US", "write \"en-US\""]);
    says(2, &["TypeError", "currency: \"USD\""]);
    says(3, &["RangeError", "parsec", "gigabyte"]);
    says(4, &["RangeError", "maximumFractionDigits", "0 to 100"]);
    says(5, &["TypeError", "/api2/json", "base"]);
    says(6, &["QuotaExceededError", "65537", "65536"]);
    says(7, &["TypeError", "integer typed array"]);
    says(8, &["TypeError", "dateStyle", "hour"]);
    // Another locale is refused, not formatted as en-US: "16,384" read as
    // German is sixteen, and 1/12/1970 read as British is January.
    says(9, &["RangeError", "de-DE", "\"en-US\""]);
    says(10, &["RangeError", "en-GB"]);
    says(11, &["RangeError", "sv-SE", "toISOString"]);
    says(12, &["RangeError", "roundingIncrement"]);
    says(13, &["RangeError", "en_US"]);
    assert_eq!(errors[14], json!("en-US,en,und"));
}

#[tokio::test]
async fn random_values_and_uuids() {
    let script = r#"
const a = crypto.getRandomValues(new Uint8Array(64));
const b = crypto.getRandomValues(new BigUint64Array(2));
const empty = crypto.getRandomValues(new Uint8Array(0));
const ids = Array.from({ length: 50 }, () => crypto.randomUUID());
({
  same: crypto.getRandomValues(a) === a,
  distinct: new Set(a).size,
  big: typeof b[0],
  empty: empty.length,
  v4: ids.every((id) => /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(id)),
  unique: new Set(ids).size,
  tag: Object.prototype.toString.call(crypto),
  subtle: typeof crypto.subtle,
})"#;
    let out = run(script).await;
    let v = ok(&out);
    assert_eq!(v["same"], json!(true));
    // 64 bytes drawn at random have far more than 16 distinct values
    // (fewer happens with probability under 1e-20).
    assert!(v["distinct"].as_u64().unwrap() > 16, "{v}");
    assert_eq!(v["big"], json!("bigint"));
    assert_eq!(v["empty"], json!(0));
    assert_eq!(v["v4"], json!(true), "{v}");
    assert_eq!(v["unique"], json!(50));
    assert_eq!(v["tag"], json!("[object Crypto]"));
    assert_eq!(v["subtle"], json!("undefined"));
}

/// A sort of 2,000 names by `localeCompare` is a sort, not a time-out:
/// the comparison runs in Rust.
#[tokio::test]
async fn sorting_by_locale_compare_keeps_to_its_order() {
    let script = r#"
const names = Array.from({ length: 2000 }, (_, i) => `vm-${(i * 7919) % 2000}${i % 3 ? 'a' : 'B'}`);
const sorted = names.toSorted((a, b) => a.localeCompare(b, undefined, { numeric: true }));
const ok = sorted.every((s, i) => i === 0 || sorted[i - 1].localeCompare(s, undefined, { numeric: true }) <= 0);
[ok, sorted.slice(0, 3)]"#;
    let out = run(script).await;
    assert_eq!(ok(&out), &json!([true, ["vm-0B", "vm-1a", "vm-2a"]]));
}

/// A URL is text: parsing one reaches nothing, and a bad one fails the
/// script only where the script does not catch it.
#[tokio::test]
async fn a_bad_url_is_a_type_error_the_script_sees() {
    match run("new URL('http://[::1')").await.result {
        Err(ExecError::RuntimeError { message, .. }) => {
            assert!(message.contains("TypeError"), "{message}");
            assert!(message.contains("http://[::1"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let out = run("URL.parse('nope') === null && URL.canParse('https://x/')").await;
    assert_eq!(ok(&out), &Value::Bool(true));
}

/// `Intl`, `URL` and `crypto` are built at their first use (a fresh
/// instance that never uses them pays nothing for them): what a script
/// sees is the same whichever it touches first.
#[tokio::test]
async fn globals_built_at_first_use_behave_as_if_always_there() {
    let script = r#"
const early = Number.prototype.toLocaleString;   // a stand-in, taken before anything is built
const had = ['Intl', 'URL', 'URLSearchParams', 'crypto'].map((g) => g in globalThis);
URLSearchParams = 'mine';                         // a script may shadow one before its first use
// The same place in the code before and after the build (boa caches a
// global's lookup per place: once an accessor, read as one after).
const bytes = new Uint8Array(4);
let looped = 0;
for (let i = 0; i < 3; i++) {
  crypto.getRandomValues(bytes);
  looped += new URL('https://pve1:8006/' + i).pathname.length + new Intl.NumberFormat().format(i).length;
}
[had, early.call(16384), typeof Intl.NumberFormat, Number.prototype.toLocaleString === early,
 URLSearchParams, new URL('https://pve1:8006').port, [3, 1, 2].map(String).sort((a, b) => a.localeCompare(b)),
 looped, crypto === globalThis.crypto]"#;
    let out = run(script).await;
    assert_eq!(
        ok(&out),
        &json!([
            [true, true, true, true],
            "16,384",
            "function",
            false,
            "mine",
            "8006",
            ["1", "2", "3"],
            9,
            true
        ])
    );
}
