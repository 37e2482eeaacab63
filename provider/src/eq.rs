//! Event queues. rshm raises no asynchronous events of its own (address insertion is
//! synchronous), but applications open an EQ and may write to it, so it is a real queue.

use crate::error::{int_ret, ssize_ret, FiError, FiResult};
use crate::object::{self, put, Parent};
use rshm_ffi as ffi;
use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_void};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

struct Event {
    event: u32,
    bytes: Vec<u8>,
}

#[repr(C)]
pub struct Eq {
    pub fid: ffi::fid_eq,
    fabric: *mut Parent<ffi::fid_fabric>,
    events: Mutex<VecDeque<Event>>,
    ready: Condvar,
}

static FI_OPS: ffi::fi_ops = object::fi_ops(eq_close, None, None);

static EQ_OPS: ffi::fi_ops_eq = ffi::fi_ops_eq {
    size: size_of::<ffi::fi_ops_eq>(),
    read: Some(eq_read),
    readerr: Some(eq_readerr),
    write: Some(eq_write),
    sread: Some(eq_sread),
    strerror: Some(eq_strerror),
};

/// `fi_eq_open`.
pub(crate) unsafe extern "C" fn eq_open(
    fabric: *mut ffi::fid_fabric,
    attr: *mut ffi::fi_eq_attr,
    eq: *mut *mut ffi::fid_eq,
    context: *mut c_void,
) -> i32 {
    crate::boundary::guard("fi_eq_open", FiError::OTHER.code(), || {
        int_ret((|| -> FiResult<()> {
            // SAFETY: libfabric contract.
            let fab = unsafe { object::get::<Parent<ffi::fid_fabric>>(fabric.cast(), ffi::FI_CLASS_FABRIC) }?;
            // SAFETY: NULL or the caller's attr.
            if let Some(attr) = unsafe { attr.as_ref() } {
                if !matches!(
                    attr.wait_obj,
                    ffi::FI_WAIT_NONE | ffi::FI_WAIT_UNSPEC | ffi::FI_WAIT_YIELD | ffi::FI_WAIT_MUTEX_COND
                ) {
                    crate::warn!(Fabric, "fi_eq_open: wait object {} not supported", attr.wait_obj);
                    return Err(FiError::NOSYS);
                }
            }
            let obj = object::into_raw(Eq {
                fid: ffi::fid_eq {
                    fid: object::fid(ffi::FI_CLASS_EQ, context, &FI_OPS),
                    ops: &EQ_OPS as *const _ as *mut _,
                },
                fabric: fabric.cast(),
                events: Mutex::new(VecDeque::new()),
                ready: Condvar::new(),
            });
            fab.adopt();
            // SAFETY: the caller's out-pointer.
            unsafe { put(eq, obj.cast::<ffi::fid_eq>()) }
        })())
    })
}

/// # Safety
/// NULL or a live EQ of ours.
unsafe fn get<'a>(fid: *const ffi::fid) -> FiResult<&'a Eq> {
    // SAFETY: per the contract.
    unsafe { object::get::<Eq>(fid, ffi::FI_CLASS_EQ) }
}

unsafe extern "C" fn eq_close(fid: *mut ffi::fid) -> i32 {
    let release = |obj: &Eq| -> FiResult<()> {
        // SAFETY: the fabric refuses to close while its EQs are open.
        unsafe { (*obj.fabric).release() };
        Ok(())
    };
    // SAFETY: the libfabric contract: a live eq of ours.
    unsafe { object::close::<Eq>(fid, ffi::FI_CLASS_EQ, "fi_close(eq)", release) }
}

fn take(
    eq: &Eq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    flags: u64,
    timeout: Option<Duration>,
) -> FiResult<usize> {
    let mut q = eq.events.lock().unwrap_or_else(|p| p.into_inner());
    if q.is_empty() {
        if let Some(t) = timeout {
            q = eq.ready.wait_timeout(q, t).unwrap_or_else(|p| p.into_inner()).0;
        }
    }
    let Some(front) = q.front() else { return Err(FiError::AGAIN) };
    if front.bytes.len() > len {
        return Err(FiError::TOOSMALL);
    }
    let n = front.bytes.len();
    // SAFETY: the caller's buffer holds `len >= n` bytes; `event` is NULL or writable.
    unsafe {
        std::ptr::copy_nonoverlapping(front.bytes.as_ptr(), buf.cast::<u8>(), n);
        if !event.is_null() {
            *event = front.event;
        }
    }
    if flags & ffi::FI_PEEK as u64 == 0 {
        q.pop_front();
    }
    Ok(n)
}

unsafe extern "C" fn eq_read(eq: *mut ffi::fid_eq, event: *mut u32, buf: *mut c_void, len: usize, flags: u64) -> isize {
    crate::boundary::guard("fi_eq_read", FiError::OTHER.code() as isize, || {
        // SAFETY: libfabric contract.
        ssize_ret(unsafe { get(eq.cast()) }.and_then(|q| take(q, event, buf, len, flags, None)))
    })
}

unsafe extern "C" fn eq_sread(
    eq: *mut ffi::fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    timeout: c_int,
    flags: u64,
) -> isize {
    crate::boundary::guard("fi_eq_sread", FiError::OTHER.code() as isize, || {
        let t = if timeout < 0 { Duration::from_secs(3600) } else { Duration::from_millis(timeout as u64) };
        // SAFETY: libfabric contract.
        ssize_ret(unsafe { get(eq.cast()) }.and_then(|q| take(q, event, buf, len, flags, Some(t))))
    })
}

unsafe extern "C" fn eq_readerr(eq: *mut ffi::fid_eq, _buf: *mut ffi::fi_eq_err_entry, _flags: u64) -> isize {
    crate::boundary::guard("fi_eq_readerr", FiError::OTHER.code() as isize, || {
        // SAFETY: libfabric contract.
        match unsafe { get(eq.cast()) } {
            Ok(_) => FiError::AGAIN.code() as isize,
            Err(e) => e.code() as isize,
        }
    })
}

unsafe extern "C" fn eq_write(eq: *mut ffi::fid_eq, event: u32, buf: *const c_void, len: usize, _flags: u64) -> isize {
    crate::boundary::guard("fi_eq_write", FiError::OTHER.code() as isize, || {
        // SAFETY: libfabric contract.
        let q = match unsafe { get(eq.cast()) } {
            Ok(q) => q,
            Err(e) => return e.code() as isize,
        };
        if buf.is_null() && len > 0 {
            return FiError::INVAL.code() as isize;
        }
        let bytes = if len == 0 {
            Vec::new()
        } else {
            // SAFETY: the caller's buffer of `len` bytes.
            unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) }.to_vec()
        };
        q.events.lock().unwrap_or_else(|p| p.into_inner()).push_back(Event { event, bytes });
        q.ready.notify_all();
        len as isize
    })
}

unsafe extern "C" fn eq_strerror(
    _eq: *mut ffi::fid_eq,
    prov_errno: c_int,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    // SAFETY: the caller's buffer of `len` bytes, or NULL.
    unsafe { crate::core_api::strerror_into(prov_errno, buf, len) }
}
