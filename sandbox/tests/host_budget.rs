//! The host's own budget: what a script, or a guest that a script has
//! corrupted, makes the *host* do is bounded too. Every case asserts the
//! outcome and what it cost the host: peak resident memory beyond what the
//! guest itself was allowed, wall time past the limit, and the size of the
//! answer.
//!
//! The cases run one after another in a single test, so that the process's
//! peak RSS (reset before each case through `/proc/self/clear_refs`)
//! belongs to that case alone.

mod common;

use std::time::{Duration, Instant};

use airlock_sandbox::{ExecError, Limit, Limits, Outcome, Sandbox};
use common::{status_kib, wat_guest, TestHost};

/// Host memory a case may add on top of the guest's own linear memory:
/// the instance's bookkeeping, tokio, the outcome. The findings this file
/// guards against cost hundreds of megabytes to gigabytes.
const HOST_MARGIN: u64 = 48 << 20;
/// Time past the wall-clock limit an execution may take to end.
const LATE: Duration = Duration::from_millis(300);
/// The most an answer (the outcome as JSON) may take beyond `result_bytes`
/// and `log_bytes`.
const ANSWER_MARGIN: usize = 64 << 10;

/// What one case cost the host.
struct Cost {
    peak_growth: u64,
    wall: Duration,
    answer: usize,
}

enum Run<'a> {
    Script(&'a str),
    Guest(&'a str),
}

async fn measure(sb: &Sandbox, run: Run<'_>, limits: &Limits, host: &TestHost) -> (Outcome, Cost) {
    // Reset the peak ("VmHWM") so it covers this case only.
    std::fs::write("/proc/self/clear_refs", "5").expect("reset peak RSS");
    let before = status_kib("VmRSS:") << 10;
    let t0 = Instant::now();
    let outcome = match run {
        Run::Script(s) => sb.execute(s, limits, host).await,
        Run::Guest(body) => sb
            .execute_module(&wat_guest(body), "", limits, host)
            .await
            .expect("module loads"),
    };
    let wall = t0.elapsed();
    let peak = status_kib("VmHWM:") << 10;
    let answer = serde_json::to_vec(&outcome).unwrap().len();
    (
        outcome,
        Cost {
            peak_growth: peak.saturating_sub(before),
            wall,
            answer,
        },
    )
}

/// Asserts the host-side bounds every case shares.
fn within_budget(name: &str, o: &Outcome, cost: &Cost, limits: &Limits) {
    let guest = o.stats.peak_memory_bytes;
    assert!(
        cost.peak_growth <= guest + HOST_MARGIN,
        "{name}: host RSS grew {} MiB with a guest of {} MiB",
        cost.peak_growth >> 20,
        guest >> 20
    );
    let deadline = Duration::from_millis(limits.wall_time_ms) + LATE;
    assert!(
        cost.wall <= deadline,
        "{name}: took {:?} with wall_time_ms = {}",
        cost.wall,
        limits.wall_time_ms
    );
    let answer_max = (limits.result_bytes + limits.log_bytes) as usize + ANSWER_MARGIN;
    assert!(
        cost.answer <= answer_max,
        "{name}: an answer of {} bytes",
        cost.answer
    );
    eprintln!(
        "{name}: host +{} MiB (guest {} MiB), {} ms, answer {} bytes",
        cost.peak_growth >> 20,
        guest >> 20,
        cost.wall.as_millis(),
        cost.answer
    );
}

fn limit_of(o: &Outcome) -> Option<Limit> {
    match &o.result {
        Err(ExecError::LimitExceeded { limit, .. }) => Some(*limit),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_scripts_and_guests_stay_within_the_host_s_budget() {
    let sb = common::fresh().await;
    let second = Limits {
        wall_time_ms: 1_000,
        memory_bytes: 64 << 20,
        ..Limits::default()
    };
    // Warm up: the first execution maps the instance slot.
    sb.execute("1", &second, &TestHost::default()).await;

    // 1. Empty console lines, as fast as the guest can make them.
    let host = TestHost::default();
    let (o, cost) = measure(&sb, Run::Script("for (;;) console.log()"), &second, &host).await;
    assert_eq!(limit_of(&o), Some(Limit::WallTimeMs), "{:?}", o.result);
    assert_eq!(
        o.logs.len() as u64,
        second.log_bytes / airlock_sandbox::LOG_LINE_OVERHEAD
    );
    assert!(o.logs_truncated.is_some());
    within_budget("empty console lines", &o, &cost, &second);

    // 2. A two-megabyte tool name: refused without being read, compared
    //    or echoed.
    let host = TestHost::default();
    let (o, cost) = measure(
        &sb,
        Run::Script("await callTool('x'.repeat(2e6), {})"),
        &second,
        &host,
    )
    .await;
    match &o.result {
        Err(ExecError::ToolError { code, message, .. }) => {
            assert_eq!(code, "not_found");
            assert!(message.len() < 1024, "{} bytes of error", message.len());
            assert!(message.contains("at most 256 bytes"), "{message}");
        }
        other => panic!("huge name: {other:?}"),
    }
    assert_eq!(host.count(), 0, "the tool host never saw the name");
    assert!(o.trace[0].tool.len() < 128, "{}", o.trace[0].tool);
    within_budget("huge tool name", &o, &cost, &second);

    // 3. Timers armed and cleared in a loop.
    let host = TestHost::default();
    let (o, cost) = measure(
        &sb,
        Run::Script("for (;;) clearTimeout(setTimeout(() => {}, 1e9))"),
        &second,
        &host,
    )
    .await;
    assert_eq!(limit_of(&o), Some(Limit::WallTimeMs), "{:?}", o.result);
    within_budget("cleared timers", &o, &cost, &second);

    // 4. Timers armed and never cleared.
    let (o, cost) = measure(
        &sb,
        Run::Script("for (;;) setTimeout(() => {}, 1e9)"),
        &second,
        &host,
    )
    .await;
    assert_eq!(limit_of(&o), Some(Limit::Timers), "{:?}", o.result);
    within_budget("armed timers", &o, &cost, &second);

    // 5. A result of 10 MB: cut by the guest, not parsed by the host.
    let big = Limits {
        memory_bytes: 256 << 20,
        ..second.clone()
    };
    let (o, cost) = measure(&sb, Run::Script("'x'.repeat(1e7)"), &big, &host).await;
    let t = o
        .truncated
        .as_ref()
        .unwrap_or_else(|| panic!("cut to result_bytes: {:?}", o.result));
    assert_eq!(t.original_bytes, 10_000_002);
    within_budget("a 10 MB result", &o, &cost, &big);

    // 6. Arguments of 4 MB, beyond args_bytes: never read.
    let host = TestHost::default();
    let (o, cost) = measure(
        &sb,
        Run::Script("await tools.echo({s: 'x'.repeat(4e6)})"),
        &big,
        &host,
    )
    .await;
    assert_eq!(limit_of(&o), Some(Limit::ArgsBytes), "{:?}", o.result);
    assert_eq!(host.count(), 0);
    within_budget("4 MB of arguments", &o, &cost, &big);

    // 7. A failure whose details are 900 KB (the tool host's answer to
    //    what the script asked for), escaping: cut like a result.
    let (o, cost) = measure(
        &sb,
        Run::Script("await tools.fail({code: 'x', details: {s: 'x'.repeat(900000)}})"),
        &big,
        &TestHost::default(),
    )
    .await;
    assert!(matches!(o.result, Err(ExecError::ToolError { .. })));
    within_budget("large failure details", &o, &cost, &big);

    // 8. Results the script never takes: 200 calls of 4 MB each, unread.
    //    They count against memory_bytes with the guest's own memory.
    let unread = Limits {
        tool_calls: 200,
        ..second.clone()
    };
    let (o, cost) = measure(
        &sb,
        Run::Script(
            "for (let i = 0; i < 200; i++) tools.big({bytes: 4e6}).then(() => 0);\nfor (;;) {}",
        ),
        &unread,
        &TestHost::default(),
    )
    .await;
    assert_eq!(limit_of(&o), Some(Limit::MemoryBytes), "{:?}", o.result);
    // The backlog may reach memory_bytes, and calls_in_flight finished
    // results wait beside it, before the execution ends.
    let held = unread.memory_bytes + unread.calls_in_flight as u64 * 2 * 4_000_000;
    assert!(
        cost.peak_growth <= o.stats.peak_memory_bytes + held + HOST_MARGIN,
        "unread results: host RSS grew {} MiB",
        cost.peak_growth >> 20
    );
    eprintln!("unread results: host +{} MiB", cost.peak_growth >> 20);

    // 9. Timers that fire and are then cleared, in a loop that never waits.
    let (o, cost) = measure(
        &sb,
        Run::Script(
            "for (;;) { const ids = []; for (let i = 0; i < 1000; i++) ids.push(setTimeout(() => {}, 0)); ids.forEach(clearTimeout); }",
        ),
        &second,
        &TestHost::default(),
    )
    .await;
    assert_eq!(limit_of(&o), Some(Limit::WallTimeMs), "{:?}", o.result);
    within_budget("fired then cleared timers", &o, &cost, &second);

    // 10. Console lines and tool names of control characters, which the
    //     answer carries escaped (six bytes each).
    let small = Limits {
        result_bytes: 4096,
        ..second.clone()
    };
    let (o, cost) = measure(
        &sb,
        Run::Script(
            "const c = String.fromCharCode(1);\n\
             for (let i = 0; i < 100; i++) console.log(c.repeat(10000));\n\
             for (let i = 0; i < 400; i++) { try { await callTool(c.repeat(256), {}) } catch (e) {} }\n1",
        ),
        &small,
        &TestHost::default(),
    )
    .await;
    assert!(o.is_ok(), "{:?}", o.result);
    within_budget("control characters", &o, &cost, &small);

    // Hostile guests: what a guest could do if a script took over the JS
    // engine. Each asks the host for work far beyond its limits.

    // 8. random_get of 2 GiB: over the 64 KiB a call may fill, it traps
    // the instance before the host allocates anything.
    let (o, cost) = measure(
        &sb,
        Run::Guest(
            "(drop (call $random_get (i32.const 0) (i32.const 0x80000000)))
             (call $finish (i32.const 0) (i32.const 6) (i32.const 4))",
        ),
        &second,
        &host,
    )
    .await;
    assert!(
        matches!(&o.result, Err(ExecError::Internal { message }) if message.contains("exceeds limit")),
        "random_get of 2 GiB: {:?}",
        o.result
    );
    within_budget("random_get 2 GiB", &o, &cost, &second);

    // 9. fd_write naming 8,000 buffers of 64 KiB each (512 MB to copy):
    // only the first is taken, into a pipe of bounded size.
    let (o, cost) = measure(
        &sb,
        Run::Guest(
            "(loop $l
               (i32.store (i32.add (i32.const 16) (i32.mul (local.get $i) (i32.const 8))) (i32.const 0))
               (i32.store (i32.add (i32.const 20) (i32.mul (local.get $i) (i32.const 8))) (i32.const 65536))
               (local.set $i (i32.add (local.get $i) (i32.const 1)))
               (br_if $l (i32.lt_u (local.get $i) (i32.const 8000))))
             (drop (call $fd_write (i32.const 1) (i32.const 16) (i32.const 8000) (i32.const 12)))
             (call $finish (i32.const 0) (i32.const 6) (i32.const 4))",
        ),
        &second,
        &host,
    )
    .await;
    assert!(o.is_ok(), "fd_write of 8,000 buffers: {:?}", o.result);
    within_budget("fd_write 8,000 buffers", &o, &cost, &second);

    // 10. A finish of 20 MB: refused unread.
    let grow = "(drop (memory.grow (i32.const 320)))";
    let (o, cost) = measure(
        &sb,
        Run::Guest(&format!(
            "{grow} (call $finish (i32.const 0) (i32.const 0) (i32.const 20000000))"
        )),
        &big,
        &host,
    )
    .await;
    assert_eq!(limit_of(&o), Some(Limit::ResultBytes), "{:?}", o.result);
    within_budget("finish of 20 MB", &o, &cost, &big);

    // 11. Arguments of 20 MB in one call: refused unread.
    let host = TestHost::default();
    let (o, cost) = measure(
        &sb,
        Run::Guest(&format!(
            "{grow} (drop (call $call_start (i32.const 0) (i32.const 4) (i32.const 0) (i32.const 20000000)))"
        )),
        &big,
        &host,
    )
    .await;
    assert_eq!(limit_of(&o), Some(Limit::ArgsBytes), "{:?}", o.result);
    assert_eq!(host.count(), 0);
    within_budget("20 MB of arguments", &o, &cost, &big);

    // 12. A 20 MB tool name: refused after reading 64 bytes.
    let (o, cost) = measure(
        &sb,
        Run::Guest(&format!(
            "{grow} (drop (call $call_start (i32.const 0) (i32.const 20000000) (i32.const 4) (i32.const 2)))
             (drop (call $wait (i32.const 100)))
             (call $finish (i32.const 0) (i32.const 6) (i32.const 4))"
        )),
        &big,
        &host,
    )
    .await;
    assert!(o.is_ok(), "{:?}", o.result);
    assert_eq!(host.count(), 0);
    assert_eq!(o.trace[0].status, "not_found");
    within_budget("20 MB tool name", &o, &cost, &big);

    // 13. A million empty console lines.
    let (o, cost) = measure(
        &sb,
        Run::Guest(
            "(loop $l
               (call $log (i32.const 0) (i32.const 0) (i32.const 0))
               (local.set $i (i32.add (local.get $i) (i32.const 1)))
               (br_if $l (i32.lt_u (local.get $i) (i32.const 1000000))))
             (call $finish (i32.const 0) (i32.const 6) (i32.const 4))",
        ),
        &second,
        &host,
    )
    .await;
    assert!(o.is_ok(), "{:?}", o.result);
    assert_eq!(
        o.logs.len() as u64,
        second.log_bytes / airlock_sandbox::LOG_LINE_OVERHEAD
    );
    within_budget("a million log calls", &o, &cost, &second);

    // A guest claiming one of the host's own limits: not believed.
    let (o, _) = measure(
        &sb,
        Run::Guest("(call $finish (i32.const 1) (i32.const 64) (i32.const 55))"),
        &second,
        &host,
    )
    .await;
    assert!(
        matches!(o.result, Err(ExecError::Internal { .. })),
        "a forged engine limit: {:?}",
        o.result
    );

    // 14. Timers armed without end, and a cancel of a call's id.
    let (o, cost) = measure(
        &sb,
        Run::Guest(
            "(call $cancel (call $call_start (i32.const 0) (i32.const 4) (i32.const 4) (i32.const 2)))
             (loop $l (drop (call $timer_start (i32.const 1000000000))) (br $l))",
        ),
        &second,
        &host,
    )
    .await;
    assert_eq!(limit_of(&o), Some(Limit::Timers), "{:?}", o.result);
    within_budget("endless timers", &o, &cost, &second);
}
