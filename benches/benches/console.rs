//! What the operator console costs its host, per page, on both state
//! backends: the request list a person's browser reloads every
//! `LIST_REFRESH_SECS` (read the open requests, draw the page), and the
//! audit trail page (one pass over the chain: verify, search, sum up
//! executions) over chains of 10,000 and 100,000 lines.
//!
//! `cargo bench -p airlock-benches --bench console`

use airlock_console::{pages, sessions::Session, trail, Role};
use airlock_gateway::{approval::Asked, GatewayConfig};
use airlock_state::{Place, PostgresConfig};
use airlock_testkit::TempPostgres;
use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::{json, Map, Value};

const PENDING: usize = 200;

fn who() -> Session {
    Session {
        identity: "rita".into(),
        role: Role::Approver,
        key_sha256: String::new(),
        provider: false,
        groups: Vec::new(),
        csrf: "c".repeat(64),
        expires_ms: i64::MAX,
    }
}

/// One execution's lines: start, three calls, end.
fn execution(audit: &dyn airlock_gateway::audit::AuditStore, n: usize) {
    let id = format!("bench-x{n}");
    let field = |pairs: Value| -> Map<String, Value> { pairs.as_object().unwrap().clone() };
    audit
        .append(
            "execution_start",
            field(json!({"execution": id, "identity": format!("agent{}", n % 20), "mode": "ro"})),
        )
        .unwrap();
    for tool in ["vm_list", "vm_status", "vm_list"] {
        audit
            .append("call", field(json!({"execution": id, "identity": format!("agent{}", n % 20), "tool": tool, "decision": "allowed", "args_sha256": "0".repeat(64)})))
            .unwrap();
    }
    audit
        .append(
            "execution_end",
            field(json!({"execution": id, "outcome": "ok", "tool_calls": 3, "wall_ms": 12})),
        )
        .unwrap();
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
    for (kind, place) in &kinds {
        let state = place.open(&config.approval).unwrap();
        for i in 0..PENDING {
            let hash = format!("{i:064x}");
            let identity = format!("agent{i}");
            let asked = Asked {
                identity: &identity,
                tool: "vm_stop",
                tool_key: "pve:POST /nodes/{node}/qemu/{vmid}/status/stop",
                args_hash: &hash,
                summary: "node=pve1 vmid=101",
                detail: None,
            };
            state.approvals.check(&asked, 1).unwrap();
        }
        c.bench_function(&format!("console/{kind}/list_{PENDING}_pending"), |b| {
            b.iter(|| {
                let open = state.approvals.list(2, false).unwrap();
                assert_eq!(open.len(), PENDING);
                pages::list(&who(), &open, 2).into_string().len()
            })
        });
        let mut lines = 0;
        for (target, name) in [(10_000, "10k"), (100_000, "100k")] {
            while lines < target {
                execution(state.audit.as_ref(), lines / 5);
                lines += 5;
            }
            let search = trail::Search {
                identity: Some("agent3".into()),
                ..trail::Search::default()
            };
            let mut group = c.benchmark_group(format!("console/{kind}"));
            group.sample_size(10);
            group.bench_function(format!("audit_page_{name}_lines"), |b| {
                b.iter(|| {
                    let t = trail::read(state.audit.as_ref(), &search).unwrap();
                    assert!(t.verdict.ok() && t.lines >= target as u64);
                    t.matched
                })
            });
            group.finish();
        }
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
