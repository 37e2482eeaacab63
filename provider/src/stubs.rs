//! Entry points for operations rshm does not offer: each returns `-FI_ENOSYS` (or the
//! ssize_t/u64 equivalent). libfabric's inline wrappers call ops through their pointers without
//! checking for NULL, so every slot of every ops table must hold a function.

use rshm_ffi as ffi;
use std::ffi::{c_char, c_int, c_void};

const NOSYS: c_int = -(ffi::FI_ENOSYS as c_int);

macro_rules! nosys {
    ($($name:ident($($arg:ty),*) -> $ret:ty;)*) => {
        $(
            pub(crate) unsafe extern "C" fn $name($(_: $arg),*) -> $ret {
                NOSYS as $ret
            }
        )*
    };
}

nosys! {
    fi_bind(*mut ffi::fid, *mut ffi::fid, u64) -> c_int;
    fi_control(*mut ffi::fid, c_int, *mut c_void) -> c_int;
    fi_ops_open(*mut ffi::fid, *const c_char, u64, *mut *mut c_void, *mut c_void) -> c_int;
    fi_tostr(*const ffi::fid, *mut c_char, usize) -> c_int;
    fi_ops_set(*mut ffi::fid, *const c_char, u64, *mut c_void, *mut c_void) -> c_int;
    passive_ep(*mut ffi::fid_fabric, *mut ffi::fi_info, *mut *mut ffi::fid_pep, *mut c_void) -> c_int;
    domain2(*mut ffi::fid_fabric, *mut ffi::fi_info, *mut *mut ffi::fid_domain, u64, *mut c_void) -> c_int;
    scalable_ep(*mut ffi::fid_domain, *mut ffi::fi_info, *mut *mut ffi::fid_ep, *mut c_void) -> c_int;
    stx_ctx(*mut ffi::fid_domain, *mut ffi::fi_tx_attr, *mut *mut ffi::fid_stx, *mut c_void) -> c_int;
    srx_ctx(*mut ffi::fid_domain, *mut ffi::fi_rx_attr, *mut *mut ffi::fid_ep, *mut c_void) -> c_int;
    query_collective(*mut ffi::fid_domain, ffi::fi_collective_op, *mut ffi::fi_collective_attr, u64) -> c_int;
    endpoint2(*mut ffi::fid_domain, *mut ffi::fi_info, *mut *mut ffi::fid_ep, u64, *mut c_void) -> c_int;
    tx_ctx(*mut ffi::fid_ep, c_int, *mut ffi::fi_tx_attr, *mut *mut ffi::fid_ep, *mut c_void) -> c_int;
    rx_ctx(*mut ffi::fid_ep, c_int, *mut ffi::fi_rx_attr, *mut *mut ffi::fid_ep, *mut c_void) -> c_int;
    getpeer(*mut ffi::fid_ep, *mut c_void, *mut usize) -> c_int;
    connect(*mut ffi::fid_ep, *const c_void, *const c_void, usize) -> c_int;
    listen(*mut ffi::fid_pep) -> c_int;
    accept(*mut ffi::fid_ep, *const c_void, usize) -> c_int;
    reject(*mut ffi::fid_pep, ffi::fid_t, *const c_void, usize) -> c_int;
    shutdown(*mut ffi::fid_ep, u64) -> c_int;
    join(*mut ffi::fid_ep, *const c_void, u64, *mut *mut ffi::fid_mc, *mut c_void) -> c_int;
    av_set(*mut ffi::fid_av, *mut ffi::fi_av_set_attr, *mut *mut ffi::fid_av_set, *mut c_void) -> c_int;
}
