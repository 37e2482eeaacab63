//! libfabric objects and the header's inline wrappers, reimplemented over the ops tables.

use super::{ffi, FiAddr, FiError, Info, ENOSYS};
use std::ffi::{c_int, c_void};
use std::mem::{offset_of, size_of};
use std::ptr::null_mut;

/// Call `(*table).field(args)`, or return `-FI_ENOSYS` if the slot is empty.
macro_rules! call {
    ($tbl:expr, $field:ident ( $($arg:expr),* $(,)? )) => {{
        let tbl = $tbl;
        match (*tbl).$field {
            Some(f) => f($($arg),*) as _,
            None => ENOSYS as _,
        }
    }};
}

/// Like `call!` but first checks the table's `size` covers the slot (libfabric's `FI_CHECK_OP`),
/// for slots added after the table was introduced.
macro_rules! call_checked {
    ($tbl:expr, $ty:ty, $field:ident ( $($arg:expr),* $(,)? )) => {{
        let tbl = $tbl;
        if (*tbl).size <= offset_of!($ty, $field) {
            ENOSYS as _
        } else {
            call!(tbl, $field($($arg),*))
        }
    }};
}

/// `fi_close(fid)` = `fid->ops->close(fid)`.
///
/// # Safety
/// `fid` is an open libfabric object.
pub unsafe fn close_fid(fid: *mut ffi::fid) -> i32 {
    // SAFETY: the caller guarantees fid is open, so fid->ops is its valid ops table.
    unsafe { call!((*fid).ops, close(fid)) }
}

/// Common parts of every object: raw pointer, `fid()`, `close()`, close on drop.
macro_rules! object {
    ($name:ident, $raw:ty) => {
        pub struct $name {
            ptr: *mut $raw,
            /// Object-specific extra state (the CQ format for a CQ).
            aux: u32,
        }

        impl $name {
            pub(crate) fn from_raw(ptr: *mut $raw) -> $name {
                assert!(!ptr.is_null(), concat!(stringify!($name), ": provider returned NULL"));
                $name { ptr, aux: 0 }
            }

            pub fn raw(&self) -> *mut $raw {
                self.ptr
            }

            /// The embedded `struct fid` (first member of every libfabric object).
            pub fn fid(&self) -> *mut ffi::fid {
                self.ptr.cast()
            }

            /// `fi_close`; on failure the object stays open (and is closed again on drop).
            pub fn close(mut self) -> Result<(), FiError> {
                // SAFETY: self.ptr is open (we only null it after a successful close).
                let ret = unsafe { close_fid(self.fid()) };
                if ret != 0 {
                    return Err(FiError(ret));
                }
                self.ptr = null_mut();
                Ok(())
            }

            /// `fi_close` that leaves the object usable after a failure (returns the code).
            pub fn try_close(&mut self) -> i32 {
                if self.ptr.is_null() {
                    return 0;
                }
                // SAFETY: self.ptr is open.
                let ret = unsafe { close_fid(self.fid()) };
                if ret == 0 {
                    self.ptr = null_mut();
                }
                ret
            }
        }

        impl Drop for $name {
            fn drop(&mut self) {
                if !self.ptr.is_null() {
                    // SAFETY: still open; a failed close leaks the object, nothing worse.
                    let _ = unsafe { close_fid(self.fid()) };
                }
            }
        }
    };
}

object!(Fabric, ffi::fid_fabric);
object!(Domain, ffi::fid_domain);
object!(Eq, ffi::fid_eq);
object!(Av, ffi::fid_av);
object!(Cq, ffi::fid_cq);
object!(Cntr, ffi::fid_cntr);
object!(Mr, ffi::fid_mr);
object!(Ep, ffi::fid_ep);
object!(WaitSet, ffi::fid_wait);

fn ret_ok(ret: c_int) -> Result<(), FiError> {
    if ret == 0 {
        Ok(())
    } else {
        Err(FiError(ret))
    }
}

impl Fabric {
    /// `fabric->api_version` (set by the core).
    pub fn api_version(&self) -> u32 {
        // SAFETY: ptr is an open fid_fabric.
        unsafe { (*self.ptr).api_version }
    }

    /// `fi_trywait(fabric, fids, count)`.
    pub fn trywait(&self, fids: &mut [*mut ffi::fid]) -> c_int {
        // SAFETY: ptr is an open fid_fabric; `fids` holds `len` fids the caller keeps open.
        unsafe { call!((*self.ptr).ops, trywait(self.ptr, fids.as_mut_ptr(), fids.len() as c_int)) }
    }
}

impl WaitSet {
    /// `fi_wait_open(fabric, attr, &waitset)`.
    pub fn open(fabric: &Fabric, attr: &mut ffi::fi_wait_attr) -> Result<WaitSet, FiError> {
        let mut w: *mut ffi::fid_wait = null_mut();
        // SAFETY: fabric is open, attr a valid fi_wait_attr, w a valid out-pointer.
        ret_ok(unsafe { call!((*fabric.ptr).ops, wait_open(fabric.ptr, attr, &mut w)) })?;
        Ok(WaitSet::from_raw(w))
    }

    /// `fi_wait(waitset, timeout)`.
    pub fn wait(&self, timeout_ms: c_int) -> c_int {
        // SAFETY: ptr is an open fid_wait.
        unsafe { call!((*self.ptr).ops, wait(self.ptr, timeout_ms)) }
    }
}

/// `fi_control(fid, command, arg)`.
///
/// # Safety
/// `fid` is an open object and `arg` what `command` expects of it (fi_control(3)).
pub unsafe fn control(fid: *mut ffi::fid, command: u32, arg: *mut c_void) -> c_int {
    // SAFETY: per the contract, fid is open, so fid->ops is its valid ops table.
    unsafe { call!((*fid).ops, control(fid, command as c_int, arg)) }
}

impl Domain {
    /// `fi_domain(fabric, info, &domain, NULL)`.
    pub fn open(fabric: &Fabric, info: &Info) -> Result<Domain, FiError> {
        let mut d: *mut ffi::fid_domain = null_mut();
        // SAFETY: fabric is open, info is a valid fi_info, d a valid out-pointer.
        let ret: c_int = unsafe { call!((*fabric.ptr).ops, domain(fabric.ptr, info.as_mut_ptr(), &mut d, null_mut())) };
        ret_ok(ret)?;
        Ok(Domain::from_raw(d))
    }
}

impl Eq {
    /// `fi_eq_open(fabric, attr, &eq, NULL)`.
    pub fn open(fabric: &Fabric, attr: &mut ffi::fi_eq_attr) -> Result<Eq, FiError> {
        let mut e: *mut ffi::fid_eq = null_mut();
        // SAFETY: fabric open, attr valid for the call, e a valid out-pointer.
        let ret: c_int = unsafe { call!((*fabric.ptr).ops, eq_open(fabric.ptr, attr, &mut e, null_mut())) };
        ret_ok(ret)?;
        Ok(Eq::from_raw(e))
    }

    /// `fi_eq_read(eq, &event, buf, len, flags)`.
    pub fn read(&self, event: &mut u32, buf: &mut [u8], flags: u64) -> isize {
        // SAFETY: eq open; buf is writable for buf.len() bytes.
        unsafe { call!((*self.ptr).ops, read(self.ptr, event, buf.as_mut_ptr().cast(), buf.len(), flags)) }
    }

    /// `fi_eq_sread(eq, &event, buf, len, timeout, flags)`.
    pub fn sread(&self, event: &mut u32, buf: &mut [u8], timeout_ms: i32, flags: u64) -> isize {
        // SAFETY: as in read.
        unsafe { call!((*self.ptr).ops, sread(self.ptr, event, buf.as_mut_ptr().cast(), buf.len(), timeout_ms, flags)) }
    }

    /// `fi_eq_write(eq, event, buf, len, flags)`.
    pub fn write(&self, event: u32, buf: &[u8], flags: u64) -> isize {
        // SAFETY: eq open; buf readable for buf.len() bytes (copied by the call).
        unsafe { call!((*self.ptr).ops, write(self.ptr, event, buf.as_ptr().cast(), buf.len(), flags)) }
    }

    /// `fi_eq_readerr(eq, buf, flags)`.
    pub fn readerr(&self, entry: &mut ffi::fi_eq_err_entry, flags: u64) -> isize {
        // SAFETY: eq open; entry is a writable fi_eq_err_entry.
        unsafe { call!((*self.ptr).ops, readerr(self.ptr, entry, flags)) }
    }
}

impl Av {
    /// `fi_av_open(domain, attr, &av, NULL)`.
    pub fn open(domain: &Domain, attr: &mut ffi::fi_av_attr) -> Result<Av, FiError> {
        let mut a: *mut ffi::fid_av = null_mut();
        // SAFETY: domain open, attr valid, a valid out-pointer.
        let ret: c_int = unsafe { call!((*domain.ptr).ops, av_open(domain.ptr, attr, &mut a, null_mut())) };
        ret_ok(ret)?;
        Ok(Av::from_raw(a))
    }

    /// `fi_av_insert(av, addr, 1, &fi_addr, flags, NULL)` for one address; returns the count
    /// inserted (or the error) and the fi_addr written.
    pub fn insert(&self, addr: &[u8], flags: u64) -> (i32, FiAddr) {
        let mut fa: FiAddr = super::FI_ADDR_NOTAVAIL;
        // SAFETY: av open; addr holds one complete address (the caller passes a getname result);
        // fa has room for one fi_addr.
        let ret: c_int =
            unsafe { call!((*self.ptr).ops, insert(self.ptr, addr.as_ptr().cast(), 1, &mut fa, flags, null_mut())) };
        (ret, fa)
    }

    /// `fi_av_remove(av, fi_addrs, count, flags)`.
    pub fn remove(&self, addrs: &mut [FiAddr], flags: u64) -> i32 {
        // SAFETY: av open; addrs valid for addrs.len() entries.
        unsafe { call!((*self.ptr).ops, remove(self.ptr, addrs.as_mut_ptr(), addrs.len(), flags)) }
    }

    /// `fi_av_lookup(av, fi_addr, buf, &len)`: returns the code and the address length reported.
    pub fn lookup(&self, fi_addr: FiAddr, buf: &mut [u8]) -> (i32, usize) {
        let mut len = buf.len();
        // SAFETY: av open; buf writable for len bytes.
        let ret: c_int =
            unsafe { call!((*self.ptr).ops, lookup(self.ptr, fi_addr, buf.as_mut_ptr().cast(), &mut len)) };
        (ret, len)
    }

    /// `fi_av_straddr(av, addr, buf, &len)`: the string (None if the call returned NULL) and
    /// the length reported.
    pub fn straddr(&self, addr: &[u8]) -> (Option<String>, usize) {
        let mut buf = vec![0u8; 512];
        let mut len = buf.len();
        // SAFETY: av open; addr is one complete address; buf writable for len bytes.
        let p: *const std::ffi::c_char = unsafe {
            match (*(*self.ptr).ops).straddr {
                Some(f) => f(self.ptr, addr.as_ptr().cast(), buf.as_mut_ptr().cast(), &mut len),
                None => std::ptr::null(),
            }
        };
        if p.is_null() {
            return (None, len);
        }
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        (Some(String::from_utf8_lossy(&buf[..end]).into_owned()), len)
    }
}

/// A completion entry type; the size must match the CQ format for `fi_cq_read` to be safe.
///
/// # Safety
/// Implemented only for libfabric's CQ entry structs (plain data, any bit pattern valid).
pub unsafe trait CqEntry: Copy + Default {}
// SAFETY: libfabric CQ entry structs: plain C data.
unsafe impl CqEntry for ffi::fi_cq_entry {}
// SAFETY: as above.
unsafe impl CqEntry for ffi::fi_cq_msg_entry {}
// SAFETY: as above.
unsafe impl CqEntry for ffi::fi_cq_data_entry {}
// SAFETY: as above.
unsafe impl CqEntry for ffi::fi_cq_tagged_entry {}

fn cq_entry_size(format: ffi::fi_cq_format) -> usize {
    match format {
        ffi::FI_CQ_FORMAT_CONTEXT => size_of::<ffi::fi_cq_entry>(),
        ffi::FI_CQ_FORMAT_MSG => size_of::<ffi::fi_cq_msg_entry>(),
        ffi::FI_CQ_FORMAT_DATA => size_of::<ffi::fi_cq_data_entry>(),
        // UNSPEC: the provider picks; only the largest entry is always safe.
        _ => size_of::<ffi::fi_cq_tagged_entry>(),
    }
}

impl Cq {
    /// `fi_cq_open(domain, attr, &cq, NULL)`.
    pub fn open(domain: &Domain, attr: &mut ffi::fi_cq_attr) -> Result<Cq, FiError> {
        let mut c: *mut ffi::fid_cq = null_mut();
        // SAFETY: domain open, attr valid, c a valid out-pointer.
        let ret: c_int = unsafe { call!((*domain.ptr).ops, cq_open(domain.ptr, attr, &mut c, null_mut())) };
        ret_ok(ret)?;
        let mut cq = Cq::from_raw(c);
        cq.aux = attr.format;
        Ok(cq)
    }

    fn check_entry<T: CqEntry>(&self, count: usize) {
        let need = cq_entry_size(self.aux);
        assert!(
            size_of::<T>() >= need && (size_of::<T>() == need || count <= 1),
            "CQ entry buffer does not match the CQ format"
        );
    }

    /// `fi_cq_read(cq, buf, count)`.
    pub fn read<T: CqEntry>(&self, buf: &mut [T]) -> isize {
        self.check_entry::<T>(buf.len());
        // SAFETY: cq open; buf holds buf.len() entries at least as large as the format's.
        unsafe { call!((*self.ptr).ops, read(self.ptr, buf.as_mut_ptr().cast(), buf.len())) }
    }

    /// `fi_cq_readfrom(cq, buf, count, src_addr)`; `src` must be as long as `buf`.
    pub fn readfrom<T: CqEntry>(&self, buf: &mut [T], src: &mut [FiAddr]) -> isize {
        assert!(src.len() >= buf.len());
        self.check_entry::<T>(buf.len());
        // SAFETY: as in read; src has room for one fi_addr per entry.
        unsafe { call!((*self.ptr).ops, readfrom(self.ptr, buf.as_mut_ptr().cast(), buf.len(), src.as_mut_ptr())) }
    }

    /// `fi_cq_sread(cq, buf, count, NULL, timeout)`.
    pub fn sread<T: CqEntry>(&self, buf: &mut [T], timeout_ms: i32) -> isize {
        self.check_entry::<T>(buf.len());
        // SAFETY: as in read; cond is NULL.
        unsafe {
            call!((*self.ptr).ops, sread(self.ptr, buf.as_mut_ptr().cast(), buf.len(), std::ptr::null(), timeout_ms))
        }
    }

    /// `fi_cq_readerr(cq, buf, flags)`.
    pub fn readerr(&self, entry: &mut ffi::fi_cq_err_entry, flags: u64) -> isize {
        // SAFETY: cq open; entry is a writable 1.17-sized fi_cq_err_entry (we request API 1.17).
        unsafe { call!((*self.ptr).ops, readerr(self.ptr, entry, flags)) }
    }

    /// `fi_cq_signal(cq)`.
    pub fn signal(&self) -> i32 {
        // SAFETY: cq open.
        unsafe { call!((*self.ptr).ops, signal(self.ptr)) }
    }
}

impl Cntr {
    /// `fi_cntr_open(domain, attr, &cntr, NULL)`.
    pub fn open(domain: &Domain, attr: &mut ffi::fi_cntr_attr) -> Result<Cntr, FiError> {
        let mut c: *mut ffi::fid_cntr = null_mut();
        // SAFETY: domain open, attr valid, c a valid out-pointer.
        let ret: c_int = unsafe { call!((*domain.ptr).ops, cntr_open(domain.ptr, attr, &mut c, null_mut())) };
        ret_ok(ret)?;
        Ok(Cntr::from_raw(c))
    }

    /// `fi_cntr_read`.
    pub fn read(&self) -> u64 {
        // SAFETY: cntr open.
        unsafe { call!((*self.ptr).ops, read(self.ptr)) }
    }

    /// `fi_cntr_readerr`.
    pub fn readerr(&self) -> u64 {
        // SAFETY: cntr open.
        unsafe { call!((*self.ptr).ops, readerr(self.ptr)) }
    }

    /// `fi_cntr_add`.
    pub fn add(&self, v: u64) -> i32 {
        // SAFETY: cntr open.
        unsafe { call!((*self.ptr).ops, add(self.ptr, v)) }
    }

    /// `fi_cntr_set`.
    pub fn set(&self, v: u64) -> i32 {
        // SAFETY: cntr open.
        unsafe { call!((*self.ptr).ops, set(self.ptr, v)) }
    }

    /// `fi_cntr_adderr` (FI_CHECK_OP in the header).
    pub fn adderr(&self, v: u64) -> i32 {
        // SAFETY: cntr open; the slot is range-checked against the table size.
        unsafe { call_checked!((*self.ptr).ops, ffi::fi_ops_cntr, adderr(self.ptr, v)) }
    }

    /// `fi_cntr_seterr` (FI_CHECK_OP in the header).
    pub fn seterr(&self, v: u64) -> i32 {
        // SAFETY: as in adderr.
        unsafe { call_checked!((*self.ptr).ops, ffi::fi_ops_cntr, seterr(self.ptr, v)) }
    }

    /// `fi_cntr_wait(cntr, threshold, timeout)`.
    pub fn wait(&self, threshold: u64, timeout_ms: i32) -> i32 {
        // SAFETY: cntr open.
        unsafe { call!((*self.ptr).ops, wait(self.ptr, threshold, timeout_ms)) }
    }
}

impl Mr {
    /// `fi_mr_reg(domain, buf, len, access, offset, requested_key, flags, &mr, NULL)`.
    ///
    /// # Safety
    /// `buf..buf+len` stays valid (and is not freed) until the MR is closed.
    pub unsafe fn reg(
        domain: &Domain,
        buf: *const u8,
        len: usize,
        access: u64,
        offset: u64,
        requested_key: u64,
        flags: u64,
    ) -> Result<Mr, FiError> {
        let mut m: *mut ffi::fid_mr = null_mut();
        // SAFETY: domain open; the caller keeps buf valid; m a valid out-pointer.
        let ret: c_int = unsafe {
            call!(
                (*domain.ptr).mr,
                reg(domain.fid(), buf.cast(), len, access, offset, requested_key, flags, &mut m, null_mut())
            )
        };
        ret_ok(ret)?;
        Ok(Mr::from_raw(m))
    }

    /// `fi_mr_regv(domain, iov, count, access, offset, requested_key, flags, &mr, NULL)`.
    ///
    /// # Safety
    /// Every iov's memory stays valid until the MR is closed.
    pub unsafe fn regv(
        domain: &Domain,
        iov: &[ffi::iovec],
        access: u64,
        offset: u64,
        requested_key: u64,
        flags: u64,
    ) -> Result<Mr, FiError> {
        let mut m: *mut ffi::fid_mr = null_mut();
        // SAFETY: domain open; iov array valid for the call, its memory kept by the caller.
        let ret: c_int = unsafe {
            call!(
                (*domain.ptr).mr,
                regv(domain.fid(), iov.as_ptr(), iov.len(), access, offset, requested_key, flags, &mut m, null_mut())
            )
        };
        ret_ok(ret)?;
        Ok(Mr::from_raw(m))
    }

    /// `fi_mr_regattr(domain, attr, flags, &mr)`.
    ///
    /// # Safety
    /// The memory `attr` describes stays valid until the MR is closed.
    pub unsafe fn regattr(domain: &Domain, attr: &ffi::fi_mr_attr, flags: u64) -> Result<Mr, FiError> {
        let mut m: *mut ffi::fid_mr = null_mut();
        // SAFETY: domain open; attr valid for the call.
        let ret: c_int = unsafe { call!((*domain.ptr).mr, regattr(domain.fid(), attr, flags, &mut m)) };
        ret_ok(ret)?;
        Ok(Mr::from_raw(m))
    }

    /// `fi_mr_key(mr)` = `mr->key`.
    pub fn key(&self) -> u64 {
        // SAFETY: mr open.
        unsafe { (*self.ptr).key }
    }

    /// `fi_mr_desc(mr)` = `mr->mem_desc`.
    pub fn desc(&self) -> *mut c_void {
        // SAFETY: mr open.
        unsafe { (*self.ptr).mem_desc }
    }

    /// `fi_mr_bind(mr, bfid, flags)`.
    pub fn bind(&self, bfid: *mut ffi::fid, flags: u64) -> i32 {
        // SAFETY: mr open; bfid is an open object the caller owns.
        unsafe { call!((*self.ptr).fid.ops, bind(self.fid(), bfid, flags)) }
    }

    /// `fi_mr_enable(mr)`.
    pub fn enable(&self) -> i32 {
        // SAFETY: mr open.
        unsafe { call!((*self.ptr).fid.ops, control(self.fid(), ffi::FI_ENABLE as c_int, null_mut())) }
    }
}

impl Ep {
    /// `fi_endpoint(domain, info, &ep, NULL)`.
    pub fn open(domain: &Domain, info: &Info) -> Result<Ep, FiError> {
        let mut e: *mut ffi::fid_ep = null_mut();
        // SAFETY: domain open, info valid, e a valid out-pointer.
        let ret: c_int =
            unsafe { call!((*domain.ptr).ops, endpoint(domain.ptr, info.as_mut_ptr(), &mut e, null_mut())) };
        ret_ok(ret)?;
        Ok(Ep::from_raw(e))
    }

    /// `fi_ep_bind(ep, bfid, flags)`.
    pub fn bind(&self, bfid: *mut ffi::fid, flags: u64) -> i32 {
        // SAFETY: ep open; bfid is an open object the caller owns.
        unsafe { call!((*self.ptr).fid.ops, bind(self.fid(), bfid, flags)) }
    }

    /// `fi_enable(ep)`.
    pub fn enable(&self) -> i32 {
        // SAFETY: ep open.
        unsafe { call!((*self.ptr).fid.ops, control(self.fid(), ffi::FI_ENABLE as c_int, null_mut())) }
    }

    /// `fi_getname(&ep->fid, buf, &len)` with the raw buffer.
    pub fn getname_raw(&self, buf: &mut [u8], len: &mut usize) -> i32 {
        *len = (*len).min(buf.len());
        // SAFETY: ep open; buf writable for *len bytes.
        unsafe { call!((*self.ptr).cm, getname(self.fid(), buf.as_mut_ptr().cast(), len)) }
    }

    /// `fi_getname` into a buffer of the size the provider asks for.
    pub fn getname(&self) -> Result<Vec<u8>, FiError> {
        let mut buf = vec![0u8; 512];
        let mut len = buf.len();
        let ret = self.getname_raw(&mut buf, &mut len);
        ret_ok(ret)?;
        buf.truncate(len);
        Ok(buf)
    }

    /// `fi_setopt(&ep->fid, level, name, &val, sizeof(size_t))` for size_t options.
    pub fn setopt_usize(&self, level: u32, name: u32, val: usize) -> i32 {
        // SAFETY: ep open; &val valid for sizeof(size_t) bytes.
        unsafe {
            call!(
                (*self.ptr).ops,
                setopt(self.fid(), level as c_int, name as c_int, (&val as *const usize).cast(), size_of::<usize>())
            )
        }
    }

    /// `fi_getopt(&ep->fid, level, name, &val, &len)` for size_t options.
    pub fn getopt_usize(&self, level: u32, name: u32) -> Result<usize, FiError> {
        let mut val: usize = 0;
        let mut len = size_of::<usize>();
        // SAFETY: ep open; val/len valid out-pointers.
        let ret: c_int = unsafe {
            call!(
                (*self.ptr).ops,
                getopt(self.fid(), level as c_int, name as c_int, (&mut val as *mut usize).cast(), &mut len)
            )
        };
        ret_ok(ret)?;
        Ok(val)
    }

    /// `fi_cancel(&ep->fid, context)`.
    pub fn cancel(&self, context: *mut c_void) -> isize {
        // SAFETY: ep open; the context is only compared by the provider.
        unsafe { call!((*self.ptr).ops, cancel(self.fid(), context)) }
    }

    // ---- FI_MSG ----

    /// `fi_recv`.
    ///
    /// # Safety
    /// `buf..buf+len` and `ctx` stay valid until the completion is read or the ep is closed.
    pub unsafe fn recv(&self, buf: *mut u8, len: usize, desc: *mut c_void, src: FiAddr, ctx: *mut c_void) -> isize {
        // SAFETY: ep open; the caller keeps buf and ctx valid.
        unsafe { call!((*self.ptr).msg, recv(self.ptr, buf.cast(), len, desc, src, ctx)) }
    }

    /// `fi_recvv`.
    ///
    /// # Safety
    /// As for `recv`, for every iov.
    pub unsafe fn recvv(&self, iov: &[ffi::iovec], desc: *mut *mut c_void, src: FiAddr, ctx: *mut c_void) -> isize {
        // SAFETY: ep open; the caller keeps the memory valid; the iov array is read during the call.
        unsafe { call!((*self.ptr).msg, recvv(self.ptr, iov.as_ptr(), desc, iov.len(), src, ctx)) }
    }

    /// `fi_recvmsg`.
    ///
    /// # Safety
    /// As for `recv`, for the memory and context `msg` refers to.
    pub unsafe fn recvmsg(&self, msg: &ffi::fi_msg, flags: u64) -> isize {
        // SAFETY: ep open; the caller keeps the memory valid.
        unsafe { call!((*self.ptr).msg, recvmsg(self.ptr, msg, flags)) }
    }

    /// `fi_send`.
    ///
    /// # Safety
    /// `buf..buf+len` and `ctx` stay valid until the completion is read or the ep is closed.
    pub unsafe fn send(&self, buf: *const u8, len: usize, desc: *mut c_void, dest: FiAddr, ctx: *mut c_void) -> isize {
        // SAFETY: ep open; the caller keeps buf and ctx valid.
        unsafe { call!((*self.ptr).msg, send(self.ptr, buf.cast(), len, desc, dest, ctx)) }
    }

    /// `fi_sendv`.
    ///
    /// # Safety
    /// As for `send`, for every iov.
    pub unsafe fn sendv(&self, iov: &[ffi::iovec], desc: *mut *mut c_void, dest: FiAddr, ctx: *mut c_void) -> isize {
        // SAFETY: ep open; the caller keeps the memory valid.
        unsafe { call!((*self.ptr).msg, sendv(self.ptr, iov.as_ptr(), desc, iov.len(), dest, ctx)) }
    }

    /// `fi_sendmsg`.
    ///
    /// # Safety
    /// As for `send`, for the memory and context `msg` refers to.
    pub unsafe fn sendmsg(&self, msg: &ffi::fi_msg, flags: u64) -> isize {
        // SAFETY: ep open; the caller keeps the memory valid.
        unsafe { call!((*self.ptr).msg, sendmsg(self.ptr, msg, flags)) }
    }

    /// `fi_senddata`.
    ///
    /// # Safety
    /// As for `send`.
    pub unsafe fn senddata(
        &self,
        buf: *const u8,
        len: usize,
        desc: *mut c_void,
        data: u64,
        dest: FiAddr,
        ctx: *mut c_void,
    ) -> isize {
        // SAFETY: ep open; the caller keeps buf and ctx valid.
        unsafe { call!((*self.ptr).msg, senddata(self.ptr, buf.cast(), len, desc, data, dest, ctx)) }
    }

    /// `fi_inject` (the buffer is free again when the call returns).
    pub fn inject(&self, buf: &[u8], dest: FiAddr) -> isize {
        // SAFETY: ep open; inject copies buf before returning.
        unsafe { call!((*self.ptr).msg, inject(self.ptr, buf.as_ptr().cast(), buf.len(), dest)) }
    }

    /// `fi_injectdata`.
    pub fn injectdata(&self, buf: &[u8], data: u64, dest: FiAddr) -> isize {
        // SAFETY: as in inject.
        unsafe { call!((*self.ptr).msg, injectdata(self.ptr, buf.as_ptr().cast(), buf.len(), data, dest)) }
    }

    // ---- FI_TAGGED ----

    /// `fi_trecv`.
    ///
    /// # Safety
    /// As for `recv`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn trecv(
        &self,
        buf: *mut u8,
        len: usize,
        desc: *mut c_void,
        src: FiAddr,
        tag: u64,
        ignore: u64,
        ctx: *mut c_void,
    ) -> isize {
        // SAFETY: ep open; the caller keeps buf and ctx valid.
        unsafe { call!((*self.ptr).tagged, recv(self.ptr, buf.cast(), len, desc, src, tag, ignore, ctx)) }
    }

    /// `fi_trecvv`.
    ///
    /// # Safety
    /// As for `recv`, for every iov.
    pub unsafe fn trecvv(
        &self,
        iov: &[ffi::iovec],
        desc: *mut *mut c_void,
        src: FiAddr,
        tag: u64,
        ignore: u64,
        ctx: *mut c_void,
    ) -> isize {
        // SAFETY: ep open; the caller keeps the memory valid.
        unsafe { call!((*self.ptr).tagged, recvv(self.ptr, iov.as_ptr(), desc, iov.len(), src, tag, ignore, ctx)) }
    }

    /// `fi_trecvmsg`.
    ///
    /// # Safety
    /// As for `recv`, for the memory and context `msg` refers to.
    pub unsafe fn trecvmsg(&self, msg: &ffi::fi_msg_tagged, flags: u64) -> isize {
        // SAFETY: ep open; the caller keeps the memory valid.
        unsafe { call!((*self.ptr).tagged, recvmsg(self.ptr, msg, flags)) }
    }

    /// `fi_tsend`.
    ///
    /// # Safety
    /// As for `send`.
    pub unsafe fn tsend(
        &self,
        buf: *const u8,
        len: usize,
        desc: *mut c_void,
        dest: FiAddr,
        tag: u64,
        ctx: *mut c_void,
    ) -> isize {
        // SAFETY: ep open; the caller keeps buf and ctx valid.
        unsafe { call!((*self.ptr).tagged, send(self.ptr, buf.cast(), len, desc, dest, tag, ctx)) }
    }

    /// `fi_tsendv`.
    ///
    /// # Safety
    /// As for `send`, for every iov.
    pub unsafe fn tsendv(
        &self,
        iov: &[ffi::iovec],
        desc: *mut *mut c_void,
        dest: FiAddr,
        tag: u64,
        ctx: *mut c_void,
    ) -> isize {
        // SAFETY: ep open; the caller keeps the memory valid.
        unsafe { call!((*self.ptr).tagged, sendv(self.ptr, iov.as_ptr(), desc, iov.len(), dest, tag, ctx)) }
    }

    /// `fi_tsendmsg`.
    ///
    /// # Safety
    /// As for `send`, for the memory and context `msg` refers to.
    pub unsafe fn tsendmsg(&self, msg: &ffi::fi_msg_tagged, flags: u64) -> isize {
        // SAFETY: ep open; the caller keeps the memory valid.
        unsafe { call!((*self.ptr).tagged, sendmsg(self.ptr, msg, flags)) }
    }

    /// `fi_tsenddata`.
    ///
    /// # Safety
    /// As for `send`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn tsenddata(
        &self,
        buf: *const u8,
        len: usize,
        desc: *mut c_void,
        data: u64,
        dest: FiAddr,
        tag: u64,
        ctx: *mut c_void,
    ) -> isize {
        // SAFETY: ep open; the caller keeps buf and ctx valid.
        unsafe { call!((*self.ptr).tagged, senddata(self.ptr, buf.cast(), len, desc, data, dest, tag, ctx)) }
    }

    /// `fi_tinject`.
    pub fn tinject(&self, buf: &[u8], dest: FiAddr, tag: u64) -> isize {
        // SAFETY: ep open; tinject copies buf before returning.
        unsafe { call!((*self.ptr).tagged, inject(self.ptr, buf.as_ptr().cast(), buf.len(), dest, tag)) }
    }

    /// `fi_tinjectdata`.
    pub fn tinjectdata(&self, buf: &[u8], data: u64, dest: FiAddr, tag: u64) -> isize {
        // SAFETY: as in tinject.
        unsafe { call!((*self.ptr).tagged, injectdata(self.ptr, buf.as_ptr().cast(), buf.len(), data, dest, tag)) }
    }

    // ---- FI_RMA ----

    /// `fi_write`.
    ///
    /// # Safety
    /// As for `send`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn write(
        &self,
        buf: *const u8,
        len: usize,
        desc: *mut c_void,
        dest: FiAddr,
        addr: u64,
        key: u64,
        ctx: *mut c_void,
    ) -> isize {
        // SAFETY: ep open; the caller keeps buf and ctx valid.
        unsafe { call!((*self.ptr).rma, write(self.ptr, buf.cast(), len, desc, dest, addr, key, ctx)) }
    }

    /// `fi_writemsg`.
    ///
    /// # Safety
    /// The memory and context `msg` refers to stay valid until the completion is read.
    pub unsafe fn writemsg(&self, msg: &ffi::fi_msg_rma, flags: u64) -> isize {
        // SAFETY: ep open; the caller keeps what msg points to valid.
        unsafe { call!((*self.ptr).rma, writemsg(self.ptr, msg, flags)) }
    }

    /// `fi_read`.
    ///
    /// # Safety
    /// As for `recv`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn read(
        &self,
        buf: *mut u8,
        len: usize,
        desc: *mut c_void,
        src: FiAddr,
        addr: u64,
        key: u64,
        ctx: *mut c_void,
    ) -> isize {
        // SAFETY: ep open; the caller keeps buf and ctx valid.
        unsafe { call!((*self.ptr).rma, read(self.ptr, buf.cast(), len, desc, src, addr, key, ctx)) }
    }

    /// `fi_writedata`.
    ///
    /// # Safety
    /// As for `send`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn writedata(
        &self,
        buf: *const u8,
        len: usize,
        desc: *mut c_void,
        data: u64,
        dest: FiAddr,
        addr: u64,
        key: u64,
        ctx: *mut c_void,
    ) -> isize {
        // SAFETY: ep open; the caller keeps buf and ctx valid.
        unsafe { call!((*self.ptr).rma, writedata(self.ptr, buf.cast(), len, desc, data, dest, addr, key, ctx)) }
    }

    /// `fi_inject_write`.
    pub fn inject_write(&self, buf: &[u8], dest: FiAddr, addr: u64, key: u64) -> isize {
        // SAFETY: ep open; the data is copied before the call returns.
        unsafe { call!((*self.ptr).rma, inject(self.ptr, buf.as_ptr().cast(), buf.len(), dest, addr, key)) }
    }

    // ---- FI_ATOMIC ----

    /// `fi_atomic`.
    ///
    /// # Safety
    /// As for `send`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn atomic(
        &self,
        buf: *const u8,
        count: usize,
        desc: *mut c_void,
        dest: FiAddr,
        addr: u64,
        key: u64,
        datatype: ffi::fi_datatype,
        op: ffi::fi_op,
        ctx: *mut c_void,
    ) -> isize {
        // SAFETY: ep open; the caller keeps buf and ctx valid.
        unsafe {
            call!((*self.ptr).atomic, write(self.ptr, buf.cast(), count, desc, dest, addr, key, datatype, op, ctx))
        }
    }

    /// `fi_fetch_atomic`.
    ///
    /// # Safety
    /// As for `send` (buf) and `recv` (result).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn fetch_atomic(
        &self,
        buf: *const u8,
        count: usize,
        desc: *mut c_void,
        result: *mut u8,
        result_desc: *mut c_void,
        dest: FiAddr,
        addr: u64,
        key: u64,
        datatype: ffi::fi_datatype,
        op: ffi::fi_op,
        ctx: *mut c_void,
    ) -> isize {
        // SAFETY: ep open; the caller keeps the buffers and ctx valid.
        unsafe {
            call!(
                (*self.ptr).atomic,
                readwrite(
                    self.ptr,
                    buf.cast(),
                    count,
                    desc,
                    result.cast(),
                    result_desc,
                    dest,
                    addr,
                    key,
                    datatype,
                    op,
                    ctx
                )
            )
        }
    }

    /// `fi_compare_atomic`.
    ///
    /// # Safety
    /// As for `fetch_atomic`, plus `compare`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn compare_atomic(
        &self,
        buf: *const u8,
        count: usize,
        compare: *const u8,
        result: *mut u8,
        dest: FiAddr,
        addr: u64,
        key: u64,
        datatype: ffi::fi_datatype,
        op: ffi::fi_op,
        ctx: *mut c_void,
    ) -> isize {
        // SAFETY: ep open; the caller keeps the buffers and ctx valid.
        unsafe {
            call!(
                (*self.ptr).atomic,
                compwrite(
                    self.ptr,
                    buf.cast(),
                    count,
                    null_mut(),
                    compare.cast(),
                    null_mut(),
                    result.cast(),
                    null_mut(),
                    dest,
                    addr,
                    key,
                    datatype,
                    op,
                    ctx
                )
            )
        }
    }

    /// `fi_atomicmsg`.
    ///
    /// # Safety
    /// As for `atomic`: the message's buffers stay valid until the operation completes.
    pub unsafe fn atomicmsg(&self, msg: &ffi::fi_msg_atomic, flags: u64) -> isize {
        // SAFETY: ep open; the caller keeps the memory valid.
        unsafe { call!((*self.ptr).atomic, writemsg(self.ptr, msg, flags)) }
    }

    /// `fi_fetch_atomicmsg(ep, msg, resultv, result_desc, result_count, flags)`.
    ///
    /// # Safety
    /// As `atomicmsg`, and `result` must name `result_count` writable iocs.
    pub unsafe fn fetch_atomicmsg(
        &self,
        msg: &ffi::fi_msg_atomic,
        result: *mut ffi::fi_ioc,
        result_count: usize,
        flags: u64,
    ) -> isize {
        let mut desc = std::ptr::null_mut::<c_void>();
        // SAFETY: ep open; the caller keeps the memory valid.
        unsafe { call!((*self.ptr).atomic, readwritemsg(self.ptr, msg, result, &mut desc, result_count, flags)) }
    }

    /// `fi_atomicvalid(ep, datatype, op, &count)`.
    pub fn atomicvalid(&self, datatype: ffi::fi_datatype, op: ffi::fi_op) -> (i32, usize) {
        let mut count = 0usize;
        // SAFETY: ep open; count a valid out-pointer.
        let ret: c_int = unsafe { call!((*self.ptr).atomic, writevalid(self.ptr, datatype, op, &mut count)) };
        (ret, count)
    }
}
