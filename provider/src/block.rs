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
use crate::state::waiters::{self, Waitable};
use crate::state::{DomainShared, DomainState};
use std::ffi::c_int;
use std::time::{Duration, Instant};

/// Longest single sleep: signals, and endpoints bound while we sleep, are noticed this often.
const SLICE: Duration = Duration::from_millis(100);

/// Poll (`poll` under the domain lock, driving progress) for up to `progress::SPIN`, or until
/// `deadline` if sooner: what it answers, or None once the time is up. What a blocking wait does
/// before it sleeps, and `fi_trywait` before it arms (`waitfd`).
pub fn spin<T>(
    shared: &DomainShared,
    deadline: Option<Instant>,
    mut poll: impl FnMut(&mut DomainState) -> Option<T>,
) -> Option<T> {
    let mut since = Instant::now();
    loop {
        shared.app_polls();
        let handled = {
            let mut st = shared.lock();
            let before = st.events;
            if let Some(answer) = poll(&mut st) {
                return Some(answer);
            }
            st.events != before
        };
        let now = Instant::now();
        // A poll that handled something (a segment of a long transfer) starts the time again:
        // counted over this poll only, so other threads' progress does not keep us spinning.
        if handled {
            since = now;
        }
        let spin_end = since + crate::progress::SPIN;
        if now >= deadline.map_or(spin_end, |d| d.min(spin_end)) {
            return None;
        }
        between_polls(now - since);
    }
}

/// How long a polling thread waits with a pause between polls before it yields its CPU between
/// them instead. An answer that comes while the peer runs on another CPU comes within a
/// microsecond or two (an 8 B put's round trip in OpenSHMEM's default build: 0.4 us).
const YIELD_AFTER: Duration = Duration::from_micros(4);

/// What a thread that polls and found nothing does before its next poll, `waited` after its
/// last progress: at first a pause, then a yield of the CPU.
///
/// The yield is for the peer it waits for, which may be waiting for this CPU. With two
/// processes on two CPUs, the scheduler sometimes placed both on one (it wakes a thread on its
/// waker's CPU), and a pause never lets the other run: each wait then spun its whole
/// `progress::SPIN` before it slept, and since neither stayed runnable long enough for the load
/// balancer to move one, an 8 B ping-pong in OpenSHMEM's default build (an atomic set, then a
/// wait on the target counter) took 130-140 us a round for hundreds of rounds in a row: in 7 of
/// 10 runs of 200,000 rounds, 87-1,016 rounds over 100 us, and 0.60 us a round on average. With
/// the yield, the other runs at once: rounds on a shared CPU take 10-20 us, until the balancer
/// moves one of the two, which stay runnable; at most 3 rounds over 100 us a run, and 0.43 us a
/// round on average. The yield costs a system call (0.4 us here), so it comes only after the
/// time in which a peer on another CPU answers.
///
/// One pause, not a burst: a pause takes 29 ns on this host's EPYC, and the 32 there were made
/// a microsecond between polls, half of which an answer waited on average (OpenSHMEM's default
/// build, whose quiet and waits block: 1.5 us per streaming 8 B put against 0.5 us with them
/// gone).
pub fn between_polls(waited: Duration) {
    if waited < YIELD_AFTER {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
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
