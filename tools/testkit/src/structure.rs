//! A crate's shape as its sources show it: which of its top-level modules
//! name which others through `crate::`, and whether they do so in a
//! circle. A reader can start from the leaves of a crate without circles
//! and never meet a module that needs one not read yet; structure tests
//! (`tools/gateway/tests/structure.rs`, `host/tests/structure.rs`) hold
//! each crate to that. Text, not a parser: comments and unit tests are
//! left out, and a child module counts as part of its parent.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

/// Every `.rs` file under `dir`.
pub fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// The module a file belongs to, at the crate's top level: a child module
/// (`gateway/executions.rs`) is part of its parent (`gateway`), whose
/// `impl` it continues.
pub fn top_module(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel.components().next().unwrap().as_os_str();
    first.to_string_lossy().trim_end_matches(".rs").to_string()
}

/// The code of a file without comments (doc links name modules without
/// importing them) and without its unit tests (which may use anything).
pub fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident_at(s: &str) -> String {
    s.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// The top-level modules `code` names through `crate::`, grouped imports
/// (`use crate::{a::x, b}`) included.
pub fn named_modules(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut start = 0;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 1 => {
                        out.insert(ident_at(group[start..j].trim_start()));
                        start = j + 1;
                    }
                    _ => {}
                }
                if depth == 0 {
                    out.insert(ident_at(group[start..j].trim_start()));
                    break;
                }
            }
        } else {
            out.insert(ident_at(rest));
        }
    }
    out.remove("");
    out
}

/// A cycle in `graph`, if there is one, as the modules along it.
pub fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == node) {
            let mut found = path[i..].to_vec();
            found.push(node.to_string());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, graph, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

/// The top-level modules of the crate whose sources are in `src`, and
/// those each names; `lib.rs` and `main.rs` (which name every module) are
/// left out.
pub fn import_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in sources(src) {
        let module = top_module(src, &file);
        if module == "lib" || module == "main" {
            continue;
        }
        let named = named_modules(&code(&std::fs::read_to_string(&file).unwrap()));
        let edges = graph.entry(module.clone()).or_default();
        edges.extend(named.into_iter().filter(|m| *m != module));
    }
    graph
}
