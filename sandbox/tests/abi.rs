//! A hostile guest: modules that call the host imports with forged pointers
//! and broken protocol. Each must trap its own instance and leave the host
//! (and the next execution) unharmed; no forged call reaches the tool host.

mod common;

use airlock_sandbox::{ExecError, Limits};
use common::{ok, TestHost};
use serde_json::json;

use common::wat_guest as guest;

async fn run_guest(body: &str) -> (airlock_sandbox::Outcome, TestHost) {
    let sb = common::fresh().await;
    let host = TestHost::default();
    let o = sb
        .execute_module(&guest(body), "", &Limits::default(), &host)
        .await
        .expect("module loads");
    // The real guest still works afterwards.
    assert_eq!(
        ok(&sb.execute("1 + 1", &Limits::default(), &host).await),
        &json!(2)
    );
    (o, host)
}

fn internal(o: &airlock_sandbox::Outcome) -> String {
    match &o.result {
        Err(ExecError::Internal { message }) => message.clone(),
        other => panic!("expected an internal error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_well_behaved_foreign_guest_works() {
    // Calls `echo` with `{}`, waits, then finishes with `null`.
    let (o, host) = run_guest(
        "(drop (call $call_start (i32.const 0) (i32.const 4) (i32.const 4) (i32.const 2)))
         (drop (call $wait (i32.const 100)))
         (call $finish (i32.const 0) (i32.const 6) (i32.const 4))",
    )
    .await;
    assert_eq!(ok(&o), &json!(null));
    assert_eq!(host.names(), ["echo"]);
}

#[tokio::test]
async fn pointers_outside_memory_trap_the_instance() {
    for body in [
        // name beyond the end of memory
        "(drop (call $call_start (i32.const 65535) (i32.const 4) (i32.const 4) (i32.const 2)))",
        // length that wraps past 4 GiB
        "(drop (call $call_start (i32.const 0) (i32.const -1) (i32.const 4) (i32.const 2)))",
        // arguments range past the end
        "(drop (call $call_start (i32.const 0) (i32.const 4) (i32.const 65000) (i32.const 1000)))",
        // console line past the end
        "(call $log (i32.const 0) (i32.const 65530) (i32.const 100))",
        // result past the end
        "(call $finish (i32.const 0) (i32.const -16) (i32.const 16))",
        // completion written past the end
        "(drop (call $call_start (i32.const 0) (i32.const 4) (i32.const 4) (i32.const 2))) (drop (call $wait (i32.const 65530)))",
    ] {
        let (o, host) = run_guest(body).await;
        let message = internal(&o);
        assert!(message.contains("airlock ABI violation"), "{body}: {message}");
        assert!(host.names().iter().all(|n| n != "echo") || body.contains("$wait"), "{body}: forged call reached the host");
    }
}

#[tokio::test]
async fn protocol_violations_trap_the_instance() {
    let cases = [
        ("(call $script_read (i32.const 0) (i32.const 99))", "script_read length"),
        ("(call $log (i32.const 9) (i32.const 0) (i32.const 4))", "unknown log level"),
        ("(call $finish (i32.const 7) (i32.const 6) (i32.const 4))", "unknown finish status"),
        (
            "(call $finish (i32.const 0) (i32.const 6) (i32.const 4)) (call $finish (i32.const 0) (i32.const 6) (i32.const 4))",
            "finish called twice",
        ),
        // arguments that are not JSON ("echo" is not JSON)
        ("(drop (call $call_start (i32.const 0) (i32.const 4) (i32.const 0) (i32.const 4)))", "not JSON"),
        ("(call $payload_read (i32.const 0) (i32.const 5))", "payload_read length"),
    ];
    for (body, want) in cases {
        let (o, host) = run_guest(body).await;
        let message = internal(&o);
        assert!(message.contains(want), "{body}: {message}");
        assert_eq!(host.count(), 0, "{body}");
    }
}

#[tokio::test]
async fn garbage_results_and_missing_finish_are_reported() {
    let (o, _) = run_guest("(call $finish (i32.const 0) (i32.const 0) (i32.const 4))").await;
    assert!(internal(&o).contains("not JSON"));
    let (o, _) = run_guest("nop").await;
    assert!(internal(&o).contains("without reporting an outcome"));
    let (o, _) = run_guest("unreachable").await;
    assert!(internal(&o).contains("JavaScript runtime stopped"));
}

/// WASI is linked whole (wasmtime-wasi) against a context that grants
/// nothing: no preopened directory, socket, environment, argument or
/// input. Each call below must fail, or find nothing, for the guest to
/// finish at all (an unexpected answer is `unreachable`).
#[tokio::test]
async fn wasi_calls_outside_the_granted_set_get_nothing() {
    const EBADF: i32 = 8;
    let check = |call: &str, want: i32| {
        format!("(if (i32.ne {call} (i32.const {want})) (then unreachable))")
    };
    let body = [
        // fd 3 would be the first preopened directory.
        check("(call $fd_prestat_get (i32.const 3) (i32.const 512))", EBADF),
        check(
            "(call $path_open (i32.const 3) (i32.const 0) (i32.const 0) (i32.const 4) (i32.const 0) (i64.const 0) (i64.const 0) (i32.const 0) (i32.const 512))",
            EBADF,
        ),
        check("(call $sock_accept (i32.const 3) (i32.const 0) (i32.const 512))", EBADF),
        // stdin is empty: success, zero bytes read.
        "(i32.store (i32.const 256) (i32.const 300)) (i32.store (i32.const 260) (i32.const 16))".into(),
        check("(call $fd_read (i32.const 0) (i32.const 256) (i32.const 1) (i32.const 512))", 0),
        check("(i32.load (i32.const 512))", 0),
        // no environment, no arguments
        check("(call $environ_sizes_get (i32.const 512) (i32.const 516))", 0),
        check("(i32.load (i32.const 512))", 0),
        check("(call $args_sizes_get (i32.const 512) (i32.const 516))", 0),
        check("(i32.load (i32.const 512))", 0),
        "(call $finish (i32.const 0) (i32.const 6) (i32.const 4))".into(),
    ]
    .join("\n");
    let (o, host) = run_guest(&body).await;
    assert_eq!(ok(&o), &json!(null), "{:?}", o.result);
    assert_eq!(host.count(), 0);
}

/// Sizes the guest chooses are bounded before the host spends on them: a
/// 4 GiB `random_get`, a buffer past the end of memory, a billion iovecs.
/// Each traps its own instance, quickly, and the host's memory does not
/// grow by what was asked.
#[tokio::test]
async fn guest_chosen_sizes_in_wasi_calls_cost_the_host_nothing() {
    for body in [
        "(drop (call $random_get (i32.const 0) (i32.const -16)))",
        "(drop (call $random_get (i32.const 65000) (i32.const 4096)))",
        "(drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1000000000) (i32.const 512)))",
        "(drop (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1000000000) (i32.const 512)))",
    ] {
        let before = common::rss_bytes();
        let started = std::time::Instant::now();
        let (o, host) = run_guest(body).await;
        let grew = common::rss_bytes().saturating_sub(before);
        assert!(
            matches!(o.result, Err(ExecError::Internal { .. })),
            "{body}: {:?}",
            o.result
        );
        assert_eq!(host.count(), 0, "{body}");
        assert!(grew < 32 << 20, "{body}: the host grew by {grew} bytes");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "{body}: took {:?}",
            started.elapsed()
        );
    }
}

/// `poll_oneoff` can sleep, outside wasm where epoch interruption cannot
/// reach: an hour's sleep still ends with the execution's wall-clock
/// limit, and the next execution is unharmed.
#[tokio::test]
async fn a_guest_sleeping_in_wasi_is_stopped_by_the_wall_clock() {
    let sb = common::fresh().await;
    let host = TestHost::default();
    let limits = Limits {
        wall_time_ms: 300,
        ..Limits::default()
    };
    // One clock subscription at 1024 (monotonic, one hour), the event at
    // 2048, the count at 2100.
    let body = "(i64.store (i32.const 1024) (i64.const 7))
        (i32.store8 (i32.const 1032) (i32.const 0))
        (i32.store (i32.const 1040) (i32.const 1))
        (i64.store (i32.const 1048) (i64.const 3600000000000))
        (i64.store (i32.const 1056) (i64.const 0))
        (i32.store16 (i32.const 1064) (i32.const 0))
        (drop (call $poll_oneoff (i32.const 1024) (i32.const 2048) (i32.const 1) (i32.const 2100)))
        (call $finish (i32.const 0) (i32.const 6) (i32.const 4))";
    let started = std::time::Instant::now();
    let o = sb
        .execute_module(&guest(body), "", &limits, &host)
        .await
        .expect("module loads");
    let took = started.elapsed();
    assert!(
        matches!(
            o.result,
            Err(ExecError::LimitExceeded {
                limit: airlock_sandbox::Limit::WallTimeMs,
                ..
            })
        ),
        "{:?}",
        o.result
    );
    assert!(took < std::time::Duration::from_secs(5), "took {took:?}");
    assert_eq!(
        ok(&sb.execute("1 + 1", &Limits::default(), &host).await),
        &json!(2)
    );
}

/// A WASI call copies at most 64 KiB of guest memory into the host: a
/// 100 MB path (the guest's own memory grown to hold it) is refused with
/// `ENOMEM` (48) before the host copies it, where wasmtime's default would
/// have let each call take 128 MiB.
#[tokio::test]
async fn a_wasi_call_copies_little_of_the_guest_s_memory() {
    let body = "(drop (memory.grow (i32.const 1600)))
        (if (i32.ne
              (call $path_open (i32.const 3) (i32.const 0) (i32.const 65536) (i32.const 100000000)
                (i32.const 0) (i64.const 0) (i64.const 0) (i32.const 0) (i32.const 512))
              (i32.const 48))
          (then unreachable))
        (call $finish (i32.const 0) (i32.const 6) (i32.const 4))";
    let before = common::rss_bytes();
    let (o, _) = run_guest(body).await;
    assert_eq!(ok(&o), &json!(null), "{:?}", o.result);
    let grew = common::rss_bytes().saturating_sub(before);
    assert!(grew < 64 << 20, "the host grew by {grew} bytes");
}

#[tokio::test]
async fn a_guest_that_exits_is_reported_not_obeyed() {
    let (o, _) = run_guest("(call $proc_exit (i32.const 3))").await;
    let message = internal(&o);
    assert!(message.contains("exit"), "{message}");
}

#[tokio::test]
async fn a_guest_importing_anything_else_does_not_load() {
    let sb = common::fresh().await;
    for import in [
        r#"(import "env" "system" (func (param i32) (result i32)))"#,
        r#"(import "wasi_snapshot_preview1" "no_such_call" (func (param i32) (result i32)))"#,
    ] {
        let wasm = wat::parse_str(format!(
            r#"(module {import} (memory (export "memory") 1)
                (func (export "airlock_run") (param i32)) (func (export "airlock_reset")))"#
        ))
        .unwrap();
        let err = sb
            .execute_module(&wasm, "", &Limits::default(), &TestHost::default())
            .await
            .expect_err("linking fails");
        assert!(err.to_string().contains("unknown import"), "{err}");
    }
}
