mod common;

use airlock_sandbox::{Limits, SandboxConfig};
use common::TestHost;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smoke() {
    let t = std::time::Instant::now();
    let sb = common::sandbox(SandboxConfig::default()).await;
    eprintln!("new: {:?} compiled_now={}", t.elapsed(), sb.compiled_now());
    let host = TestHost::default();
    for script in [
        "1+1",
        "const n = await tools.list_nodes({}); n.length",
        "const r = await Promise.all([tools.sleep({ms: 200}), tools.sleep({ms: 200}), tools.sleep({ms:200})]); r",
        "console.log('hi', {a: 1}); console.warn('w'); ({x: [1, undefined, () => 1]})",
        "let x = ;",
        "\n\nfoo.bar()",
        "try { await tools.fail({code: 'denied', message: 'nope'}) } catch (e) { ({name: e.name, tool: e.tool, code: e.code, msg: e.message}) }",
        "await tools.fail({code: 'policy_denied', message: 'nope'})",
        "await new Promise(() => {})",
        "let t = 0; setTimeout(() => { t = 1 }, 10); await new Promise(r => setTimeout(r, 20)); t",
        "while (true) {}",
        "Promise.reject(new Error('lost')); 5",
        "new Date().getFullYear() > 2000 && Math.random() < 1",
    ] {
        let t = std::time::Instant::now();
        let limits = Limits { wall_time_ms: 1000, ..Limits::default() };
        let o = sb.execute(script, &limits, &host).await;
        eprintln!("{:?} {script:?}\n  => {}", t.elapsed(), serde_json::to_string(&o).unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timing() {
    use airlock_sandbox::Mode;
    let host = TestHost::default();
    for mode in [Mode::Fresh, Mode::Reuse] {
        let sb = common::sandbox(SandboxConfig { mode, ..SandboxConfig::default() }).await;
        for script in ["1+1", "await tools.echo({a: 1})", "let s = 0; for (let i = 0; i < 10; i++) { s += (await tools.add({a: i, b: 1})) } s"] {
            let mut v = Vec::new();
            for _ in 0..300 {
                sb.settle().await;
                let t = std::time::Instant::now();
                let o = sb.execute(script, &Limits::default(), &host).await;
                v.push(t.elapsed().as_micros());
                assert!(o.is_ok(), "{o:?}");
            }
            v.sort();
            eprintln!("{mode:?} {script:?}: p50 {}us p90 {}us min {}us", v[150], v[270], v[0]);
        }
    }
}
