//! `fi_trywait`: whether the application may block on the wait objects of CQs and counters.
//! Those opened with FI_WAIT_FD are armed, so that a peer's arrival makes their descriptor
//! readable (`waitfd`); the others (rshm's blocking reads sleep on futexes inside the provider)
//! are only asked whether something is ready now.

use crate::error::FiError;
use crate::state::waiters::Waitable;
use crate::waitfd::try_arm;
use rshm_ffi as ffi;

/// `fi_trywait`: 0 if the caller may block on every object's wait object, `-FI_EAGAIN` if any
/// has completions to read first. Objects that are neither CQs nor counters of ours are left
/// alone.
pub(crate) unsafe extern "C" fn trywait(_fabric: *mut ffi::fid_fabric, fids: *mut *mut ffi::fid, count: i32) -> i32 {
    crate::boundary::guard("fi_trywait", FiError::OTHER.code(), || {
        if fids.is_null() || count < 0 {
            return FiError::INVAL.code();
        }
        for i in 0..count as usize {
            // SAFETY: the caller's array of `count` fids.
            let fid = unsafe { *fids.add(i) };
            // SAFETY: fids are live objects of ours, per the libfabric contract (`get` checks the
            // class before it uses one as a CQ).
            let cq = unsafe { crate::cq::get(fid) };
            // SAFETY: as above, for a counter.
            let cntr = unsafe { crate::cntr::get(fid) };
            // SAFETY: as above, for a wait set.
            let set = unsafe { crate::waitset::get(fid) };
            let armed = match (cq, cntr, set) {
                (Ok(cq), _, _) => try_arm(&cq.shared, Waitable::Cq(cq.id)),
                (_, Ok(c), _) => try_arm(&c.shared, Waitable::Cntr(c.id)),
                (_, _, Ok(set)) => crate::waitset::try_arm(set),
                _ => Ok(()),
            };
            if let Err(e) = armed {
                return e.code();
            }
        }
        0
    })
}
