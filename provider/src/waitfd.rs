//! FI_WAIT_FD: CQs and counters whose wait object is a file descriptor that the application
//! blocks on itself (poll, epoll, select) after `fi_trywait` said it may.
//!
//! Peers wake an endpoint through the futex word in its region, which no file descriptor can
//! watch. So the descriptor is an eventfd of the CQ or counter (`WaitFd`), and one thread of the
//! domain (`Bell`, started by the first `fi_trywait` that arms anything) sleeps on the wake words
//! of the armed objects' endpoints and writes the eventfd of each object whose endpoint a peer
//! woke. `fi_trywait` drains the eventfd, drives the endpoints, arms their wake words and drives
//! them again, so that nothing published in between goes unseen, and answers -FI_EAGAIN instead
//! when something is ready. A completion made by a thread of this process (the auto-progress
//! thread, another application thread) into an armed object rings it at once. The next read, a
//! ring, or the next `fi_trywait` disarms. Senders pay nothing unless an object is armed: these
//! are the wake words that blocking reads arm.

use crate::error::{FiError, FiResult};
use crate::state::threads::{Bell, DomainThread, ThreadControl};
use crate::state::{DomainShared, DomainState};
use smr_core::endpoint::WaitHandle;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::state::waiters::{self, Waitable};

/// Drive what can complete into `w`; true if something is ready for the application to read:
/// a CQ entry, or a counter that moved since the application last read it (an object without
/// a descriptor: since ever, so never).
fn ready(st: &mut DomainState, w: Waitable) -> bool {
    match w {
        Waitable::Cq(id) => {
            crate::progress::cq(st, id, None);
            st.cqs.get(id).is_some_and(|c| !c.events.is_empty())
        }
        Waitable::Cntr(id) => {
            crate::progress::cntr(st, id);
            st.cntrs.get(id).is_some_and(|c| c.wait_fd().is_some_and(|fd| fd.seen != (c.value, c.errors)))
        }
    }
}

fn endpoints(st: &DomainState, w: Waitable) -> Vec<usize> {
    crate::progress::wait_eps(st, w).unwrap_or_default()
}

/// `fi_trywait` for one object: Ok(()) if the application may block on its descriptor now (it
/// is armed), -FI_EAGAIN if something is ready to read first. An object without FI_WAIT_FD is
/// only asked whether something is ready.
pub fn try_arm(shared: &Arc<DomainShared>, w: Waitable) -> FiResult<()> {
    arm(shared, w, true)
}

/// `try_arm`, draining the object's descriptor first if `drain_first` (not for the members of
/// a wait set, whose one descriptor `waitset::try_arm` drains before the first).
pub fn arm(shared: &Arc<DomainShared>, w: Waitable, drain_first: bool) -> FiResult<()> {
    // Poll a little first, as a blocking read does: an answer microseconds away then costs no
    // sleep and no two wake-ups (the bell thread's, then the application's).
    if crate::block::spin(shared, None, |st| ready(st, w).then_some(())).is_some() {
        return Err(FiError::AGAIN);
    }
    let mut st = shared.lock();
    // An object without a descriptor was only asked whether something is ready: the spin said.
    let Some(fd) = waiters::fd(&mut st, w) else { return Ok(()) };
    // What rang before is drained; what it rang for is seen by the look after the arming below.
    if drain_first {
        fd.drain();
    }
    fd.disarm();
    let armed = waiters::arm(&st, endpoints(&st, w));
    // What a peer published before the words were armed woke nobody: look once more.
    if ready(&mut st, w) {
        waiters::disarm(&armed);
        return Err(FiError::AGAIN);
    }
    if let Some(fd) = waiters::fd(&mut st, w) {
        fd.watch(armed);
    }
    drop(st);
    if !bell_armed(shared) {
        if let Some(fd) = waiters::fd(&mut shared.lock(), w) {
            fd.disarm();
        }
        return Err(FiError::OTHER);
    }
    Ok(())
}

/// `fi_trywait` armed an FI_WAIT_FD object: the bell thread, started now if need be, must
/// watch its endpoints' wake words. False if it cannot run (nobody would ring).
fn bell_armed(shared: &Arc<DomainShared>) -> bool {
    let mut bell = shared.bell.lock().unwrap_or_else(|p| p.into_inner());
    match bell.as_ref() {
        Some(b) => b.poke(),
        None => match start_bell(shared) {
            Ok(b) => *bell = Some(b),
            Err(e) => {
                crate::warn!(Domain, "cannot start the thread that wakes FI_WAIT_FD waiters: {e}");
                return false;
            }
        },
    }
    true
}

/// Start the bell thread of `shared`.
fn start_bell(shared: &Arc<DomainShared>) -> std::io::Result<Bell> {
    DomainThread::start("rshm-bell", shared, Arc::default(), run)
}

/// Longest sleep without a wake-up (a backstop: an object armed meanwhile pokes the thread).
const IDLE: Duration = Duration::from_secs(1);

/// While an armed object's endpoints have operations outstanding, the thread rings it at least
/// this often even if no peer woke it: a peer that died never will, and only the application's
/// next read (its progress pass, and the liveness checks in it) turns what waited on that peer
/// into error completions. So a dead peer costs a waiter in poll(2) this much at most on top of
/// the liveness checks' own bound, instead of a hang.
const OUTSTANDING_CHECK: Duration = Duration::from_millis(250);

fn run(domain: Weak<DomainShared>, control: Arc<ThreadControl>) {
    let mut last_check = std::time::Instant::now();
    // An endpoint's work waited for room at a peer at the last look: that peer makes room
    // without waking us (`progress::waits_for_room`), so the objects are rung again soon, and
    // the application's next read pushes that work on.
    let mut room = false;
    while !control.stopping() {
        let control_seq = control.seq.load(Ordering::SeqCst);
        // The domain is held only while the thread looks at it, never while it sleeps.
        let Some(shared) = domain.upgrade() else { return };
        let (watched, waiting) = {
            let mut st = shared.lock();
            let check = room || last_check.elapsed() >= OUTSTANDING_CHECK;
            if check {
                last_check = std::time::Instant::now();
            }
            let waiting = ring(&mut st, check);
            room = crate::progress::waits_for_room(&st, st.eps.iter().map(|(id, _)| id));
            let cqs = st.cqs.iter().filter_map(|(_, c)| c.wait_fd());
            let cntrs = st.cntrs.iter().filter_map(|(_, c)| c.wait_fd());
            let watched: Vec<(WaitHandle, u32)> = cqs.chain(cntrs).flat_map(|fd| fd.armed().iter().cloned()).collect();
            (watched, waiting)
        };
        drop(shared);
        let sleep = match (room, waiting) {
            (true, _) => crate::progress::ROOM_SLICE,
            (false, true) => OUTSTANDING_CHECK.saturating_sub(last_check.elapsed()),
            (false, false) => IDLE,
        };
        waiters::sleep(&watched, (&control.seq, control_seq), sleep);
    }
}

/// Ring every armed object one of whose endpoints a peer woke, and with `check`, every armed
/// object one of whose endpoints has operations outstanding (`OUTSTANDING_CHECK`). Returns
/// whether an armed object is left whose endpoints have operations outstanding.
fn ring(st: &mut DomainState, check: bool) -> bool {
    let busy = |st: &DomainState, eps: &[usize]| {
        eps.iter().any(|&id| {
            st.eps
                .get(id)
                .is_some_and(|e| e.tx_outstanding() > 0 || e.engine.as_ref().is_some_and(|g| g.outstanding() > 0))
        })
    };
    let mut waiting = false;
    let ids: Vec<Waitable> = st
        .cqs
        .iter()
        .filter(|(_, c)| c.wait_fd().is_some_and(|fd| fd.is_armed()))
        .map(|(id, _)| Waitable::Cq(id))
        .chain(
            st.cntrs
                .iter()
                .filter(|(_, c)| c.wait_fd().is_some_and(|fd| fd.is_armed()))
                .map(|(id, _)| Waitable::Cntr(id)),
        )
        .collect();
    for w in ids {
        let outstanding = busy(st, &endpoints(st, w));
        let Some(fd) = waiters::fd(st, w) else { continue };
        if fd.woken() || (check && outstanding) {
            fd.ring();
        } else {
            waiting |= outstanding;
        }
    }
    waiting
}

/// `fi_control` of a CQ, counter or wait set: FI_GETWAITOBJ says which wait object it has,
/// FI_GETWAIT gives the descriptor of an FI_WAIT_FD one, or of a wait set (other wait objects
/// have nothing to hand out).
///
/// # Safety
/// `arg` is NULL or, for those two commands, the caller's `enum fi_wait_obj` or `int`.
pub unsafe fn control(
    command: i32,
    arg: *mut std::ffi::c_void,
    wait_obj: rshm_ffi::fi_wait_obj,
    fd: Option<RawFd>,
) -> i32 {
    use rshm_ffi as ffi;
    match command as u32 {
        _ if arg.is_null() => FiError::INVAL.code(),
        ffi::FI_GETWAITOBJ => {
            // SAFETY: per the contract, the caller's enum fi_wait_obj.
            unsafe { arg.cast::<ffi::fi_wait_obj>().write_unaligned(wait_obj) };
            0
        }
        ffi::FI_GETWAIT => match fd {
            Some(fd) => {
                // SAFETY: per the contract, the caller's int.
                unsafe { arg.cast::<std::ffi::c_int>().write_unaligned(fd) };
                0
            }
            None => FiError::NOSYS.code(),
        },
        _ => FiError::NOSYS.code(),
    }
}
