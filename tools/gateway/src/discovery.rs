//! Finding tools from inside a script: `catalog.search(query, options)` and
//! `catalog.describe(...names)` in the guest are calls of the reserved
//! names [`SEARCH`] and [`DESCRIBE`] (a dot makes them no tool name). They
//! pass the gateway like any call — rate limit, audit — and read only the
//! catalog; they show only tools the caller's mode may call, so a script
//! learns nothing an agent could not already use, and a name it may not
//! call is answered as a name that does not exist.

use serde_json::{json, Map, Value};

use crate::{
    catalog::{quote_name, Catalog, SchemaAnswer},
    search::Query,
    spec::Tier,
};

pub const SEARCH: &str = "catalog.search";
pub const DESCRIBE: &str = "catalog.describe";

/// At most this many hits from one `catalog.search`.
pub const MAX_HITS: usize = 20;
/// At most this many names in one `catalog.describe`.
pub const MAX_DESCRIBED: usize = 20;
/// At most this long a query, in characters.
pub const MAX_QUERY_CHARS: usize = 500;

pub fn is_discovery(name: &str) -> bool {
    name == SEARCH || name == DESCRIBE
}

/// The answer to a discovery call, or what is wrong with its arguments.
/// `may_call` says which tiers the caller's mode grants.
pub fn answer(
    catalog: &Catalog,
    name: &str,
    args: &Value,
    may_call: impl Fn(Tier) -> bool,
) -> Result<Value, Vec<String>> {
    if name == SEARCH {
        search(catalog, args, may_call)
    } else {
        describe(catalog, args, may_call)
    }
}

fn search(
    catalog: &Catalog,
    args: &Value,
    may_call: impl Fn(Tier) -> bool,
) -> Result<Value, Vec<String>> {
    let mut problems = Vec::new();
    let fields = object(args, &["query", "tier", "limit"], &mut problems);
    let query = match fields.get("query") {
        Some(Value::String(q)) if q.chars().count() <= MAX_QUERY_CHARS => q.clone(),
        Some(Value::String(q)) => {
            problems.push(format!(
                "`query` has {} characters; at most {MAX_QUERY_CHARS}: a few words say what the tool does",
                q.chars().count()
            ));
            String::new()
        }
        _ => {
            problems.push("`query` must be a string, e.g. catalog.search(\"start a vm\")".into());
            String::new()
        }
    };
    let limit = match fields.get("limit") {
        None => 5,
        Some(v) => match v.as_u64() {
            Some(n) if (1..=MAX_HITS as u64).contains(&n) => n as usize,
            _ => {
                problems.push(format!(
                    "`limit` must be a whole number from 1 to {MAX_HITS}"
                ));
                5
            }
        },
    };
    let asked: Vec<Tier> = match fields.get("tier") {
        None => Vec::new(),
        Some(v) => {
            let list: Vec<&Value> = match v {
                Value::Array(a) => a.iter().collect(),
                other => vec![other],
            };
            let mut tiers = Vec::new();
            for t in list {
                match t.as_str().and_then(|s| s.parse::<Tier>().ok()) {
                    Some(t) => tiers.push(t),
                    None => problems
                        .push("`tier` must be read, operate or admin, or a list of them".into()),
                }
            }
            tiers
        }
    };
    if !problems.is_empty() {
        return Err(problems);
    }
    let tiers: Vec<Tier> = [Tier::Read, Tier::Operate, Tier::Admin]
        .into_iter()
        .filter(|t| may_call(*t) && (asked.is_empty() || asked.contains(t)))
        .collect();
    if tiers.is_empty() {
        return Ok(
            json!({"hits": [], "hint": "this identity may call no tool of the tiers asked for"}),
        );
    }
    let results = catalog.search(&Query {
        text: query,
        tiers,
        backend: None,
        limit: Some(limit),
    });
    let hits: Vec<Value> = results
        .hits
        .iter()
        .map(|h| {
            let mut hit = json!({
                "name": h.name,
                "summary": h.summary,
                "tier": h.tier.as_str(),
                "signature": h.signature,
            });
            if let Some(e) = &h.endpoint {
                hit["endpoint"] = json!(e);
            }
            hit
        })
        .collect();
    let mut out = json!({"hits": hits});
    if let Some(hint) = results.hint {
        out["hint"] = json!(hint);
    }
    Ok(out)
}

fn describe(
    catalog: &Catalog,
    args: &Value,
    may_call: impl Fn(Tier) -> bool,
) -> Result<Value, Vec<String>> {
    let mut problems = Vec::new();
    let fields = object(args, &["names"], &mut problems);
    let names: Vec<String> = match fields.get("names") {
        Some(Value::Array(a))
            if !a.is_empty() && a.len() <= MAX_DESCRIBED && a.iter().all(Value::is_string) =>
        {
            a.iter()
                .filter_map(|n| n.as_str().map(str::to_string))
                .collect()
        }
        _ => {
            problems.push(format!(
                "give 1 to {MAX_DESCRIBED} tool names as strings, e.g. catalog.describe(\"vm_start\")"
            ));
            Vec::new()
        }
    };
    if !problems.is_empty() {
        return Err(problems);
    }
    let described: Vec<Value> = names
        .iter()
        .map(|n| {
            let callable = catalog.get(n).is_some_and(|e| may_call(e.spec.tier));
            match catalog.schemas(std::slice::from_ref(n)).pop() {
                Some(SchemaAnswer::Found {
                    name,
                    tier,
                    endpoint,
                    typescript,
                    ..
                }) if callable => {
                    let mut d = json!({"name": name, "tier": tier.as_str(), "typescript": typescript});
                    if let Some(e) = endpoint {
                        d["endpoint"] = json!(e);
                    }
                    d
                }
                // Unknown and not callable read the same.
                _ => json!({
                    "name": quote_name(n),
                    "error": format!("no tool named `{}` that this identity may call; catalog.search finds tools by what they do", quote_name(n)),
                }),
            }
        })
        .collect();
    Ok(Value::Array(described))
}

/// The argument object's fields, with a problem for anything but an
/// object and for fields not in `known`.
fn object(args: &Value, known: &[&str], problems: &mut Vec<String>) -> Map<String, Value> {
    match args {
        Value::Object(m) => {
            for k in m.keys().filter(|k| !known.contains(&k.as_str())) {
                problems.push(format!(
                    "unknown field `{}`; the fields are {}",
                    quote_name(k),
                    known.join(", ")
                ));
            }
            m.clone()
        }
        _ => {
            problems.push("the argument must be an object".into());
            Map::new()
        }
    }
}
