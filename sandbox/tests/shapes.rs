//! The shapes scripts come in besides a plain body, as agents write them:
//! one function (arrow or not, async or not) that is called; `export
//! default` of one; a script inside a Markdown code fence. And what a
//! script reaches for that a sandbox has not (`fetch`, `require`,
//! `process`, `import`): an error that names the way that works.

mod common;

use airlock_sandbox::ExecError;
use common::{ok, run};
use serde_json::json;

#[tokio::test]
async fn a_script_that_is_one_function_is_called() {
    for script in [
        "async () => {\n  const nodes = await tools.node_list({});\n  return nodes.length;\n}",
        "() => 3",
        "(async function () { return 3; })",
        "export default async function main() {\n  return (await tools.node_list({})).length;\n}",
        "export default () => 3;",
        "```js\nconst nodes = await tools.node_list({});\nnodes.length\n```",
        "```typescript\nconst n: number = (await tools.node_list({})).length;\nn\n```\n",
        "```\nasync () => 3\n```",
    ] {
        assert_eq!(ok(&run(script).await), &json!(3), "{script}");
    }
}

/// A called function's rejection is the outcome, said once: not also a
/// warning about an unhandled rejection.
#[tokio::test]
async fn a_called_function_that_throws_fails_once() {
    for script in [
        "async () => { throw new Error('no node pve9'); }",
        "export default async function main() { await null; throw new Error('no node pve9'); }",
    ] {
        let out = run(script).await;
        match &out.result {
            Err(ExecError::RuntimeError { message, .. }) => {
                assert!(message.contains("no node pve9"), "{script}: {message}")
            }
            other => panic!("{script}: {other:?}"),
        }
        assert!(
            out.logs.iter().all(|l| !l.message.contains("Uncaught")),
            "{script}: {:?}",
            out.logs
        );
    }
}

/// Positions survive the unwrapping: an error on line 3 of a fenced
/// script is on line 3.
#[tokio::test]
async fn unwrapped_scripts_keep_their_lines() {
    match run("```js\nconst a = 1;\nnull.x;\n```").await.result {
        Err(ExecError::RuntimeError { stack, .. }) => {
            let stack = stack.unwrap_or_default();
            assert!(stack.contains("script.js:3:"), "{stack}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn what_a_sandbox_has_not_is_named_with_the_way_that_works() {
    for (script, says) in [
        ("await fetch('http://169.254.169.254/')", "tools.NAME(args)"),
        (
            "require('fs')",
            "`search` finds one, then `await tools.NAME(args)` calls it",
        ),
        ("process.env.HOME", "no process environment"),
    ] {
        match run(script).await.result {
            Err(ExecError::RuntimeError { message, .. }) => {
                assert!(
                    message.contains("ReferenceError") && message.contains(says),
                    "{script}: {message}"
                );
            }
            other => panic!("{script}: {other:?}"),
        }
    }
    // A dynamic import() says the same (boa has no module loader here).
    match run("await import('fs')").await.result {
        Err(ExecError::RuntimeError { message, .. }) => assert!(
            message.contains("no modules here") && message.contains("tools.NAME(args)"),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
    // `performance.now()`, which agents time steps with, is there: whole
    // milliseconds of Date.now()'s clock, from its first use.
    let timed = run(
        "const a = performance.now(); let x = 0; for (let i = 0; i < 1e5; i++) x += i;\n\
         const b = performance.now();\n\
         [typeof a, a >= 0 && a <= b, Number.isInteger(b), String(performance), Object.keys(JSON.parse(JSON.stringify(performance)))]",
    )
    .await;
    assert_eq!(
        ok(&timed),
        &json!(["number", true, true, "[object Performance]", ["timeOrigin"]])
    );
    match run("import { readFile } from 'fs';\nreadFile").await.result {
        Err(ExecError::SyntaxError { message, line, .. }) => {
            assert_eq!(line, 1);
            assert!(message.contains("not a module"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

/// The result is the script's completion value, as `eval` gives it: the
/// last expression statement of the branch of an `if … else` or of a
/// `try … catch` that ran, not `null`.
#[tokio::test]
async fn completion_values_are_as_eval_gives_them() {
    for (script, want) in [
        (
            "const n = 2;\nif (n > 1) { 'many' } else { 'one' }",
            json!("many"),
        ),
        (
            "const n = 1;\nif (n > 1) { 'many' } else if (n === 1) 'one'; else { 'none' }",
            json!("one"),
        ),
        (
            "try { JSON.parse('{'); 'parsed' } catch (e) { 'bad: ' + e.name }",
            json!("bad: SyntaxError"),
        ),
        (
            "try { const nodes = await tools.node_list({}); nodes.length } catch { -1 }",
            json!(3),
        ),
        ("{ const a = 1; a + 1 }", json!(2)),
        // A branch without an expression statement gives null, as before.
        ("if (false) { 'x' }", json!(null)),
    ] {
        assert_eq!(ok(&run(script).await), &want, "{script}");
    }
}

/// The web-platform globals agents reach for: base64, UTF-8 bytes, deep
/// clones.
#[tokio::test]
async fn web_platform_globals_agents_reach_for() {
    let script = r#"const bytes = new TextEncoder().encode("héllo €𝄞");
const c = structuredClone({d: new Date(0), m: new Map([[1, [1, 2]]]), u: new Uint8Array([7])});
let bad = null;
try { structuredClone({f() {}}.f) } catch (e) { bad = e.name }
let latin = null;
try { btoa("€") } catch (e) { latin = e.name }
({
  bytes: bytes.length,
  text: new TextDecoder().decode(bytes),
  replaced: new TextDecoder().decode(new Uint8Array([0x61, 0xff, 0x62])),
  b64: btoa("hello"),
  back: atob(" aGVs\nbG8= "),
  clone: [c.d.getTime(), c.m.get(1), c.u[0], c.m instanceof Map],
  bad,
  latin,
})"#;
    assert_eq!(
        ok(&run(script).await),
        &json!({
            "bytes": 14,
            "text": "héllo €𝄞",
            "replaced": "a\u{fffd}b",
            "b64": "aGVsbG8=",
            "back": "hello",
            "clone": [0, [1, 2], 7, true],
            "bad": "DataCloneError",
            "latin": "InvalidCharacterError",
        })
    );
}

/// Found by an attacker's reading: the result's `return` goes only where
/// a statement starts (an assignment or update through a call is not cut
/// in two); a valid script's strings are never rewritten; only a script
/// that is one function has its value called (a forgotten `()` calls
/// nothing).
#[tokio::test]
async fn the_result_rules_touch_nothing_else() {
    for (script, want) in [
        (
            "const m = new Map([['a', {n: 0}]]);\nif (true) { m.get('a').n = 1 }\nm.get('a').n",
            json!(1),
        ),
        (
            "const m = new Map([['a', {n: 0}]]);\ntry { m.get('a').n++ } catch {}",
            json!(0),
        ),
        (
            "const src = `\nexport default function h() {}`;\nsrc.includes('export default')",
            json!(true),
        ),
    ] {
        assert_eq!(ok(&run(script).await), &want, "{script}");
    }
    // A function as the value of a script that is more than one function
    // is not called: the result is refused as before.
    let outcome = run("const f = () => 41;\nf").await;
    assert!(outcome.result.is_err(), "{:?}", outcome.result);
}
