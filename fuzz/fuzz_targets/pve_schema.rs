//! The API schema comes from the Proxmox server Airlock talks to
//! (`proxmox.catalog = "full"` fetches it at start-up), so it is input
//! from a network peer. Any tree either is refused with an error or
//! becomes tools whose names are unique JavaScript identifiers and whose
//! schemas compile and whose paths have only literal or `{placeholder}`
//! segments — and a Perl pattern either is dropped or is anchored to
//! match the whole value, as PVE matches it.
#![no_main]

use std::collections::HashSet;

use airlock_catalog::{spec::is_js_identifier, validate::ArgsValidator};
use airlock_proxmox::{apidata, full, schema, tiers::TierRules};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Some(translated) = schema::translate_pattern(text) {
        assert!(
            translated.starts_with("^(?:") && translated.ends_with(")$"),
            "a translated pattern must match the whole value: {translated}"
        );
    }
    if let Ok(v) = serde_json::from_str(text) {
        let _ = schema::property(&v);
        let _ = schema::parameters(&v);
    }
    let Ok(ops) = apidata::parse_text(text) else {
        return;
    };
    for op in &ops {
        assert!(
            apidata::valid_path(&op.path),
            "a kept path has a segment that is neither a name nor a placeholder: {:?}",
            op.path
        );
    }
    let tools = full::generate(&ops, &TierRules::defaults(), "proxmox");
    assert_eq!(tools.len(), ops.len());
    let mut seen = HashSet::new();
    for (spec, route) in &tools {
        assert!(is_js_identifier(&spec.name), "tool name {:?}", spec.name);
        assert!(
            seen.insert(spec.name.clone()),
            "two tools named {}",
            spec.name
        );
        assert_eq!(spec.path_params, route.path_params());
        if let Err(e) = ArgsValidator::new(spec) {
            panic!("converted schema does not compile: {e}");
        }
    }
});
