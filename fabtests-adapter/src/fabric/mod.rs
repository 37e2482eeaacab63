//! A small wrapper over libfabric's public API, as an application sees it.
//!
//! Most of libfabric's API is `static inline` functions in the headers that call through the
//! ops tables of each object (`fi_send(ep, ...)` is `ep->msg->send(ep, ...)`). Those wrappers are
//! reimplemented here in Rust over `rshm_ffi`'s types. The only symbols called directly are the
//! ones libfabric really exports: `fi_getinfo`, `fi_fabric`, `fi_dupinfo`, `fi_freeinfo`,
//! `fi_strerror`, `fi_version`. Linking against the installed 1.17 `libfabric.so` binds
//! `fi_getinfo`/`fi_dupinfo`/`fi_freeinfo` to `@FABRIC_1.3` and `fi_fabric` to `@FABRIC_1.1`.
//!
//! Objects own their fid and close it on drop; [`close`](Ep::close) returns libfabric's code.
//! Operations that hand a buffer to the provider for later use (send, recv, RMA) are `unsafe`:
//! the caller keeps the memory alive until the operation completes or the endpoint is closed.

mod info;
mod obj;

pub use info::{Hints, Info, InfoList};
pub use obj::{close_fid, control, Av, Cntr, Cq, CqEntry, Domain, Ep, Eq, Fabric, Mr, WaitSet};
pub use rshm_ffi as ffi;

use std::ffi::{c_char, c_int, c_void, CStr};

/// The API version every call here requests: FI_VERSION(1,17), the installed headers.
pub const API_VERSION: u32 = ffi::fi_version_make(1, 17);

pub type FiAddr = ffi::fi_addr_t;
pub const FI_ADDR_UNSPEC: FiAddr = ffi::FI_ADDR_UNSPEC;
pub const FI_ADDR_NOTAVAIL: FiAddr = ffi::FI_ADDR_NOTAVAIL;

extern "C" {
    /// `fi_getinfo@@FABRIC_1.3` (default version of the 1.17 library we link).
    fn fi_getinfo(
        version: u32,
        node: *const c_char,
        service: *const c_char,
        flags: u64,
        hints: *const ffi::fi_info,
        info: *mut *mut ffi::fi_info,
    ) -> c_int;
    /// `fi_fabric@@FABRIC_1.1`.
    fn fi_fabric(attr: *mut ffi::fi_fabric_attr, fabric: *mut *mut ffi::fid_fabric, context: *mut c_void) -> c_int;
}

/// A libfabric return code (always negative, `-FI_Exxx`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FiError(pub i32);

impl FiError {
    pub fn code(self) -> i32 {
        self.0
    }
}

impl std::fmt::Display for FiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", errname(self.0), strerror(self.0))
    }
}

/// `Ok(())` for a non-negative code, the error otherwise.
pub fn check(ret: isize) -> Result<(), FiError> {
    if ret < 0 {
        Err(FiError(ret as i32))
    } else {
        Ok(())
    }
}

pub const fn neg(code: u32) -> i32 {
    -(code as i32)
}

pub const EAGAIN: i32 = neg(ffi::FI_EAGAIN);
pub const EAVAIL: i32 = neg(ffi::FI_EAVAIL);
pub const ENODATA: i32 = neg(ffi::FI_ENODATA);
pub const ENOSYS: i32 = neg(ffi::FI_ENOSYS);
pub const EOPNOTSUPP: i32 = neg(ffi::FI_EOPNOTSUPP);
pub const ENOMSG: i32 = neg(ffi::FI_ENOMSG);

/// `fi_strerror(code)` (accepts either sign).
pub fn strerror(code: i32) -> String {
    // SAFETY: fi_strerror returns a pointer to a static NUL-terminated string for any input.
    let p = unsafe { ffi::fi_strerror(code.abs()) };
    if p.is_null() {
        return format!("error {code}");
    }
    // SAFETY: non-null, NUL-terminated and static (see above).
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// "-FI_ENODATA" for -61 (or "FI_ENODATA" for 61); falls back to the number.
pub fn errname(code: i32) -> String {
    const NAMES: &[(u32, &str)] = &[
        (ffi::FI_SUCCESS, "FI_SUCCESS"),
        (ffi::FI_EPERM, "FI_EPERM"),
        (ffi::FI_ENOENT, "FI_ENOENT"),
        (ffi::FI_EINTR, "FI_EINTR"),
        (ffi::FI_EIO, "FI_EIO"),
        (ffi::FI_E2BIG, "FI_E2BIG"),
        (ffi::FI_EBADF, "FI_EBADF"),
        (ffi::FI_EAGAIN, "FI_EAGAIN"),
        (ffi::FI_ENOMEM, "FI_ENOMEM"),
        (ffi::FI_EACCES, "FI_EACCES"),
        (ffi::FI_EFAULT, "FI_EFAULT"),
        (ffi::FI_EBUSY, "FI_EBUSY"),
        (ffi::FI_ENODEV, "FI_ENODEV"),
        (ffi::FI_EINVAL, "FI_EINVAL"),
        (ffi::FI_EMFILE, "FI_EMFILE"),
        (ffi::FI_ENOSPC, "FI_ENOSPC"),
        (ffi::FI_ENOSYS, "FI_ENOSYS"),
        (ffi::FI_ENOMSG, "FI_ENOMSG"),
        (ffi::FI_ENODATA, "FI_ENODATA"),
        (ffi::FI_EOVERFLOW, "FI_EOVERFLOW"),
        (ffi::FI_EMSGSIZE, "FI_EMSGSIZE"),
        (ffi::FI_ENOPROTOOPT, "FI_ENOPROTOOPT"),
        (ffi::FI_EOPNOTSUPP, "FI_EOPNOTSUPP"),
        (ffi::FI_EADDRINUSE, "FI_EADDRINUSE"),
        (ffi::FI_EADDRNOTAVAIL, "FI_EADDRNOTAVAIL"),
        (ffi::FI_ENETDOWN, "FI_ENETDOWN"),
        (ffi::FI_ENETUNREACH, "FI_ENETUNREACH"),
        (ffi::FI_ECONNABORTED, "FI_ECONNABORTED"),
        (ffi::FI_ECONNRESET, "FI_ECONNRESET"),
        (ffi::FI_ENOBUFS, "FI_ENOBUFS"),
        (ffi::FI_EISCONN, "FI_EISCONN"),
        (ffi::FI_ENOTCONN, "FI_ENOTCONN"),
        (ffi::FI_ESHUTDOWN, "FI_ESHUTDOWN"),
        (ffi::FI_ETIMEDOUT, "FI_ETIMEDOUT"),
        (ffi::FI_ECONNREFUSED, "FI_ECONNREFUSED"),
        (ffi::FI_EHOSTDOWN, "FI_EHOSTDOWN"),
        (ffi::FI_EHOSTUNREACH, "FI_EHOSTUNREACH"),
        (ffi::FI_EALREADY, "FI_EALREADY"),
        (ffi::FI_EINPROGRESS, "FI_EINPROGRESS"),
        (ffi::FI_EREMOTEIO, "FI_EREMOTEIO"),
        (ffi::FI_ECANCELED, "FI_ECANCELED"),
        (ffi::FI_EKEYREJECTED, "FI_EKEYREJECTED"),
        (ffi::FI_EOTHER, "FI_EOTHER"),
        (ffi::FI_ETOOSMALL, "FI_ETOOSMALL"),
        (ffi::FI_EOPBADSTATE, "FI_EOPBADSTATE"),
        (ffi::FI_EAVAIL, "FI_EAVAIL"),
        (ffi::FI_EBADFLAGS, "FI_EBADFLAGS"),
        (ffi::FI_ENOEQ, "FI_ENOEQ"),
        (ffi::FI_EDOMAIN, "FI_EDOMAIN"),
        (ffi::FI_ENOCQ, "FI_ENOCQ"),
        (ffi::FI_ECRC, "FI_ECRC"),
        (ffi::FI_ETRUNC, "FI_ETRUNC"),
        (ffi::FI_ENOKEY, "FI_ENOKEY"),
        (ffi::FI_ENOAV, "FI_ENOAV"),
        (ffi::FI_EOVERRUN, "FI_EOVERRUN"),
        (ffi::FI_ENORX, "FI_ENORX"),
    ];
    let abs = code.unsigned_abs();
    let sign = if code < 0 { "-" } else { "" };
    match NAMES.iter().find(|(c, _)| *c == abs) {
        Some((_, n)) => format!("{sign}{n}"),
        None => format!("{code}"),
    }
}

/// `fi_version()` of the running core.
pub fn core_version() -> u32 {
    // SAFETY: fi_version takes no arguments and has no preconditions.
    unsafe { ffi::fi_version() }
}

/// `fi_getinfo(API_VERSION, NULL, NULL, 0, hints, &info)`.
pub fn getinfo(hints: Option<&Hints>) -> Result<InfoList, FiError> {
    getinfo_full(API_VERSION, None, None, 0, hints)
}

/// `fi_getinfo` with every argument.
pub fn getinfo_full(
    version: u32,
    node: Option<&str>,
    service: Option<&str>,
    flags: u64,
    hints: Option<&Hints>,
) -> Result<InfoList, FiError> {
    let node = node.map(|s| std::ffi::CString::new(s).expect("node without NUL"));
    let service = service.map(|s| std::ffi::CString::new(s).expect("service without NUL"));
    let mut out: *mut ffi::fi_info = std::ptr::null_mut();
    let hp = hints.map_or(std::ptr::null(), |h| h.as_ptr());
    // SAFETY: node/service are NUL-terminated or NULL, hints is NULL or a valid fi_info owned by
    // `hints` (allocated by fi_dupinfo), `out` is a valid out-pointer.
    let ret = unsafe {
        fi_getinfo(
            version,
            node.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            service.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            flags,
            hp,
            &mut out,
        )
    };
    if ret != 0 {
        if !out.is_null() {
            // SAFETY: a list returned by fi_getinfo is freed with fi_freeinfo.
            unsafe { ffi::fi_freeinfo(out) };
        }
        return Err(FiError(ret));
    }
    Ok(InfoList::from_raw(out))
}

/// `fi_fabric(info->fabric_attr, &fabric, NULL)`.
pub fn open_fabric(info: &Info) -> Result<Fabric, FiError> {
    let mut fab: *mut ffi::fid_fabric = std::ptr::null_mut();
    // SAFETY: fabric_attr is a valid attribute struct owned by `info` (fi_dupinfo), `fab` is a
    // valid out-pointer.
    let ret = unsafe { fi_fabric(info.raw().fabric_attr, &mut fab, std::ptr::null_mut()) };
    if ret != 0 {
        return Err(FiError(ret));
    }
    Ok(Fabric::from_raw(fab))
}
