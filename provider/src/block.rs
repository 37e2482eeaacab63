//! Blocking waits (`fi_cq_sread`, `fi_cntr_wait`): poll under the domain lock for a few tens of
//! microseconds, then sleep between polls until something can have changed the answer.
//!
//! Two kinds of news end a sleep. A peer's message wakes the endpoint it lands on through that
//! endpoint's futex word, so with manual progress the waiter arms the words of every endpoint
//! that can satisfy it. A change made inside this process (progress another thread drives,
//! a completion written when an operation is posted, `fi_cntr_add`, `fi_cq_signal`) rings the
//! object's bell (`state::waiters`), which the waiter sleeps on as well. With auto progress the
//! progress thread serves the peers, and its completions ring the bell. Words and bell are read
//! before the poll that may find nothing, so what comes after that poll still wakes us.

use crate::error::{FiError, FiResult};
use crate::progress::Poller;
use crate::state::ep::idle::YIELD_AFTER;
use crate::state::waiters::{self, Waitable};
use crate::state::{DomainShared, DomainState};
use std::ffi::c_int;
use std::time::{Duration, Instant};

/// Longest single sleep: signals, and endpoints bound while we sleep, are noticed this often.
const SLICE: Duration = Duration::from_millis(100);

/// How many polls a spinning wait makes under one taking of the domain lock, with a pause
/// between them, before it looks at the clock (`spin`).
const POLLS_PER_LOCK: u32 = 8;

/// Poll (`poll` under the domain lock, driving progress) for up to `progress::SPIN`, or until
/// `deadline` if sooner: what it answers, or None once the time is up. What a blocking wait does
/// before it sleeps, and `fi_trywait` before it arms (`waitfd`).
///
/// While it pauses between polls (the first `YIELD_AFTER` without progress), it makes
/// `POLLS_PER_LOCK` of them under one taking of the lock and then reads the clock once; after
/// that, one poll, a look at the clock and a yield in turn. The lock's taking and release are
/// two locked instructions, each waiting for the stores before it to drain, and a read of the
/// clock takes about 20 ns here, as long as a poll: half a poll's time is what an answer waits
/// on average before the wait notices it. Another thread that wants the lock (the progress
/// thread stands aside while the application polls) waits a few hundred nanoseconds at most.
pub fn spin<T>(
    shared: &DomainShared,
    deadline: Option<Instant>,
    mut poll: impl FnMut(&mut DomainState) -> Option<T>,
) -> Option<T> {
    // When the wait began, for the spin's length: read at the first look at the clock, so that a
    // wait answered within its first polls (most of OpenSHMEM's, for a put's or a get's
    // completion) reads no clock at all.
    let mut since: Option<Instant> = None;
    let mut waited = Duration::ZERO;
    loop {
        shared.app_polls();
        let polls = if waited < YIELD_AFTER { POLLS_PER_LOCK } else { 1 };
        let handled = {
            let mut st = shared.lock();
            let mut handled = false;
            for n in 1..=polls {
                let before = st.events;
                if let Some(answer) = poll(&mut st) {
                    return Some(answer);
                }
                handled = st.events != before;
                if handled || n == polls {
                    break;
                }
                std::hint::spin_loop();
            }
            handled
        };
        // A poll that handled something (a segment of a long transfer) starts the time again:
        // counted over this wait's polls only, so other threads' progress does not keep us
        // spinning.
        if handled {
            since = None;
            waited = Duration::ZERO;
        } else {
            let now = Instant::now();
            let since = *since.get_or_insert(now);
            waited = now - since;
            let spin_end = since + crate::progress::SPIN;
            if now >= deadline.map_or(spin_end, |d| d.min(spin_end)) {
                return None;
            }
        }
        crate::progress::between_polls(waited, Poller::Application);
    }
}

/// Repeat `poll` until it answers (`Ok(Some)` or an error) or `timeout_ms` passes (then
/// `timed_out`; a negative timeout waits for ever). `poll` looks at `w`.
pub fn until<T>(
    shared: &DomainShared,
    timeout_ms: c_int,
    timed_out: FiError,
    w: Waitable,
    mut poll: impl FnMut(&mut DomainState) -> FiResult<Option<T>>,
) -> FiResult<T> {
    let deadline = (timeout_ms >= 0).then(|| Instant::now() + Duration::from_millis(timeout_ms as u64));
    // Spin first, driving progress ourselves: an answer that is microseconds away (the usual
    // case: a read or an atomic's reply, the next message of a stream) costs no sleep and no
    // wake-up, and with auto progress no wait for the progress threads to be scheduled
    // (measured idle, OpenSHMEM's default build, blocking random gets between 2 PEs: 0.21 M/s
    // per PE with the spin, 0.08 without).
    if let Some(answer) = spin(shared, deadline, |st| poll(st).transpose()) {
        return answer;
    }
    let auto = shared.config.auto_progress;
    let mut st = shared.lock();
    let bell = waiters::block(&mut st, w).ok_or(FiError::INVAL)?;
    let answer = loop {
        // With manual progress, every endpoint that can satisfy the wait is armed: an arrival
        // at any of them must end the sleep. (With auto progress the progress thread serves
        // them, and its completions ring the bell.)
        let bound = if auto { Vec::new() } else { crate::progress::wait_eps(&st, w).unwrap_or_default() };
        let armed = waiters::arm(&st, bound.iter().copied());
        let answer = poll(&mut st);
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let answer = match answer {
            Ok(None) if left.is_some_and(|l| l.is_zero()) => Some(Err(timed_out)),
            Ok(None) => None,
            Ok(Some(v)) => Some(Ok(v)),
            Err(e) => Some(Err(e)),
        };
        if let Some(answer) = answer {
            waiters::disarm(&armed);
            break answer;
        }
        let mut slice = left.unwrap_or(SLICE).min(SLICE);
        if auto {
            crate::progress::app_asleep(shared, &mut st, true);
        } else {
            crate::progress::before_sleep(&mut st);
            if crate::progress::waits_for_room(&st, bound.iter().copied()) {
                slice = slice.min(crate::progress::ROOM_SLICE);
            }
            if armed.is_empty() {
                // No endpoint to wake us (none bound yet): look again soon.
                slice = slice.min(Duration::from_millis(1));
            }
        }
        let rung = waiters::to_sleep(&mut st, w);
        drop(st);
        waiters::sleep(&armed, (&bell, rung), slice);
        waiters::disarm(&armed);
        st = shared.lock();
        if auto {
            crate::progress::app_asleep(shared, &mut st, false);
        }
    };
    waiters::unblock(&mut st, w);
    answer
}
