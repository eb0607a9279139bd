//! Scripts written in TypeScript run as their JavaScript: the guest
//! blanks the types (every position kept) when the script does not parse
//! as JavaScript. Errors point at the agent's own lines and columns;
//! TypeScript that would need code generated is refused, naming what to
//! write instead.

mod common;

use airlock_sandbox::ExecError;
use common::{ok, run};
use serde_json::json;

/// The shapes agents write when they were shown TypeScript declarations.
#[tokio::test]
async fn typescript_runs_as_its_javascript() {
    let cases: &[(&str, serde_json::Value)] = &[
        // An annotation on a const, the issue's first failure.
        ("const n: number = 1 + 1;\nn", json!(2)),
        // Interfaces and type aliases, including ones never declared
        // (get_schema's names): nothing is type-checked.
        (
            "interface Vm { vmid: number; name?: string }\ntype Ids = number[];\nconst vms: VmListResult = await tools.node_list({});\nconst ids: Ids = [1, 2];\nids.length + vms.length",
            json!(5),
        ),
        // Generics in calls and constructors, typed and optional
        // parameters, return types.
        (
            "function first<T>(xs: T[], fallback?: T): T | undefined { return xs[0] ?? fallback; }\nconst m = new Map<string, number[]>();\nm.set('a', [1]);\nfirst<number>(m.get('a')!, 0)",
            json!(1),
        ),
        // `as`, non-null `!`, `satisfies`, arrow parameter types.
        (
            "const o = { a: 1 } as const;\nconst xs = [1, 2, 3].map((x: number): number => x * 2);\nconst s = { k: 'v' } satisfies Record<string, string>;\n[o.a, xs[2]!, s.k]",
            json!([1, 6, "v"]),
        ),
        // Classes with typed fields and access modifiers on methods.
        (
            "class Counter { private n: number = 0; public add(by: number): this { this.n += by; return this; } get value(): number { return this.n; } }\nnew Counter().add(2).add(3).value",
            json!(5),
        ),
        // Top-level await and return in a TypeScript script.
        (
            "const nodes: Array<{ node: string }> = await tools.node_list({});\nif (nodes.length > 0) { return nodes.length as number; }\n0",
            json!(3),
        ),
        // Type-only imports of nothing are types too.
        ("let x: unknown = 'a';\n(x as string).toUpperCase()", json!("A")),
    ];
    for (script, want) in cases {
        let outcome = run(script).await;
        assert_eq!(ok(&outcome), want, "{script}");
    }
}

/// A runtime error in a TypeScript script points at the agent's line and
/// column: the blanked types moved nothing.
#[tokio::test]
async fn a_typescript_runtime_error_names_the_agents_line_and_column() {
    let script = "interface Row { id: number }\nconst rows: Row[] = [];\nconst m = new Map<number, Row>();\ntype T = string;\nfunction f(x: T): T { return x; }\nconst n: number = 1;\nconst bad = (null as any).id;\n";
    match run(script).await.result {
        Err(ExecError::RuntimeError { stack, .. }) => {
            let stack = stack.unwrap_or_default();
            assert!(stack.contains("script.js:7:"), "{stack}");
        }
        other => panic!("{other:?}"),
    }
    // A syntax error that is not about types: the line and column of a
    // script that parses as neither.
    match run("const a: number = 1;\nconst b = ;").await.result {
        Err(ExecError::SyntaxError { line, column, .. }) => {
            assert_eq!(line, 2);
            assert!(column >= 10, "{column}");
        }
        other => panic!("{other:?}"),
    }
}

/// `enum` and `namespace` need code generated: refused, saying what to
/// write instead, at the agent's position.
#[tokio::test]
async fn typescript_that_needs_code_generated_is_refused_with_the_way_that_works() {
    for (script, says, line) in [
        (
            "const a = 1;\nenum Color { Red, Green }\nColor.Red",
            "const Color = { Red: 0, Green: 1 } as const",
            2,
        ),
        (
            "namespace Util { export const x = 1 }\nUtil.x",
            "plain objects or functions",
            1,
        ),
    ] {
        match run(script).await.result {
            Err(ExecError::SyntaxError {
                message, line: at, ..
            }) => {
                assert!(message.contains(says), "{message}");
                assert_eq!(at, line, "{message}");
            }
            other => panic!("{script}: {other:?}"),
        }
    }
}

/// A JavaScript syntax error is reported as before: the JavaScript
/// parser's words, not the TypeScript one's.
#[tokio::test]
async fn javascript_syntax_errors_are_unchanged() {
    match run("const a = 1;\nconst b = ;").await.result {
        Err(ExecError::SyntaxError {
            line,
            column,
            message,
        }) => {
            assert_eq!((line, column), (2, 11), "{message}");
            assert!(!message.contains("TypeScript"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

/// Found by an attacker's reading: module syntax was once rewritten by
/// matching lines, so a line of a template literal or a comment that
/// read `import type …`, `export default …` or `export type …` was
/// rewritten too, and a backtick on it went with it: text a reader sees
/// as a string ran as code. Now only tokens are rewritten: every string
/// reaches the tool as written, and nothing a reader sees as text runs.
#[tokio::test]
async fn module_syntax_inside_strings_and_comments_stays_text() {
    let sandbox = common::fresh().await;
    // The flip: `import type` on a template's last line, its backtick
    // closing the template. Blanking the line made `tools.echo` code.
    let flip = "const confirm: boolean = false;\nconst doc = `\nimport type { Vm } from \"./vm\"; `;\nconst more = `\nawait tools.echo({ stop: true });\n`; // `\nawait tools.echo({ doc, more });\nconfirm ? 'stopped' : 'left running'";
    let comment = "const n: number = 1;\nconst f = function () { /*\nimport type { Vm } from \"./vm\";\n*/ };\nawait tools.echo({ source: f.toString() });\nn";
    let export_default = "const config: number = 1;\nconst s: string = `line one\nexport default config`;\nawait tools.echo({ s });\nconfig";
    let export_types = "const t: string = `\nexport type X = 1;\nexport interface Y {}\n`;\nawait tools.echo({ t });\nt.length";
    for (script, text) in [
        (
            flip,
            json!({"doc": "\nimport type { Vm } from \"./vm\"; ", "more": "\nawait tools.echo({ stop: true });\n"}),
        ),
        (
            comment,
            json!({"source": "function () { /*\nimport type { Vm } from \"./vm\";\n*/ }"}),
        ),
        (
            export_default,
            json!({"s": "line one\nexport default config"}),
        ),
        (
            export_types,
            json!({"t": "\nexport type X = 1;\nexport interface Y {}\n"}),
        ),
    ] {
        let host = common::TestHost::default();
        let outcome = sandbox
            .execute(script, &airlock_sandbox::Limits::default(), &host)
            .await;
        assert!(outcome.result.is_ok(), "{script}: {:?}", outcome.result);
        let calls = host.calls.lock().unwrap();
        assert_eq!(calls.len(), 1, "{script}: {:?}", host.names());
        assert_eq!(calls[0].args, text, "{script}");
    }
}

/// Module syntax that is made of tokens is still what it was: type-only
/// imports and exports erased, `export default` the result.
#[tokio::test]
async fn module_syntax_made_of_tokens_is_rewritten() {
    for (script, want) in [
        (
            "import type { Vm } from './vm';\nexport type Ids = number[];\nexport interface R { a: number }\nexport type { R as Row };\nconst ids: Ids = [1, 2];\nexport default ids.length",
            json!(2),
        ),
        (
            "export default async function main() {\n  const n = 3;\n  return n;\n}",
            json!(3),
        ),
    ] {
        let outcome = run(script).await;
        assert_eq!(ok(&outcome), &want, "{script}");
    }
    // `export default` with its value on the next line would return
    // nothing: it is left to fail, not rewritten.
    assert!(matches!(
        run("export default\n  3").await.result,
        Err(ExecError::SyntaxError { .. })
    ));
}

/// A reviewed script (a runbook) runs as the JavaScript its approver
/// read: no fence, `export default` or type is taken away, and a check
/// before it is approved says so at its line.
#[tokio::test]
async fn reviewed_scripts_run_as_written() {
    let sandbox = common::fresh().await;
    let limits = airlock_sandbox::Limits::default();
    for script in [
        "const n: number = 1;\nn",
        "```js\n1\n```",
        "export default 1",
        "import type { X } from './x';\n1",
        // As a runbook runs: its input on the line before the fence.
        "const input = {};\n```js\n1\n```",
    ] {
        let host = common::TestHost::default();
        let outcome = sandbox.execute_within(script, &limits, &host).await;
        assert!(
            matches!(outcome.result, Err(ExecError::SyntaxError { .. })),
            "{script}: {:?}",
            outcome.result
        );
        match sandbox.check_as_written(script).await {
            Err(ExecError::SyntaxError { line, .. }) => assert!(line >= 1, "{script}"),
            other => panic!("{script}: {other:?}"),
        }
    }
    // Checked as it would run: an early error of the compiler too (the
    // reviewer's `new.target` passed a parse-only check, then failed
    // every run).
    assert!(matches!(
        sandbox.check_as_written("new.target;\n1").await,
        Err(ExecError::SyntaxError { .. })
    ));
    // JavaScript is checked without running: no call reaches a host.
    assert_eq!(
        sandbox
            .check_as_written("await tools.echo({});\n1")
            .await
            .map_err(|e| e.to_string()),
        Ok(())
    );
    let host = common::TestHost::default();
    let outcome = sandbox
        .execute_within("const r = await tools.echo({a: 1});\nr.a", &limits, &host)
        .await;
    assert_eq!(ok(&outcome), &json!(1));
}

/// Found while fixing the rewrite above: `<!--` starts a comment to the
/// sandbox's JavaScript (Annex B), and code to TypeScript, modules and
/// people (`x <!--y` is `x < !(--y)`). A backtick after it opened a
/// template for a reader but not for the sandbox, so a call the reader
/// saw as text ran. Where such a comment starts depends on lexing that
/// other parsers get wrong (an attacker's review hid one behind a
/// TypeScript instantiation expression, and behind line separators a
/// line-based look missed), so `<!--` and `-->` are refused anywhere,
/// saying how to write them.
#[tokio::test]
async fn html_like_comments_are_refused_anywhere() {
    let sandbox = common::fresh().await;
    for (script, at) in [
        (
            "let y = 1, x = 0;\nconst z = x <!--y; const s = `\nawait tools.echo({ ran: true });\n`; // `\n'done'",
            (2, 13),
        ),
        ("const a = 1;\n  --> `\nawait tools.echo({ ran: true });\n// `\n'done'", (2, 3)),
        ("const n: number = 1;\nconst m = n <!--n;\nm", (2, 13)),
        // The reviewer's: behind an instantiation expression, and after a
        // line separator where swc cannot parse the script at all.
        (
            "const a = 1, b = 2; let n = 3\nconst t = a < b > /`/ < n <!--n + `\nawait tools.echo({ ran: true })\n// `",
            (2, 27),
        ),
        (
            "for (var k = 0 in {}) {}\nlet n = 1\u{2028}--> `\nawait tools.echo({ ran: true }) // `",
            (2, 11),
        ),
        ("const html = '<!-- note -->';\nhtml.length", (1, 15)),
        ("let n = 3;\nwhile (n-->0) {}\nn", (2, 9)),
    ] {
        let host = common::TestHost::default();
        let outcome = sandbox
            .execute(script, &airlock_sandbox::Limits::default(), &host)
            .await;
        match &outcome.result {
            Err(ExecError::SyntaxError {
                message,
                line,
                column,
            }) => {
                assert_eq!((*line, *column), at, "{script}: {message}");
                assert!(message.contains("`n-- > 0`"), "{message}");
            }
            other => panic!("{script}: {other:?}"),
        }
        assert_eq!(host.count(), 0, "{script}");
        match sandbox.check_as_written(script).await {
            Err(ExecError::SyntaxError { .. }) => {}
            other => panic!("a runbook's check: {script}: {other:?}"),
        }
    }
    // Written as the refusal says, the same text runs.
    for (script, want) in [
        (
            "const html = '\\x3C!-- note --\\x3E';\nhtml.length",
            json!(13),
        ),
        ("let n = 3;\nwhile (n-- > 0) {}\nn", json!(-1)),
    ] {
        assert_eq!(ok(&run(script).await), &want, "{script}");
    }
}

/// Found by an attacker's review: swc drops a leading byte order mark
/// before counting positions, so a rewrite landed three bytes early and a
/// blanked `import type` line kept a backtick that opened a template; and
/// a rewritten script that then parsed as JavaScript ran with
/// JavaScript's reading where the rewrite had followed TypeScript's
/// (`a < b > /`/` is a division and a template to one, a regular
/// expression to the other). Neither calls anything now.
#[tokio::test]
async fn a_rewrite_is_never_read_two_ways() {
    let sandbox = common::fresh().await;
    for script in [
        "\u{feff}import type { X } from \";`\"\nconst note = \"`; await tools.echo({ ran: true }); `\";\n// `\nnote",
        "import type { Vm } from 'airlock';\nconst a = 1, b = 2;\nconst x = a < b > /`/; await tools.echo({ ran: true }) // `\n'done'",
    ] {
        let host = common::TestHost::default();
        let outcome = sandbox
            .execute(script, &airlock_sandbox::Limits::default(), &host)
            .await;
        assert_eq!(host.count(), 0, "{script}: {:?}", outcome.result);
    }
}

/// Found by the second attacker's review: boa reads a `/` after the name
/// `async` as a regular expression, where other engines read a division,
/// so a template a reader saw became code; and a
/// reviewed script could hide a line break from its reviewer (U+2028
/// shows as nothing in a terminal) or a fence behind a byte order mark.
/// Both are refused before they are parsed.
#[tokio::test]
async fn text_read_two_ways_is_refused() {
    let sandbox = common::fresh().await;
    let limits = airlock_sandbox::Limits::default();
    for (script, at) in [
        (
            "const async = (x) => x\nconst note = async\n/`/; await tools.echo({ ran: true }); //`\nnote",
            (2, 14),
        ),
        ("let async = 1;\nconst n = async /* a\n */ / 2;\nn", (2, 11)),
        ("let async = 6;\nconst h = async / 2;\nh", (2, 11)),
    ] {
        let host = common::TestHost::default();
        match sandbox.execute(script, &limits, &host).await.result {
            Err(ExecError::SyntaxError {
                message,
                line,
                column,
            }) => {
                assert_eq!((line, column), at, "{message}");
                assert!(message.contains("Name the value otherwise"), "{message}");
            }
            other => panic!("{script}: {other:?}"),
        }
        assert_eq!(host.count(), 0, "{script}");
    }
    // Async functions run; `async` followed by `/` is refused wherever it
    // stands (a look at the text, as for `<!--`), strings and comments too.
    for (script, want) in [
        ("const f = async () => 1;\ntypeof f", json!("function")),
        ("const g = async () => 2;\nawait g()", json!(2)),
    ] {
        assert_eq!(ok(&run(script).await), &want, "{script}");
    }
    // What a reviewer cannot see is refused in reviewed code, and runs in
    // an agent's own.
    for script in [
        "// no shutdown unless confirmed\u{2028}await tools.echo({ ran: true })",
        "const a = 1;\n\u{feff}```js\nthrow 1\n\u{feff}```\na",
        "const s = 'abc\u{202e}def';\ns",
        "const a = 1;\rconst b = 2;\na + b",
    ] {
        let host = common::TestHost::default();
        let outcome = sandbox.execute_within(script, &limits, &host).await;
        match outcome.result {
            Err(ExecError::SyntaxError { message, .. }) => {
                assert!(message.contains("cannot see"), "{script}: {message}")
            }
            other => panic!("{script}: {other:?}"),
        }
        assert_eq!(host.count(), 0, "{script}");
        assert!(sandbox.check_as_written(script).await.is_err(), "{script}");
    }
    assert_eq!(
        ok(&run("const a = 1;\rconst b = 2;\na + b").await),
        &json!(3)
    );
}
