//! Durable executions' journal: what crossed the boundary, replayed in a
//! fresh instance without sending anything, then live; divergence stops a
//! replay before anything leaves it.

mod common;

use airlock_sandbox::{Entry, ExecError, Journal, Limit, Limits, Outcome};
use common::{ok, TestHost};
use serde_json::json;

/// Scripts whose results depend on everything a replay must reproduce:
/// the clocks, Math.random and crypto, timers racing calls, the order answers
/// arrive in.
const NONDETERMINISTIC: &[&str] = &[
    // Clocks and randomness.
    "const t = Date.now(); const r = [Math.random(), Math.random()];
     const d = new Date().toISOString();
     const e = await tools.echo({t, r}); [t, r, d, e]",
    // performance.now(), on Date.now()'s journaled clock.
    "const p0 = performance.now(); const e = await tools.sleep({ms: 3});
     const p1 = performance.now();
     [p0, p1, p1 >= p0 + 3, Number.isInteger(p1), performance.timeOrigin === Date.now() - p1 || 'moved', e]",
    // crypto's random bytes (WASI random_get, journaled like Math.random's).
    "const id = crypto.randomUUID();
     const b = Array.from(crypto.getRandomValues(new Uint32Array(4)));
     const e = await tools.echo({id});
     [id, b, e, crypto.randomUUID()]",
    // Timers racing calls whose delay is random: who wins is timing.
    "const slow = (ms) => tools.sleep({ms: Math.floor(Math.random() * ms)});
     const timer = (ms, v) => new Promise((res) => setTimeout(() => res(v), ms));
     const order = [];
     await Promise.all([
       slow(6).then(() => order.push('a')),
       slow(6).then(() => order.push('b')),
       timer(3, 'x').then(() => order.push('t')),
       slow(6).then(() => order.push('c')),
     ]);
     [order, Date.now()]",
    // Promise.race and Promise.any over calls and timers.
    "const r = await Promise.race([
       tools.sleep({ms: 1 + Math.floor(Math.random() * 4)}).then(() => 'call'),
       new Promise((res) => setTimeout(() => res('timer'), 2)),
     ]);
     const a = await Promise.any([
       tools.fail({}),
       tools.sleep({ms: Math.floor(Math.random() * 3)}).then(() => 'first'),
       tools.sleep({ms: Math.floor(Math.random() * 3)}).then(() => 'second'),
     ]);
     [r, a, Math.random()]",
    // A loop whose calls depend on earlier answers and the clock.
    "const seen = [];
     for (let i = 0; i < 5; i++) {
       const v = await tools.echo({i, at: Date.now() % 1000, r: Math.random()});
       seen.push(v.r > 0.5 ? 'hi' : 'lo');
     }
     seen",
];

async fn journaled(
    sb: &airlock_sandbox::Sandbox,
    script: &str,
    host: &TestHost,
    journal: &mut Journal,
) -> Outcome {
    sb.execute_journaled(script, &Limits::default(), host, journal)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaying_a_journal_gives_the_same_calls_and_result_and_sends_nothing() {
    let sb = common::fresh().await;
    for script in NONDETERMINISTIC {
        let live_host = TestHost::default();
        let mut journal = Journal::new();
        let live = journaled(&sb, script, &live_host, &mut journal).await;
        let value = ok(&live).clone();
        let sent = live_host.count();
        assert!(sent > 0, "the script made calls");
        let recorded = journal.clone();
        let tools: Vec<_> = live
            .trace
            .iter()
            .map(|c| (c.tool.clone(), c.status.clone()))
            .collect();

        let replay_host = TestHost::default();
        for round in 0..1000 {
            let mut again = recorded.clone();
            let replay = journaled(&sb, script, &replay_host, &mut again).await;
            assert_eq!(
                ok(&replay),
                &value,
                "round {round} of {script}: the same result"
            );
            // The same calls; each the script saw end, ended the same
            // way. A call it stopped waiting for (a race's loser) may have
            // ended on the host unseen: the journal holds no end of it.
            assert_eq!(replay.trace.len(), tools.len());
            for (r, (tool, status)) in replay.trace.iter().zip(&tools) {
                assert_eq!(&r.tool, tool);
                if r.replayed {
                    assert_eq!(&r.status, status);
                } else {
                    assert_eq!(r.status, "cancelled");
                }
            }
            assert_eq!(again, recorded, "a full replay adds nothing");
            let stats = replay.stats.journal.as_ref().unwrap();
            assert_eq!(stats.replayed_entries, recorded.entries.len() as u64);
        }
        assert_eq!(replay_host.count(), 0, "{script}: a replay sends nothing");
    }
}

#[tokio::test]
async fn a_journal_cut_anywhere_resumes_and_sends_only_what_it_does_not_hold() {
    let sb = common::fresh().await;
    let script = "const out = [];
        for (let i = 1; i <= 3; i++) out.push((await tools.echo({i, r: Math.random()})).i);
        out";
    let host = TestHost::default();
    let mut full = Journal::new();
    let live = journaled(&sb, script, &host, &mut full).await;
    assert_eq!(ok(&live), &json!([1, 2, 3]));
    assert_eq!(full.calls(), (3, 3));

    // Cut after every entry: the calls whose end the cut holds are not
    // sent again; one started and not ended is sent again as resumed.
    for cut in 0..=full.entries.len() {
        let mut journal = Journal {
            script: full.script.clone(),
            entries: full.entries[..cut].to_vec(),
        };
        let (started, ended) = journal.calls();
        let host = TestHost::default();
        let o = journaled(&sb, script, &host, &mut journal).await;
        assert_eq!(ok(&o), &json!([1, 2, 3]), "cut at {cut}");
        let calls = host.calls.lock().unwrap();
        assert_eq!(
            calls.len(),
            3 - ended,
            "cut at {cut}: only calls without an end are sent"
        );
        for (n, call) in calls.iter().enumerate() {
            let i = call.args["i"].as_u64().unwrap() as usize;
            assert_eq!(i, ended + 1 + n, "cut at {cut}: in order");
            assert_eq!(
                call.resumed,
                i <= started,
                "cut at {cut}: call {i} is resumed only if the journal shows it started"
            );
        }
        assert_eq!(
            journal.calls(),
            (3, 3),
            "cut at {cut}: the journal is whole again"
        );
        assert_eq!(
            journal.entries[..cut],
            full.entries[..cut],
            "the stored entries are kept as they were"
        );
    }
}

/// What a host writes down before it sends a call: the journal as the
/// call leaves, its start included. Resumed from that copy, the execution
/// sends that call again (as resumed) and nothing before it.
#[tokio::test]
async fn a_journal_taken_as_a_call_leaves_resumes_at_that_call() {
    struct Tapping {
        inner: TestHost,
        taps: std::sync::Mutex<Vec<Option<Journal>>>,
    }
    #[async_trait::async_trait]
    impl airlock_sandbox::ToolHost for Tapping {
        async fn call(
            &self,
            call: airlock_sandbox::ToolCall,
        ) -> Result<serde_json::Value, airlock_sandbox::ToolFailure> {
            self.taps.lock().unwrap().push(call.journal.snapshot());
            self.inner.call(call).await
        }
    }
    let sb = common::fresh().await;
    let script = "const out = [];
        for (let i = 1; i <= 3; i++) out.push((await tools.echo({i, r: Math.random()})).i);
        [out, Math.random()]";
    let host = Tapping {
        inner: TestHost::default(),
        taps: Default::default(),
    };
    let mut full = Journal::new();
    let live = sb
        .execute_journaled(script, &Limits::default(), &host, &mut full)
        .await;
    let value = ok(&live).clone();
    let taps: Vec<Journal> = host
        .taps
        .into_inner()
        .unwrap()
        .into_iter()
        .map(|t| t.expect("a journaled execution's call sees its journal"))
        .collect();
    assert_eq!(taps.len(), 3);
    for (k, tap) in taps.into_iter().enumerate() {
        assert_eq!(
            tap.calls(),
            (k + 1, k),
            "call {} has left, unanswered",
            k + 1
        );
        assert_eq!(
            tap.entries[..],
            full.entries[..tap.entries.len()],
            "a prefix"
        );
        let again = TestHost::default();
        let mut journal = tap;
        let o = sb
            .execute_journaled(script, &Limits::default(), &again, &mut journal)
            .await;
        assert_eq!(ok(&o), &value, "resumed at call {}", k + 1);
        let calls = again.calls.lock().unwrap();
        assert_eq!(calls.len(), 3 - k, "nothing before call {} is sent", k + 1);
        assert!(calls[0].resumed, "call {} again, as resumed", k + 1);
        assert_eq!(calls[0].args["i"], k as u64 + 1);
        assert!(calls[1..].iter().all(|c| !c.resumed));
    }
    // An execution that is not journaled shows no journal.
    let plain = Tapping {
        inner: TestHost::default(),
        taps: Default::default(),
    };
    ok(&sb
        .execute("await tools.echo({})", &Limits::default(), &plain)
        .await);
    assert_eq!(plain.taps.into_inner().unwrap(), vec![None]);
}

#[tokio::test]
async fn a_journal_of_another_script_is_refused_before_anything_runs() {
    let sb = common::fresh().await;
    let host = TestHost::default();
    let mut journal = Journal::new();
    ok(&journaled(&sb, "await tools.echo({a: 1})", &host, &mut journal).await);
    let before = journal.clone();
    let other = TestHost::default();
    let o = journaled(&sb, "await tools.echo({a: 2})", &other, &mut journal).await;
    match o.error() {
        Some(ExecError::ReplayDiverged { entry: 0, message }) => {
            assert!(message.contains("another script"), "{message}");
            assert!(message.contains("nothing was run or sent"), "{message}");
        }
        e => panic!("expected ReplayDiverged, got {e:?}"),
    }
    assert_eq!(other.count(), 0);
    assert!(o.trace.is_empty());
    assert_eq!(
        journal, before,
        "a refused journal is handed back untouched"
    );
}

#[tokio::test]
async fn a_replay_that_asks_for_something_else_stops_there_and_sends_nothing() {
    let sb = common::fresh().await;
    // The second call's arguments come from the first call's answer.
    let script = "const a = await tools.echo({n: 1});
        const b = await tools.echo({n: a.n + 1});
        await tools.echo({n: b.n + 1})";
    let host = TestHost::default();
    let mut journal = Journal::new();
    assert_eq!(
        ok(&journaled(&sb, script, &host, &mut journal).await),
        &json!({"n": 3})
    );

    // An answer changed in the store: the replay makes another second
    // call than the journal holds.
    let mut forged = journal.clone();
    let first_done = forged
        .entries
        .iter()
        .position(|e| matches!(e, Entry::Done { .. }))
        .unwrap();
    let second_call = forged
        .entries
        .iter()
        .position(|e| matches!(e, Entry::Call { id: 2, .. }))
        .unwrap();
    if let Entry::Done { payload, .. } = &mut forged.entries[first_done] {
        *payload = r#"{"n":41}"#.into();
    }
    let other = TestHost::default();
    let o = journaled(&sb, script, &other, &mut forged).await;
    match o.error() {
        Some(ExecError::ReplayDiverged { entry, message }) => {
            assert_eq!(*entry as usize, second_call, "{message}");
            assert!(
                message.contains("the journal has call #2 to echo, the script asked for call #2 to echo with other arguments"),
                "{message}"
            );
            assert!(message.contains("nothing was sent"), "{message}");
        }
        e => panic!("expected ReplayDiverged, got {e:?}"),
    }
    assert_eq!(other.count(), 0, "a diverging replay sends nothing");

    // A call digest changed: the same.
    let mut forged = journal.clone();
    for e in &mut forged.entries {
        if let Entry::Call { id: 1, args, .. } = e {
            *args = "00".repeat(16);
        }
    }
    let o = journaled(&sb, script, &other, &mut forged).await;
    assert!(
        matches!(o.error(), Some(ExecError::ReplayDiverged { .. })),
        "{:?}",
        o.result
    );
    assert_eq!(other.count(), 0);

    // A clock reading where the journal has a call: the clock cannot stop
    // the guest, the next import does, before the call leaves.
    let clocked = "const a = await tools.echo({n: 1}); const t = Date.now(); await tools.echo({t})";
    let mut journal = Journal::new();
    ok(&journaled(&sb, clocked, &host, &mut journal).await);
    journal
        .entries
        .retain(|e| !matches!(e, Entry::Clock { wall: true, .. }));
    let o = journaled(&sb, clocked, &other, &mut journal).await;
    match o.error() {
        Some(ExecError::ReplayDiverged { message, .. }) => {
            assert!(message.contains("wall-clock reading"), "{message}")
        }
        e => panic!("expected ReplayDiverged, got {e:?}"),
    }
    assert_eq!(other.count(), 0);
}

#[tokio::test]
async fn replayed_failures_keep_their_kind_and_the_trace_says_replayed() {
    let sb = common::fresh().await;
    let script = "await tools.echo({}); await tools.fail({code: 'policy_denied', message: 'not in read mode'})";
    let host = TestHost::default();
    let mut journal = Journal::new();
    let live = journaled(&sb, script, &host, &mut journal).await;
    assert!(
        matches!(live.error(), Some(ExecError::PolicyDenied { .. })),
        "{:?}",
        live.result
    );
    let replay = journaled(&sb, script, &TestHost::default(), &mut journal).await;
    assert_eq!(replay.result, live.result);
    assert_eq!(replay.trace[1].status, "policy_denied");
    assert!(replay.trace[1].replayed);
    // What the script throws is still not the host's record.
    let script = "await tools.echo({}); throw {name: 'ToolError', call: 1, code: 'policy_denied'}";
    let mut journal = Journal::new();
    journaled(&sb, script, &host, &mut journal).await;
    let replay = journaled(&sb, script, &TestHost::default(), &mut journal).await;
    assert!(
        !matches!(replay.error(), Some(ExecError::PolicyDenied { .. })),
        "{:?}",
        replay.result
    );
}

#[tokio::test]
async fn a_timer_pending_at_the_cut_fires_when_it_was_due() {
    let sb = common::fresh().await;
    let script = "await new Promise((r) => setTimeout(r, 40)); await tools.echo({after: 'timer'})";
    let host = TestHost::default();
    let mut journal = Journal::new();
    ok(&journaled(&sb, script, &host, &mut journal).await);
    let armed = journal
        .entries
        .iter()
        .position(|e| matches!(e, Entry::Timer { .. }))
        .unwrap();
    journal.entries.truncate(armed + 1);
    // Armed long ago: due at once on resume.
    if let Entry::Timer { at_ms, .. } = &mut journal.entries[armed] {
        *at_ms -= 10_000;
    }
    let host = TestHost::default();
    let o = journaled(&sb, script, &host, &mut journal).await;
    assert_eq!(ok(&o), &json!({"after": "timer"}));
    assert_eq!(host.names(), ["echo"]);
    assert!(
        o.stats.wall_us < 40_000,
        "due, so not armed for its full delay again: {} µs",
        o.stats.wall_us
    );
}

fn assert_journal_full(o: &Outcome) {
    assert!(
        matches!(
            o.error(),
            Some(ExecError::LimitExceeded {
                limit: Limit::JournalBytes,
                ..
            })
        ),
        "{:?}",
        o.result
    );
}

#[tokio::test]
async fn journal_bytes_bounds_what_a_durable_execution_keeps() {
    let sb = common::fresh().await;
    let limits = Limits {
        journal_bytes: 8 * 1024,
        ..Limits::default()
    };
    // A result larger than the journal may hold: not handed to the script.
    let host = TestHost::default();
    let mut journal = Journal::new();
    let o = sb
        .execute_journaled(
            "const b = await tools.big({bytes: 20000}); b.length",
            &limits,
            &host,
            &mut journal,
        )
        .await;
    match o.error() {
        Some(ExecError::LimitExceeded { limit, value, used }) => {
            assert_eq!(*limit, Limit::JournalBytes);
            assert_eq!(*value, 8 * 1024);
            assert!(*used > 20_000, "{used}");
        }
        e => panic!("expected journal_bytes, got {e:?}"),
    }
    assert!(journal.bytes() <= 8 * 1024, "{}", journal.bytes());

    // A loop reading the clock, no import in sight: the epoch tick ends it.
    let mut journal = Journal::new();
    let t0 = std::time::Instant::now();
    let o = sb
        .execute_journaled("for (;;) Date.now()", &limits, &host, &mut journal)
        .await;
    assert_journal_full(&o);
    assert!(journal.bytes() <= 8 * 1024);
    assert!(
        t0.elapsed().as_secs() < 10,
        "ended by the journal, not the wall clock"
    );

    // A journal already past the limit is refused before it runs.
    let mut big = Journal::new();
    ok(&sb
        .execute_journaled(
            "await tools.big({bytes: 20000})",
            &Limits::default(),
            &host,
            &mut big,
        )
        .await);
    let sent = host.count();
    let o = sb
        .execute_journaled("await tools.big({bytes: 20000})", &limits, &host, &mut big)
        .await;
    assert_journal_full(&o);
    assert_eq!(host.count(), sent);
}

#[tokio::test]
async fn a_journal_holds_digests_of_arguments_not_the_arguments() {
    let sb = common::fresh().await;
    let host = TestHost::default();
    let mut journal = Journal::new();
    ok(&journaled(
        &sb,
        "await tools.echo({password: 'Hunter2-S3cr3t!'}); 1",
        &host,
        &mut journal,
    )
    .await);
    let text = serde_json::to_string(&journal).unwrap();
    // The answer the script saw holds it (echo returns it); the call entry
    // does not.
    let call = journal
        .entries
        .iter()
        .find(|e| matches!(e, Entry::Call { .. }))
        .unwrap();
    assert!(!serde_json::to_string(call).unwrap().contains("Hunter2"));
    assert!(
        text.contains("Hunter2"),
        "what the script saw is kept to replay it"
    );
    // Serialized and read back, it replays.
    let mut back: Journal = serde_json::from_str(&text).unwrap();
    let o = journaled(
        &sb,
        "await tools.echo({password: 'Hunter2-S3cr3t!'}); 1",
        &TestHost::default(),
        &mut back,
    )
    .await;
    assert_eq!(ok(&o), &json!(1));
}

#[tokio::test]
async fn an_execution_waiting_only_for_decisions_parks_once_and_resumes_as_they_come() {
    let sb = common::fresh().await;
    let script = "const first = await tools.echo({n: 1});
        const [x, y] = await Promise.all([tools.ask({id: 'a'}), tools.ask({id: 'b'})]);
        const last = await tools.echo({n: 2});
        [first.n, x.approved, y.approved, last.n]";
    let host = TestHost::default();
    let mut journal = Journal::new();
    let sent = |host: &TestHost| {
        host.calls
            .lock()
            .unwrap()
            .iter()
            .map(|c| {
                format!(
                    "{}{}{}",
                    c.name,
                    c.args,
                    if c.resumed { " resumed" } else { "" }
                )
            })
            .collect::<Vec<_>>()
    };

    // Both asks wait: the execution parks once, naming both.
    let o = journaled(&sb, script, &host, &mut journal).await;
    match o.error() {
        Some(ExecError::Parked { waiting }) => {
            let ids: Vec<_> = waiting
                .iter()
                .map(|w| w.details["request_id"].clone())
                .collect();
            assert_eq!(ids, [json!("a"), json!("b")]);
            assert_eq!(waiting[0].tool, "ask");
            assert_eq!(waiting[0].call, 2);
        }
        e => panic!("expected Parked, got {e:?}"),
    }
    assert_eq!(o.trace[1].status, "waiting");
    assert_eq!(journal.calls(), (3, 1));

    // One decision in: it resumes, the decided call goes on, it parks again
    // for the other; nothing it had done is sent again.
    host.approved.lock().unwrap().push("a".into());
    let o = journaled(&sb, script, &host, &mut journal).await;
    match o.error() {
        Some(ExecError::Parked { waiting }) => assert_eq!(waiting.len(), 1, "{waiting:?}"),
        e => panic!("expected Parked, got {e:?}"),
    }
    host.approved.lock().unwrap().push("b".into());
    let o = journaled(&sb, script, &host, &mut journal).await;
    assert_eq!(ok(&o), &json!([1, "a", "b", 2]));
    assert_eq!(
        sent(&host),
        [
            r#"echo{"n":1}"#,
            r#"ask{"id":"a"}"#,
            r#"ask{"id":"b"}"#,
            r#"ask{"id":"a"} resumed"#,
            r#"ask{"id":"b"} resumed"#,
            r#"ask{"id":"b"} resumed"#,
            r#"echo{"n":2}"#,
        ],
        "each echo once; an ask again only while it waited"
    );
}

#[tokio::test]
async fn an_armed_timer_keeps_an_execution_from_parking_and_a_plain_one_never_parks() {
    let sb = common::fresh().await;
    let script = "await Promise.race([
        tools.ask({id: 'c'}),
        new Promise((r) => setTimeout(() => r('gave up waiting'), 20)),
    ])";
    let mut journal = Journal::new();
    let o = journaled(&sb, script, &TestHost::default(), &mut journal).await;
    assert_eq!(ok(&o), &json!("gave up waiting"));

    // Not journaled: "waiting" is a failure the script sees.
    let o = sb
        .execute(
            "let code; try { await tools.ask({id: 'd'}) } catch (e) { code = e.code }\ncode",
            &Limits::default(),
            &TestHost::default(),
        )
        .await;
    assert_eq!(ok(&o), &json!("waiting"));
}
