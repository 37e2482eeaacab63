//! Address vectors (FI_AV_TABLE and FI_AV_MAP): fi_addr_t values are indices into a table of
//! peer names, each name held once (state/av.rs). Removal leaves a hole; the index is reused
//! only by later inserts.

use crate::error::{int_ret, FiError, FiResult};
use crate::getinfo::{decode_addr, encode_addr, node_is_local, ADDR_LEN};
use crate::names::service_name;
use crate::object::{self, put};
use crate::state::av::AvState;
use crate::state::{DomainShared, DomainState};
use crate::stubs;
use rshm_ffi as ffi;
use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;

#[repr(C)]
pub struct Av {
    pub fid: ffi::fid_av,
    pub shared: Arc<DomainShared>,
    pub id: usize,
}

// No bind: binding an EQ asks for asynchronous inserts, and ours complete synchronously.
static FI_OPS: ffi::fi_ops = object::fi_ops(av_close, None, None);

static AV_OPS: ffi::fi_ops_av = ffi::fi_ops_av {
    size: size_of::<ffi::fi_ops_av>(),
    insert: Some(av_insert),
    insertsvc: Some(av_insertsvc),
    insertsym: Some(av_insertsym),
    remove: Some(av_remove),
    lookup: Some(av_lookup),
    straddr: Some(av_straddr),
    av_set: Some(stubs::av_set),
};

/// # Safety
/// NULL or a live AV of ours.
pub unsafe fn get<'a>(fid: *const ffi::fid) -> FiResult<&'a Av> {
    // SAFETY: per the contract.
    unsafe { object::get::<Av>(fid, ffi::FI_CLASS_AV) }
}

/// `fi_av_open`.
pub(crate) unsafe extern "C" fn av_open(
    domain: *mut ffi::fid_domain,
    attr: *mut ffi::fi_av_attr,
    av: *mut *mut ffi::fid_av,
    context: *mut c_void,
) -> i32 {
    crate::boundary::guard("fi_av_open", FiError::OTHER.code(), || {
        int_ret((|| -> FiResult<()> {
            // SAFETY: libfabric contract.
            let dom = unsafe { crate::state::get(domain) }?;
            // SAFETY: the caller's attr.
            let attr = unsafe { attr.as_ref() }.ok_or(FiError::INVAL)?;
            if attr.type_ > ffi::FI_AV_TABLE {
                return Err(FiError::INVAL);
            }
            if !attr.name.is_null() {
                crate::warn!(Av, "fi_av_open: named (shared) AVs are not supported");
                return Err(FiError::NOSYS);
            }
            if attr.rx_ctx_bits != 0 {
                return Err(FiError::NOSYS);
            }
            let id = dom.shared.lock().avs.insert(AvState::default());
            let obj = object::into_raw(Av {
                fid: ffi::fid_av {
                    fid: object::fid(ffi::FI_CLASS_AV, context, &FI_OPS),
                    ops: &AV_OPS as *const _ as *mut _,
                },
                shared: Arc::clone(&dom.shared),
                id,
            });
            // SAFETY: the caller's out-pointer.
            unsafe { put(av, obj.cast::<ffi::fid_av>()) }
        })())
    })
}

unsafe extern "C" fn av_close(fid: *mut ffi::fid) -> i32 {
    let release = |obj: &Av| -> FiResult<()> {
        let mut st = obj.shared.lock();
        if !st.avs[obj.id].eps.is_empty() {
            crate::warn!(Av, "fi_close: endpoints are still bound to it");
            return Err(FiError::BUSY);
        }
        st.avs.remove(obj.id);
        Ok(())
    };
    // SAFETY: the libfabric contract: a live av of ours.
    unsafe { object::close::<Av>(fid, ffi::FI_CLASS_AV, "fi_close(av)", release) }
}

/// AV `id` took or freed an index: the endpoints bound to it forget the peers they cached from
/// it and give held messages from senders they did not know the fi_addr those have now.
fn changed(st: &mut DomainState, id: usize) {
    let DomainState { avs, eps, .. } = st;
    let av = &avs[id];
    for &ep in &av.eps {
        if let Some(e) = eps.get_mut(ep) {
            e.av_changed(av);
        }
    }
}

/// Insert names; `out[i]` gets each fi_addr (FI_ADDR_NOTAVAIL for a bad one).
fn insert_names(
    av: *mut ffi::fid_av,
    names: Vec<FiResult<String>>,
    out: *mut ffi::fi_addr_t,
    flags: u64,
    context: *mut c_void,
) -> FiResult<usize> {
    // SAFETY: libfabric contract.
    let av = unsafe { get(av.cast()) }?;
    let mut st = av.shared.lock();
    let (mut inserted, mut taken) = (0, false);
    for (i, name) in names.into_iter().enumerate() {
        let addr = match name {
            Ok(n) => {
                inserted += 1;
                let (addr, new) = st.avs[av.id].insert(n);
                taken |= new;
                addr
            }
            Err(_) => ffi::FI_ADDR_NOTAVAIL,
        };
        if !out.is_null() {
            // SAFETY: the caller's fi_addr array has one slot per address.
            unsafe { out.add(i).write(addr) };
        }
        if flags & ffi::FI_SYNC_ERR != 0 && !context.is_null() {
            let err = if addr == ffi::FI_ADDR_NOTAVAIL { ffi::FI_EINVAL as c_int } else { 0 };
            // SAFETY: with FI_SYNC_ERR, `context` is an int array of one slot per address.
            unsafe { context.cast::<c_int>().add(i).write(err) };
        }
    }
    if taken {
        changed(&mut st, av.id);
    }
    Ok(inserted)
}

unsafe extern "C" fn av_insert(
    av: *mut ffi::fid_av,
    addr: *const c_void,
    count: usize,
    fi_addr: *mut ffi::fi_addr_t,
    flags: u64,
    context: *mut c_void,
) -> i32 {
    crate::boundary::guard("fi_av_insert", FiError::OTHER.code(), || {
        if addr.is_null() && count > 0 {
            return FiError::INVAL.code();
        }
        if flags & !ffi::FI_SYNC_ERR != 0 && flags & !(ffi::FI_SYNC_ERR | ffi::FI_MORE as u64) != 0 {
            return FiError::BADFLAGS.code();
        }
        let names = (0..count)
            // SAFETY: the caller's array of `count` addresses, each ADDR_LEN bytes (or shorter
            // and NUL-terminated).
            .map(|i| unsafe { decode_addr(addr.cast::<u8>().add(i * ADDR_LEN)) })
            .collect::<Vec<_>>();
        match insert_names(av, names, fi_addr, flags, context) {
            Ok(n) => n as i32,
            Err(e) => e.code(),
        }
    })
}

unsafe extern "C" fn av_insertsvc(
    av: *mut ffi::fid_av,
    node: *const c_char,
    service: *const c_char,
    fi_addr: *mut ffi::fi_addr_t,
    flags: u64,
    context: *mut c_void,
) -> i32 {
    crate::boundary::guard("fi_av_insertsvc", FiError::OTHER.code(), || {
        // SAFETY: NULL or C strings of the caller.
        let (node, service) = unsafe { (crate::core_api::opt_str(node), crate::core_api::opt_str(service)) };
        let Some(service) = service else { return FiError::INVAL.code() };
        let name = if node_is_local(node) { service_name(service) } else { Err(FiError::INVAL) };
        match insert_names(av, vec![name], fi_addr, flags, context) {
            Ok(n) => n as i32,
            Err(e) => e.code(),
        }
    })
}

unsafe extern "C" fn av_insertsym(
    av: *mut ffi::fid_av,
    node: *const c_char,
    nodecnt: usize,
    service: *const c_char,
    svccnt: usize,
    fi_addr: *mut ffi::fi_addr_t,
    flags: u64,
    context: *mut c_void,
) -> i32 {
    crate::boundary::guard("fi_av_insertsym", FiError::OTHER.code(), || {
        // SAFETY: NULL or C strings of the caller.
        let (node, service) = unsafe { (crate::core_api::opt_str(node), crate::core_api::opt_str(service)) };
        let (Some(node), Some(service)) = (node, service) else { return FiError::INVAL.code() };
        let Ok(first_port) = service.parse::<u64>() else { return FiError::INVAL.code() };
        if nodecnt != 1 || !node_is_local(Some(node)) {
            // Every endpoint is on this node: only one node can be named.
            return FiError::INVAL.code();
        }
        let names = (0..svccnt as u64).map(|i| service_name(&(first_port + i).to_string())).collect();
        match insert_names(av, names, fi_addr, flags, context) {
            Ok(n) => n as i32,
            Err(e) => e.code(),
        }
    })
}

unsafe extern "C" fn av_remove(av: *mut ffi::fid_av, fi_addr: *mut ffi::fi_addr_t, count: usize, _flags: u64) -> i32 {
    crate::boundary::guard("fi_av_remove", FiError::OTHER.code(), || {
        int_ret((|| -> FiResult<()> {
            // SAFETY: libfabric contract.
            let av = unsafe { get(av.cast()) }?;
            if fi_addr.is_null() && count > 0 {
                return Err(FiError::INVAL);
            }
            let mut st = av.shared.lock();
            let (mut result, mut freed) = (Ok(()), false);
            for i in 0..count {
                // SAFETY: the caller's array of `count` addresses.
                let addr = unsafe { *fi_addr.add(i) };
                match st.avs[av.id].remove(addr) {
                    Ok(last) => freed |= last,
                    Err(e) => result = Err(e),
                }
            }
            if freed {
                changed(&mut st, av.id);
            }
            result
        })())
    })
}

unsafe extern "C" fn av_lookup(
    av: *mut ffi::fid_av,
    fi_addr: ffi::fi_addr_t,
    addr: *mut c_void,
    addrlen: *mut usize,
) -> i32 {
    crate::boundary::guard("fi_av_lookup", FiError::OTHER.code(), || {
        int_ret((|| -> FiResult<()> {
            // SAFETY: libfabric contract.
            let av = unsafe { get(av.cast()) }?;
            if addrlen.is_null() {
                return Err(FiError::INVAL);
            }
            let st = av.shared.lock();
            let name = st.avs[av.id].name(fi_addr).ok_or(FiError::INVAL)?;
            let bytes = encode_addr(name);
            // SAFETY: `addrlen` is the caller's in/out length; `addr` holds that many bytes.
            unsafe {
                let room = *addrlen;
                *addrlen = ADDR_LEN;
                if !addr.is_null() {
                    std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr.cast::<u8>(), room.min(ADDR_LEN));
                }
                if room < ADDR_LEN {
                    return Err(FiError::TOOSMALL);
                }
            }
            Ok(())
        })())
    })
}

unsafe extern "C" fn av_straddr(
    _av: *mut ffi::fid_av,
    addr: *const c_void,
    buf: *mut c_char,
    len: *mut usize,
) -> *const c_char {
    crate::boundary::guard("fi_av_straddr", std::ptr::null(), || {
        if len.is_null() || addr.is_null() {
            return std::ptr::null();
        }
        // SAFETY: an address of ours: NUL-terminated within ADDR_LEN bytes.
        let text = unsafe { decode_addr(addr.cast()) }.unwrap_or_else(|_| "(invalid rshm address)".into());
        // SAFETY: `len` is the caller's in/out size of `buf`.
        unsafe {
            let room = *len;
            *len = text.len() + 1;
            if !buf.is_null() && room > 0 {
                let n = text.len().min(room - 1);
                std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
                *buf.add(n) = 0;
            }
        }
        buf
    })
}
