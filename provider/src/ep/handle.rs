//! The `fid_ep` handed to the application (`Ep`: the domain's handle and the endpoint's key in
//! its state), and how an entry point gets from it to the locked state (`with_ep`).

use crate::error::FiResult;
use crate::object;
use crate::state::{DomainShared, DomainState};
use rshm_ffi as ffi;
use std::sync::Arc;

#[repr(C)]
pub struct Ep {
    pub fid: ffi::fid_ep,
    pub shared: Arc<DomainShared>,
    pub id: usize,
}

/// # Safety
/// NULL or a live endpoint of ours.
pub unsafe fn get<'a>(fid: *const ffi::fid) -> FiResult<&'a Ep> {
    // SAFETY: per the contract.
    unsafe { object::get::<Ep>(fid, ffi::FI_CLASS_EP) }
}

fn ret(r: FiResult<()>) -> isize {
    match r {
        Ok(()) => 0,
        Err(e) => e.code() as isize,
    }
}

/// Run `f` on the endpoint's locked state.
pub fn with_ep(ep: *mut ffi::fid_ep, f: impl FnOnce(&Ep, &mut DomainState) -> FiResult<()>) -> isize {
    // SAFETY: libfabric contract: a live endpoint of ours.
    let ep = match unsafe { get(ep.cast()) } {
        Ok(e) => e,
        Err(e) => return e.code() as isize,
    };
    let mut st = ep.shared.lock();
    ret(f(ep, &mut st))
}
