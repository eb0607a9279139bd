//! The guest and its dispatcher polled as one future, answering the wakes
//! they give each other in the same poll instead of through the runtime.
//!
//! A tool call crosses between the two halves of an execution twice: the
//! guest's request wakes the dispatcher, and the dispatcher's answer wakes
//! the guest's `wait`. Both are polled by the same task, so each of those
//! wakes lands on a task that is running. tokio treats a task woken while
//! it runs as one that yielded: it queues it behind the worker's other
//! tasks and wakes an idle worker, which steals it. With two workers,
//! every backend call moved the execution from one thread to the other —
//! 3.2 context switches and 0.18 ms of CPU a call, against 1.1 and
//! 0.14 ms with a single worker (`benches/peer/call_cost.py`).
//!
//! Here each half gets a waker of its own that only notes a wake while the
//! task is polled; the note is answered by polling that half again, in
//! the same turn. A wake a half gives itself while it runs (the guest's
//! yield at an epoch tick; the dispatcher's while a runbook's guest yields
//! inside one of its calls) is a yield: that half is not polled again in
//! this poll, and the task goes back to the runtime through
//! `tokio::task::yield_now`, which polls it again only after the worker
//! has run its other tasks and looked at its sockets and timers. Wakes
//! from anywhere else (a backend answer, a timer) between polls reach the
//! runtime as before. A poll takes at most [`MAX_TURNS`] turns and
//! [`TURNS_TIME`].

use std::{
    future::Future,
    pin::Pin,
    sync::{
        atomic::{AtomicU8, Ordering},
        Arc,
    },
    task::{Context, Poll, Wake, Waker},
    time::{Duration, Instant},
};

use futures::task::AtomicWaker;

/// Most turns in one poll before the task is handed back to the runtime.
/// A turn runs the guest until it waits and the dispatcher until it has
/// nothing to do, so this bounds how long an execution whose calls are
/// answered at once keeps its worker without yielding.
const MAX_TURNS: u32 = 64;

/// Longest a poll goes on taking turns: host work between turns (a
/// call's arguments, a refusal, its audit line) is not metered by the
/// epoch, so this bounds it as the epoch tick bounds the guest's.
const TURNS_TIME: Duration = Duration::from_millis(1);

const WOKEN: u8 = 1;
const HELD: u8 = 2;

/// One half's waker: while held, a wake is noted for the poll in
/// progress; otherwise it goes to the task's waker.
struct Relay {
    state: AtomicU8,
    task: AtomicWaker,
}

impl Relay {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            // Both halves are polled on the first poll.
            state: AtomicU8::new(WOKEN),
            task: AtomicWaker::new(),
        })
    }

    fn hold(&self) {
        self.state.fetch_or(HELD, Ordering::SeqCst);
    }

    /// Stops holding; a wake from now on goes to the task.
    fn release(&self) {
        self.state.fetch_and(!HELD, Ordering::SeqCst);
    }

    /// Whether a wake came since the last call (and forgets it).
    fn take_woken(&self) -> bool {
        self.state.fetch_and(!WOKEN, Ordering::SeqCst) & WOKEN != 0
    }

    fn is_woken(&self) -> bool {
        self.state.load(Ordering::SeqCst) & WOKEN != 0
    }
}

impl Wake for Relay {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Noted first, then forwarded unless held: a poll that stops
        // holding after this reads the note; one that stopped before is
        // woken.
        if self.state.fetch_or(WOKEN, Ordering::SeqCst) & HELD == 0 {
            self.task.wake();
        }
    }
}

/// The guest's call and the dispatcher, as one future that is ready when
/// the guest's call is. The dispatcher never finishes on its own.
pub struct Together<G, D> {
    guest: Pin<Box<G>>,
    dispatcher: Pin<Box<D>>,
    guest_relay: Arc<Relay>,
    guest_waker: Waker,
    dispatcher_relay: Arc<Relay>,
    dispatcher_waker: Waker,
}

impl<G: Future, D: Future<Output = ()>> Together<G, D> {
    pub fn new(guest: G, dispatcher: D) -> Self {
        let guest_relay = Relay::new();
        let dispatcher_relay = Relay::new();
        Self {
            guest: Box::pin(guest),
            dispatcher: Box::pin(dispatcher),
            guest_waker: Waker::from(guest_relay.clone()),
            guest_relay,
            dispatcher_waker: Waker::from(dispatcher_relay.clone()),
            dispatcher_relay,
        }
    }
}

impl<G: Future, D: Future<Output = ()>> Future for Together<G, D> {
    type Output = G::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<G::Output> {
        let this = self.get_mut();
        this.guest_relay.task.register(cx.waker());
        this.dispatcher_relay.task.register(cx.waker());
        let began = Instant::now();
        // Both halves are held for the whole poll: what one gives the
        // other is answered by the loop, and a wake a half gives itself
        // while it runs (the guest's yield at an epoch tick; the
        // dispatcher's when a runbook's guest, polled inside one of its
        // calls, yields, or tokio's cooperative budget runs out) means it
        // yielded: it is not polled again in this poll, and the task goes
        // back to the runtime as a yield (below).
        this.guest_relay.hold();
        this.dispatcher_relay.hold();
        let mut guest_may_run = true;
        let mut dispatcher_may_run = true;
        for _ in 0..MAX_TURNS {
            let mut ran = false;
            if guest_may_run && this.guest_relay.take_woken() {
                ran = true;
                let mut guest_cx = Context::from_waker(&this.guest_waker);
                if let Poll::Ready(out) = this.guest.as_mut().poll(&mut guest_cx) {
                    this.guest_relay.release();
                    this.dispatcher_relay.release();
                    return Poll::Ready(out);
                }
                // Woken while it ran: it yielded, or something on another
                // thread woke it meanwhile. Either way the runtime polls
                // it next.
                guest_may_run = !this.guest_relay.is_woken();
            }
            if dispatcher_may_run && this.dispatcher_relay.take_woken() {
                ran = true;
                let mut dispatcher_cx = Context::from_waker(&this.dispatcher_waker);
                let _ = this.dispatcher.as_mut().poll(&mut dispatcher_cx);
                dispatcher_may_run = !this.dispatcher_relay.is_woken();
            }
            if !ran || began.elapsed() >= TURNS_TIME {
                break;
            }
        }
        // From here a wake goes to the runtime; one noted before is
        // answered now.
        this.guest_relay.release();
        this.dispatcher_relay.release();
        let yielded = !guest_may_run || !dispatcher_may_run;
        if yielded {
            // A plain wake would put the task straight back on the
            // worker's queue, and tokio polls its I/O and timers only
            // every 61 tasks: a runbook, or a script computing, 4 ms a
            // poll kept a worker's sockets and timers waiting ~230 ms
            // (the attacker review). tokio's own yield wakes the task
            // once the worker has run its other tasks and polled them.
            let mut yielding = std::pin::pin!(tokio::task::yield_now());
            let _ = yielding.as_mut().poll(cx);
        } else if this.guest_relay.is_woken() || this.dispatcher_relay.is_woken() {
            // Noted and not answered because the turns ran out.
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{
        atomic::{AtomicUsize, Ordering},
        Mutex,
    };

    use super::*;

    /// A task waker that counts its wakes.
    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl Count {
        fn get(&self) -> usize {
            self.0.load(Ordering::SeqCst)
        }
    }

    /// A shared mailbox: the guest posts requests the dispatcher answers,
    /// each side waking the other as channels do.
    #[derive(Default)]
    struct Mailbox {
        requests: Vec<u32>,
        answers: Vec<u32>,
        guest: Option<Waker>,
        dispatcher: Option<Waker>,
        guest_polls: u32,
        dispatcher_polls: u32,
    }

    type Shared = Arc<Mutex<Mailbox>>;

    /// A guest that asks `n` questions one after another and is ready
    /// with the sum of the answers.
    fn guest(shared: Shared, n: u32) -> impl Future<Output = u32> {
        let mut asked = 0;
        let mut sum = 0;
        std::future::poll_fn(move |cx| {
            let mut m = shared.lock().unwrap();
            m.guest_polls += 1;
            if let Some(a) = m.answers.pop() {
                sum += a;
            } else if asked > 0 {
                m.guest = Some(cx.waker().clone());
                return Poll::Pending;
            }
            if asked == n {
                return Poll::Ready(sum);
            }
            asked += 1;
            m.requests.push(asked);
            m.guest = Some(cx.waker().clone());
            if let Some(d) = m.dispatcher.take() {
                d.wake();
            }
            Poll::Pending
        })
    }

    /// A dispatcher that answers each request at once (doubling it).
    fn dispatcher(shared: Shared) -> impl Future<Output = ()> {
        std::future::poll_fn(move |cx| {
            let mut m = shared.lock().unwrap();
            m.dispatcher_polls += 1;
            while let Some(r) = m.requests.pop() {
                m.answers.push(2 * r);
                if let Some(g) = m.guest.take() {
                    g.wake();
                }
            }
            m.dispatcher = Some(cx.waker().clone());
            Poll::Pending
        })
    }

    fn poll_once<F: Future + Unpin>(f: &mut F, count: &Arc<Count>) -> Poll<F::Output> {
        let waker = Waker::from(count.clone());
        Pin::new(f).poll(&mut Context::from_waker(&waker))
    }

    #[test]
    fn wakes_between_the_halves_are_answered_in_the_same_poll() {
        let shared = Shared::default();
        let mut both = Together::new(guest(shared.clone(), 10), dispatcher(shared.clone()));
        let count = Arc::new(Count::default());
        assert_eq!(
            poll_once(&mut both, &count),
            Poll::Ready(2 * (1..=10).sum::<u32>())
        );
        assert_eq!(count.get(), 0, "no wake reached the task");
        let m = shared.lock().unwrap();
        assert_eq!((m.guest_polls, m.dispatcher_polls), (11, 10));
    }

    #[test]
    fn more_turns_than_the_bound_are_handed_back_to_the_runtime() {
        let shared = Shared::default();
        let n = 3 * MAX_TURNS;
        let mut both = Together::new(guest(shared.clone(), n), dispatcher(shared.clone()));
        let count = Arc::new(Count::default());
        let mut polls = 0;
        let sum = loop {
            polls += 1;
            let before = count.get();
            match poll_once(&mut both, &count) {
                Poll::Ready(sum) => break sum,
                // Pending with nothing else to wake it: it must have
                // asked the runtime for another poll.
                Poll::Pending => assert_eq!(count.get(), before + 1),
            }
        };
        assert_eq!(sum, n * (n + 1));
        assert!(polls >= 3, "{polls} polls");
    }

    #[test]
    fn a_guest_that_yields_reaches_the_runtime_and_is_not_polled_again() {
        let polls = Arc::new(AtomicUsize::new(0));
        let seen = polls.clone();
        // Yields twice (wakes itself and waits), then is ready.
        let yielding = std::future::poll_fn(move |cx| {
            if seen.fetch_add(1, Ordering::SeqCst) < 2 {
                cx.waker().wake_by_ref();
                Poll::Pending
            } else {
                Poll::Ready(7)
            }
        });
        let mut both = Together::new(yielding, std::future::pending::<()>());
        let count = Arc::new(Count::default());
        assert_eq!(poll_once(&mut both, &count), Poll::Pending);
        assert_eq!((polls.load(Ordering::SeqCst), count.get()), (1, 1));
        assert_eq!(poll_once(&mut both, &count), Poll::Pending);
        assert_eq!((polls.load(Ordering::SeqCst), count.get()), (2, 2));
        assert_eq!(poll_once(&mut both, &count), Poll::Ready(7));
    }

    /// A dispatcher waking itself (a runbook's guest yielding inside one
    /// of its calls) is handed to the runtime, not polled again: a poll
    /// that turned such wakes over 64 times held a worker for 130 ms.
    #[test]
    fn a_dispatcher_that_yields_reaches_the_runtime_and_is_not_polled_again() {
        let polls = Arc::new(AtomicUsize::new(0));
        let seen = polls.clone();
        let yielding = std::future::poll_fn(move |cx| {
            seen.fetch_add(1, Ordering::SeqCst);
            cx.waker().wake_by_ref();
            Poll::<()>::Pending
        });
        let mut both = Together::new(std::future::pending::<()>(), yielding);
        let count = Arc::new(Count::default());
        for round in 1..=3 {
            assert_eq!(poll_once(&mut both, &count), Poll::Pending);
            assert_eq!((polls.load(Ordering::SeqCst), count.get()), (round, round));
        }
    }

    #[test]
    fn a_wake_after_the_poll_reaches_the_runtime_and_polls_that_half() {
        let shared = Shared::default();
        let mut both = Together::new(guest(shared.clone(), 1), std::future::pending::<()>());
        let count = Arc::new(Count::default());
        assert_eq!(poll_once(&mut both, &count), Poll::Pending);
        assert_eq!(count.get(), 0);
        // The answer comes from elsewhere, after the poll.
        let waker = {
            let mut m = shared.lock().unwrap();
            m.answers.push(5);
            m.guest.take().expect("the guest waits")
        };
        std::thread::spawn(move || waker.wake()).join().unwrap();
        assert_eq!(count.get(), 1);
        assert_eq!(poll_once(&mut both, &count), Poll::Ready(5));
    }
}
