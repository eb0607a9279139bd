//! Collector prompt templates are parsed from the collector's text and
//! rendered with the agent's argument values. Neither side may hang or
//! crash Airlock: the input is `template \0 value \0 value …`, the values
//! assigned to the template's names in order.
#![no_main]

use std::collections::HashMap;

use airlock_collector::template::Template;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut parts = text.split('\0');
    let source = parts.next().unwrap_or_default();
    let template = Template::parse(source);
    let names: Vec<String> = template.names().into_iter().map(str::to_string).collect();
    let vars: HashMap<String, String> = names
        .iter()
        .cloned()
        .zip(parts.map(str::to_string))
        .collect();
    let out = template.render(&vars);

    if !source.contains("{{") {
        assert_eq!(out, source, "text without tags must come out unchanged");
    }
    // Values are inserted, never parsed: rendering once more with the same
    // values from an already-rendered text is not required to be stable,
    // but the output can only hold text from the template and the values.
    let budget = source.len() * (1 + vars.values().map(String::len).sum::<usize>());
    assert!(
        out.len() <= budget.max(source.len()),
        "output grew past its inputs"
    );
    for n in &names {
        assert!(!n.is_empty() && n.len() <= 64, "name {n:?}");
    }
});
