//! Blocking waits (`fi_cq_sread`, `fi_cntr_wait`): poll under the domain lock for a few tens of
//! microseconds, then sleep on an endpoint's futex (or, with auto progress, on the domain's
//! completions) between polls.
//!
//! The wake word is armed before the poll that may find nothing, and the sleep is on the
//! sequence read when arming, so a message that arrives after the poll still wakes us.

use crate::error::{FiError, FiResult};
use crate::state::{DomainShared, DomainState};
use smr_core::endpoint::WaitHandle;
use std::ffi::c_int;
use std::time::{Duration, Instant};

/// The endpoints whose arrivals can satisfy a wait on CQ or counter `id`.
pub type Bound = fn(&DomainState, usize) -> Option<Vec<usize>>;

pub fn cq_eps(st: &DomainState, id: usize) -> Option<Vec<usize>> {
    st.cqs.get(id).map(|c| c.eps.to_vec())
}

/// How long a blocking wait polls (driving progress) before it sleeps.
const SPIN: Duration = Duration::from_micros(50);

/// Longest single sleep: signals, and endpoints bound while we sleep, are noticed this often.
const SLICE: Duration = Duration::from_millis(100);

/// Poll (`poll` under the domain lock, driving progress) for up to `SPIN`, or until `deadline`
/// if sooner: what it answers, or None once the time is up. What a blocking wait does before it
/// sleeps, and `fi_trywait` before it arms (`waitfd`).
pub fn spin<T>(
    shared: &DomainShared,
    deadline: Option<Instant>,
    mut poll: impl FnMut(&mut DomainState) -> Option<T>,
) -> Option<T> {
    let spin_end = Instant::now() + SPIN;
    let spin_end = deadline.map_or(spin_end, |d| d.min(spin_end));
    loop {
        shared.app_polls();
        if let Some(answer) = poll(&mut shared.lock()) {
            return Some(answer);
        }
        if Instant::now() >= spin_end {
            return None;
        }
        for _ in 0..32 {
            std::hint::spin_loop();
        }
    }
}

/// Repeat `poll` until it answers (`Ok(Some)` or an error) or `timeout_ms` passes (then
/// `timed_out`; a negative timeout waits for ever). `eps` names the endpoints whose arrivals
/// can satisfy `poll` (those bound to CQ or counter `id`).
pub fn until<T>(
    shared: &DomainShared,
    timeout_ms: c_int,
    timed_out: FiError,
    (eps, id): (Bound, usize),
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
    if shared.config.auto_progress {
        return until_notified(shared, deadline, timed_out, poll);
    }
    loop {
        let (answer, armed, short) = {
            let mut st = shared.lock();
            let bound = eps(&st, id).ok_or(FiError::INVAL)?;
            // Every endpoint that can satisfy the wait is armed: an arrival at any of them must
            // end the sleep, not only one at the first (a CQ or counter shared by endpoints).
            let armed: Vec<(WaitHandle, u32)> = bound
                .iter()
                .filter_map(|&e| st.eps.get(e)?.wait_handle())
                .map(|h| {
                    let seq = h.arm();
                    (h, seq)
                })
                .collect();
            let answer = poll(&mut st);
            if matches!(answer, Ok(None)) {
                crate::progress::before_sleep(&mut st);
            }
            (answer, armed, crate::progress::waits_for_room(&st, bound.iter().copied()))
        };
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let answer = match answer {
            Ok(None) if left.is_some_and(|l| l.is_zero()) => Some(Err(timed_out)),
            Ok(None) => None,
            Ok(Some(v)) => Some(Ok(v)),
            Err(e) => Some(Err(e)),
        };
        if answer.is_none() {
            let slice = left.unwrap_or(SLICE).min(if short { crate::progress::ROOM_SLICE } else { SLICE });
            sleep_on(&armed, slice);
        }
        for (h, _) in &armed {
            h.disarm();
        }
        if let Some(answer) = answer {
            return answer;
        }
    }
}

/// Wake the threads asleep in `until` on these endpoints, for a change made in this process
/// (`fi_cq_signal`, `fi_cntr_add`...) rather than by a peer, which wakes them itself.
pub fn wake_sleepers(st: &DomainState, eps: &[usize]) {
    for h in eps.iter().filter_map(|&e| st.eps.get(e)?.wait_handle()) {
        h.wake();
    }
}

/// Sleep until a sender wakes one of the `armed` endpoints or `slice` passes.
fn sleep_on(armed: &[(WaitHandle, u32)], slice: Duration) {
    match armed {
        [] => std::thread::sleep(slice.min(Duration::from_millis(1))),
        [(h, seq)] => h.sleep(*seq, Some(slice)),
        many => {
            let words: Vec<smr_core::wake::WaitOn<'_>> = many.iter().map(|(h, seq)| h.wait_on(*seq)).collect();
            if !smr_core::wake::sleep_any(&words, slice) {
                // No futex_waitv (before Linux 5.16): sleep on the first, briefly, so that the
                // others' arrivals are seen within a millisecond.
                many[0].0.sleep(many[0].1, Some(slice.min(Duration::from_millis(1))));
            }
        }
    }
}

/// `until` for an auto-progress domain: the progress thread serves arrivals and notifies the
/// domain's completions, on which this sleeps (polling once more on every wake-up or slice).
fn until_notified<T>(
    shared: &DomainShared,
    deadline: Option<Instant>,
    timed_out: FiError,
    mut poll: impl FnMut(&mut DomainState) -> FiResult<Option<T>>,
) -> FiResult<T> {
    let mut st = shared.lock();
    loop {
        if let Some(v) = poll(&mut st)? {
            return Ok(v);
        }
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if left.is_some_and(|l| l.is_zero()) {
            return Err(timed_out);
        }
        st = shared.wait_completion(st, left.unwrap_or(SLICE).min(SLICE));
    }
}
