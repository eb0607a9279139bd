//! The crate's shape, held as a test: its modules import each other in
//! one direction only (a reader can start from the leaves — specs,
//! digests, plans — and never meet a module that needs one not read yet),
//! and no storage code is left in it (that lives in `airlock-state`).

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
        graph.len() > 20,
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
