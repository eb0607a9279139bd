//! Per-execution cost of the sandbox in both modes, against an in-process
//! echo host (so the numbers are the sandbox's own overhead).
//!
//! `cargo bench -p airlock-benches --bench sandbox` (`-- compute` for the
//! data-work scripts alone)

use airlock_benches::{EchoHost, COMPUTE, WORKLOADS};
use airlock_sandbox::{Capacity, Limits, Mode, Sandbox, SandboxConfig};
use criterion::{criterion_group, criterion_main, Criterion};

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let limits = Limits::default();
    compute(c, &rt, &limits);
    for mode in [Mode::Fresh, Mode::Reuse] {
        let sandbox = rt
            .block_on(Sandbox::new(SandboxConfig {
                mode,
                capacity: Capacity {
                    executions_in_flight: 2,
                    ..Capacity::default()
                },
                ..SandboxConfig::default()
            }))
            .expect("sandbox");
        let mut group = c.benchmark_group(format!("execute/{mode}"));
        for (name, script) in WORKLOADS {
            group.bench_function(*name, |b| {
                b.to_async(&rt).iter(|| async {
                    let o = sandbox.execute(script, &limits, &EchoHost).await;
                    assert!(o.is_ok(), "{:?}", o.result);
                    o
                })
            });
        }
        group.finish();
    }

    // One host round trip: the difference between 101 and 1 sequential
    // calls, per call.
    let sandbox = rt.block_on(Sandbox::new(SandboxConfig::default())).unwrap();
    let many = "for (let i = 0; i < 100; i++) { await tools.echo({}) } 0";
    let mut group = c.benchmark_group("round_trip");
    group.bench_function("hundred_sequential_calls", |b| {
        b.to_async(&rt)
            .iter(|| async { sandbox.execute(many, &limits, &EchoHost).await })
    });
    group.bench_function("no_calls", |b| {
        b.to_async(&rt).iter(|| async {
            sandbox
                .execute("for (let i = 0; i < 100; i++) {} 0", &limits, &EchoHost)
                .await
        })
    });
    group.finish();

    journal(c, &rt, &sandbox, &limits);

    // JSON across the boundary: 1,000 objects out to the host and back,
    // and a 1,000-element result out of the guest.
    let mut group = c.benchmark_group("json_crossing");
    let big_call = "const rows = Array.from({length: 1000}, (_, i) => ({id: i, name: 'vm-' + i, running: i % 2 === 0})); (await tools.echo({rows})).rows.length";
    group.bench_function("call_with_1000_rows", |b| {
        b.to_async(&rt)
            .iter(|| async { sandbox.execute(big_call, &limits, &EchoHost).await })
    });
    let big_result = "Array.from({length: 1000}, (_, i) => ({id: i, name: 'vm-' + i}))";
    group.bench_function("result_of_1000_rows", |b| {
        b.to_async(&rt)
            .iter(|| async { sandbox.execute(big_result, &limits, &EchoHost).await })
    });
    group.finish();
}

/// What a durable execution's journal costs (issue 48): `1+1` and 100
/// sequential calls plain and journaled, side by side, and resuming an
/// execution of 500 calls by replaying its journal.
///
/// `cargo bench -p airlock-benches --bench sandbox -- journal`
fn journal(c: &mut Criterion, rt: &tokio::runtime::Runtime, sandbox: &Sandbox, limits: &Limits) {
    use airlock_sandbox::Journal;
    let mut group = c.benchmark_group("journal");
    let hundred = "for (let i = 0; i < 100; i++) { await tools.echo({i}) } 0";
    for (name, script) in [("one_plus_one", "1 + 1"), ("hundred_calls", hundred)] {
        group.bench_function(format!("{name}/plain"), |b| {
            b.to_async(rt)
                .iter(|| async { sandbox.execute(script, limits, &EchoHost).await })
        });
        group.bench_function(format!("{name}/journaled"), |b| {
            b.to_async(rt).iter(|| async {
                let mut journal = Journal::new();
                sandbox
                    .execute_journaled(script, limits, &EchoHost, &mut journal)
                    .await
            })
        });
    }
    // A script that read 500 results, then waited: its resume replays
    // them all (and sends nothing) before going on.
    let five_hundred = "const seen = []; for (let i = 0; i < 500; i++) { seen.push((await tools.echo({i, vm: 'vm-' + i, status: 'running'})).i) } seen.length";
    let mut recorded = Journal::new();
    let o = rt.block_on(sandbox.execute_journaled(five_hundred, limits, &EchoHost, &mut recorded));
    assert!(o.is_ok(), "{:?}", o.result);
    group.bench_function("five_hundred_calls/live", |b| {
        b.to_async(rt).iter(|| async {
            let mut journal = Journal::new();
            sandbox
                .execute_journaled(five_hundred, limits, &EchoHost, &mut journal)
                .await
        })
    });
    group.bench_function("five_hundred_calls/replayed", |b| {
        b.to_async(rt).iter(|| async {
            let mut journal = recorded.clone();
            let o = sandbox
                .execute_journaled(five_hundred, limits, &EchoHost, &mut journal)
                .await;
            assert_eq!(
                o.stats.journal.as_ref().map(|j| j.replayed_entries),
                Some(recorded.entries.len() as u64)
            );
            o
        })
    });
    group.finish();
}

/// The data-work scripts (issues 19 and 38): the guest's own speed, each
/// checked against the value it must end with.
fn compute(c: &mut Criterion, rt: &tokio::runtime::Runtime, limits: &Limits) {
    let sandbox = rt.block_on(Sandbox::new(SandboxConfig::default())).unwrap();
    let mut group = c.benchmark_group("compute");
    group
        .sample_size(10)
        .measurement_time(std::time::Duration::from_secs(10));
    for (name, script, expected) in COMPUTE {
        let want: serde_json::Value = serde_json::from_str(expected).unwrap();
        group.bench_function(*name, |b| {
            b.to_async(rt).iter(|| async {
                let o = sandbox.execute(script, limits, &EchoHost).await;
                assert_eq!(o.result.as_ref().ok(), Some(&want), "{name}");
                o
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(200).measurement_time(std::time::Duration::from_secs(4));
    targets = bench
}
criterion_main!(benches);
