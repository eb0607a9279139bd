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
    /// How many times the other task has run.
    ticks: AtomicU64,
    /// (the tick last seen, polls seen at that tick, the most seen at one
    /// tick, all polls)
    polls: Mutex<(u64, u64, u64, u64)>,
}

#[async_trait]
impl ToolHost for Spinning {
    async fn call(&self, _call: ToolCall) -> Result<Value, ToolFailure> {
        let mut left = 200u32;
        std::future::poll_fn(|cx| {
            let tick = self.ticks.load(Ordering::SeqCst);
            let mut p = self.polls.lock().unwrap();
            if p.0 == tick {
                p.1 += 1;
            } else {
                *p = (tick, 1, p.2, p.3);
            }
            p.2 = p.2.max(p.1);
            p.3 += 1;
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

/// A script that queues thousands of timer requests while a self-waking
/// call runs: the dispatcher takes them all in one go, instead of one per
/// turn of its loop with the call polled again between them (which held a
/// worker 4.9 s with an 8 s runbook in flight: the attacker review).
#[tokio::test(flavor = "current_thread")]
async fn queued_requests_do_not_poll_a_running_call_again_and_again() {
    let host = std::sync::Arc::new(Spinning::default());
    let ticking = host.clone();
    let ticker = tokio::spawn(async move {
        loop {
            ticking.ticks.fetch_add(1, Ordering::SeqCst);
            tokio::task::yield_now().await;
        }
    });
    let script = r#"
        const spun = tools.spin({});
        for (let i = 0; i < 5000; i++) clearTimeout(setTimeout(() => {}, 60000));
        return await spun;
    "#;
    let outcome = common::fresh()
        .await
        .execute(script, &Limits::default(), host.as_ref())
        .await;
    ticker.abort();
    assert_eq!(common::ok(&outcome), &json!("spun"));
    let (_, _, most_in_one_poll, all) = *host.polls.lock().unwrap();
    assert_eq!(all, 200);
    assert!(
        most_in_one_poll <= 16,
        "the call was polled {most_in_one_poll} times while the runtime waited"
    );
}
