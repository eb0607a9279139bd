//! Every limit, hit on purpose: the error names the limit, its configured
//! value and the amount used, and nothing past the limit reaches the host.

mod common;

use std::{sync::Arc, time::Duration};

use airlock_sandbox::{
    Capacity, ExecError, Limit, Limits, SandboxConfig, ARGS_VALUE_OVERHEAD, LOG_LINE_OVERHEAD,
};
use common::{ok, TestHost};
use serde_json::{json, Value};

fn limit_of(r: &Result<Value, ExecError>) -> (Limit, u64, u64) {
    match r {
        Err(ExecError::LimitExceeded { limit, value, used }) => (*limit, *value, *used),
        other => panic!("expected LimitExceeded, got {other:?}"),
    }
}

#[tokio::test]
async fn source_bytes() {
    let limits = Limits {
        source_bytes: 100,
        ..Limits::default()
    };
    let host = TestHost::default();
    let script = format!("tools.echo({{}}); // {}", "x".repeat(200));
    let o = common::fresh().await.execute(&script, &limits, &host).await;
    assert_eq!(
        limit_of(&o.result),
        (Limit::SourceBytes, 100, script.len() as u64)
    );
    assert_eq!(host.count(), 0);
}

#[tokio::test]
async fn memory_bytes() {
    let limits = Limits {
        memory_bytes: 64 << 20,
        ..Limits::default()
    };
    let host = TestHost::default();
    let sb = common::fresh().await;
    let o = sb
        .execute(
            "const keep = []; while (true) keep.push(new Array(100000).fill(7)); 0",
            &limits,
            &host,
        )
        .await;
    let (limit, value, used) = limit_of(&o.result);
    assert_eq!((limit, value), (Limit::MemoryBytes, 64 << 20));
    assert!(used > 64 << 20, "asked for {used}");
    assert!(o.stats.peak_memory_bytes <= 64 << 20);
    // The sandbox is unharmed.
    assert_eq!(ok(&sb.execute("1 + 1", &limits, &host).await), &json!(2));
}

#[tokio::test]
async fn wall_time_ms_while_computing() {
    let limits = Limits {
        wall_time_ms: 200,
        ..Limits::default()
    };
    let o = common::run_with("while (true) {}", &limits).await;
    let (limit, value, used) = limit_of(&o.result);
    assert_eq!((limit, value), (Limit::WallTimeMs, 200));
    assert!(used >= 200);
}

#[tokio::test]
async fn wall_time_ms_while_waiting_on_a_tool() {
    let limits = Limits {
        wall_time_ms: 200,
        ..Limits::default()
    };
    let host = TestHost::default();
    let o = common::fresh()
        .await
        .execute("await tools.gate({})", &limits, &host)
        .await;
    let (limit, value, used) = limit_of(&o.result);
    assert_eq!((limit, value), (Limit::WallTimeMs, 200));
    assert!(used >= 200);
    assert_eq!(host.cancelled(), 1, "the hanging call was cancelled");
    assert_eq!(host.in_flight(), 0);
    assert_eq!(o.trace[0].status, "cancelled");
}

#[tokio::test]
async fn fuel() {
    let sb = common::sandbox(SandboxConfig {
        fuel_metering: true,
        ..SandboxConfig::default()
    })
    .await;
    let host = TestHost::default();
    let limits = Limits {
        fuel: Some(5_000_000),
        ..Limits::default()
    };
    let o = sb
        .execute("let i = 0; while (true) { i++ }", &limits, &host)
        .await;
    assert_eq!(limit_of(&o.result), (Limit::Fuel, 5_000_000, 5_000_000));
    let o = sb.execute("1 + 1", &limits, &host).await;
    assert_eq!(ok(&o), &json!(2));
    let used = o.stats.fuel_used.expect("fuel is reported when metered");
    assert!(used > 0 && used < 5_000_000, "{used}");
    // Metering without a budget: nothing is stopped, the use is reported.
    let o = sb
        .execute(
            "let s = 0; for (let i = 0; i < 1000; i++) { s += i } s",
            &Limits::default(),
            &host,
        )
        .await;
    assert_eq!(ok(&o), &json!(499500));
    let unbudgeted = o
        .stats
        .fuel_used
        .expect("reported when metered, budget or not");
    assert!(unbudgeted > used, "{unbudgeted} vs {used}");
    // Without metering there is nothing to report.
    let plain = common::fresh().await;
    let o = plain.execute("1", &Limits::default(), &host).await;
    assert_eq!(o.stats.fuel_used, None);
    // Asking for fuel from a sandbox built without metering is refused.
    match plain.execute("1", &limits, &host).await.result {
        Err(ExecError::InvalidRequest { message }) => {
            assert!(message.contains("fuel"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn tool_calls() {
    let limits = Limits {
        tool_calls: 5,
        ..Limits::default()
    };
    let host = TestHost::default();
    let o = common::fresh()
        .await
        .execute(
            "for (let i = 0; i < 10; i++) { try { await tools.echo({i}) } catch (e) {} }",
            &limits,
            &host,
        )
        .await;
    assert_eq!(limit_of(&o.result), (Limit::ToolCalls, 5, 6));
    assert_eq!(host.count(), 5, "the sixth call never reached the host");
}

#[tokio::test]
async fn args_bytes_counts_every_call_and_is_charged_before_the_host_reads() {
    let limits = Limits {
        args_bytes: 10_000,
        ..Limits::default()
    };
    let host = TestHost::default();
    // {"s":"xxx…"} is 3,008 bytes and three tokens ({, :, and the value),
    // each charged ARGS_VALUE_OVERHEAD more: three calls fit, the fourth
    // does not.
    let call = 3008 + 3 * ARGS_VALUE_OVERHEAD;
    let o = common::fresh()
        .await
        .execute(
            "const s = 'x'.repeat(3000); for (let i = 0; i < 5; i++) await tools.echo({s}); 'done'",
            &limits,
            &host,
        )
        .await;
    // The fourth call's text alone passes the limit: refused unscanned.
    assert_eq!(
        limit_of(&o.result),
        (Limit::ArgsBytes, 10_000, 3 * call + 3008)
    );
    assert_eq!(host.count(), 3, "the fourth call never reached the host");
    let o = common::run_with("await tools.echo({s: 'x'.repeat(20000)})", &limits).await;
    assert_eq!(limit_of(&o.result), (Limit::ArgsBytes, 10_000, 20_008));
    // Small text, much structure: 2,000 empty objects are 8 KB of text but
    // a tree of 6,000 nodes on the host.
    let o = common::run_with(
        "await tools.echo({a: Array.from({length: 2000}, () => ({}))})",
        &limits,
    )
    .await;
    let (limit, _, used) = limit_of(&o.result);
    assert_eq!(limit, Limit::ArgsBytes);
    assert!(used > 4000 * ARGS_VALUE_OVERHEAD, "{used}");
}

#[tokio::test]
async fn timers_bounds_timers_armed_at_once_not_in_total() {
    let limits = Limits {
        timers: 10,
        ..Limits::default()
    };
    let o = common::run_with(
        "for (let i = 0; i < 11; i++) setTimeout(() => {}, 1e9)",
        &limits,
    )
    .await;
    assert_eq!(limit_of(&o.result), (Limit::Timers, 10, 11));
    // Cleared or fired timers no longer count.
    let o = common::run_with(
        "for (let i = 0; i < 1000; i++) clearTimeout(setTimeout(() => {}, 1e9));
         let fired = 0;
         for (let i = 0; i < 30; i++) await new Promise((r) => setTimeout(() => { fired++; r(); }, 0));
         fired",
        &limits,
    )
    .await;
    assert_eq!(ok(&o), &json!(30));
}

#[tokio::test]
async fn calls_in_flight_throttles_instead_of_failing() {
    let limits = Limits {
        calls_in_flight: 2,
        ..Limits::default()
    };
    let host = TestHost::default();
    let o = common::fresh()
        .await
        .execute("(await Promise.all([1, 2, 3, 4, 5, 6].map((ms) => tools.sleep({ms: 20 + ms})))).length", &limits, &host)
        .await;
    assert_eq!(ok(&o), &json!(6));
    assert_eq!(host.peak(), 2);
    assert_eq!(o.stats.peak_calls_in_flight, 2);
}

#[tokio::test]
async fn call_timeout_ms() {
    let limits = Limits {
        call_timeout_ms: 100,
        ..Limits::default()
    };
    let host = TestHost::default();
    let sb = common::fresh().await;
    let o = sb.execute("await tools.gate({})", &limits, &host).await;
    let (limit, value, used) = limit_of(&o.result);
    assert_eq!((limit, value), (Limit::CallTimeoutMs, 100));
    assert!(used >= 100);
    assert_eq!(o.trace[0].status, "limit_exceeded");
    // A script may catch it and carry on.
    let o = sb
        .execute(
            "try { await tools.gate({}) } catch (e) { return [e.code, e.details.limit] }",
            &limits,
            &host,
        )
        .await;
    assert_eq!(ok(&o), &json!(["limit_exceeded", "call_timeout_ms"]));
}

#[tokio::test]
async fn result_bytes_truncates_to_valid_json() {
    let limits = Limits {
        result_bytes: 1000,
        ..Limits::default()
    };
    let o = common::run_with(
        "Array.from({length: 500}, (_, i) => ({vmid: 100 + i, name: `vm-${i}`}))",
        &limits,
    )
    .await;
    let value = ok(&o);
    let text = serde_json::to_string(value).unwrap();
    assert!(text.len() <= 1000, "{} bytes", text.len());
    let items = value.as_array().unwrap();
    assert_eq!(items[0], json!({"vmid": 100, "name": "vm-0"}));
    let t = o.truncated.expect("marked truncated");
    assert_eq!((t.limit, t.value), (Limit::ResultBytes, 1000));
    assert!(t.original_bytes > 10_000, "{}", t.original_bytes);
}

#[tokio::test]
async fn log_bytes_keeps_the_first_lines_and_counts_the_rest() {
    let limits = Limits {
        log_bytes: 1000,
        ..Limits::default()
    };
    let o = common::run_with(
        "for (let i = 0; i < 100; i++) console.log('x'.repeat(99)); 'done'",
        &limits,
    )
    .await;
    assert_eq!(ok(&o), &json!("done"));
    // Each line costs its 99 bytes and the per-line overhead.
    let line = 99 + LOG_LINE_OVERHEAD;
    assert_eq!(o.logs.len() as u64, 1000 / line);
    let t = o.logs_truncated.expect("marked truncated");
    assert_eq!(
        (t.limit, t.value, t.original_bytes),
        (Limit::LogBytes, 1000, 100 * line)
    );
}

#[tokio::test]
async fn empty_console_lines_cost_their_overhead() {
    let limits = Limits {
        log_bytes: 64 * 1024,
        ..Limits::default()
    };
    let o = common::run_with(
        "for (let i = 0; i < 100000; i++) console.log(); 'done'",
        &limits,
    )
    .await;
    assert_eq!(ok(&o), &json!("done"));
    assert_eq!(o.logs.len() as u64, 64 * 1024 / LOG_LINE_OVERHEAD);
    let t = o.logs_truncated.expect("marked truncated");
    assert_eq!(t.original_bytes, 100_000 * LOG_LINE_OVERHEAD);
}

/// Runs `script` in the background with default limits.
fn spawn(
    sb: &airlock_sandbox::Sandbox,
    host: &Arc<TestHost>,
    script: &'static str,
) -> tokio::task::JoinHandle<airlock_sandbox::Outcome> {
    let (sb, host) = (sb.clone(), host.clone());
    tokio::spawn(async move { sb.execute(script, &Limits::default(), &*host).await })
}

fn one_at_a_time(queue_depth: u32, queue_wait_ms: u64) -> SandboxConfig {
    SandboxConfig {
        capacity: Capacity {
            executions_in_flight: 1,
            queue_depth,
            queue_wait_ms,
            ..Capacity::default()
        },
        ..SandboxConfig::default()
    }
}

#[tokio::test]
async fn executions_in_flight_refuses_at_once_without_a_queue() {
    let sb = common::sandbox(one_at_a_time(0, 1000)).await;
    let host = Arc::new(TestHost::default());
    let first = spawn(&sb, &host, "await tools.gate({})");
    host.wait_for_calls(1).await;
    let o = sb.execute("1", &Limits::default(), &*host).await;
    assert_eq!(limit_of(&o.result), (Limit::ExecutionsInFlight, 1, 2));
    host.gate.add_permits(1);
    assert_eq!(ok(&first.await.unwrap()), &json!("opened"));
}

#[tokio::test]
async fn queue_depth_refuses_when_the_queue_is_full() {
    let sb = common::sandbox(one_at_a_time(1, 10_000)).await;
    let host = Arc::new(TestHost::default());
    let first = spawn(&sb, &host, "await tools.gate({})");
    host.wait_for_calls(1).await;
    let second = spawn(&sb, &host, "'second'");
    while sb.queued() < 1 {
        tokio::task::yield_now().await;
    }
    let o = sb.execute("'third'", &Limits::default(), &*host).await;
    assert_eq!(limit_of(&o.result), (Limit::QueueDepth, 1, 2));
    host.gate.add_permits(1);
    ok(&first.await.unwrap());
    assert_eq!(
        ok(&second.await.unwrap()),
        &json!("second"),
        "the queued execution ran"
    );
}

#[tokio::test]
async fn queue_wait_ms_bounds_the_wait_for_a_slot() {
    let sb = common::sandbox(one_at_a_time(4, 100)).await;
    let host = Arc::new(TestHost::default());
    let first = spawn(&sb, &host, "await tools.gate({})");
    host.wait_for_calls(1).await;
    let o = sb.execute("1", &Limits::default(), &*host).await;
    let (limit, value, used) = limit_of(&o.result);
    assert_eq!((limit, value), (Limit::QueueWaitMs, 100));
    assert!(used >= 100);
    assert!(o.stats.queue_us >= 100_000);
    host.gate.add_permits(1);
    ok(&first.await.unwrap());
}

/// `sb` holds `n` of `host`'s executions parked in a gate.
async fn hold(
    sb: &airlock_sandbox::Sandbox,
    host: &Arc<TestHost>,
    n: u32,
) -> Vec<tokio::task::JoinHandle<airlock_sandbox::Outcome>> {
    let held = (0..n)
        .map(|_| spawn(sb, host, "await tools.gate({})"))
        .collect();
    host.wait_for_calls(n).await;
    held
}

async fn queued(sb: &airlock_sandbox::Sandbox, n: u32) {
    while sb.queued() < n {
        tokio::task::yield_now().await;
    }
}

/// Waits for `host`'s `n`th call, failing (not hanging) when the
/// scheduler gave the slot to someone else.
async fn called(host: &TestHost, n: u32, why: &str) {
    tokio::time::timeout(Duration::from_secs(30), host.wait_for_calls(n))
        .await
        .unwrap_or_else(|_| panic!("{why}"));
}

#[tokio::test]
async fn one_identity_cannot_hold_every_slot() {
    let sb = common::sandbox(SandboxConfig {
        capacity: Capacity {
            executions_in_flight: 4,
            queue_depth: 16,
            ..Capacity::default()
        },
        ..SandboxConfig::default()
    })
    .await;
    let rita = Arc::new(TestHost::for_principal(Some("rita")));
    let olga = Arc::new(TestHost::for_principal(Some("olga")));
    // Rita's share is half the slots; her other six wait.
    let mut held = hold(&sb, &rita, 2).await;
    held.extend((0..6).map(|_| spawn(&sb, &rita, "await tools.gate({})")));
    queued(&sb, 6).await;
    assert_eq!(rita.count(), 2, "rita runs no more than her share");
    // Olga is not behind rita's backlog: she runs while all of rita's
    // executions are still parked.
    let o = tokio::time::timeout(
        Duration::from_secs(30),
        sb.execute("await tools.echo({n: 1})", &Limits::default(), &*olga),
    )
    .await
    .expect("olga's execution runs while rita's are parked");
    assert_eq!(ok(&o), &json!({"n": 1}));
    assert_eq!(rita.count(), 2);
    rita.gate.add_permits(8);
    for h in held {
        assert_eq!(ok(&h.await.unwrap()), &json!("opened"));
    }
    assert_eq!(rita.peak(), 2, "never more than rita's share at once");
}

#[tokio::test]
async fn identities_waiting_are_served_in_turn() {
    let sb = common::sandbox(one_at_a_time(8, 60_000)).await;
    let first = Arc::new(TestHost::for_principal(Some("first")));
    let rita = Arc::new(TestHost::for_principal(Some("rita")));
    let olga = Arc::new(TestHost::for_principal(Some("olga")));
    let held = hold(&sb, &first, 1).await;
    let ritas: Vec<_> = (0..3)
        .map(|_| spawn(&sb, &rita, "await tools.gate({})"))
        .collect();
    queued(&sb, 3).await;
    let olgas = spawn(&sb, &olga, "await tools.gate({})");
    queued(&sb, 4).await;

    first.gate.add_permits(1);
    called(&rita, 1, "rita queued first, so she is served first").await;
    rita.gate.add_permits(1);
    called(&olga, 1, "olga's turn comes before rita's second").await;
    assert_eq!(rita.count(), 1, "rita's second waited for olga's turn");
    olga.gate.add_permits(1);
    rita.gate.add_permits(2);
    for h in held.into_iter().chain(ritas).chain([olgas]) {
        assert_eq!(ok(&h.await.unwrap()), &json!("opened"));
    }
    assert_eq!(sb.queued(), 0);
}

#[tokio::test]
async fn queued_per_identity_refuses_one_identity_not_the_others() {
    let sb = common::sandbox(SandboxConfig {
        capacity: Capacity {
            executions_in_flight: 1,
            queue_depth: 8,
            queued_per_identity: Some(2),
            ..Capacity::default()
        },
        ..SandboxConfig::default()
    })
    .await;
    let rita = Arc::new(TestHost::for_principal(Some("rita")));
    let olga = Arc::new(TestHost::for_principal(Some("olga")));
    let mut held = hold(&sb, &rita, 1).await;
    held.extend((0..2).map(|_| spawn(&sb, &rita, "await tools.gate({})")));
    queued(&sb, 2).await;
    let o = sb.execute("1", &Limits::default(), &*rita).await;
    assert_eq!(limit_of(&o.result), (Limit::QueuedPerIdentity, 2, 3));
    let text = o.result.unwrap_err().to_string();
    assert!(text.contains("queued_per_identity"), "{text}");
    let olgas = spawn(&sb, &olga, "'olga ran'");
    queued(&sb, 3).await;
    rita.gate.add_permits(3);
    for h in held {
        assert_eq!(ok(&h.await.unwrap()), &json!("opened"));
    }
    assert_eq!(ok(&olgas.await.unwrap()), &json!("olga ran"));
}

#[tokio::test]
async fn executions_per_identity_without_a_queue_is_refused_by_name() {
    let sb = common::sandbox(SandboxConfig {
        capacity: Capacity {
            executions_in_flight: 4,
            queue_depth: 0,
            executions_per_identity: Some(1),
            ..Capacity::default()
        },
        ..SandboxConfig::default()
    })
    .await;
    let rita = Arc::new(TestHost::for_principal(Some("rita")));
    let held = hold(&sb, &rita, 1).await;
    let o = sb.execute("1", &Limits::default(), &*rita).await;
    assert_eq!(limit_of(&o.result), (Limit::ExecutionsPerIdentity, 1, 2));
    let olga = TestHost::for_principal(Some("olga"));
    assert_eq!(
        ok(&sb.execute("2", &Limits::default(), &olga).await),
        &json!(2)
    );
    rita.gate.add_permits(1);
    for h in held {
        ok(&h.await.unwrap());
    }
}

#[tokio::test]
async fn a_waiter_cancelled_leaves_no_place_and_no_slot_behind() {
    let sb = common::sandbox(one_at_a_time(4, 60_000)).await;
    let rita = Arc::new(TestHost::for_principal(Some("rita")));
    let held = hold(&sb, &rita, 1).await;
    let gone = spawn(&sb, &rita, "'never'");
    queued(&sb, 1).await;
    gone.abort();
    assert!(gone.await.unwrap_err().is_cancelled());
    assert_eq!(sb.queued(), 0, "the cancelled waiter left the queue");
    rita.gate.add_permits(1);
    for h in held {
        ok(&h.await.unwrap());
    }
    // The slot came back: one execution at a time still runs.
    assert_eq!(
        ok(&sb.execute("3", &Limits::default(), &*rita).await),
        &json!(3)
    );
}

#[tokio::test]
async fn shares_above_the_whole_are_refused_naming_both() {
    for capacity in [
        Capacity {
            executions_in_flight: 2,
            executions_per_identity: Some(3),
            ..Capacity::default()
        },
        Capacity {
            queue_depth: 4,
            queued_per_identity: Some(5),
            ..Capacity::default()
        },
    ] {
        let e = airlock_sandbox::Sandbox::new(SandboxConfig {
            capacity,
            ..SandboxConfig::default()
        })
        .await
        .err()
        .expect("refused")
        .to_string();
        assert!(e.contains("_per_identity") && e.contains("raise"), "{e}");
    }
}

#[tokio::test]
async fn limit_errors_say_what_to_do() {
    let e = ExecError::limit(Limit::WallTimeMs, 200, 250);
    let text = e.to_string();
    assert!(
        text.contains("wall_time_ms") && text.contains("200") && text.contains("250"),
        "{text}"
    );
    assert!(text.contains("raise wall_time_ms"), "{text}");
}

#[tokio::test]
async fn invalid_limits_are_refused_naming_the_field() {
    let limits = Limits {
        tool_calls: 0,
        ..Limits::default()
    };
    match common::run_with("1", &limits).await.result {
        Err(ExecError::InvalidRequest { message }) => {
            assert!(message.contains("tool_calls"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}

/// Backlogs cannot keep others out of the queue either: with the queue
/// full of rita's, olga's execution takes the place of rita's newest
/// (refused as over rita's share) and runs in its turn.
#[tokio::test]
async fn a_full_queue_makes_room_for_an_identity_with_nothing_waiting() {
    let sb = common::sandbox(SandboxConfig {
        capacity: Capacity {
            executions_in_flight: 1,
            queue_depth: 3,
            queued_per_identity: Some(3),
            queue_wait_ms: 60_000,
            ..Capacity::default()
        },
        ..SandboxConfig::default()
    })
    .await;
    let first = Arc::new(TestHost::for_principal(Some("first")));
    let rita = Arc::new(TestHost::for_principal(Some("rita")));
    let olga = Arc::new(TestHost::for_principal(Some("olga")));
    let held = hold(&sb, &first, 1).await;
    let mut ritas = Vec::new();
    for n in 1..=3 {
        ritas.push(spawn(&sb, &rita, "await tools.gate({})"));
        queued(&sb, n).await;
    }
    let olgas = spawn(&sb, &olga, "'olga ran'");
    // Rita's newest gives up its place at once.
    let displaced = ritas.pop().unwrap().await.unwrap();
    assert_eq!(
        limit_of(&displaced.result),
        (Limit::QueuedPerIdentity, 2, 3)
    );
    assert_eq!(sb.queued(), 3);
    let third = TestHost::for_principal(Some("third"));
    first.gate.add_permits(1);
    rita.gate.add_permits(2);
    for h in held.into_iter().chain(ritas) {
        assert_eq!(ok(&h.await.unwrap()), &json!("opened"));
    }
    assert_eq!(ok(&olgas.await.unwrap()), &json!("olga ran"));
    assert_eq!(sb.queued(), 0);
    assert_eq!(
        ok(&sb.execute("4", &Limits::default(), &third).await),
        &json!(4),
        "no slot was lost"
    );
}
