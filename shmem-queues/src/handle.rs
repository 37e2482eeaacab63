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

pub struct Queue {
    shared: bool,
    inner: Mutex<Kind>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Queue ids count creations in this process; creation is collective, so a queue has the same
/// id on every PE.
pub fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

impl Queue {
    pub fn new(shared: bool, kind: Kind) -> Box<Self> {
        Box::new(Queue { shared, inner: Mutex::new(kind) })
    }

    pub fn into_kind(self) -> Option<Kind> {
        self.inner.into_inner().ok()
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
    // SAFETY: the caller's contract: h is a live Box<Queue>.
    let shared = unsafe { (*h).shared };
    if shared {
        // SAFETY: live handle; shared access only, the Mutex serializes the threads.
        let q = unsafe { &*h };
        match q.inner.lock() {
            Ok(mut k) => f(&mut k),
            Err(_) => bad,
        }
    } else {
        // SAFETY: live handle, and EXCLUSIVE means this thread is its only user now.
        let q = unsafe { &mut *h };
        match q.inner.get_mut() {
            Ok(k) => f(k),
            Err(_) => bad,
        }
    }
}

/// The communication queue behind `h` when it is EXCLUSIVE, with no lock and no closure: the
/// push fast path. `None` for null, SHARED, data or poisoned handles (the general path).
///
/// # Safety
/// As for [`with`]: `h` is null or a live handle, and no other thread uses an EXCLUSIVE one
/// during the borrow.
#[inline]
pub unsafe fn exclusive_comm<'a>(h: *mut Queue) -> Option<&'a mut CommQueue> {
    if h.is_null() {
        return None;
    }
    // SAFETY: the caller's contract: h is a live Box<Queue>; for an EXCLUSIVE queue this thread
    // is its only user now (checked below before any mutable use of the contents).
    let q = unsafe { &mut *h };
    if q.shared {
        return None;
    }
    match q.inner.get_mut() {
        Ok(Kind::Comm(c)) => Some(c),
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
