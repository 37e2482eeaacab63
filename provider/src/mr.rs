//! Memory registration. Every peer reads and writes through the kernel (CMA) or bounce
//! buffers, so registration pins nothing: it records the range, access and key, which the RMA
//! path checks.

use crate::domain::DomainShared;
use crate::error::{int_ret, FiError, FiResult};
use crate::object::{self, put};
use rshm_ffi as ffi;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;

/// What one registration covers.
#[derive(Debug, Clone)]
pub struct MrEntry {
    pub iov: smr_core::iov::Ranges,
    pub access: u64,
}

#[derive(Default)]
pub struct MrTable {
    pub by_key: HashMap<u64, MrEntry>,
}

#[repr(C)]
pub struct Mr {
    pub fid: ffi::fid_mr,
    pub shared: Arc<DomainShared>,
}

static FI_OPS: ffi::fi_ops = object::fi_ops(mr_close, Some(mr_bind), Some(mr_control));

const ACCESS: u64 =
    (ffi::FI_SEND | ffi::FI_RECV | ffi::FI_READ | ffi::FI_WRITE | ffi::FI_REMOTE_READ | ffi::FI_REMOTE_WRITE) as u64;

fn register(
    fid: *mut ffi::fid,
    iov: FiResult<smr_core::iov::Ranges>,
    access: u64,
    requested_key: u64,
    flags: u64,
    mr: *mut *mut ffi::fid_mr,
    context: *mut c_void,
) -> FiResult<()> {
    // SAFETY: libfabric contract: the domain's fid.
    let dom = unsafe { object::get::<crate::domain::Domain>(fid, ffi::FI_CLASS_DOMAIN) }?;
    if access & !ACCESS != 0 {
        return Err(FiError::INVAL);
    }
    if flags != 0 {
        return Err(FiError::BADFLAGS);
    }
    let iov = iov?;
    let mut st = dom.shared.lock();
    if st.mrs.by_key.contains_key(&requested_key) {
        crate::warn!(Mr, "fi_mr_reg: key {requested_key} is already registered");
        return Err(FiError::NOKEY);
    }
    st.mrs.by_key.insert(requested_key, MrEntry { iov, access });
    drop(st);
    let obj = object::into_raw(Mr {
        fid: ffi::fid_mr {
            fid: object::fid(ffi::FI_CLASS_MR, context, &FI_OPS),
            mem_desc: std::ptr::null_mut(),
            key: requested_key,
        },
        shared: Arc::clone(&dom.shared),
    });
    // SAFETY: `obj` is ours; the descriptor points back at the MR so data calls can check it.
    unsafe { (*obj).fid.mem_desc = obj.cast() };
    // SAFETY: the caller's out-pointer.
    unsafe { put(mr, obj.cast::<ffi::fid_mr>()) }
}

/// `fi_mr_reg`.
pub(crate) unsafe extern "C" fn mr_reg(
    fid: *mut ffi::fid,
    buf: *const c_void,
    len: usize,
    access: u64,
    _offset: u64,
    requested_key: u64,
    flags: u64,
    mr: *mut *mut ffi::fid_mr,
    context: *mut c_void,
) -> i32 {
    crate::guard("fi_mr_reg", FiError::OTHER.code(), || {
        int_ret(register(fid, crate::iov::one(buf, len), access, requested_key, flags, mr, context))
    })
}

/// `fi_mr_regv`.
pub(crate) unsafe extern "C" fn mr_regv(
    fid: *mut ffi::fid,
    iov: *const ffi::iovec,
    count: usize,
    access: u64,
    _offset: u64,
    requested_key: u64,
    flags: u64,
    mr: *mut *mut ffi::fid_mr,
    context: *mut c_void,
) -> i32 {
    crate::guard("fi_mr_regv", FiError::OTHER.code(), || {
        // SAFETY: the caller's array of `count` iovecs.
        let list = unsafe { crate::iov::many(iov, count) };
        int_ret(register(fid, list, access, requested_key, flags, mr, context))
    })
}

/// `fi_mr_regattr`: reads only the fields every API version defines up to `requested_key` and
/// `context` (the struct grew later).
pub(crate) unsafe extern "C" fn mr_regattr(
    fid: *mut ffi::fid,
    attr: *const ffi::fi_mr_attr,
    flags: u64,
    mr: *mut *mut ffi::fid_mr,
) -> i32 {
    crate::guard("fi_mr_regattr", FiError::OTHER.code(), || {
        // SAFETY: the caller's attr.
        let Some(attr) = (unsafe { attr.as_ref() }) else { return FiError::INVAL.code() };
        // SAFETY: the caller's iov array of `iov_count` entries.
        let list = unsafe { crate::iov::many(attr.mr_iov, attr.iov_count) };
        int_ret(register(fid, list, attr.access, attr.requested_key, flags, mr, attr.context))
    })
}

unsafe extern "C" fn mr_close(fid: *mut ffi::fid) -> i32 {
    let release = |obj: &Mr| -> FiResult<()> {
        obj.shared.lock().mrs.by_key.remove(&obj.fid.key);
        Ok(())
    };
    // SAFETY: the libfabric contract: a live mr of ours.
    unsafe { object::close::<Mr>(fid, ffi::FI_CLASS_MR, "fi_close(mr)", release) }
}

/// Binding an MR to an endpoint (FI_MR_ENDPOINT style) or to a counter (remote-access events)
/// is accepted; remote access events come with RMA.
unsafe extern "C" fn mr_bind(fid: *mut ffi::fid, bfid: *mut ffi::fid, _flags: u64) -> i32 {
    crate::guard("fi_mr_bind", FiError::OTHER.code(), || {
        // SAFETY: libfabric contract.
        if let Err(e) = unsafe { object::get::<Mr>(fid, ffi::FI_CLASS_MR) } {
            return e.code();
        }
        if bfid.is_null() {
            return FiError::INVAL.code();
        }
        // SAFETY: a live fid of ours.
        match unsafe { (*bfid).fclass } as u32 {
            ffi::FI_CLASS_EP | ffi::FI_CLASS_CNTR => 0,
            _ => FiError::INVAL.code(),
        }
    })
}

unsafe extern "C" fn mr_control(fid: *mut ffi::fid, command: i32, _arg: *mut c_void) -> i32 {
    crate::guard("mr control", FiError::OTHER.code(), || {
        // SAFETY: libfabric contract.
        if let Err(e) = unsafe { object::get::<Mr>(fid, ffi::FI_CLASS_MR) } {
            return e.code();
        }
        match command as u32 {
            ffi::FI_ENABLE | ffi::FI_REFRESH => 0,
            _ => FiError::NOSYS.code(),
        }
    })
}
