//! `airlock search` and `airlock schema`: the catalog as an agent sees it
//! through the `search` and `get_schema` tools.

use std::process::ExitCode;

use airlock_catalog::{search::Query, SchemaAnswer, Tier};

use crate::{settings::ConfigFile, wiring};

pub async fn search(
    file: &ConfigFile,
    text: &str,
    tiers: Vec<Tier>,
    backend: Option<String>,
    limit: Option<usize>,
    json: bool,
) -> ExitCode {
    let gateway = match wiring::gateway(file).await {
        Ok(g) => g,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let mut results = gateway.catalog().search(&Query {
        text: text.into(),
        tiers: tiers.clone(),
        backend,
        limit,
    });
    let runbooks = crate::runbooks::search(&gateway, text, &tiers, &mut results);
    // Tools a backend has not offered yet are not "no match": say why,
    // and fail when nothing else matched.
    let missing = gateway.unavailable_backends();
    for (id, why) in &missing {
        eprintln!("warning: {id}: {why}");
    }
    let status = if results.hits.is_empty() && !missing.is_empty() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    };
    if json {
        let mut out = serde_json::json!(results);
        if !runbooks.is_empty() {
            out["runbooks"] = serde_json::json!(runbooks);
        }
        println!(
            "{}",
            serde_json::to_string_pretty(&out).expect("results serialize")
        );
        return status;
    }
    if let Some(hint) = &results.hint {
        println!("{hint}");
    }
    for h in &results.hits {
        let endpoint = h
            .endpoint
            .as_deref()
            .map(|e| format!("\n         {e}"))
            .unwrap_or_default();
        println!(
            "{:<8} {}\n         {}{endpoint}\n",
            h.tier.as_str(),
            h.signature,
            h.summary
        );
    }
    for r in &runbooks {
        println!(
            "{:<8} {}\n         {} ({} version {})\n",
            "runbook", r.signature, r.description, r.status, r.version
        );
    }
    status
}

pub async fn schema(file: &ConfigFile, names: &[String], json: bool) -> ExitCode {
    let gateway = match wiring::gateway(file).await {
        Ok(g) => g,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let answers = gateway.catalog().schemas(names);
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&answers).expect("answers serialize")
        );
    } else {
        for a in &answers {
            match a {
                SchemaAnswer::Found {
                    typescript,
                    endpoint,
                    ..
                } => match endpoint {
                    Some(e) => println!("// {e}\n{typescript}"),
                    None => println!("{typescript}"),
                },
                SchemaAnswer::Unknown {
                    error,
                    did_you_mean,
                    ..
                } => {
                    println!("// {error}; did you mean: {}\n", did_you_mean.join(", "))
                }
            }
        }
    }
    if answers
        .iter()
        .all(|a| matches!(a, SchemaAnswer::Found { .. }))
    {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
