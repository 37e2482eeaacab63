//! The one-sided entry points (fi_ops_rma, fi_ops_atomic): argument checks, then `rma::start`.
//!
//! Every call reduces to one `OneSided` (where and how) and one `Op` (what); the v and msg
//! forms only differ in how the caller describes its buffers.

use super::rma::{self, Desc, OneSided, Op};
use super::Ep;
use crate::atomic::apply::{self, Kind};
use crate::error::{FiError, FiResult};
use crate::iov::{many, one};
use rshm_ffi as ffi;
use smr_core::iov::Ranges;
use std::ffi::{c_int, c_void};

/// Run a one-sided call: `make` gets the endpoint's default op flags (for the short forms).
fn call(ep: *mut ffi::fid_ep, default_flags: bool, make: impl FnOnce(u64) -> FiResult<(OneSided, Op)>) -> isize {
    super::ops::with_ep(ep, |ep: &Ep, st| {
        let (a, op) = make(if default_flags { st.eps[ep.id].tx_op_flags } else { 0 })?;
        let result = rma::start(st, ep.id, a, op);
        if result == Err(FiError::AGAIN) {
            super::progress(st, ep.id);
        }
        result
    })
}

fn target(dest: u64, addr: u64, key: u64, ctx: *mut c_void, flags: u64) -> OneSided {
    OneSided { dest, addr, key, ctx: ctx as usize, flags, inject_call: false }
}

fn injected(dest: u64, addr: u64, key: u64) -> OneSided {
    OneSided { dest, addr, key, ctx: 0, flags: ffi::FI_INJECT as u64, inject_call: true }
}

fn total(r: &Ranges) -> usize {
    r.iter().map(|p| p.1).sum()
}

/// The one remote range of an RMA message (rshm's rma_iov_limit is 1); it must cover exactly
/// the local bytes.
///
/// # Safety
/// `msg` must be NULL or the caller's valid message.
unsafe fn rma_msg(msg: *const ffi::fi_msg_rma, flags: u64) -> FiResult<(OneSided, Ranges, Option<u64>)> {
    // SAFETY: per the contract.
    let m = unsafe { msg.as_ref() }.ok_or(FiError::INVAL)?;
    if m.rma_iov_count != 1 || m.rma_iov.is_null() {
        return Err(FiError::INVAL);
    }
    // SAFETY: one fi_rma_iov (checked non-NULL).
    let r = unsafe { *m.rma_iov };
    // SAFETY: the caller's iovec array of `iov_count` entries.
    let local = unsafe { many(m.msg_iov, m.iov_count) }?;
    if total(&local) != r.len {
        return Err(FiError::INVAL);
    }
    let data = (flags & ffi::FI_REMOTE_CQ_DATA as u64 != 0).then_some(m.data);
    Ok((target(m.addr, r.addr, r.key, m.context, flags), local, data))
}

// ---- fi_ops_rma ----

unsafe extern "C" fn rma_read(
    ep: *mut ffi::fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    src: ffi::fi_addr_t,
    addr: u64,
    key: u64,
    ctx: *mut c_void,
) -> isize {
    crate::guard("fi_read", FiError::OTHER.code() as isize, || {
        call(ep, true, |f| Ok((target(src, addr, key, ctx, f), Op::Read { local: one(buf, len)? })))
    })
}

unsafe extern "C" fn rma_readv(
    ep: *mut ffi::fid_ep,
    iov: *const ffi::iovec,
    _desc: *mut *mut c_void,
    count: usize,
    src: ffi::fi_addr_t,
    addr: u64,
    key: u64,
    ctx: *mut c_void,
) -> isize {
    crate::guard("fi_readv", FiError::OTHER.code() as isize, || {
        call(ep, true, |f| {
            // SAFETY: the caller's iovec array.
            let local = unsafe { many(iov, count) }?;
            Ok((target(src, addr, key, ctx, f), Op::Read { local }))
        })
    })
}

unsafe extern "C" fn rma_readmsg(ep: *mut ffi::fid_ep, msg: *const ffi::fi_msg_rma, flags: u64) -> isize {
    crate::guard("fi_readmsg", FiError::OTHER.code() as isize, || {
        call(ep, false, |_| {
            // SAFETY: the caller's message.
            let (a, local, _) = unsafe { rma_msg(msg, flags) }?;
            Ok((a, Op::Read { local }))
        })
    })
}

unsafe extern "C" fn rma_write(
    ep: *mut ffi::fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest: ffi::fi_addr_t,
    addr: u64,
    key: u64,
    ctx: *mut c_void,
) -> isize {
    crate::guard("fi_write", FiError::OTHER.code() as isize, || {
        call(ep, true, |f| Ok((target(dest, addr, key, ctx, f), Op::Write { local: one(buf, len)?, data: None })))
    })
}

unsafe extern "C" fn rma_writev(
    ep: *mut ffi::fid_ep,
    iov: *const ffi::iovec,
    _desc: *mut *mut c_void,
    count: usize,
    dest: ffi::fi_addr_t,
    addr: u64,
    key: u64,
    ctx: *mut c_void,
) -> isize {
    crate::guard("fi_writev", FiError::OTHER.code() as isize, || {
        call(ep, true, |f| {
            // SAFETY: the caller's iovec array.
            let local = unsafe { many(iov, count) }?;
            Ok((target(dest, addr, key, ctx, f), Op::Write { local, data: None }))
        })
    })
}

unsafe extern "C" fn rma_writemsg(ep: *mut ffi::fid_ep, msg: *const ffi::fi_msg_rma, flags: u64) -> isize {
    crate::guard("fi_writemsg", FiError::OTHER.code() as isize, || {
        call(ep, false, |_| {
            // SAFETY: the caller's message.
            let (a, local, data) = unsafe { rma_msg(msg, flags) }?;
            Ok((a, Op::Write { local, data }))
        })
    })
}

unsafe extern "C" fn rma_inject(
    ep: *mut ffi::fid_ep,
    buf: *const c_void,
    len: usize,
    dest: ffi::fi_addr_t,
    addr: u64,
    key: u64,
) -> isize {
    crate::guard("fi_inject_write", FiError::OTHER.code() as isize, || {
        call(ep, false, |_| Ok((injected(dest, addr, key), Op::Write { local: one(buf, len)?, data: None })))
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn rma_writedata(
    ep: *mut ffi::fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    data: u64,
    dest: ffi::fi_addr_t,
    addr: u64,
    key: u64,
    ctx: *mut c_void,
) -> isize {
    crate::guard("fi_writedata", FiError::OTHER.code() as isize, || {
        call(ep, true, |f| Ok((target(dest, addr, key, ctx, f), Op::Write { local: one(buf, len)?, data: Some(data) })))
    })
}

unsafe extern "C" fn rma_injectdata(
    ep: *mut ffi::fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: ffi::fi_addr_t,
    addr: u64,
    key: u64,
) -> isize {
    crate::guard("fi_inject_writedata", FiError::OTHER.code() as isize, || {
        call(ep, false, |_| Ok((injected(dest, addr, key), Op::Write { local: one(buf, len)?, data: Some(data) })))
    })
}

pub static RMA_OPS: ffi::fi_ops_rma = ffi::fi_ops_rma {
    size: size_of::<ffi::fi_ops_rma>(),
    read: Some(rma_read),
    readv: Some(rma_readv),
    readmsg: Some(rma_readmsg),
    write: Some(rma_write),
    writev: Some(rma_writev),
    writemsg: Some(rma_writemsg),
    inject: Some(rma_inject),
    writedata: Some(rma_writedata),
    injectdata: Some(rma_injectdata),
};

// ---- fi_ops_atomic ----

/// The caller's element arrays (fi_ioc) as byte ranges of `datatype`.
///
/// # Safety
/// `ioc` must be NULL or point to `count` fi_iocs.
unsafe fn iocs(ioc: *const ffi::fi_ioc, count: usize, datatype: u32) -> FiResult<Ranges> {
    let size = apply::type_size(datatype).ok_or(FiError::OPNOTSUPP)?;
    if count > crate::getinfo::IOV_LIMIT || (ioc.is_null() && count > 0) {
        return Err(FiError::INVAL);
    }
    let mut out = Ranges::new();
    for i in 0..count {
        // SAFETY: per the contract, `count` readable entries.
        let v = unsafe { *ioc.add(i) };
        let bytes = v.count.checked_mul(size).ok_or(FiError::INVAL)?;
        if v.addr.is_null() && bytes > 0 {
            return Err(FiError::INVAL);
        }
        if bytes > 0 {
            out.push((v.addr as usize, bytes));
        }
    }
    Ok(out)
}

/// One element array of `count` elements of `datatype`.
fn elems(buf: *const c_void, count: usize, datatype: u32) -> FiResult<Ranges> {
    let size = apply::type_size(datatype).ok_or(FiError::OPNOTSUPP)?;
    one(buf, count.checked_mul(size).ok_or(FiError::INVAL)?)
}

/// The operand buffer of an atomic: none for FI_ATOMIC_READ, whose callers (OpenSHMEM) may pass
/// NULL for it, so it is not even looked at.
fn operand_of(op: u32, read: impl FnOnce() -> FiResult<Ranges>) -> FiResult<Ranges> {
    if op == ffi::FI_ATOMIC_READ {
        Ok(Ranges::new())
    } else {
        read()
    }
}

/// Check an atomic's buffers against its operation and describe it.
fn describe(kind: Kind, op: u32, datatype: u32, operand: &Ranges, compare: &Ranges, result: &Ranges) -> FiResult<Desc> {
    if !apply::valid(kind, op, datatype) {
        crate::debug!(EpData, "atomic op {op} on datatype {datatype} ({kind:?}) not supported");
        return Err(FiError::OPNOTSUPP);
    }
    let size = apply::type_size(datatype).ok_or(FiError::OPNOTSUPP)?;
    // FI_ATOMIC_READ has no operand: the count comes from the result buffer.
    let bytes = if op == ffi::FI_ATOMIC_READ { total(result) } else { total(operand) };
    let count = bytes / size;
    if count == 0 || bytes % size != 0 || count > rma::max_count(kind, datatype).unwrap_or(0) {
        return Err(FiError::INVAL);
    }
    let fits = |r: &Ranges, want: bool| total(r) == if want { bytes } else { 0 };
    if !fits(compare, kind == Kind::Compare) || !fits(result, kind != Kind::Write) {
        return Err(FiError::INVAL);
    }
    Ok(Desc { kind, op, datatype, count: count as u32 })
}

/// The one remote element array of an atomic message, which must hold `count` elements.
///
/// # Safety
/// `msg` must be NULL or the caller's valid message.
unsafe fn atomic_msg(msg: *const ffi::fi_msg_atomic, flags: u64) -> FiResult<(ffi::fi_msg_atomic, OneSided, Ranges)> {
    // SAFETY: per the contract.
    let m = *unsafe { msg.as_ref() }.ok_or(FiError::INVAL)?;
    if m.rma_iov_count != 1 || m.rma_iov.is_null() {
        return Err(FiError::INVAL);
    }
    if flags & ffi::FI_REMOTE_CQ_DATA as u64 != 0 {
        return Err(FiError::OPNOTSUPP);
    }
    // SAFETY: one fi_rma_ioc (checked non-NULL).
    let r = unsafe { *m.rma_iov };
    // SAFETY: the caller's fi_ioc array (not read for FI_ATOMIC_READ).
    let operand = operand_of(m.op, || unsafe { iocs(m.msg_iov, m.iov_count, m.datatype) })?;
    Ok((m, target(m.addr, r.addr, r.key, m.context, flags), operand))
}

fn atomic_op(kind: Kind, op: u32, datatype: u32, operand: Ranges, compare: Ranges, result: Ranges) -> FiResult<Op> {
    let desc = describe(kind, op, datatype, &operand, &compare, &result)?;
    Ok(Op::Atomic { desc, operand, compare, result })
}

/// The remote element count of a msg form must match the local one.
fn check_remote_count(m: &ffi::fi_msg_atomic, op: &Op) -> FiResult<()> {
    // SAFETY: checked non-NULL by `atomic_msg`.
    let remote = unsafe { (*m.rma_iov).count };
    match op {
        Op::Atomic { desc, .. } if desc.count as usize == remote => Ok(()),
        _ => Err(FiError::INVAL),
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn atomic_write(
    ep: *mut ffi::fid_ep,
    buf: *const c_void,
    count: usize,
    _desc: *mut c_void,
    dest: ffi::fi_addr_t,
    addr: u64,
    key: u64,
    datatype: ffi::fi_datatype,
    op: ffi::fi_op,
    ctx: *mut c_void,
) -> isize {
    crate::guard("fi_atomic", FiError::OTHER.code() as isize, || {
        call(ep, true, |f| {
            let o = atomic_op(Kind::Write, op, datatype, elems(buf, count, datatype)?, Ranges::new(), Ranges::new())?;
            Ok((target(dest, addr, key, ctx, f), o))
        })
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn atomic_writev(
    ep: *mut ffi::fid_ep,
    iov: *const ffi::fi_ioc,
    _desc: *mut *mut c_void,
    count: usize,
    dest: ffi::fi_addr_t,
    addr: u64,
    key: u64,
    datatype: ffi::fi_datatype,
    op: ffi::fi_op,
    ctx: *mut c_void,
) -> isize {
    crate::guard("fi_atomicv", FiError::OTHER.code() as isize, || {
        call(ep, true, |f| {
            // SAFETY: the caller's fi_ioc array.
            let operand = unsafe { iocs(iov, count, datatype) }?;
            let o = atomic_op(Kind::Write, op, datatype, operand, Ranges::new(), Ranges::new())?;
            Ok((target(dest, addr, key, ctx, f), o))
        })
    })
}

unsafe extern "C" fn atomic_writemsg(ep: *mut ffi::fid_ep, msg: *const ffi::fi_msg_atomic, flags: u64) -> isize {
    crate::guard("fi_atomicmsg", FiError::OTHER.code() as isize, || {
        call(ep, false, |_| {
            // SAFETY: the caller's message.
            let (m, a, operand) = unsafe { atomic_msg(msg, flags) }?;
            let o = atomic_op(Kind::Write, m.op, m.datatype, operand, Ranges::new(), Ranges::new())?;
            check_remote_count(&m, &o)?;
            Ok((a, o))
        })
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn atomic_inject(
    ep: *mut ffi::fid_ep,
    buf: *const c_void,
    count: usize,
    dest: ffi::fi_addr_t,
    addr: u64,
    key: u64,
    datatype: ffi::fi_datatype,
    op: ffi::fi_op,
) -> isize {
    crate::guard("fi_inject_atomic", FiError::OTHER.code() as isize, || {
        call(ep, false, |_| {
            let o = atomic_op(Kind::Write, op, datatype, elems(buf, count, datatype)?, Ranges::new(), Ranges::new())?;
            Ok((injected(dest, addr, key), o))
        })
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn atomic_readwrite(
    ep: *mut ffi::fid_ep,
    buf: *const c_void,
    count: usize,
    _desc: *mut c_void,
    result: *mut c_void,
    _result_desc: *mut c_void,
    dest: ffi::fi_addr_t,
    addr: u64,
    key: u64,
    datatype: ffi::fi_datatype,
    op: ffi::fi_op,
    ctx: *mut c_void,
) -> isize {
    crate::guard("fi_fetch_atomic", FiError::OTHER.code() as isize, || {
        call(ep, true, |f| {
            let operand = operand_of(op, || elems(buf, count, datatype))?;
            let o = atomic_op(Kind::Fetch, op, datatype, operand, Ranges::new(), elems(result, count, datatype)?)?;
            Ok((target(dest, addr, key, ctx, f), o))
        })
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn atomic_readwritev(
    ep: *mut ffi::fid_ep,
    iov: *const ffi::fi_ioc,
    _desc: *mut *mut c_void,
    count: usize,
    resultv: *mut ffi::fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    dest: ffi::fi_addr_t,
    addr: u64,
    key: u64,
    datatype: ffi::fi_datatype,
    op: ffi::fi_op,
    ctx: *mut c_void,
) -> isize {
    crate::guard("fi_fetch_atomicv", FiError::OTHER.code() as isize, || {
        call(ep, true, |f| {
            // SAFETY: the caller's fi_ioc array (not read for FI_ATOMIC_READ).
            let operand = operand_of(op, || unsafe { iocs(iov, count, datatype) })?;
            // SAFETY: as above.
            let result = unsafe { iocs(resultv, result_count, datatype) }?;
            let o = atomic_op(Kind::Fetch, op, datatype, operand, Ranges::new(), result)?;
            Ok((target(dest, addr, key, ctx, f), o))
        })
    })
}

unsafe extern "C" fn atomic_readwritemsg(
    ep: *mut ffi::fid_ep,
    msg: *const ffi::fi_msg_atomic,
    resultv: *mut ffi::fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    flags: u64,
) -> isize {
    crate::guard("fi_fetch_atomicmsg", FiError::OTHER.code() as isize, || {
        call(ep, false, |_| {
            // SAFETY: the caller's message and fi_ioc array.
            let (m, a, operand) = unsafe { atomic_msg(msg, flags) }?;
            // SAFETY: as above.
            let result = unsafe { iocs(resultv, result_count, m.datatype) }?;
            let o = atomic_op(Kind::Fetch, m.op, m.datatype, operand, Ranges::new(), result)?;
            check_remote_count(&m, &o)?;
            Ok((a, o))
        })
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn atomic_compwrite(
    ep: *mut ffi::fid_ep,
    buf: *const c_void,
    count: usize,
    _desc: *mut c_void,
    compare: *const c_void,
    _compare_desc: *mut c_void,
    result: *mut c_void,
    _result_desc: *mut c_void,
    dest: ffi::fi_addr_t,
    addr: u64,
    key: u64,
    datatype: ffi::fi_datatype,
    op: ffi::fi_op,
    ctx: *mut c_void,
) -> isize {
    crate::guard("fi_compare_atomic", FiError::OTHER.code() as isize, || {
        call(ep, true, |f| {
            let (operand, cmp, res) =
                (elems(buf, count, datatype)?, elems(compare, count, datatype)?, elems(result, count, datatype)?);
            Ok((target(dest, addr, key, ctx, f), atomic_op(Kind::Compare, op, datatype, operand, cmp, res)?))
        })
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn atomic_compwritev(
    ep: *mut ffi::fid_ep,
    iov: *const ffi::fi_ioc,
    _desc: *mut *mut c_void,
    count: usize,
    comparev: *const ffi::fi_ioc,
    _compare_desc: *mut *mut c_void,
    compare_count: usize,
    resultv: *mut ffi::fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    dest: ffi::fi_addr_t,
    addr: u64,
    key: u64,
    datatype: ffi::fi_datatype,
    op: ffi::fi_op,
    ctx: *mut c_void,
) -> isize {
    crate::guard("fi_compare_atomicv", FiError::OTHER.code() as isize, || {
        call(ep, true, |f| {
            // SAFETY: the caller's fi_ioc arrays.
            let (operand, cmp, res) = unsafe {
                (
                    iocs(iov, count, datatype)?,
                    iocs(comparev, compare_count, datatype)?,
                    iocs(resultv, result_count, datatype)?,
                )
            };
            Ok((target(dest, addr, key, ctx, f), atomic_op(Kind::Compare, op, datatype, operand, cmp, res)?))
        })
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn atomic_compwritemsg(
    ep: *mut ffi::fid_ep,
    msg: *const ffi::fi_msg_atomic,
    comparev: *const ffi::fi_ioc,
    _compare_desc: *mut *mut c_void,
    compare_count: usize,
    resultv: *mut ffi::fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    flags: u64,
) -> isize {
    crate::guard("fi_compare_atomicmsg", FiError::OTHER.code() as isize, || {
        call(ep, false, |_| {
            // SAFETY: the caller's message and fi_ioc arrays.
            let (m, a, operand) = unsafe { atomic_msg(msg, flags) }?;
            // SAFETY: as above.
            let (cmp, res) =
                unsafe { (iocs(comparev, compare_count, m.datatype)?, iocs(resultv, result_count, m.datatype)?) };
            let o = atomic_op(Kind::Compare, m.op, m.datatype, operand, cmp, res)?;
            check_remote_count(&m, &o)?;
            Ok((a, o))
        })
    })
}

/// `fi_atomicvalid` and friends, and `fi_query_atomic`: 0 and the element count one call may
/// carry if the combination works, -FI_EOPNOTSUPP otherwise.
pub fn query(kind: Kind, datatype: u32, op: u32) -> FiResult<usize> {
    if !apply::valid(kind, op, datatype) {
        return Err(FiError::OPNOTSUPP);
    }
    rma::max_count(kind, datatype).ok_or(FiError::OPNOTSUPP)
}

macro_rules! valid_fn {
    ($name:ident, $what:literal, $kind:expr) => {
        unsafe extern "C" fn $name(
            ep: *mut ffi::fid_ep,
            datatype: ffi::fi_datatype,
            op: ffi::fi_op,
            count: *mut usize,
        ) -> c_int {
            crate::guard($what, FiError::OTHER.code(), || {
                // SAFETY: libfabric contract: a live endpoint of ours.
                if let Err(e) = unsafe { super::get(ep.cast()) } {
                    return e.code();
                }
                match query($kind, datatype, op) {
                    Ok(n) => {
                        if !count.is_null() {
                            // SAFETY: the caller's out-pointer.
                            unsafe { *count = n };
                        }
                        0
                    }
                    Err(e) => e.code(),
                }
            })
        }
    };
}

valid_fn!(atomic_writevalid, "fi_atomicvalid", Kind::Write);
valid_fn!(atomic_readwritevalid, "fi_fetch_atomicvalid", Kind::Fetch);
valid_fn!(atomic_compwritevalid, "fi_compare_atomicvalid", Kind::Compare);

pub static ATOMIC_OPS: ffi::fi_ops_atomic = ffi::fi_ops_atomic {
    size: size_of::<ffi::fi_ops_atomic>(),
    write: Some(atomic_write),
    writev: Some(atomic_writev),
    writemsg: Some(atomic_writemsg),
    inject: Some(atomic_inject),
    readwrite: Some(atomic_readwrite),
    readwritev: Some(atomic_readwritev),
    readwritemsg: Some(atomic_readwritemsg),
    compwrite: Some(atomic_compwrite),
    compwritev: Some(atomic_compwritev),
    compwritemsg: Some(atomic_compwritemsg),
    writevalid: Some(atomic_writevalid),
    readwritevalid: Some(atomic_readwritevalid),
    compwritevalid: Some(atomic_compwritevalid),
};

/// `fi_query_atomic`: what `fi_*atomicvalid` say, for the domain (flags: FI_FETCH_ATOMIC or
/// FI_COMPARE_ATOMIC; FI_TAGGED is not offered).
pub(crate) unsafe extern "C" fn query_atomic(
    domain: *mut ffi::fid_domain,
    datatype: ffi::fi_datatype,
    op: ffi::fi_op,
    attr: *mut ffi::fi_atomic_attr,
    flags: u64,
) -> c_int {
    crate::guard("fi_query_atomic", FiError::OTHER.code(), || {
        // SAFETY: libfabric contract: a live domain of ours.
        if let Err(e) = unsafe { crate::domain::get(domain) } {
            return e.code();
        }
        if attr.is_null() {
            return FiError::INVAL.code();
        }
        if flags & !(ffi::FI_FETCH_ATOMIC | ffi::FI_COMPARE_ATOMIC) != 0 {
            return FiError::OPNOTSUPP.code();
        }
        let Some(kind) = Kind::from_flags(flags) else { return FiError::BADFLAGS.code() };
        match query(kind, datatype, op) {
            Ok(count) => {
                let size = apply::type_size(datatype).unwrap_or(0);
                // SAFETY: the caller's out-struct.
                unsafe { *attr = ffi::fi_atomic_attr { count, size } };
                0
            }
            Err(e) => e.code(),
        }
    })
}
