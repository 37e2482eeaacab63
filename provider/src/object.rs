//! Turning libfabric `fid` pointers back into our objects, and object lifetime.
//!
//! Every object is a `#[repr(C)]` struct whose first field is the libfabric `fid_*` struct (whose
//! own first field is `struct fid`), allocated with `Box` and handed out as a raw pointer.
//! A `fid` that comes back is checked for NULL and for its class before it is used.

use crate::error::{FiError, FiResult};
use rshm_ffi as ffi;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};

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

/// An object that others are opened on and count on, so that it refuses to close under them
/// (the fabric: its domains and EQs). They find it from the `fid_*` they were opened with, so
/// they need its layout, not the module that opens it.
#[repr(C)]
pub struct Parent<F> {
    pub fid: F,
    children: AtomicUsize,
}

impl<F> Parent<F> {
    pub fn new(fid: F) -> Parent<F> {
        Parent { fid, children: AtomicUsize::new(0) }
    }

    /// An object was opened on it.
    pub fn adopt(&self) {
        self.children.fetch_add(1, Ordering::AcqRel);
    }

    /// An object opened on it closed.
    pub fn release(&self) {
        self.children.fetch_sub(1, Ordering::AcqRel);
    }

    pub fn has_children(&self) -> bool {
        self.children.load(Ordering::Acquire) != 0
    }
}

/// The generic `fi_ops` of an object: its own `close` (and `bind`/`control` where it has them),
/// `-FI_ENOSYS` stubs for the rest.
pub const fn fi_ops(
    close: unsafe extern "C" fn(*mut ffi::fid) -> i32,
    bind: Option<unsafe extern "C" fn(*mut ffi::fid, *mut ffi::fid, u64) -> i32>,
    control: Option<unsafe extern "C" fn(*mut ffi::fid, i32, *mut c_void) -> i32>,
) -> ffi::fi_ops {
    ffi::fi_ops {
        size: size_of::<ffi::fi_ops>(),
        close: Some(close),
        bind: match bind {
            Some(f) => Some(f),
            None => Some(crate::stubs::fi_bind),
        },
        control: match control {
            Some(f) => Some(f),
            None => Some(crate::stubs::fi_control),
        },
        ops_open: Some(crate::stubs::fi_ops_open),
        tostr: Some(crate::stubs::fi_tostr),
        ops_set: Some(crate::stubs::fi_ops_set),
    }
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

/// `fi_close` for an object of type `T`: check the fid, let `release` refuse (`-FI_EBUSY`
/// while others still use the object) or drop the object's shared state, then free it.
///
/// # Safety
/// As `get`: `fid` is NULL or a live object of ours of type `T`.
pub unsafe fn close<T>(fid: *mut ffi::fid, class: u32, what: &str, release: impl FnOnce(&T) -> FiResult<()>) -> i32 {
    crate::boundary::guard(what, FiError::OTHER.code(), || {
        // SAFETY: per this function's contract.
        let obj = match unsafe { get::<T>(fid, class) } {
            Ok(o) => o,
            Err(e) => return e.code(),
        };
        if let Err(e) = release(obj) {
            return e.code();
        }
        // SAFETY: created by `into_raw::<T>`; `release` agreed, so it is closed exactly once.
        drop(unsafe { from_raw(fid.cast::<T>()) });
        0
    })
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
