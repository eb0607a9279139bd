//! Every crate of the workspace, and the guest (its own workspace), held
//! to one shape: its top-level modules name each other in one direction
//! only, so a newcomer can read any crate from its leaves. A circle
//! added anywhere fails here, naming the modules along it.

use std::path::{Path, PathBuf};

use airlock_testkit::structure::{cycle, import_graph};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

#[test]
fn no_crate_s_modules_import_each_other_in_a_circle() {
    let manifest: toml::Value =
        toml::from_str(&std::fs::read_to_string(repo().join("Cargo.toml")).unwrap()).unwrap();
    let mut crates: Vec<String> = manifest["workspace"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap().to_string())
        .collect();
    crates.push("guest-sdk/guest".into());
    assert!(crates.len() >= 13, "{crates:?}");
    let mut found = Vec::new();
    for krate in &crates {
        let src = repo().join(krate).join("src");
        let graph = import_graph(&src);
        if let Some(circle) = cycle(&graph) {
            found.push(format!("{krate}: {}", circle.join(" → ")));
        }
    }
    assert!(
        found.is_empty(),
        "modules import each other in a circle:\n{}",
        found.join("\n")
    );
}
