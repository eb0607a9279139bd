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
        // An annotation on a const, the first failure.
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
