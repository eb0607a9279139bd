//! The full catalog: one tool per API operation, generated from the API
//! schema (`proxmox.catalog = "full"`).

use serde_json::{json, Value};

use std::collections::{HashMap, HashSet};

use crate::{
    apidata::{Method, Operation},
    curated, glossary, naming,
    route::{with_target, Route, RouteKind},
    schema,
    tiers::TierRules,
};
use airlock_catalog::spec::{Hints, ToolSpec};

/// PVE's own `target` (a destination node) is offered as `target_node`,
/// because `target` selects the cluster.
const TARGET_NODE: &str = "target_node";

pub fn generate(ops: &[Operation], rules: &TierRules, backend: &str) -> Vec<(ToolSpec, Route)> {
    let curated = curated_texts(rules, backend);
    let names = with_curated_names(ops, naming::names(ops), &curated);
    ops.iter()
        .zip(names)
        .map(|(op, name)| {
            let tier = rules.tier(op.method, &op.path);
            let ours = curated.get(&(op.method, op.path.clone()));
            // The curated catalog's words where it has them: written for
            // agents, where PVE's are written for its API viewer.
            let summary = match ours {
                Some(c) => c.summary.clone(),
                None => first_sentence(&op.description),
            };
            let pve = op.description.trim();
            let mut description = match ours {
                Some(c) if c.description != c.summary => {
                    format!("{}\n\n{pve}\n\n{} {}", c.description, op.method, op.path)
                }
                Some(c) => format!("{}\n\n{pve}\n\n{} {}", c.summary, op.method, op.path),
                None => format!("{pve}\n\n{} {}", op.method, op.path),
            };
            let fields = answer_fields(&op.returns);
            if !fields.is_empty() {
                // What it answers with is what an agent asks about
                // ("uptime of a node").
                description.push_str(&format!("\n\nAnswers with: {}.", fields.join(", ")));
            }
            let mut route = Route::api(op.method, op.path.clone());
            let mut input = schema::parameters(&op.parameters);
            rename_target(&mut input, &mut route);
            let output_schema = op
                .returns
                .get("type")
                .and_then(Value::as_str)
                .filter(|t| *t == "string")
                .map(|_| json!({"type": "string", "description": "For a mutating call, the task id (UPID); pass it to wait_task."}));
            let spec = ToolSpec {
                name,
                summary,
                description,
                input_schema: with_target(input),
                output_schema,
                tier,
                hints: Hints::for_tier(tier),
                backend: backend.into(),
                path_params: op.path_params(),
                endpoint: Some(format!("{} {}", op.method, op.path)),
                keywords: glossary::keywords(op.method, &op.path),
                key: route.key(backend),
                aliases: Vec::new(),
            };
            (spec, route)
        })
        .collect()
}

/// The curated tool that is exactly an operation, by method and path.
type Curated = HashMap<(Method, String), ToolSpec>;

/// The curated tools that call an operation as it is (no fixed or
/// Airlock-only arguments); the first one where several do.
fn curated_texts(rules: &TierRules, backend: &str) -> Curated {
    let mut out = Curated::new();
    for (spec, route) in curated::tools(rules, &Default::default(), backend) {
        if route.kind == RouteKind::Api && route.fixed.is_empty() && route.local.is_empty() {
            out.entry((route.method, route.path.clone()))
                .or_insert(spec);
        }
    }
    out
}

/// The curated catalog's name for every operation it covers as it is (no
/// fixed or Airlock-only arguments), so a script written against it runs
/// on the full catalog too; a derived name that one of these took gets
/// the method, then a number.
fn with_curated_names(ops: &[Operation], mut names: Vec<String>, curated: &Curated) -> Vec<String> {
    let mut taken: HashSet<String> = HashSet::new();
    for (op, name) in ops.iter().zip(names.iter_mut()) {
        if let Some(c) = curated.get(&(op.method, op.path.clone())) {
            *name = c.name.clone();
            taken.insert(c.name.clone());
        }
    }
    for (op, name) in ops.iter().zip(names.iter_mut()) {
        if curated.contains_key(&(op.method, op.path.clone())) {
            continue;
        }
        if taken.contains(name.as_str()) {
            *name = format!("{name}_{}", op.method.as_str().to_lowercase());
        }
        let base = name.clone();
        let mut k = 2;
        while taken.contains(name.as_str()) {
            *name = format!("{base}_{k}");
            k += 1;
        }
        taken.insert(name.clone());
    }
    names
}

/// Offers PVE's `target` as `target_node`.
fn rename_target(input: &mut Value, route: &mut Route) {
    let Some(props) = input.get_mut("properties").and_then(Value::as_object_mut) else {
        return;
    };
    let Some(t) = props.shift_remove("target") else {
        return;
    };
    props.insert(TARGET_NODE.into(), t);
    route.renames.push((TARGET_NODE.into(), "target".into()));
    if let Some(req) = input.get_mut("required").and_then(Value::as_array_mut) {
        for r in req.iter_mut().filter(|r| *r == "target") {
            *r = Value::String(TARGET_NODE.into());
        }
    }
}

/// The fields of an answer (an object, or a list of objects), as the
/// `returns` schema declares them: at most 40.
fn answer_fields(returns: &Value) -> Vec<String> {
    let props = returns["properties"]
        .as_object()
        .or_else(|| returns["items"]["properties"].as_object());
    props
        .map(|p| p.keys().take(40).cloned().collect())
        .unwrap_or_default()
}

fn first_sentence(text: &str) -> String {
    let t = text.trim();
    let end = t
        .find(". ")
        .map(|i| i + 1)
        .or_else(|| t.find('\n'))
        .unwrap_or(t.len());
    let s = t[..end].trim();
    if s.is_empty() {
        "(no description)".into()
    } else {
        s.to_string()
    }
}
