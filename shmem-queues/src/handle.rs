//! The object behind a `shmem_queue_t`: a communication or data queue, with the access rule of
//! its sharing model.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::comm::CommQueue;
use crate::config::{EINTERNAL, EINVAL};
use crate::data::DataQueue;

pub enum Kind {
    Comm(CommQueue),
    Data(DataQueue),
}

/// A queue with its sharing model: an EXCLUSIVE queue is used by one thread at a time (its
/// contract) and needs no lock; a SHARED one is serialized by a mutex.
pub enum Queue {
    Exclusive(Kind),
    Shared(Mutex<Kind>),
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Queue ids count creations in this process; creation is collective, so a queue has the same
/// id on every PE.
pub fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

impl Queue {
    pub fn new(shared: bool, kind: Kind) -> Box<Self> {
        Box::new(if shared { Queue::Shared(Mutex::new(kind)) } else { Queue::Exclusive(kind) })
    }

    pub fn into_kind(self) -> Option<Kind> {
        match self {
            Queue::Exclusive(k) => Some(k),
            Queue::Shared(m) => m.into_inner().ok(),
        }
    }
}

/// Runs `f` on the queue behind `h`: under its lock when SHARED, directly when EXCLUSIVE.
///
/// # Safety
/// `h` is null or a live handle from a create call. For an EXCLUSIVE queue no other thread
/// uses the handle during the call (the SHMEM_QUEUE_EXCLUSIVE contract).
pub unsafe fn with<R>(h: *mut Queue, bad: R, f: impl FnOnce(&mut Kind) -> R) -> R {
    if h.is_null() {
        return bad;
    }
    // SAFETY: the caller's contract: h is a live Box<Queue>; shared access only (other threads
    // may hold the same for a SHARED queue).
    if let Queue::Shared(m) = unsafe { &*h } {
        return match m.lock() {
            Ok(mut k) => f(&mut k),
            Err(_) => bad,
        };
    }
    // SAFETY: live handle, EXCLUSIVE (checked above; the variant never changes), so this thread
    // is its only user now.
    match unsafe { &mut *h } {
        Queue::Exclusive(k) => f(k),
        Queue::Shared(_) => bad,
    }
}

/// The communication queue behind `h` when it is EXCLUSIVE, with no lock and no closure: the
/// push fast path. `None` for null, SHARED or data-queue handles (the general path).
///
/// # Safety
/// As for [`with`]: `h` is null or a live handle, and no other thread uses an EXCLUSIVE one
/// during the borrow.
#[inline]
pub unsafe fn exclusive_comm<'a>(h: *mut Queue) -> Option<&'a mut CommQueue> {
    if h.is_null() {
        return None;
    }
    // SAFETY: the caller's contract: h is a live Box<Queue>; shared access only (other threads
    // may hold the same for a SHARED queue).
    if let Queue::Shared(_) = unsafe { &*h } {
        return None;
    }
    // SAFETY: live handle, EXCLUSIVE (checked above), so this thread is its only user now.
    match unsafe { &mut *h } {
        Queue::Exclusive(Kind::Comm(c)) => Some(c),
        _ => None,
    }
}

/// The return code for a null or poisoned handle.
pub fn bad_handle(h: *mut Queue) -> i32 {
    if h.is_null() {
        EINVAL
    } else {
        EINTERNAL
    }
}
