//! The crate's shape, held as a test: its modules import each other in
//! one direction only (a reader can start from the leaves — plans, rate
//! counts, audit fields — and never meet a module that needs one not
//! read yet), no storage code is left in it (that lives in
//! `airlock-state`), and it stays the call path, small enough to read:
//! what the tools are, runbooks, the approver's view and the edges to
//! outside systems have crates of their own.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
};

use airlock_testkit::structure::{code, cycle, import_graph, named_modules, sources};

fn gateway_src() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn the_modules_import_each_other_one_way() {
    let graph = import_graph(&gateway_src());
    assert!(
        graph.len() > 15,
        "the crate's modules were found: {graph:?}"
    );
    // The reader itself: an edge it must see.
    assert!(
        graph["backend"].contains("caller"),
        "{:?}",
        graph["backend"]
    );
    if let Some(found) = cycle(&graph) {
        panic!(
            "modules import each other in a circle: {}",
            found.join(" → ")
        );
    }
}

#[test]
fn the_cycle_finder_finds_one() {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    graph.entry("a".into()).or_default().insert("b".into());
    graph.entry("b".into()).or_default().insert("c".into());
    assert_eq!(cycle(&graph), None);
    graph.entry("c".into()).or_default().insert("a".into());
    assert_eq!(cycle(&graph).unwrap(), ["a", "b", "c", "a"]);
    assert_eq!(
        named_modules(
            "use crate::{\n    approval::{A, B},\n    plan,\n};\nlet x = crate::spec::Tier::Read;"
        ),
        ["approval", "plan", "spec"].map(String::from).into()
    );
}

#[test]
fn no_storage_code_is_left_in_the_gateway() {
    for file in sources(&gateway_src()) {
        let code = code(&std::fs::read_to_string(&file).unwrap());
        for store in ["rusqlite", "tokio_postgres", "deadpool_postgres"] {
            assert!(
                !code.contains(store),
                "{} uses {store}: stores belong in airlock-state",
                file.display()
            );
        }
    }
}

/// The lines of a source file outside its unit tests: everything before
/// the first top-level `#[cfg(test)]`, comments and blank lines
/// included (they are read too).
fn lines_outside_tests(text: &str) -> usize {
    text.lines()
        .take_while(|line| !line.starts_with("#[cfg(test)]"))
        .count()
}

/// The gateway grew to 12,300 lines once, holding the catalog, search,
/// TypeScript, runbooks, the approver's summaries and TLS beside the call
/// path. Past this bound, what was added belongs in a crate of its own
/// (or in one of those).
const GATEWAY_LINES: usize = 6_500;

#[test]
fn the_gateway_stays_the_call_path_in_at_most_6500_lines() {
    let mut total = 0;
    let mut largest = Vec::new();
    for file in sources(&gateway_src()) {
        let n = lines_outside_tests(&std::fs::read_to_string(&file).unwrap());
        total += n;
        largest.push((n, file));
    }
    largest.sort();
    largest.reverse();
    assert!(total > 3_000, "the gateway's sources were found: {total}");
    assert!(
        total <= GATEWAY_LINES,
        "the gateway has {total} lines outside its unit tests, over {GATEWAY_LINES}; \
         move what is not the call path into a crate of its own (largest: {:?})",
        &largest[..largest.len().min(5)]
    );
}

#[test]
fn lines_are_counted_up_to_the_unit_tests() {
    assert_eq!(
        lines_outside_tests("a\n\n// c\n#[cfg(test)]\nmod tests {}\n"),
        3
    );
    assert_eq!(lines_outside_tests("a\n    #[cfg(test)]\nb\n"), 3);
}
