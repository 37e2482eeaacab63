//! Poll sets (`fi_poll_open`, `fi_poll_add`, `fi_poll_del`, `fi_poll`): one call that reports
//! which of several CQs and counters of the domain have new events, as fi_poll(3) says, the way
//! libfabric's own utility poll set does it:
//! - a CQ has an event when reading it (which drives its endpoints) finds a completion or an
//!   error entry;
//! - a counter has one when its value or its error count moved since the last `fi_poll` that
//!   reported it.
//!
//! `fi_poll` returns the number of contexts it wrote (the `context` each object was opened with).

use crate::error::{int_ret, FiError, FiResult};
use crate::object::{self, put};
use rshm_ffi as ffi;
use std::ffi::{c_int, c_void};
use std::sync::Mutex;

/// One member: the object, and for a counter the value and error count last reported.
struct Member {
    fid: *mut ffi::fid,
    seen: (u64, u64),
}

#[repr(C)]
pub struct Poll {
    pub fid: ffi::fid_poll,
    members: Mutex<Vec<Member>>,
}

// SAFETY: the raw fids are objects of this provider that the application keeps open while they
// are in the set (fi_poll(3)); they are only used under the set's lock, through their own
// thread-safe entry points.
unsafe impl Send for Poll {}
// SAFETY: as above.
unsafe impl Sync for Poll {}

static FI_OPS: ffi::fi_ops = object::fi_ops(poll_close, None, None);

static POLL_OPS: ffi::fi_ops_poll = ffi::fi_ops_poll {
    size: size_of::<ffi::fi_ops_poll>(),
    poll: Some(poll_run),
    poll_add: Some(poll_add),
    poll_del: Some(poll_del),
};

/// # Safety
/// `fid` must be NULL or a live poll set of ours.
unsafe fn get<'a>(fid: *const ffi::fid) -> FiResult<&'a Poll> {
    // SAFETY: per the contract.
    unsafe { object::get::<Poll>(fid, ffi::FI_CLASS_POLL) }
}

/// `fi_poll_open`.
pub(crate) unsafe extern "C" fn poll_open(
    domain: *mut ffi::fid_domain,
    attr: *mut ffi::fi_poll_attr,
    pollset: *mut *mut ffi::fid_poll,
) -> c_int {
    crate::boundary::guard("fi_poll_open", FiError::OTHER.code(), || {
        int_ret((|| -> FiResult<()> {
            // SAFETY: libfabric contract.
            unsafe { crate::state::get(domain) }?;
            // SAFETY: NULL or the caller's attr.
            if unsafe { attr.as_ref() }.is_some_and(|a| a.flags != 0) {
                crate::warn!(Domain, "fi_poll_open: unknown flags in the attributes");
                return Err(FiError::INVAL);
            }
            let obj = object::into_raw(Poll {
                fid: ffi::fid_poll {
                    fid: object::fid(ffi::FI_CLASS_POLL, std::ptr::null_mut(), &FI_OPS),
                    ops: &POLL_OPS as *const _ as *mut _,
                },
                members: Mutex::new(Vec::new()),
            });
            // SAFETY: the caller's out-pointer.
            unsafe { put(pollset, obj.cast::<ffi::fid_poll>()) }
        })())
    })
}

unsafe extern "C" fn poll_close(fid: *mut ffi::fid) -> i32 {
    // SAFETY: the libfabric contract: a live poll set of ours.
    unsafe { object::close::<Poll>(fid, ffi::FI_CLASS_POLL, "fi_close(poll)", |_| Ok(())) }
}

unsafe extern "C" fn poll_add(pollset: *mut ffi::fid_poll, event_fid: *mut ffi::fid, flags: u64) -> c_int {
    crate::boundary::guard("fi_poll_add", FiError::OTHER.code(), || {
        int_ret((|| -> FiResult<()> {
            // SAFETY: libfabric contract.
            let set = unsafe { get(pollset.cast()) }?;
            if flags != 0 || event_fid.is_null() {
                crate::warn!(Domain, "fi_poll_add: NULL object or unknown flags {flags:#x}");
                return Err(FiError::INVAL);
            }
            // SAFETY: non-NULL; per the contract an open object (its class is its first field).
            let class = unsafe { (*event_fid).fclass } as u32;
            let seen = match class {
                ffi::FI_CLASS_CQ => (0, 0),
                // SAFETY: a counter, checked to be ours by `cntr::get` inside.
                ffi::FI_CLASS_CNTR => unsafe { counter_now(event_fid) }?,
                _ => {
                    crate::warn!(Domain, "fi_poll_add: objects of class {class} cannot be polled");
                    return Err(FiError::NOSYS);
                }
            };
            if class == ffi::FI_CLASS_CQ {
                // SAFETY: as above, checked to be a CQ of ours.
                unsafe { crate::cq::get(event_fid.cast()) }?;
            }
            let mut members = set.members.lock().unwrap_or_else(|p| p.into_inner());
            if members.iter().any(|m| m.fid == event_fid) {
                return Err(FiError::ALREADY_ADDED);
            }
            members.push(Member { fid: event_fid, seen });
            Ok(())
        })())
    })
}

unsafe extern "C" fn poll_del(pollset: *mut ffi::fid_poll, event_fid: *mut ffi::fid, flags: u64) -> c_int {
    crate::boundary::guard("fi_poll_del", FiError::OTHER.code(), || {
        int_ret((|| -> FiResult<()> {
            // SAFETY: libfabric contract.
            let set = unsafe { get(pollset.cast()) }?;
            if flags != 0 {
                return Err(FiError::INVAL);
            }
            let mut members = set.members.lock().unwrap_or_else(|p| p.into_inner());
            let at = members.iter().position(|m| m.fid == event_fid).ok_or(FiError::NOENT)?;
            members.remove(at);
            Ok(())
        })())
    })
}

/// A counter's (value, errors), after driving its endpoints.
///
/// # Safety
/// `fid` must be a live object whose class says counter.
unsafe fn counter_now(fid: *mut ffi::fid) -> FiResult<(u64, u64)> {
    // SAFETY: per the contract; `get` checks it is one of ours.
    let c = unsafe { crate::cntr::get(fid) }?;
    let ops = c.fid.ops;
    // SAFETY: our own counter's ops table, with both entries set.
    unsafe {
        let read = (*ops).read.ok_or(FiError::NOSYS)?;
        let readerr = (*ops).readerr.ok_or(FiError::NOSYS)?;
        let cntr = fid.cast::<ffi::fid_cntr>();
        Ok((read(cntr), readerr(cntr)))
    }
}

unsafe extern "C" fn poll_run(pollset: *mut ffi::fid_poll, context: *mut *mut c_void, count: c_int) -> c_int {
    crate::boundary::guard("fi_poll", FiError::OTHER.code(), || {
        (|| -> FiResult<c_int> {
            // SAFETY: libfabric contract.
            let set = unsafe { get(pollset.cast()) }?;
            if count < 0 || (context.is_null() && count > 0) {
                return Err(FiError::INVAL);
            }
            let mut members = set.members.lock().unwrap_or_else(|p| p.into_inner());
            let (mut n, mut err) = (0, None);
            for m in members.iter_mut() {
                // SAFETY: members are live objects of ours (checked when added; the application
                // keeps them open while they are in the set).
                let ready = match unsafe { (*m.fid).fclass } as u32 {
                    // SAFETY: as above.
                    ffi::FI_CLASS_CQ => match unsafe { cq_has_event(m.fid) } {
                        Ok(r) => r,
                        Err(e) => {
                            err.get_or_insert(e);
                            false
                        }
                    },
                    // SAFETY: as above.
                    _ => match unsafe { counter_now(m.fid) } {
                        Ok(now) => std::mem::replace(&mut m.seen, now) != now,
                        Err(e) => {
                            err.get_or_insert(e);
                            false
                        }
                    },
                };
                if ready && n < count {
                    // SAFETY: `n < count` entries of the caller's array.
                    unsafe { *context.add(n as usize) = (*m.fid).context };
                    n += 1;
                }
            }
            match (n, err) {
                (0, Some(e)) => Err(e),
                _ => Ok(n),
            }
        })()
        .unwrap_or_else(|e| e.code())
    })
}

/// Whether a CQ holds a completion or an error entry (reading it with count 0 drives its
/// endpoints and takes nothing).
///
/// # Safety
/// `fid` must be a live CQ of ours.
unsafe fn cq_has_event(fid: *mut ffi::fid) -> FiResult<bool> {
    // SAFETY: per the contract.
    let cq = unsafe { crate::cq::get(fid.cast()) }?;
    // SAFETY: our own CQ's ops table.
    let read = unsafe { (*cq.fid.ops).read }.ok_or(FiError::NOSYS)?;
    // SAFETY: a live CQ; count 0 writes nothing.
    match unsafe { read(fid.cast(), std::ptr::null_mut(), 0) } {
        0 => Ok(true),
        r if r == FiError::AVAIL.code() as isize => Ok(true),
        r if r == FiError::AGAIN.code() as isize => Ok(false),
        r if r > 0 => Ok(true),
        r => Err(FiError((-r) as u32)),
    }
}
