//! Who runs next: the sandbox's slots shared fairly between principals.
//!
//! One identity's executions, busy or only awaiting a timer, could hold
//! every slot, and everyone else then waited for one of them to end. So
//! each principal may run at most `executions_per_identity` executions
//! and keep at most `queued_per_identity` waiting; when a slot frees, the
//! principals with someone waiting are served in turn (round robin), each
//! its oldest waiter first. A principal below its share never waits
//! behind another's backlog: while a slot is free and a waiter could take
//! it, it has already been given one. When the queue is full, a newcomer
//! takes the place of the newest waiter of the principal with the most
//! waiting (if that is more than the newcomer's own, plus one), which is
//! refused as over its share: backlogs cannot keep others out of the
//! queue either.
//!
//! Everything lives under one short-held lock; what it holds is bounded
//! by the slots and the queue (a principal is forgotten once it has
//! nothing running and nothing waiting), so many identities cost no more
//! than few.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, Instant},
};

use tokio::sync::oneshot;

use crate::{
    limits::{Capacity, Limit},
    outcome::ExecError,
};

/// The admission gate of one sandbox.
pub(crate) struct Admission {
    capacity: Capacity,
    gate: Mutex<Gate>,
}

#[derive(Default)]
struct Gate {
    running: u32,
    waiting: u32,
    /// Principals running or waiting; no others.
    principals: HashMap<String, Principal>,
    /// Principals with a waiter, in the order they are served.
    turn: VecDeque<String>,
    next_ticket: u64,
}

#[derive(Default)]
struct Principal {
    running: u32,
    waiters: VecDeque<(u64, oneshot::Sender<Served>)>,
}

/// What a waiter is told when it leaves the queue by another's hand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Served {
    /// A slot is now its own.
    Slot,
    /// Its place went to an identity with nothing waiting, the queue
    /// being full; its own identity had this many waiting.
    Displaced { waiting: u32 },
}

/// A slot held; dropping it frees the slot for the next in turn.
pub(crate) struct Slot {
    admission: Arc<Admission>,
    principal: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut gate = self.admission.lock();
        gate.running -= 1;
        if let Some(p) = gate.principals.get_mut(&self.principal) {
            p.running -= 1;
        }
        gate.forget_if_idle(&self.principal);
        self.admission.dispatch(&mut gate);
    }
}

/// A place in the queue. Dropped before it was served, it leaves the
/// queue; served and then dropped (the waiter timed out or was cancelled
/// in the same instant), it frees the slot it was given.
struct Place {
    admission: Arc<Admission>,
    principal: String,
    ticket: u64,
    rx: oneshot::Receiver<Served>,
    /// Set once the place is done with: its slot handed over as a
    /// [`Slot`], or the place refused.
    taken: bool,
}

impl Place {
    /// Leaves the queue. `true` when the place was still waiting; `false`
    /// when a slot had already been given to it (and is now this
    /// place's to use or free).
    fn leave(&self, gate: &mut Gate) -> bool {
        let Some(p) = gate.principals.get_mut(&self.principal) else {
            return false;
        };
        let Some(i) = p.waiters.iter().position(|(t, _)| *t == self.ticket) else {
            return false;
        };
        p.waiters.remove(i);
        let empty = p.waiters.is_empty();
        gate.waiting -= 1;
        if empty {
            gate.turn.retain(|q| q != &self.principal);
        }
        gate.forget_if_idle(&self.principal);
        true
    }

    fn into_slot(mut self) -> Slot {
        self.taken = true;
        Slot {
            admission: self.admission.clone(),
            principal: std::mem::take(&mut self.principal),
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if self.taken {
            return;
        }
        let mut gate = self.admission.lock();
        if !self.leave(&mut gate) {
            drop(gate);
            // Served (a slot given under the lock, so its word is in the
            // channel by now), but nobody is left to run: give it back.
            if self.rx.try_recv() == Ok(Served::Slot) {
                drop(Slot {
                    admission: self.admission.clone(),
                    principal: std::mem::take(&mut self.principal),
                });
            }
        }
    }
}

impl Gate {
    /// The queue is full and someone with `mine` waiting wants in: the
    /// newest waiter of the identity with the most waiting (more than
    /// `mine + 1`) gives up its place, so that identities with a backlog
    /// cannot keep the others out of the queue. `false` when no one has
    /// more to give up than the newcomer would take.
    fn displace_for(&mut self, mine: u32) -> bool {
        let Some((name, most)) = self
            .principals
            .iter()
            .map(|(name, p)| (name, p.waiters.len() as u32))
            .max_by_key(|(_, n)| *n)
        else {
            return false;
        };
        if most <= mine + 1 {
            return false;
        }
        let name = name.clone();
        let p = self.principals.get_mut(&name).expect("just found");
        let (_, tx) = p.waiters.pop_back().expect("it has waiters");
        self.waiting -= 1;
        let _ = tx.send(Served::Displaced { waiting: most });
        true
    }

    fn forget_if_idle(&mut self, principal: &str) {
        if self
            .principals
            .get(principal)
            .is_some_and(|p| p.running == 0 && p.waiters.is_empty())
        {
            self.principals.remove(principal);
        }
    }
}

impl Admission {
    pub(crate) fn new(capacity: Capacity) -> Arc<Self> {
        Arc::new(Self {
            capacity,
            gate: Mutex::new(Gate::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Gate> {
        // Nothing under the lock can panic halfway through a change.
        self.gate.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Executions waiting for a slot right now.
    pub(crate) fn waiting(&self) -> u32 {
        self.lock().waiting
    }

    /// Waits for a slot for `principal` (`""` for executions without
    /// one, which share a single share), or says which limit refused it.
    pub(crate) async fn admit(self: &Arc<Self>, principal: &str) -> Result<Slot, ExecError> {
        let cap = &self.capacity;
        let (per_identity, queued_per_identity) = cap.identity_share();
        let (ticket, rx) = {
            let mut gate = self.lock();
            let running = gate.principals.get(principal).map_or(0, |p| p.running);
            let mine_waiting = gate
                .principals
                .get(principal)
                .map_or(0, |p| p.waiters.len() as u32);
            let free = gate.running < cap.executions_in_flight;
            if free && running < per_identity && mine_waiting == 0 {
                gate.running += 1;
                gate.principals
                    .entry(principal.to_string())
                    .or_default()
                    .running += 1;
                return Ok(Slot {
                    admission: self.clone(),
                    principal: principal.to_string(),
                });
            }
            // Which is full, for the refusal: the sandbox, or this
            // identity's share of it.
            let (limit, value) = if free {
                (Limit::ExecutionsPerIdentity, per_identity)
            } else {
                (Limit::ExecutionsInFlight, cap.executions_in_flight)
            };
            if cap.queue_depth == 0 {
                return Err(ExecError::limit(limit, value as u64, value as u64 + 1));
            }
            let below_share = mine_waiting < queued_per_identity;
            if gate.waiting >= cap.queue_depth && !(below_share && gate.displace_for(mine_waiting))
            {
                return Err(ExecError::limit(
                    Limit::QueueDepth,
                    cap.queue_depth as u64,
                    gate.waiting as u64 + 1,
                ));
            }
            if !below_share {
                return Err(ExecError::limit(
                    Limit::QueuedPerIdentity,
                    queued_per_identity as u64,
                    mine_waiting as u64 + 1,
                ));
            }
            let (tx, rx) = oneshot::channel();
            let ticket = gate.next_ticket;
            gate.next_ticket += 1;
            gate.waiting += 1;
            let p = gate.principals.entry(principal.to_string()).or_default();
            p.waiters.push_back((ticket, tx));
            if p.waiters.len() == 1 {
                gate.turn.push_back(principal.to_string());
            }
            (ticket, rx)
        };
        let mut place = Place {
            admission: self.clone(),
            principal: principal.to_string(),
            ticket,
            rx,
            taken: false,
        };
        let t0 = Instant::now();
        let wait = Duration::from_millis(cap.queue_wait_ms);
        let told = match tokio::time::timeout(wait, &mut place.rx).await {
            Ok(told) => told.ok(),
            Err(_) => {
                // Timed out; a word given in the same instant still holds.
                let still_waiting = place.leave(&mut self.lock());
                if still_waiting {
                    place.taken = true;
                    return Err(ExecError::limit(
                        Limit::QueueWaitMs,
                        cap.queue_wait_ms,
                        (t0.elapsed().as_millis() as u64).max(cap.queue_wait_ms),
                    ));
                }
                place.rx.try_recv().ok()
            }
        };
        match told {
            Some(Served::Slot) => Ok(place.into_slot()),
            Some(Served::Displaced { waiting }) => {
                place.taken = true;
                Err(ExecError::limit(
                    Limit::QueuedPerIdentity,
                    queued_per_identity.min(waiting.saturating_sub(1)) as u64,
                    waiting as u64,
                ))
            }
            // Only a gate dropped with waiters in it drops their word.
            None => {
                place.taken = true;
                Err(ExecError::Internal {
                    message: "the sandbox is shutting down".into(),
                })
            }
        }
    }

    /// Gives free slots to waiters whose principal is below its share,
    /// principals taking turns.
    fn dispatch(&self, gate: &mut Gate) {
        let (per_identity, _) = self.capacity.identity_share();
        while gate.running < self.capacity.executions_in_flight {
            let Some(i) = gate.turn.iter().position(|name| {
                gate.principals
                    .get(name)
                    .is_some_and(|p| p.running < per_identity)
            }) else {
                return;
            };
            let name = gate.turn.remove(i).expect("position is in range");
            let p = gate
                .principals
                .get_mut(&name)
                .expect("a principal in turn is known");
            let (_, tx) = p.waiters.pop_front().expect("a principal in turn waits");
            p.running += 1;
            let more = !p.waiters.is_empty();
            gate.running += 1;
            gate.waiting -= 1;
            if more {
                gate.turn.push_back(name);
            }
            // A waiter gone already is found by its `Place`'s drop, which
            // frees the slot; the send failing needs nothing here.
            let _ = tx.send(Served::Slot);
        }
    }
}
