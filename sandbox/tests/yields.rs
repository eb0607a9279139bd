//! How long one poll of an execution keeps its worker from the runtime's
//! other tasks, whatever the script queues for the dispatcher.

mod common;

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Mutex,
    },
    task::Poll,
};

use airlock_sandbox::{Limits, ToolCall, ToolFailure, ToolHost};
use async_trait::async_trait;
use serde_json::{json, Value};

/// Polls of a call that wakes itself each time it is polled (as a
/// runbook's guest does when it yields inside the call), measured in
/// turns of another task on the same single-threaded runtime.
#[derive(Default)]
struct Spinning {
    /// When the first `echo` answers.
    first_echo: std::sync::OnceLock<std::time::Instant>,
    /// How many times the other task has run.
    ticks: AtomicU64,
    polls: Mutex<Polls>,
}

/// The spinning call's polls, counted by the other task's turns.
#[derive(Default)]
struct Polls {
    /// The other task's turn at the last poll.
    tick: u64,
    /// Polls since the other task last ran.
    since_tick: u64,
    /// The most polls between two turns of the other task.
    most: u64,
    all: u64,
}

#[async_trait]
impl ToolHost for Spinning {
    async fn call(&self, call: ToolCall) -> Result<Value, ToolFailure> {
        if call.name == "echo" {
            // Answered from another thread, `at_us` after the first
            // answer is due (5 ms after the first call), as a backend
            // answers.
            let first = *self
                .first_echo
                .get_or_init(|| std::time::Instant::now() + std::time::Duration::from_millis(5));
            let due =
                first + std::time::Duration::from_micros(call.args["at_us"].as_u64().unwrap_or(0));
            let (answer, answered) = tokio::sync::oneshot::channel();
            std::thread::spawn(move || {
                std::thread::sleep(due.saturating_duration_since(std::time::Instant::now()));
                let _ = answer.send(());
            });
            answered.await.expect("the answering thread answers");
            return Ok(call.args);
        }
        // Host work each poll of the call does (a runbook's guest runs
        // up to an epoch tick).
        let work = std::time::Duration::from_micros(call.args["work_us"].as_u64().unwrap_or(0));
        let mut left = call.args["polls"].as_u64().unwrap_or(200);
        std::future::poll_fn(|cx| {
            let tick = self.ticks.load(Ordering::SeqCst);
            let mut p = self.polls.lock().unwrap();
            if p.tick == tick {
                p.since_tick += 1;
            } else {
                p.tick = tick;
                p.since_tick = 1;
            }
            p.most = p.most.max(p.since_tick);
            p.all += 1;
            drop(p);
            let began = std::time::Instant::now();
            while began.elapsed() < work {
                std::hint::spin_loop();
            }
            left -= 1;
            if left == 0 {
                return Poll::Ready(());
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        })
        .await;
        Ok(json!("spun"))
    }
}

/// Runs `script` with `Spinning` as its host on this (single-threaded)
/// runtime, and asserts that its spinning call was polled `polls` times
/// in all and at most `most` times in one poll of the execution.
async fn spins_within(script: &str, polls: u64, most: u64) {
    let host = std::sync::Arc::new(Spinning::default());
    let ticking = host.clone();
    let ticker = tokio::spawn(async move {
        loop {
            ticking.ticks.fetch_add(1, Ordering::SeqCst);
            tokio::task::yield_now().await;
        }
    });
    let outcome = common::fresh()
        .await
        .execute(script, &Limits::default(), host.as_ref())
        .await;
    ticker.abort();
    assert_eq!(common::ok(&outcome), &json!("spun"));
    let p = host.polls.lock().unwrap();
    assert_eq!(p.all, polls);
    assert!(
        p.most <= most,
        "the call was polled {} times while the runtime waited",
        p.most
    );
}

/// A script that queues thousands of timer requests while a self-waking
/// call runs: the dispatcher takes them all in one go, instead of one per
/// turn of its loop with the call polled again between them (which held a
/// worker 4.9 s with an 8 s runbook in flight: the attacker review).
#[tokio::test(flavor = "current_thread")]
async fn queued_requests_do_not_poll_a_running_call_again_and_again() {
    spins_within(
        r#"
        const spun = tools.spin({ polls: 200 });
        for (let i = 0; i < 5000; i++) clearTimeout(setTimeout(() => {}, 60000));
        return await spun;
    "#,
        200,
        16,
    )
    .await;
}

/// Answers arriving one after another (from a backend, or timers firing
/// while a runbook runs) each take a turn of the dispatcher's loop, and
/// each turn polled a self-waking call again: with 0.3 ms of work a poll
/// and an answer every 0.05 ms, one poll went on for as long as answers
/// came. A poll of the dispatcher now ends after about 1 ms.
#[tokio::test(flavor = "current_thread")]
async fn answers_in_a_row_do_not_hold_the_runtime() {
    spins_within(
        r#"
        const spun = tools.spin({ polls: 100, work_us: 300 });
        const echoed = await Promise.all(Array.from({ length: 400 }, (_, i) => tools.echo({ at_us: 50 * i })));
        if (echoed.length !== 400) throw new Error('lost answers');
        return await spun;
    "#,
        100,
        10,
    )
    .await;
}

/// A script computing yields at every epoch tick; that yield lets the
/// worker look at its timers and sockets before the script runs on. A
/// plain wake put the execution straight back on the queue, and tokio
/// looks at them only every 61 polls: a 1 ms timer on the same worker
/// fired about every 120 ms (a runbook in flight delayed other clients'
/// requests ~230 ms in the attacker review).
#[tokio::test(flavor = "current_thread")]
async fn a_computing_script_lets_the_worker_s_timers_fire() {
    let fired = std::sync::Arc::new(AtomicU64::new(0));
    let counting = fired.clone();
    let timer = tokio::spawn(async move {
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            counting.fetch_add(1, Ordering::SeqCst);
        }
    });
    let limits = Limits {
        wall_time_ms: 400,
        ..Limits::default()
    };
    // A task of its own, as every execution of `airlock serve` is: the
    // future `block_on` drives gets the driver polled between its polls.
    let sandbox = common::fresh().await;
    let outcome = tokio::spawn(async move {
        sandbox
            .execute("for (;;) {}", &limits, &common::TestHost::default())
            .await
    })
    .await
    .unwrap();
    timer.abort();
    assert!(outcome.result.is_err(), "the loop ends at its wall time");
    // A tick is 2 ms: about 200 chances in 400 ms, against 3 or 4 with
    // the driver polled every 61 ticks.
    let fired = fired.load(Ordering::SeqCst);
    assert!(fired >= 40, "a 1 ms timer fired {fired} times in 400 ms");
}
