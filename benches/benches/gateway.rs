//! The gateway's hot paths, without a network: ranked search over the
//! curated catalog, argument validation, an audit append, and one whole
//! call through lookup → validation → policy → rate limit → audit → a
//! backend that answers at once → redaction → audit.
//!
//! `cargo bench -p airlock-benches --bench gateway`

mod common;

use airlock_catalog::{search::Query, Catalog, ToolSpec};
use airlock_gateway::GatewayConfig;
use airlock_state::{local::AuditLog, Place};
use common::{bench_call, curated_specs};
use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::{json, Map};

fn bench(c: &mut Criterion) {
    let specs: Vec<ToolSpec> = curated_specs();
    let (catalog, _) = Catalog::build(vec![("pve".into(), specs.clone())]).unwrap();

    c.bench_function("search/curated/stop_a_vm", |b| {
        b.iter(|| {
            catalog.search(&Query {
                text: "stop a running vm".into(),
                ..Query::default()
            })
        })
    });

    let entry = catalog.get("vm_list").unwrap();
    let args = json!({"node": "pve1", "full": true});
    c.bench_function("validate/vm_list", |b| b.iter(|| entry.problems(&args)));

    let dir = tempfile::tempdir().unwrap();
    let audit = AuditLog::open(&dir.path().join("audit.jsonl")).unwrap();
    let mut line = Map::new();
    line.insert("identity".into(), json!("alice"));
    line.insert("tool".into(), json!("vm_list"));
    line.insert("args_sha256".into(), json!("0".repeat(64)));
    c.bench_function("audit/append", |b| {
        b.iter(|| audit.append("call", line.clone()).unwrap())
    });

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut config = GatewayConfig::default();
    config.rate.calls_per_minute = 0;
    let place = Place::in_dir(dir.path().join("gw"));
    bench_call(c, "gateway/call/vm_list", config, &place, specs, args, &rt);
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(100).measurement_time(std::time::Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
