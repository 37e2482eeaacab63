//! Memory registration. Every peer reads and writes through the kernel (CMA) or bounce
//! buffers, so registration pins nothing: it records the range, access and key, which the RMA
//! path checks when a peer's operation arrives (`MrTable::resolve`), and the counters bound to
//! it with `fi_mr_bind`, which count remote writes and reads into it.
//!
//! Keys: with FI_MR_PROV_KEY the domain chooses them, otherwise the application's requested key
//! is used (the same on every process, as OpenSHMEM's scalable mode wants). Addresses: with
//! FI_MR_VIRT_ADDR a remote address is a virtual address inside the region, otherwise an offset
//! from its start.

use crate::error::{int_ret, FiError, FiResult};
use crate::object::{self, put};
use crate::state::mr::MrEntry;
use crate::state::DomainShared;
use rshm_ffi as ffi;
use std::ffi::c_void;
use std::sync::Arc;

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
    let dom = unsafe { object::get::<crate::state::Domain>(fid, ffi::FI_CLASS_DOMAIN) }?;
    if access & !ACCESS != 0 {
        return Err(FiError::INVAL);
    }
    // FI_RMA_EVENT: the application asks for remote-access counting on this region, which
    // rshm does for every region (domains with FI_MR_RMA_EVENT require the flag).
    if flags & !ffi::FI_RMA_EVENT != 0 {
        return Err(FiError::BADFLAGS);
    }
    let iov = iov?;
    let mut st = dom.shared.lock();
    let key = st.mrs.key_for(requested_key);
    if st.mrs.contains(key) {
        crate::warn!(Mr, "fi_mr_reg: key {key} is already registered");
        return Err(FiError::NOKEY);
    }
    st.mrs.insert(key, MrEntry::new(iov, access));
    crate::ep::published::sync(&mut st);
    drop(st);
    let obj = object::into_raw(Mr {
        fid: ffi::fid_mr { fid: object::fid(ffi::FI_CLASS_MR, context, &FI_OPS), mem_desc: std::ptr::null_mut(), key },
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
    crate::boundary::guard("fi_mr_reg", FiError::OTHER.code(), || {
        int_ret(register(fid, crate::iov::registered(buf, len), access, requested_key, flags, mr, context))
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
    crate::boundary::guard("fi_mr_regv", FiError::OTHER.code(), || {
        // SAFETY: the caller's array of `count` iovecs.
        let list = unsafe { crate::iov::many_checked(iov, count, crate::iov::registered_addr) };
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
    crate::boundary::guard("fi_mr_regattr", FiError::OTHER.code(), || {
        // SAFETY: the caller's attr.
        let Some(attr) = (unsafe { attr.as_ref() }) else { return FiError::INVAL.code() };
        // SAFETY: the caller's iov array of `iov_count` entries.
        let list = unsafe { crate::iov::many_checked(attr.mr_iov, attr.iov_count, crate::iov::registered_addr) };
        int_ret(register(fid, list, attr.access, attr.requested_key, flags, mr, attr.context))
    })
}

unsafe extern "C" fn mr_close(fid: *mut ffi::fid) -> i32 {
    let release = |obj: &Mr| -> FiResult<()> {
        let mut st = obj.shared.lock();
        if let Some(entry) = st.mrs.remove(obj.fid.key) {
            // Peers reading it on their own, and replies to reads still going out of this
            // memory, must not read it after we return.
            crate::ep::published::sync(&mut st);
            for (_, ep) in st.eps.iter_mut() {
                ep.registration_closed(entry.iov());
            }
            for id in [entry.write_cntr, entry.read_cntr].into_iter().flatten() {
                if let Some(c) = st.cntrs.get_mut(id) {
                    c.mrs = c.mrs.saturating_sub(1);
                }
            }
        }
        Ok(())
    };
    // SAFETY: the libfabric contract: a live mr of ours.
    unsafe { object::close::<Mr>(fid, ffi::FI_CLASS_MR, "fi_close(mr)", release) }
}

/// Binding an MR to an endpoint (FI_MR_ENDPOINT style: accepted, the MR serves every endpoint
/// of the domain) or to a counter: with FI_REMOTE_WRITE / FI_REMOTE_READ the counter counts the
/// peers' writes (and atomics) / reads into this region, as OpenSHMEM's target counter does.
unsafe extern "C" fn mr_bind(fid: *mut ffi::fid, bfid: *mut ffi::fid, flags: u64) -> i32 {
    crate::boundary::guard("fi_mr_bind", FiError::OTHER.code(), || {
        int_ret((|| -> FiResult<()> {
            // SAFETY: libfabric contract.
            let mr = unsafe { object::get::<Mr>(fid, ffi::FI_CLASS_MR) }?;
            if bfid.is_null() {
                return Err(FiError::INVAL);
            }
            // SAFETY: a live fid of ours.
            match unsafe { (*bfid).fclass } as u32 {
                ffi::FI_CLASS_EP => Ok(()),
                ffi::FI_CLASS_CNTR => {
                    // SAFETY: class checked.
                    let cntr = unsafe { crate::cntr::get(bfid) }?;
                    if !Arc::ptr_eq(&cntr.shared, &mr.shared) {
                        return Err(FiError::INVAL);
                    }
                    let remote = (ffi::FI_REMOTE_WRITE | ffi::FI_REMOTE_READ) as u64;
                    if flags & !remote != 0 || flags == 0 {
                        return Err(FiError::BADFLAGS);
                    }
                    let mut st = mr.shared.lock();
                    let entry = st.mrs.get_mut(mr.fid.key).ok_or(FiError::INVAL)?;
                    if flags & ffi::FI_REMOTE_WRITE as u64 != 0 {
                        entry.write_cntr = Some(cntr.id);
                    }
                    if flags & ffi::FI_REMOTE_READ as u64 != 0 {
                        entry.read_cntr = Some(cntr.id);
                    }
                    st.cntrs[cntr.id].mrs += 1;
                    // A counted registration is read through us only.
                    crate::ep::published::sync(&mut st);
                    Ok(())
                }
                _ => Err(FiError::INVAL),
            }
        })())
    })
}

unsafe extern "C" fn mr_control(fid: *mut ffi::fid, command: i32, _arg: *mut c_void) -> i32 {
    crate::boundary::guard("mr control", FiError::OTHER.code(), || {
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
