//! One route's queue: the requests that found the limit full wait in it, the first to come
//! the first admitted, each for a slot a finished request frees. The queue holds a ticket
//! and a waker per waiting request (the request itself stays in its future), never more
//! than `max_waiting` of them.
//!
//! Admission is the caller's (`acquire`, the route's controller); the queue only decides
//! who may try: the first in line, or a newcomer when nobody waits (so a newcomer never
//! overtakes a waiter).

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// A route's queue.
pub(crate) struct Queue {
    max_waiting: usize,
    /// How long a request may wait, from its arrival.
    pub(crate) deadline: Duration,
    waiting: Mutex<Waiting>,
}

/// The waiting requests, in arrival order (so in ticket order).
#[derive(Default)]
struct Waiting {
    next_ticket: u64,
    line: VecDeque<Place>,
}

/// One waiting request's place: its ticket, and the waker of its task once it has been
/// polled.
struct Place {
    ticket: u64,
    waker: Option<Waker>,
}

/// What a request arriving at the queue gets.
pub(crate) enum Entered<P> {
    /// Nobody was waiting and the limit had room: admitted at once.
    Now(P),
    /// A place in line, under this ticket.
    Queued(u64),
    /// `max_waiting` requests were already waiting: shed.
    Full,
}

impl Queue {
    /// An empty queue of at most `max_waiting` requests, each waiting at most `deadline`.
    pub(crate) fn new(max_waiting: usize, deadline: Duration) -> Queue {
        Queue {
            max_waiting,
            deadline,
            waiting: Mutex::default(),
        }
    }

    /// The requests waiting now.
    pub(crate) fn len(&self) -> usize {
        self.lock().line.len()
    }

    /// A request arrives: admitted by `acquire` if nobody waits, else queued, else (the
    /// queue full) shed. `acquire` runs under the queue's lock, so a release that frees a
    /// slot after it failed finds this request in line and wakes it.
    pub(crate) fn enter<P>(&self, acquire: impl FnOnce() -> Option<P>) -> Entered<P> {
        let mut w = self.lock();
        if w.line.is_empty() {
            if let Some(p) = acquire() {
                return Entered::Now(p);
            }
        }
        if w.line.len() >= self.max_waiting {
            return Entered::Full;
        }
        let ticket = w.next_ticket;
        w.next_ticket += 1;
        w.line.push_back(Place {
            ticket,
            waker: None,
        });
        Entered::Queued(ticket)
    }

    /// The waiter of `ticket` asks for its turn: if it is first in line and `acquire`
    /// admits it, it leaves the line (and the next in line is woken: there may be room for
    /// it too); otherwise its task is woken when it may try again.
    pub(crate) fn poll_turn<P>(
        &self,
        ticket: u64,
        cx: &mut Context<'_>,
        acquire: impl FnOnce() -> Option<P>,
    ) -> Poll<P> {
        let mut w = self.lock();
        let at = w
            .line
            .binary_search_by_key(&ticket, |p| p.ticket)
            .expect("a ticket stays in line until its waiter is admitted or leaves");
        if at == 0 {
            if let Some(p) = acquire() {
                w.line.pop_front();
                let next = w.first_waker();
                drop(w);
                if let Some(next) = next {
                    next.wake();
                }
                return Poll::Ready(p);
            }
        }
        let waker = &mut w.line[at].waker;
        if !waker.as_ref().is_some_and(|k| k.will_wake(cx.waker())) {
            *waker = Some(cx.waker().clone());
        }
        Poll::Pending
    }

    /// The waiter of `ticket` leaves without a slot (its deadline passed, its client went
    /// away). If it was first in line, the next is woken: a slot may be free.
    pub(crate) fn leave(&self, ticket: u64) {
        let mut w = self.lock();
        let Ok(at) = w.line.binary_search_by_key(&ticket, |p| p.ticket) else {
            return;
        };
        w.line.remove(at);
        let next = if at == 0 { w.first_waker() } else { None };
        drop(w);
        if let Some(next) = next {
            next.wake();
        }
    }

    /// A slot was freed: the first in line may try for it.
    pub(crate) fn wake_first(&self) {
        let first = self.lock().first_waker();
        if let Some(first) = first {
            first.wake();
        }
    }

    fn lock(&self) -> MutexGuard<'_, Waiting> {
        // Nothing panics while the lock is held; a poisoned queue is still a valid line.
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Waiting {
    /// The waker of the first in line (taken: its poll registers it again if it must wait
    /// on).
    fn first_waker(&mut self) -> Option<Waker> {
        self.line.front_mut().and_then(|p| p.waker.take())
    }
}
