//! Turning libfabric `fid` pointers back into our objects, and object lifetime.
//!
//! Every object is a `#[repr(C)]` struct whose first field is the libfabric `fid_*` struct (whose
//! own first field is `struct fid`), allocated with `Box` and handed out as a raw pointer.
//! A `fid` that comes back is checked for NULL and for its class before it is used.

use crate::error::{FiError, FiResult};
use rshm_ffi as ffi;
use std::ffi::c_void;

/// Our object behind a `fid` of class `class`.
///
/// # Safety
/// `fid` must be NULL or a pointer this provider handed out for an object of type `T` that has
/// not been closed (the libfabric API contract for every call).
pub unsafe fn get<'a, T>(fid: *const ffi::fid, class: u32) -> FiResult<&'a T> {
    if fid.is_null() {
        return Err(FiError::INVAL);
    }
    // SAFETY: non-NULL and, per the contract, one of our live objects, which starts with a fid.
    if unsafe { (*fid).fclass } != class as usize {
        return Err(FiError::INVAL);
    }
    // SAFETY: the class identifies the object type; `T` starts with the fid.
    Ok(unsafe { &*fid.cast::<T>() })
}

/// Initialise the generic part of a fid.
pub fn fid(class: u32, context: *mut c_void, ops: &'static ffi::fi_ops) -> ffi::fid {
    ffi::fid { fclass: class as usize, context, ops: ops as *const ffi::fi_ops as *mut ffi::fi_ops }
}

/// Hand out a new object.
pub fn into_raw<T>(obj: T) -> *mut T {
    Box::into_raw(Box::new(obj))
}

/// Take back an object to drop it (close).
///
/// # Safety
/// `ptr` must come from `into_raw::<T>` and not be used again.
pub unsafe fn from_raw<T>(ptr: *mut T) -> Box<T> {
    // SAFETY: per the contract.
    unsafe { Box::from_raw(ptr) }
}

/// Write `value` through an out-pointer the caller passed, if non-NULL.
///
/// # Safety
/// `out` must be NULL or valid for a write of `T`.
pub unsafe fn put<T>(out: *mut T, value: T) -> FiResult<()> {
    if out.is_null() {
        return Err(FiError::INVAL);
    }
    // SAFETY: non-NULL and, per the contract, writable.
    unsafe { out.write(value) };
    Ok(())
}
