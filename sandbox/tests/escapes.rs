//! Scripts trying to get out or to take the host down. Each must end in a
//! clear error (or a harmless value), and the sandbox must serve the next
//! execution afterwards.

mod common;

use airlock_sandbox::{ExecError, Limit, Limits};
use common::{ok, TestHost};
use serde_json::json;

async fn survives(script: &str, limits: &Limits) -> airlock_sandbox::Outcome {
    let sb = common::fresh().await;
    let host = TestHost::default();
    let o = sb.execute(script, limits, &host).await;
    assert_eq!(
        ok(&sb.execute("1 + 1", &Limits::default(), &host).await),
        &json!(2),
        "after {script}"
    );
    o
}

/// Asserts the execution ended on `limit`.
fn hit(o: &airlock_sandbox::Outcome, limit: Limit) {
    match &o.result {
        Err(ExecError::LimitExceeded { limit: l, .. }) if *l == limit => {}
        other => panic!("expected {limit} to be hit, got {other:?}"),
    }
}

fn short() -> Limits {
    Limits {
        wall_time_ms: 300,
        memory_bytes: 96 << 20,
        ..Limits::default()
    }
}

#[tokio::test]
async fn no_ambient_capability_is_reachable() {
    let o = survives(
        "['require', 'process', 'fetch', 'XMLHttpRequest', 'WebSocket', 'WebAssembly', 'Deno', 'Bun', \
          'importScripts', 'module', 'exports', 'global', 'setInterval', 'queueMicrotask']\n\
           .filter((name) => typeof globalThis[name] !== 'undefined')",
        &Limits::default(),
    )
    .await;
    assert_eq!(ok(&o), &json!([]));
    // Nothing of the host ABI is visible as a global.
    let o = survives(
        "Object.getOwnPropertyNames(globalThis).filter((n) => /airlock|wasi|host|native|__/i.test(n))",
        &Limits::default(),
    )
    .await;
    assert_eq!(ok(&o), &json!([]));
    // The function constructor gives back the same realm, nothing more.
    let o = survives(
        "Function('return typeof this.process')()",
        &Limits::default(),
    )
    .await;
    assert_eq!(ok(&o), &json!("undefined"));
}

#[tokio::test]
async fn modules_cannot_be_loaded() {
    let o = survives(
        "try { await import('fs'); return 'loaded' } catch (e) { return 'refused' }",
        &Limits::default(),
    )
    .await;
    assert_eq!(ok(&o), &json!("refused"));
}

#[tokio::test]
async fn endless_loop() {
    let o = survives("for (;;) {}", &short()).await;
    hit(&o, Limit::WallTimeMs);
}

#[tokio::test]
async fn endless_microtask_chain() {
    let o = survives(
        "const spin = () => Promise.resolve().then(spin); spin(); await new Promise(() => {})",
        &short(),
    )
    .await;
    hit(&o, Limit::WallTimeMs);
}

#[tokio::test]
async fn promise_flood() {
    let o = survives(
        "while (true) { new Promise((r) => r()).then(() => 1) }",
        &short(),
    )
    .await;
    assert!(
        matches!(o.result, Err(ExecError::LimitExceeded { .. })),
        "{:?}",
        o.result
    );
}

#[tokio::test]
async fn deep_recursion_hits_the_recursion_limit() {
    // The engine's recursion limit cannot be caught by the script, so a
    // runaway recursion cannot be turned into an endless retry loop.
    let o = survives(
        "function f(n) { return f(n + 1) + 1 }\ntry { f(0) } catch (e) { 'caught' }",
        &short(),
    )
    .await;
    assert!(
        matches!(
            o.result,
            Err(ExecError::LimitExceeded {
                limit: Limit::RecursionDepth,
                value: 512,
                used: 513
            })
        ),
        "{:?}",
        o.result
    );
    // Recursion well inside the limit works.
    let o = survives(
        "function depth(n) { return n === 0 ? 0 : 1 + depth(n - 1) }\ndepth(400)",
        &short(),
    )
    .await;
    assert_eq!(ok(&o), &json!(400));
}

#[tokio::test]
async fn deep_json_nesting() {
    let o = survives(
        "JSON.parse('['.repeat(200000) + ']'.repeat(200000)); 'parsed'",
        &short(),
    )
    .await;
    match &o.result {
        Ok(v) => assert_eq!(v, &json!("parsed")),
        Err(ExecError::RuntimeError { message, .. }) => assert!(
            message.contains("RangeError") || message.contains("SyntaxError"),
            "{message}"
        ),
        Err(ExecError::LimitExceeded { .. }) => {}
        other => panic!("{other:?}"),
    }
}

/// `JSON.stringify` of nesting deeper than the recursion limit ends the
/// script with that limit (boa's own recursed until the guest's stack ran
/// out, a trap at about 3,000 levels); nesting inside it is written.
#[tokio::test]
async fn deep_json_stringify_hits_the_recursion_limit() {
    let o = survives(
        "let a = []; for (let i = 0; i < 100000; i++) a = [a];\ntry { JSON.stringify(a) } catch (e) { 'caught' }",
        &short(),
    )
    .await;
    hit(&o, Limit::RecursionDepth);
    // A `toJSON` that stringifies again nests against the same limit.
    let o = survives(
        "let n = 0;\n\
         const mk = () => { let a = [{ toJSON() { return n++ < 200 ? JSON.stringify(mk()) : 0 } }];\n\
         for (let i = 0; i < 505; i++) a = [a]; return a };\n\
         JSON.stringify(mk())",
        &short(),
    )
    .await;
    hit(&o, Limit::RecursionDepth);
    // A cycle is the language's TypeError even where it closes at the
    // limit (512 arrays deep).
    let o = survives(
        "let a = []; const top = a; for (let i = 0; i < 511; i++) a = a[0] = [];\n\
         a[0] = top; let r; try { JSON.stringify(top) } catch (e) { r = String(e) } r",
        &short(),
    )
    .await;
    assert_eq!(ok(&o), &json!("TypeError: cyclic object value"));
    let o = survives(
        "let a = {}; for (let i = 0; i < 500; i++) a = {a}; JSON.stringify(a, null, 1).length",
        &short(),
    )
    .await;
    assert!(
        ok(&o).as_u64().is_some_and(|n| n > 500 * 6),
        "{:?}",
        o.result
    );
}

#[tokio::test]
async fn a_gigabyte_string() {
    let o = survives("const s = 'x'.repeat(1 << 30); s.length", &short()).await;
    match &o.result {
        Err(ExecError::LimitExceeded {
            limit: Limit::MemoryBytes,
            value,
            used,
        }) => {
            assert_eq!(*value, 96 << 20);
            assert!(*used > *value);
        }
        Err(ExecError::RuntimeError { message, .. }) => {
            assert!(message.contains("RangeError"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    let o = survives("let s = 'x'; while (true) s = s + s; 0", &short()).await;
    assert!(
        matches!(
            o.result,
            Err(ExecError::LimitExceeded { .. }) | Err(ExecError::RuntimeError { .. })
        ),
        "{:?}",
        o.result
    );
}

#[tokio::test]
async fn array_and_typed_array_bombs() {
    for script in [
        "const a = []; a[2 ** 32 - 2] = 1; a.fill(0); 0",
        "new Uint8Array(2 ** 31).length",
        "const parts = []; while (true) parts.push(new ArrayBuffer(1 << 20)); 0",
        "Array.from({length: 1e9}, (_, i) => i).length",
    ] {
        let o = survives(script, &short()).await;
        assert!(
            matches!(
                o.result,
                Err(ExecError::LimitExceeded { .. }) | Err(ExecError::RuntimeError { .. })
            ),
            "{script}: {:?}",
            o.result
        );
    }
}

#[tokio::test]
async fn oversized_tool_results_hit_the_memory_limit_not_the_host() {
    let sb = common::fresh().await;
    let host = TestHost::default();
    let limits = Limits {
        memory_bytes: 48 << 20,
        ..Limits::default()
    };
    let o = sb
        .execute(
            "(await tools.big({bytes: 100000000})).length",
            &limits,
            &host,
        )
        .await;
    hit(&o, Limit::MemoryBytes);
    assert_eq!(ok(&sb.execute("1", &limits, &host).await), &json!(1));
}

#[tokio::test]
async fn deeply_nested_tool_results() {
    let o = survives(
        "const r = await tools.deep({depth: 100}); JSON.stringify(r).length",
        &Limits::default(),
    )
    .await;
    assert_eq!(ok(&o), &json!(200));
    let o = survives(
        "try { await tools.deep({depth: 5000}) } catch (e) { return e.message }",
        &Limits::default(),
    )
    .await;
    // serde_json refuses more than 128 levels when the guest reads it.
    assert!(
        ok(&o).as_str().unwrap().contains("not valid JSON"),
        "{:?}",
        o.result
    );
}

#[tokio::test]
async fn tool_call_flood() {
    let limits = Limits {
        tool_calls: 50,
        ..Limits::default()
    };
    let sb = common::fresh().await;
    let host = TestHost::default();
    let o = sb
        .execute(
            "await Promise.all(Array.from({length: 10000}, (_, i) => tools.echo({i})))",
            &limits,
            &host,
        )
        .await;
    assert!(
        matches!(
            o.result,
            Err(ExecError::LimitExceeded {
                limit: Limit::ToolCalls,
                value: 50,
                used: 51
            })
        ),
        "{:?}",
        o.result
    );
    assert!(host.count() <= 50);
}

#[tokio::test]
async fn a_rejected_promise_nobody_awaits_does_not_fail_the_run() {
    let o = survives(
        "tools.fail({}); Promise.reject(1); 'fine'",
        &Limits::default(),
    )
    .await;
    assert_eq!(ok(&o), &json!("fine"));
}

#[tokio::test]
async fn regex_backtracking_is_bounded_by_the_wall_clock() {
    let o = survives("/^(a+)+$/.test('a'.repeat(40) + 'b')", &short()).await;
    assert!(
        matches!(
            o.result,
            Err(ExecError::LimitExceeded {
                limit: Limit::WallTimeMs,
                ..
            }) | Ok(_)
        ),
        "{:?}",
        o.result
    );
}

#[tokio::test]
async fn prototype_pollution_payloads_cross_as_plain_data() {
    let host = TestHost::default();
    let sb = common::fresh().await;
    let o = sb
        .execute(
            "const args = JSON.parse('{\"__proto__\": {\"admin\": true}, \"constructor\": {\"prototype\": {\"x\": 1}}}');\n\
             await tools.echo(args); ({}).admin === undefined",
            &Limits::default(),
            &host,
        )
        .await;
    assert_eq!(ok(&o), &json!(true));
    let sent = &host.calls.lock().unwrap()[0].args;
    assert_eq!(
        sent["__proto__"],
        json!({"admin": true}),
        "sent as an ordinary key"
    );
}
