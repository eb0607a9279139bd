//! Arguments a script passes to a curated Proxmox tool. Whatever the JSON,
//! validation answers with problems that name the argument and stay short,
//! and arguments it accepts always become a request whose path has exactly
//! the route's segments: nothing smuggled into the URL.
#![no_main]

use std::sync::OnceLock;

use airlock_catalog::validate::{ArgsValidator, MAX_PROBLEMS};
use airlock_proxmox::{
        backend::build_request,
        curated,
        route::{Route, RouteKind},
        tiers::TierRules,
    };
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// The longest single problem text; a problem that quotes a megabyte-long
/// value would land whole in the agent's context.
const PROBLEM_CHARS: usize = 1_000;

fn tools() -> &'static Vec<(ArgsValidator, Route)> {
    static TOOLS: OnceLock<Vec<(ArgsValidator, Route)>> = OnceLock::new();
    TOOLS.get_or_init(|| {
        curated::tools(&TierRules::defaults(), &Default::default(), "proxmox")
            .into_iter()
            .map(|(spec, route)| {
                (
                    ArgsValidator::new(&spec).expect("curated schemas compile"),
                    route,
                )
            })
            .collect()
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, json)) = data.split_first() else {
        return;
    };
    let Ok(args) = serde_json::from_slice::<Value>(json) else {
        return;
    };
    let (validator, route) = &tools()[usize::from(pick) % tools().len()];
    let problems = validator.problems(&args);
    assert!(
        problems.len() <= MAX_PROBLEMS + 1,
        "{} problems",
        problems.len()
    );
    for p in &problems {
        assert!(
            p.starts_with("args"),
            "a problem that names no argument: {p}"
        );
        let n = p.chars().count();
        assert!(n <= PROBLEM_CHARS, "a problem of {n} characters");
    }
    if !problems.is_empty() || route.kind != RouteKind::Api {
        return;
    }
    let request = build_request(route, &args).expect("valid arguments build a request");
    let want = route.path.split('/').filter(|s| !s.is_empty()).count();
    let segments: Vec<&str> = request.path.split('/').skip(1).collect();
    assert!(request.path.starts_with('/'), "{}", request.path);
    assert_eq!(segments.len(), want, "{} from {}", request.path, route.path);
    for s in segments {
        assert!(
            !s.is_empty() && s != "." && s != "..",
            "segment {s:?} in {}",
            request.path
        );
        assert!(
            s.bytes().all(|b| b.is_ascii_graphic()),
            "segment {s:?} holds raw bytes"
        );
    }
});
