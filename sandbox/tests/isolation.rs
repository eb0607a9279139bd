//! Nothing one execution does is visible to the next, in either mode. In
//! `reuse` mode the tests check `instance_uses` so they know the second
//! execution really ran on the same instance.

mod common;

use airlock_sandbox::{Capacity, Limits, Mode, Sandbox, SandboxConfig};
use common::{ok, TestHost};
use serde_json::json;

async fn single(mode: Mode) -> Sandbox {
    common::sandbox(SandboxConfig {
        mode,
        capacity: Capacity {
            executions_in_flight: 1,
            ..Capacity::default()
        },
        ..SandboxConfig::default()
    })
    .await
}

/// Runs `first`, then `second` on the same instance (reuse) or a new one
/// (fresh), and returns the second's value.
async fn after(mode: Mode, first: &str, second: &str) -> serde_json::Value {
    let sb = single(mode).await;
    let host = TestHost::default();
    let limits = Limits::default();
    let a = sb.execute(first, &limits, &host).await;
    assert!(a.is_ok(), "{:?}", a.result);
    sb.settle().await;
    let b = sb.execute(second, &limits, &host).await;
    let expected_uses = if mode == Mode::Reuse { 2 } else { 1 };
    assert_eq!(b.stats.instance_uses, expected_uses, "{mode:?}");
    ok(&b).clone()
}

const POLLUTE: &str = "globalThis.leak = 42;\n\
    var declared = 'v';\n\
    Array.prototype.evil = 1;\n\
    Object.prototype.polluted = 'yes';\n\
    JSON.stringify = () => 'hijacked';\n\
    Math.max = () => -1;\n\
    console.log = () => {};\n\
    1";

const PROBE: &str = "[typeof leak, typeof declared, typeof [].evil, typeof ({}).polluted, \
    JSON.stringify({a: 1}), Math.max(1, 2), typeof console.log]";

fn clean() -> serde_json::Value {
    json!([
        "undefined",
        "undefined",
        "undefined",
        "undefined",
        "{\"a\":1}",
        2,
        "function"
    ])
}

#[tokio::test]
async fn globals_and_prototypes_do_not_survive_fresh() {
    assert_eq!(after(Mode::Fresh, POLLUTE, PROBE).await, clean());
}

#[tokio::test]
async fn globals_and_prototypes_do_not_survive_reuse() {
    assert_eq!(after(Mode::Reuse, POLLUTE, PROBE).await, clean());
}

const LEAVE_PENDING: &str = "globalThis.fired = false;\n\
    setTimeout(() => { globalThis.fired = true; console.log('late') }, 1);\n\
    new Promise(() => {});\n\
    tools.gate({});\n\
    'left things pending'";

#[tokio::test]
async fn pending_timers_promises_and_calls_die_with_their_execution() {
    for mode in [Mode::Fresh, Mode::Reuse] {
        let sb = single(mode).await;
        let host = TestHost::default();
        let a = sb.execute(LEAVE_PENDING, &Limits::default(), &host).await;
        assert_eq!(ok(&a), &json!("left things pending"));
        assert!(
            a.logs.is_empty(),
            "the timer never fired inside the first execution"
        );
        // The unawaited call was cancelled: dropped before it reached the
        // host, or while it waited there.
        assert_eq!(host.in_flight(), 0, "{mode:?}");
        assert_eq!(host.count() as u32, host.cancelled(), "{mode:?}");
        assert_eq!(a.trace.len(), 1);
        assert_eq!(a.trace[0].status, "cancelled");
        sb.settle().await;
        let b = sb
            .execute(
                "await new Promise((r) => setTimeout(r, 20)); typeof fired",
                &Limits::default(),
                &host,
            )
            .await;
        assert_eq!(ok(&b), &json!("undefined"), "{mode:?}");
        assert!(
            b.logs.is_empty(),
            "{mode:?}: no callback of the first execution ran: {:?}",
            b.logs
        );
    }
}

#[tokio::test]
async fn reuse_serves_several_executions_then_recycles() {
    let sb = common::sandbox(SandboxConfig {
        mode: Mode::Reuse,
        reuse_runs: 3,
        capacity: Capacity {
            executions_in_flight: 1,
            ..Capacity::default()
        },
        ..SandboxConfig::default()
    })
    .await;
    let host = TestHost::default();
    let mut uses = Vec::new();
    for _ in 0..5 {
        let o = sb.execute("1", &Limits::default(), &host).await;
        uses.push(o.stats.instance_uses);
        sb.settle().await;
    }
    assert_eq!(uses, [1, 2, 3, 1, 2]);
}

#[tokio::test]
async fn reuse_never_hands_one_principal_s_instance_to_another() {
    let sb = common::sandbox(SandboxConfig {
        mode: Mode::Reuse,
        capacity: Capacity {
            executions_in_flight: 2,
            ..Capacity::default()
        },
        ..SandboxConfig::default()
    })
    .await;
    let alice = TestHost::for_principal(Some("alice"));
    let bob = TestHost::for_principal(Some("bob"));
    let anonymous = TestHost::for_principal(None);
    let mut uses = Vec::new();
    for host in [&alice, &alice, &bob, &alice, &bob, &anonymous, &anonymous] {
        let o = sb.execute("1", &Limits::default(), host).await;
        assert!(o.is_ok(), "{:?}", o.result);
        uses.push(o.stats.instance_uses);
        sb.settle().await;
    }
    // Each principal counts its own instance's uses; a host that names no
    // principal never gets or leaves a reused instance.
    assert_eq!(uses, [1, 2, 1, 3, 2, 1, 1]);
}

#[tokio::test]
async fn a_hit_limit_retires_the_instance() {
    let sb = single(Mode::Reuse).await;
    let host = TestHost::default();
    let o = sb.execute("1", &Limits::default(), &host).await;
    assert_eq!(o.stats.instance_uses, 1);
    sb.settle().await;
    let limits = Limits {
        wall_time_ms: 50,
        ..Limits::default()
    };
    let o = sb
        .execute("globalThis.x = 1; while (true) {}", &limits, &host)
        .await;
    assert!(o.error().is_some());
    assert_eq!(o.stats.instance_uses, 2);
    sb.settle().await;
    let o = sb.execute("typeof x", &Limits::default(), &host).await;
    assert_eq!(o.stats.instance_uses, 1, "a new instance after the limit");
    assert_eq!(ok(&o), &json!("undefined"));
}

#[tokio::test]
async fn concurrent_executions_do_not_see_each_other() {
    for mode in [Mode::Fresh, Mode::Reuse] {
        let sb = common::sandbox(SandboxConfig {
            mode,
            ..SandboxConfig::default()
        })
        .await;
        let host = std::sync::Arc::new(TestHost::default());
        let mut tasks = Vec::new();
        for i in 0..8 {
            let (sb, host) = (sb.clone(), host.clone());
            tasks.push(tokio::spawn(async move {
                let script = format!(
                    "globalThis.mine = {i};\nawait tools.sleep({{ms: 10}});\n[mine, typeof other]"
                );
                sb.execute(&script, &Limits::default(), &*host).await
            }));
        }
        for (i, t) in tasks.into_iter().enumerate() {
            let o = t.await.unwrap();
            assert_eq!(ok(&o), &json!([i, "undefined"]), "{mode:?}");
        }
    }
}

/// A script that fills 30-odd MB of the guest's memory.
const FILL: &str =
    "globalThis.kept = Array.from({ length: 150000 }, (_, i) => ({ i, s: 'x' + i }));";

/// The peak memory of `first`, and of `FILL` run after it on the same
/// (reused) instance. Memory an instance has grown to stays grown, so
/// what `first` left behind shows when the second peak passes both the
/// first and what `FILL` needs on its own.
async fn reuse_peaks(first: &str) -> (u64, u64) {
    let sb = single(Mode::Reuse).await;
    let host = TestHost::default();
    let limits = Limits::default();
    let before = sb.execute(first, &limits, &host).await;
    assert!(before.is_ok(), "{:?}", before.result);
    sb.settle().await;
    let second = sb.execute(&format!("{FILL}\n1"), &limits, &host).await;
    assert_eq!(second.stats.instance_uses, 2);
    assert_eq!(ok(&second), &json!(1));
    (
        before.stats.peak_memory_bytes,
        second.stats.peak_memory_bytes,
    )
}

/// Asserts that `FILL` after `first` needs no more memory than `first`
/// had grown to or `FILL` needs after a script that kept nothing.
async fn leaves_nothing(first: &str) {
    let (_, alone) = reuse_peaks("1").await;
    let (before, after) = reuse_peaks(first).await;
    assert!(
        after <= before.max(alone) + (4 << 20),
        "FILL peaked at {after} bytes after the script ({before} bytes), at {alone} after `1`"
    );
}

/// The guest remembers the objects a script's regular expression literals
/// made (for their fast `test`); nothing of that may keep the realm alive
/// past the reset, or the next script on the instance finds the last
/// one's data still in its memory (the attacker review measured 155 MB
/// against 129 MB).
#[tokio::test]
async fn a_regexp_literal_keeps_nothing_of_its_realm_for_the_next_script() {
    leaves_nothing(&format!("{FILL}\n/a/.test('a')")).await;
}

/// boa's symbol registry is process-wide, and the instance outlives the
/// realm: the guest gives each realm its own, so keys registered by one
/// script are gone for the next (five 1 MiB keys made the next scripts on
/// the instance run out of memory in the attacker review).
#[tokio::test]
async fn registered_symbols_are_gone_for_the_next_script() {
    leaves_nothing("for (let i = 0; i < 3; i++) Symbol.for('k'.repeat(1 << 20) + i); 1").await;
}
