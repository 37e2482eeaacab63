//! `fi_trywait`: rshm's CQs and counters sleep on futexes inside `fi_cq_sread`/`fi_cntr_wait`,
//! and offer no file descriptors, so trywait only answers whether anything is ready now.

use crate::error::FiError;
use rshm_ffi as ffi;

/// `fi_trywait`: `-FI_EAGAIN` if any CQ has completions ready, else 0.
pub(crate) unsafe extern "C" fn trywait(_fabric: *mut ffi::fid_fabric, fids: *mut *mut ffi::fid, count: i32) -> i32 {
    crate::guard("fi_trywait", FiError::OTHER.code(), || {
        if fids.is_null() || count < 0 {
            return FiError::INVAL.code();
        }
        for i in 0..count as usize {
            // SAFETY: the caller's array of `count` fids.
            let fid = unsafe { *fids.add(i) };
            // SAFETY: fids are live objects of ours, per the libfabric contract.
            if let Ok(cq) = unsafe { crate::cq::get(fid) } {
                let mut st = cq.shared.lock();
                crate::progress::cq(&mut st, cq.id);
                if st.cqs.get(cq.id).is_some_and(|c| !c.events.is_empty()) {
                    return FiError::AGAIN.code();
                }
            }
        }
        0
    })
}
