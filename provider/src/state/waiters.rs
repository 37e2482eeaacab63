//! Who waits, in this process, for a CQ or counter to change: the descriptor of an FI_WAIT_FD
//! object (`wait_fd`) and threads asleep in `fi_cq_sread` or `fi_cntr_wait` (`block`).
//!
//! A peer's message wakes them through the wake word of the endpoint it lands on. What changes
//! an object from inside this process rings them here instead: progress that another thread
//! drives (the auto-progress thread, an application thread reading another CQ of the same
//! endpoints), a completion made when an operation is posted, `fi_cntr_add` and `fi_cntr_set`,
//! `fi_cq_signal`. Every change happens under the domain lock, and a blocked thread reads the
//! bell's value under it before it sleeps, so no ring falls between its last look and its sleep.

use super::wait_fd::WaitFd;
use super::DomainState;
use smr_core::endpoint::WaitHandle;
use smr_core::wake::WaitOn;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A CQ or counter that can be waited on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Waitable {
    Cq(usize),
    Cntr(usize),
}

/// The waiters of one object. Boxed in it, and present only while it has one: most objects
/// never do, and every completion checks.
#[derive(Default)]
pub struct Waiters {
    pub fd: Option<WaitFd>,
    /// Threads in a blocking wait on the object (polling or asleep).
    blocked: u32,
    /// The private futex word they sleep on beside their endpoints' wake words. Shared, so that
    /// a sleeper holds it while the lock (and the object) may change.
    bell: Arc<AtomicU32>,
    /// A blocked thread read the bell to sleep on it, and nothing rang it since: the next change
    /// rings it, and the ones after it until a thread reads it again make no syscall (a pass of
    /// the progress thread may count many completions into a counter someone sleeps on).
    asleep: bool,
}

impl Waiters {
    pub fn with_fd(fd: WaitFd) -> Waiters {
        Waiters { fd: Some(fd), ..Waiters::default() }
    }

    /// The object changed in this process: wake whoever waits for it.
    #[inline]
    pub fn changed(&mut self) {
        if let Some(fd) = &mut self.fd {
            fd.changed();
        }
        self.wake_sleepers();
    }

    /// Wake the threads asleep in a blocking wait on the object (`fi_cq_signal`, a change).
    pub fn wake_sleepers(&mut self) {
        if self.asleep {
            self.asleep = false;
            self.bell.fetch_add(1, Ordering::SeqCst);
            super::threads::futex_wake_private(&self.bell);
        }
    }
}

/// Where the waiters of `w` are kept (None: no such object).
pub fn slot(st: &mut DomainState, w: Waitable) -> Option<&mut Option<Box<Waiters>>> {
    match w {
        Waitable::Cq(id) => st.cqs.get_mut(id).map(|c| &mut c.waiters),
        Waitable::Cntr(id) => st.cntrs.get_mut(id).map(|c| &mut c.waiters),
    }
}

/// The descriptor of `w`, if it was opened with FI_WAIT_FD (or in a wait set).
pub fn fd(st: &mut DomainState, w: Waitable) -> Option<&mut WaitFd> {
    slot(st, w)?.as_deref_mut()?.fd.as_mut()
}

/// A thread is about to block on `w` until it changes: its bell (None: no such object). Undone
/// by `unblock`.
pub fn block(st: &mut DomainState, w: Waitable) -> Option<Arc<AtomicU32>> {
    let waiters = slot(st, w)?.get_or_insert_with(Box::default);
    waiters.blocked += 1;
    Some(Arc::clone(&waiters.bell))
}

/// A thread `block` counted is about to sleep on `w`'s bell: the value to sleep on. Read under
/// the domain lock, after the thread's last look at the object.
pub fn to_sleep(st: &mut DomainState, w: Waitable) -> u32 {
    match slot(st, w).and_then(|s| s.as_deref_mut()) {
        Some(waiters) => {
            waiters.asleep = true;
            waiters.bell.load(Ordering::SeqCst)
        }
        None => 0,
    }
}

/// The thread `block` counted no longer waits on `w`.
pub fn unblock(st: &mut DomainState, w: Waitable) {
    let Some(slot) = slot(st, w) else { return };
    if let Some(waiters) = slot.as_deref_mut() {
        waiters.blocked = waiters.blocked.saturating_sub(1);
        if waiters.blocked == 0 && waiters.fd.is_none() {
            *slot = None;
        }
    }
}

/// Arm the wake words of endpoints `eps` (those without an engine are skipped): each with the
/// sequence to sleep on, until `disarm`.
pub fn arm(st: &DomainState, eps: impl IntoIterator<Item = usize>) -> Vec<(WaitHandle, u32)> {
    eps.into_iter()
        .filter_map(|e| st.eps.get(e)?.wait_handle())
        .map(|h| {
            let seq = h.arm();
            (h, seq)
        })
        .collect()
}

pub fn disarm(armed: &[(WaitHandle, u32)]) {
    for (h, _) in armed {
        h.disarm();
    }
}

/// Sleep until a peer wakes one of the `armed` endpoints, `private` (a word of this process,
/// with the value it is expected to move off) moves, or `timeout` passes: all at once with
/// futex_waitv (Linux 5.16). Without it, the private word alone while no endpoint is armed, or
/// else the first endpoint's word for at most a millisecond, so that the rest are looked at
/// that often.
pub fn sleep(armed: &[(WaitHandle, u32)], (private, expected): (&AtomicU32, u32), timeout: Duration) {
    let mut words: Vec<WaitOn<'_>> = armed.iter().map(|(h, seq)| h.wait_on(*seq)).collect();
    words.push(WaitOn { word: private, expected, private: true });
    if !smr_core::wake::sleep_any(&words, timeout) {
        match armed.first() {
            None => super::threads::futex_wait_private(private, expected, timeout),
            Some((h, seq)) => h.sleep(*seq, Some(timeout.min(Duration::from_millis(1)))),
        }
    }
}

/// The application reads the object: no peer needs to wake its descriptor any more.
/// Out of line: every read of every CQ checks for waiters, and most have none.
#[cold]
#[inline(never)]
pub fn reading(waiters: &mut Option<Box<Waiters>>) {
    if let Some(fd) = waiters.as_deref_mut().and_then(|w| w.fd.as_mut()) {
        fd.disarm();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::cntr::CntrState;

    /// A blocked thread's bell moves when the object changes after the thread read it, once;
    /// the box goes when the last blocked thread leaves an object without a descriptor.
    #[test]
    fn a_change_rings_the_bell_of_a_blocked_thread_only() {
        let mut st = DomainState::default();
        let id = st.cntrs.insert(CntrState::default());
        let w = Waitable::Cntr(id);
        st.cntrs[id].count(false);
        assert!(st.cntrs[id].waiters.is_none(), "a count made waiters for an object nobody waits on");

        let bell = block(&mut st, w).expect("the counter exists");
        let rung = to_sleep(&mut st, w);
        st.cntrs[id].count(false);
        assert_ne!(bell.load(Ordering::SeqCst), rung, "a count did not ring the blocked thread's bell");
        let after = bell.load(Ordering::SeqCst);
        st.cntrs[id].count(false);
        assert_eq!(bell.load(Ordering::SeqCst), after, "a second count rang a bell nobody read again");
        let rung = to_sleep(&mut st, w);
        st.cntrs[id].count(true);
        assert_ne!(bell.load(Ordering::SeqCst), rung, "an error count did not ring the bell");

        let second = block(&mut st, w).expect("the counter exists");
        assert!(Arc::ptr_eq(&bell, &second), "two threads blocked on one object got different bells");
        unblock(&mut st, w);
        assert!(st.cntrs[id].waiters.is_some(), "the box went while a thread still blocks");
        unblock(&mut st, w);
        assert!(st.cntrs[id].waiters.is_none(), "the box stayed after the last blocked thread left");
        let _ = to_sleep(&mut st, w);
        let rung = bell.load(Ordering::SeqCst);
        st.cntrs[id].count(false);
        assert_eq!(bell.load(Ordering::SeqCst), rung, "a count rang the bell of a thread that left");
        assert!(block(&mut st, Waitable::Cntr(id + 1)).is_none(), "blocked on a counter that does not exist");
    }
}
