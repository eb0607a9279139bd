//! The state backends side by side: this machine's files (SQLite, JSONL,
//! buckets in memory) against a real PostgreSQL on loopback (started by
//! `airlock-testkit` with `fsync=off`: docs/PERFORMANCE.md says what that
//! means for the numbers). One audit
//! append, one rate token, one approval check that files a request, one
//! whole gateway call, a parked execution's life (park, ready, take,
//! end); and appends from three "replicas" at once (three `State`s on
//! one store, a thread each), per append.
//!
//! `cargo bench -p airlock-benches --bench state`

use std::{
    sync::{Arc, Barrier},
    time::{Duration, Instant},
};

mod common;

use airlock_catalog::ToolSpec;
use airlock_gateway::{
    approval::Asked,
    parked::{ParkCaps, ParkedRow, Take},
    state::State,
    GatewayConfig,
};
use airlock_state::{Place, PostgresConfig};
use airlock_testkit::TempPostgres;
use common::{bench_call, curated_specs};
use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::{json, Map, Value};

fn line() -> Map<String, Value> {
    let mut line = Map::new();
    line.insert("identity".into(), json!("alice"));
    line.insert("tool".into(), json!("vm_list"));
    line.insert("args_sha256".into(), json!("0".repeat(64)));
    line
}

/// Appends from `writers` stores at once, `per` each; the time per append.
fn appends_at_once(stores: &[State], per: u64) -> Duration {
    let start = Arc::new(Barrier::new(stores.len() + 1));
    let began = std::thread::scope(|scope| {
        for s in stores {
            let (audit, start) = (s.audit.clone(), start.clone());
            scope.spawn(move || {
                start.wait();
                for _ in 0..per {
                    audit.append("call", line()).unwrap();
                }
            });
        }
        start.wait();
        Instant::now()
    });
    began.elapsed() / (per as u32 * stores.len() as u32)
}

fn bench(c: &mut Criterion) {
    let pg = TempPostgres::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kinds: Vec<(&str, Place)> = vec![
        ("files", Place::in_dir(dir.path().join("files"))),
        ("postgres", {
            let mut p = PostgresConfig::new(pg.create_database("bench").unwrap());
            p.password_file = Some(pg.password_file().to_path_buf());
            Place::Postgres(p)
        }),
    ];
    let config = GatewayConfig::default();
    let specs: Vec<ToolSpec> = curated_specs();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    for (kind, place) in &kinds {
        let state = place.open(&config.approval).unwrap();
        c.bench_function(&format!("state/{kind}/audit_append"), |b| {
            b.iter(|| state.audit.append("call", line()).unwrap())
        });
        c.bench_function(&format!("state/{kind}/audit_append_3_writers"), |b| {
            let three: Vec<State> = (0..3)
                .map(|_| place.open(&config.approval).unwrap())
                .collect();
            b.iter_custom(|iters| {
                let per = iters.div_ceil(3).max(1);
                appends_at_once(&three, per) * iters as u32
            })
        });
        let mut now = 0i64;
        c.bench_function(&format!("state/{kind}/rate_take"), |b| {
            b.iter(|| {
                now += 1;
                state.rate.take("alice", 1_000_000, now).unwrap()
            })
        });
        let mut n = 0u64;
        let approvals = place
            .open(&{
                let mut a = config.approval.clone();
                a.max_open_per_identity = u32::MAX;
                a
            })
            .unwrap()
            .approvals;
        c.bench_function(
            &format!("state/{kind}/approval_check_files_a_request"),
            |b| {
                b.iter(|| {
                    n += 1;
                    let hash = format!("{n:064}");
                    let asked = Asked {
                        identity: "alice",
                        tool: "vm_stop",
                        tool_key: "pve:POST /nodes/{node}/qemu/{vmid}/status/stop",
                        args_hash: &hash,
                        summary: "node=pve1",
                        detail: None,
                    };
                    approvals.check(&asked, 1).unwrap()
                })
            },
        );

        // A wait's whole life in the store: parked, made ready, taken by a
        // follow-up, ended — with a sealed body of 10 KiB and of 1 MiB.
        let caps = ParkCaps {
            per_identity: u32::MAX,
            total: u32::MAX,
            bytes_per_identity: i64::MAX,
            bytes_total: i64::MAX,
        };
        for (label, size) in [("10KiB", 10 * 1024), ("1MiB", 1024 * 1024)] {
            let body = "b".repeat(size);
            let mut n = 0u64;
            c.bench_function(&format!("state/{kind}/park_take_end_{label}"), |b| {
                b.iter(|| {
                    n += 1;
                    let row = ParkedRow {
                        execution: format!("bench-x{n}"),
                        identity: "alice".into(),
                        born_ms: 1,
                        bytes: size as i64,
                        waiting: vec!["ap-1".into()],
                        body: body.clone(),
                        asked: 0,
                        declined: false,
                        calls: 1,
                    };
                    state.parked.park(&row, None, &caps, 2).unwrap().unwrap();
                    state.parked.ready(&row.execution).unwrap();
                    let taken = state
                        .parked
                        .take(&row.execution, "alice", "h", 3, 1_000_000)
                        .unwrap();
                    assert!(matches!(taken, Take::Taken { .. }));
                    state.parked.ended(&row.execution, "h").unwrap();
                })
            });
        }

        // What a change of a running durable execution costs the store:
        // its record before it is sent and again once answered, the row
        // held by this process.
        for (label, size) in [("10KiB", 10 * 1024), ("1MiB", 1024 * 1024)] {
            let mut row = ParkedRow {
                execution: format!("bench-running-{label}"),
                identity: "alice".into(),
                born_ms: 1,
                bytes: size as i64,
                waiting: Vec::new(),
                body: "r".repeat(size),
                asked: 0,
                declined: false,
                calls: 1,
            };
            state
                .parked
                .checkpoint(&row, "h", true, i64::MAX, &caps, 2)
                .unwrap()
                .unwrap();
            c.bench_function(&format!("state/{kind}/record_change_{label}"), |b| {
                b.iter(|| {
                    row.calls += 1;
                    for _ in 0..2 {
                        state
                            .parked
                            .checkpoint(&row, "h", false, i64::MAX, &caps, 3)
                            .unwrap()
                            .unwrap();
                    }
                })
            });
            state.parked.ended(&row.execution, "h").unwrap();
        }

        let mut config = config.clone();
        config.rate.calls_per_minute = 1_000_000_000;
        let name = format!("state/{kind}/gateway_call_vm_list");
        bench_call(
            c,
            &name,
            config,
            place,
            specs.clone(),
            json!({"node": "pve1"}),
            &rt,
        );
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);
