//! The one-sided entry points (fi_ops_rma, fi_ops_atomic): argument checks, then `rma_start::start`.
//!
//! Every call reduces to one `OneSided` (where and how) and one `Op` (what); the v and msg
//! forms only differ in how the caller describes its buffers.

use super::handle::{self, Ep};
use super::rma_start;
use crate::atomic::apply::{self, Kind};
use crate::error::{FiError, FiResult};
use crate::iov::{many, one, one_addr};
use crate::state::ep::rma::segments::{Segment, Segments, RMA_IOV_LIMIT};
use crate::state::ep::rma::{self, Desc, OneSided, Op};
use rshm_ffi as ffi;
use smr_core::iov::Ranges;
use std::ffi::{c_int, c_void};
use std::ptr::{null, null_mut};

/// Run a one-sided call: `make` gets the endpoint's default op flags (for the short forms).
fn call(ep: *mut ffi::fid_ep, default_flags: bool, make: impl FnOnce(u64) -> FiResult<(OneSided, Op)>) -> isize {
    run(ep, default_flags, |st, id, flags| {
        let (a, op) = make(flags)?;
        rma_start::start_inline(st, id, a, op)
    })
}

/// Run `go` on the endpoint's domain with its default op flags (or none); progress it when it
/// found no room, so that the caller's retry may.
fn run(
    ep: *mut ffi::fid_ep,
    default_flags: bool,
    go: impl FnOnce(&mut crate::state::DomainState, usize, u64) -> FiResult<()>,
) -> isize {
    handle::with_ep(ep, |ep: &Ep, st| {
        let flags = if default_flags { st.eps[ep.id].tx_op_flags } else { 0 };
        let result = go(st, ep.id, flags);
        if result == Err(FiError::AGAIN) {
            crate::progress::endpoint(st, ep.id);
        }
        result
    })
}

/// An atomic whose operands, compare values and result are one buffer of `count` elements each:
/// what fi_atomic, fi_inject_atomic, fi_fetch_atomic and fi_compare_atomic pass.
struct Contiguous {
    kind: Kind,
    op: u32,
    datatype: u32,
    count: usize,
    operand: *const c_void,
    compare: *const c_void,
    result: *mut c_void,
}

/// The request of a small atomic, built on the stack: 8 bytes left for an op id (which most
/// requests do not carry: `Desc::with_op_id`), then operands and compare values (one element of
/// every datatype, two of most).
const SMALL_REQUEST: usize = 8 + 2 * 32;

/// Run a `Contiguous` atomic: one whose request fits `SMALL_REQUEST` takes the short way
/// (`rma_start::start_atomic`: checked against the tables, copied once into the request, no iov lists);
/// the others go as any atomic does.
fn call_contiguous(ep: *mut ffi::fid_ep, default_flags: bool, a: impl FnOnce(u64) -> OneSided, c: Contiguous) -> isize {
    run(ep, default_flags, |st, id, flags| start_contiguous(st, id, a(flags), c))
}

fn start_contiguous(st: &mut crate::state::DomainState, id: usize, a: OneSided, c: Contiguous) -> FiResult<()> {
    let mut req = [0u8; SMALL_REQUEST];
    match small_request(&c, &mut req)? {
        Some((desc, len)) => rma_start::start_atomic(st, id, a, desc, &mut req[..len], c.result as usize),
        None => {
            let operand = operand_of(c.op, || elems(c.operand, c.count, c.datatype))?;
            let compare = match c.kind {
                Kind::Compare => elems(c.compare, c.count, c.datatype)?,
                _ => Ranges::new(),
            };
            let result = match c.kind {
                Kind::Write => Ranges::new(),
                _ => elems(c.result, c.count, c.datatype)?,
            };
            rma_start::start(st, id, a, atomic_op(c.kind, c.op, c.datatype, operand, compare, result)?)
        }
    }
}

/// Check a `Contiguous` atomic as `describe` does and, if its request fits `req`, copy its
/// operands and compare values in: Some((what it is, the request's length)).
fn small_request(c: &Contiguous, req: &mut [u8; SMALL_REQUEST]) -> FiResult<Option<(Desc, usize)>> {
    let size = supported(c.kind, c.op, c.datatype)?;
    let desc = counted(c.kind, c.op, c.datatype, c.count)?;
    // No overflow: `counted` bounds the count by what one request carries.
    let bytes = c.count * size;
    let len = 8 + desc.payload();
    if len > SMALL_REQUEST {
        return Ok(None);
    }
    let operands = if c.op == ffi::FI_ATOMIC_READ { 0 } else { bytes };
    let compares = len - 8 - operands;
    let missing = |p: *const c_void, n: usize| p.is_null() && n > 0;
    if c.kind != Kind::Write && c.result.is_null() || missing(c.operand, operands) || missing(c.compare, compares) {
        return Err(FiError::INVAL);
    }
    // The request: operands from byte 8, then compare values, `len <= SMALL_REQUEST` bytes.
    if operands > 0 {
        // SAFETY: the application's operand buffer of `operands` bytes (non-NULL: checked
        // above), read during this call only.
        unsafe { copy_in(&mut req[8..8 + operands], c.operand) };
    }
    if compares > 0 {
        // SAFETY: as above, its compare buffer of `compares` bytes.
        unsafe { copy_in(&mut req[8 + operands..len], c.compare) };
    }
    Ok(Some((desc, len)))
}

/// Fill `dst` from the caller's buffer at `p`: the usual element, of 4 or 8 bytes, as one
/// unaligned word, where a copy of a length known only here is a call to memcpy.
///
/// # Safety
/// `p` must be readable for `dst.len()` bytes.
#[inline(always)]
unsafe fn copy_in(dst: &mut [u8], p: *const c_void) {
    match dst.len() {
        // SAFETY: per the contract, 8 readable bytes at `p`, read at any alignment.
        8 => dst.copy_from_slice(&unsafe { p.cast::<[u8; 8]>().read_unaligned() }),
        // SAFETY: as above, 4 bytes.
        4 => dst.copy_from_slice(&unsafe { p.cast::<[u8; 4]>().read_unaligned() }),
        // SAFETY: per the contract, `n` readable bytes at `p`.
        n => dst.copy_from_slice(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n) }),
    }
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

/// The one remote range of an RMA message (one with several takes `start_rma_segmented`); it must cover
/// exactly the local bytes.
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

/// The remote ranges of a message's array of `count` entries at `at` (fi_rma_iov, fi_rma_ioc),
/// each as `range` reads it (None: a length that overflows); at most `RMA_IOV_LIMIT`.
///
/// # Safety
/// `at` must be NULL or the caller's array of `count` entries.
unsafe fn remote_ranges<T>(at: *const T, count: usize, range: impl Fn(&T) -> Option<Segment>) -> FiResult<Segments> {
    if at.is_null() || count > RMA_IOV_LIMIT {
        return Err(FiError::INVAL);
    }
    // SAFETY: per the contract, `count` entries at `at` (non-NULL).
    let remote = unsafe { std::slice::from_raw_parts(at, count) };
    let mut list = [Segment::default(); RMA_IOV_LIMIT];
    for (s, r) in list.iter_mut().zip(remote) {
        *s = range(r).ok_or(FiError::INVAL)?;
    }
    Segments::new(&list[..count]).ok_or(FiError::INVAL)
}

/// Start RMA message `m`, of several remote ranges (`rma::segments`), as a write (else a read);
/// `start_segmented` checks that they cover the local bytes.
///
/// # Safety
/// `m` must be the caller's valid message.
#[cold]
unsafe fn start_rma_segmented(
    st: &mut crate::state::DomainState,
    id: usize,
    m: &ffi::fi_msg_rma,
    flags: u64,
    write: bool,
) -> FiResult<()> {
    let range = |r: &ffi::fi_rma_iov| Some(Segment { key: r.key, addr: r.addr, len: r.len as u64 });
    // SAFETY: the caller's array of `rma_iov_count` fi_rma_iov, per the contract.
    let segments = unsafe { remote_ranges(m.rma_iov, m.rma_iov_count, range) }?;
    // SAFETY: the caller's iovec array of `iov_count` entries.
    let local = unsafe { many(m.msg_iov, m.iov_count) }?;
    let first = segments.as_slice()[0];
    let a = target(m.addr, first.addr, first.key, m.context, flags);
    let op = if write {
        Op::Write { local, data: (flags & ffi::FI_REMOTE_CQ_DATA as u64 != 0).then_some(m.data) }
    } else {
        Op::Read { local }
    };
    rma_start::start_segmented(st, id, a, segments, op)
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
    crate::boundary::guard("fi_read", FiError::OTHER.code() as isize, || {
        run(ep, true, |st, id, f| {
            rma_start::start_read(st, id, target(src, addr, key, ctx, f), one_addr(buf, len)?, len)
        })
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
    crate::boundary::guard("fi_readv", FiError::OTHER.code() as isize, || {
        call(ep, true, |f| {
            // SAFETY: the caller's iovec array.
            let local = unsafe { many(iov, count) }?;
            Ok((target(src, addr, key, ctx, f), Op::Read { local }))
        })
    })
}

unsafe extern "C" fn rma_readmsg(ep: *mut ffi::fid_ep, msg: *const ffi::fi_msg_rma, flags: u64) -> isize {
    crate::boundary::guard("fi_readmsg", FiError::OTHER.code() as isize, || {
        run(ep, false, |st, id, _| {
            // SAFETY: the caller's message.
            if let Some(m) = unsafe { msg.as_ref() }.filter(|m| m.rma_iov_count > 1) {
                // SAFETY: as above.
                return unsafe { start_rma_segmented(st, id, m, flags, false) };
            }
            // SAFETY: the caller's message.
            let (a, local, _) = unsafe { rma_msg(msg, flags) }?;
            rma_start::start_inline(st, id, a, Op::Read { local })
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
    crate::boundary::guard("fi_write", FiError::OTHER.code() as isize, || {
        run(ep, true, |st, id, f| {
            rma_start::start_write(st, id, target(dest, addr, key, ctx, f), one_addr(buf, len)?, len, None)
        })
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
    crate::boundary::guard("fi_writev", FiError::OTHER.code() as isize, || {
        call(ep, true, |f| {
            // SAFETY: the caller's iovec array.
            let local = unsafe { many(iov, count) }?;
            Ok((target(dest, addr, key, ctx, f), Op::Write { local, data: None }))
        })
    })
}

unsafe extern "C" fn rma_writemsg(ep: *mut ffi::fid_ep, msg: *const ffi::fi_msg_rma, flags: u64) -> isize {
    crate::boundary::guard("fi_writemsg", FiError::OTHER.code() as isize, || {
        run(ep, false, |st, id, _| {
            // SAFETY: the caller's message.
            if let Some(m) = unsafe { msg.as_ref() }.filter(|m| m.rma_iov_count > 1) {
                // SAFETY: as above.
                return unsafe { start_rma_segmented(st, id, m, flags, true) };
            }
            // SAFETY: the caller's message.
            let (a, local, data) = unsafe { rma_msg(msg, flags) }?;
            match *local.as_slice() {
                [(buf, len)] => rma_start::start_write(st, id, a, buf, len, data),
                _ => rma_start::start_inline(st, id, a, Op::Write { local, data }),
            }
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
    crate::boundary::guard("fi_inject_write", FiError::OTHER.code() as isize, || {
        run(ep, false, |st, id, _| {
            rma_start::start_write(st, id, injected(dest, addr, key), one_addr(buf, len)?, len, None)
        })
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
    crate::boundary::guard("fi_writedata", FiError::OTHER.code() as isize, || {
        run(ep, true, |st, id, f| {
            rma_start::start_write(st, id, target(dest, addr, key, ctx, f), one_addr(buf, len)?, len, Some(data))
        })
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
    crate::boundary::guard("fi_inject_writedata", FiError::OTHER.code() as isize, || {
        run(ep, false, |st, id, _| {
            rma_start::start_write(st, id, injected(dest, addr, key), one_addr(buf, len)?, len, Some(data))
        })
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
    let size = supported(kind, op, datatype)?;
    // FI_ATOMIC_READ has no operand: the count comes from the result buffer.
    let bytes = if op == ffi::FI_ATOMIC_READ { total(result) } else { total(operand) };
    if !bytes.is_multiple_of(size) {
        return Err(FiError::INVAL);
    }
    let desc = counted(kind, op, datatype, bytes / size)?;
    let fits = |r: &Ranges, want: bool| total(r) == if want { bytes } else { 0 };
    if !fits(compare, kind == Kind::Compare) || !fits(result, kind != Kind::Write) {
        return Err(FiError::INVAL);
    }
    Ok(desc)
}

/// The element size of `datatype`, if `(kind, op, datatype)` is an atomic rshm implements.
#[inline(always)]
fn supported(kind: Kind, op: u32, datatype: u32) -> FiResult<usize> {
    if !apply::valid(kind, op, datatype) {
        crate::debug!(EpData, "atomic op {op} on datatype {datatype} ({kind:?}) not supported");
        return Err(FiError::OPNOTSUPP);
    }
    apply::type_size(datatype).ok_or(FiError::OPNOTSUPP)
}

/// The atomic of `count` elements, if there are any and one request carries them.
#[inline(always)]
fn counted(kind: Kind, op: u32, datatype: u32, count: usize) -> FiResult<Desc> {
    if count == 0 || count > rma::max_count(kind, datatype).unwrap_or(0) {
        return Err(FiError::INVAL);
    }
    Ok(Desc { kind, op, datatype, count: count as u32, with_op_id: false })
}

/// An atomic message and its one remote element array (whose count the local arrays must match).
///
/// # Safety
/// `msg` must be NULL or the caller's valid message.
#[inline(always)]
unsafe fn atomic_msg(msg: *const ffi::fi_msg_atomic, flags: u64) -> FiResult<(ffi::fi_msg_atomic, OneSided)> {
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
    Ok((m, target(m.addr, r.addr, r.key, m.context, flags)))
}

/// No fi_ioc array (the compare or result array of a kind that has none).
const NO_IOCS: (*const ffi::fi_ioc, usize) = (std::ptr::null(), 0);

/// Start the atomic message `msg` of `kind` with these compare and result arrays: the contiguous
/// shape the short way (`start_contiguous`), any other the general way. Inlined into each msg
/// entry point, with `atomic_msg` and `msg_contiguous`: in frames of their own, the copied
/// message and the target description crossed them (fi_fetch_atomicmsg 711 -> 683 instructions).
///
/// # Safety
/// `msg` must be NULL or the caller's valid message; `compare` and `result` the caller's fi_ioc
/// arrays of their lengths (read only for the kinds that have them).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn start_msg(
    st: &mut crate::state::DomainState,
    id: usize,
    msg: *const ffi::fi_msg_atomic,
    flags: u64,
    kind: Kind,
    compare: (*const ffi::fi_ioc, usize),
    result: (*const ffi::fi_ioc, usize),
) -> FiResult<()> {
    // SAFETY: per this function's contract.
    if let Some(m) = unsafe { msg.as_ref() }.filter(|m| m.rma_iov_count > 1) {
        // SAFETY: per this function's contract.
        return unsafe { start_msg_segmented(st, id, m, flags, kind, compare, result) };
    }
    // SAFETY: per this function's contract.
    let (m, a) = unsafe { atomic_msg(msg, flags) }?;
    // SAFETY: per this function's contract; the message's remote array was checked above.
    if let Some(c) = unsafe { msg_contiguous(&m, kind, compare, result) } {
        return start_contiguous(st, id, a, c);
    }
    // SAFETY: per this function's contract.
    let o = unsafe { msg_op(&m, kind, compare, result) }?;
    check_remote_count(&m, &o)?;
    rma_start::start(st, id, a, o)
}

/// The operation of atomic message `m` of `kind` with these compare and result arrays, checked
/// (`describe`), for the general path.
///
/// # Safety
/// As `start_msg`'s.
unsafe fn msg_op(
    m: &ffi::fi_msg_atomic,
    kind: Kind,
    compare: (*const ffi::fi_ioc, usize),
    result: (*const ffi::fi_ioc, usize),
) -> FiResult<Op> {
    // SAFETY: the caller's arrays, per this function's contract (the operand array is not read
    // for FI_ATOMIC_READ, nor a compare or result array for a kind without one).
    let (operand, cmp, res) = unsafe {
        (
            operand_of(m.op, || iocs(m.msg_iov, m.iov_count, m.datatype))?,
            if kind == Kind::Compare { iocs(compare.0, compare.1, m.datatype)? } else { Ranges::new() },
            if kind == Kind::Write { Ranges::new() } else { iocs(result.0, result.1, m.datatype)? },
        )
    };
    atomic_op(kind, m.op, m.datatype, operand, cmp, res)
}

/// `start_msg` for message `m` with several remote element arrays (`rma::segments`);
/// `start_segmented` checks that their counts cover the local arrays'.
///
/// # Safety
/// As `start_msg`'s, for `m`.
#[cold]
unsafe fn start_msg_segmented(
    st: &mut crate::state::DomainState,
    id: usize,
    m: &ffi::fi_msg_atomic,
    flags: u64,
    kind: Kind,
    compare: (*const ffi::fi_ioc, usize),
    result: (*const ffi::fi_ioc, usize),
) -> FiResult<()> {
    if flags & ffi::FI_REMOTE_CQ_DATA as u64 != 0 {
        return Err(FiError::OPNOTSUPP);
    }
    let size = apply::type_size(m.datatype).ok_or(FiError::INVAL)?;
    let range =
        |r: &ffi::fi_rma_ioc| Some(Segment { key: r.key, addr: r.addr, len: r.count.checked_mul(size)? as u64 });
    // SAFETY: the caller's array of `rma_iov_count` fi_rma_ioc, per the contract.
    let segments = unsafe { remote_ranges(m.rma_iov, m.rma_iov_count, range) }?;
    // SAFETY: per this function's contract.
    let o = unsafe { msg_op(m, kind, compare, result) }?;
    let first = segments.as_slice()[0];
    let a = target(m.addr, first.addr, first.key, m.context, flags);
    rma_start::start_segmented(st, id, a, segments, o)
}

/// An atomic message whose arrays are one fi_ioc each, all of the remote array's count: the
/// contiguous case, which runs like the short forms (`start_contiguous`). None: any other shape,
/// left to the general path and its checks.
///
/// # Safety
/// `m` must be the caller's valid message with its one remote array (`atomic_msg`); `compare`
/// and `result` the caller's fi_ioc arrays of their lengths.
#[inline(always)]
unsafe fn msg_contiguous(
    m: &ffi::fi_msg_atomic,
    kind: Kind,
    compare: (*const ffi::fi_ioc, usize),
    result: (*const ffi::fi_ioc, usize),
) -> Option<Contiguous> {
    // SAFETY: one fi_rma_ioc (checked non-NULL by `atomic_msg`).
    let count = unsafe { (*m.rma_iov).count };
    // The buffer of a one-entry array of `count` elements.
    let one = |(v, n): (*const ffi::fi_ioc, usize)| {
        // SAFETY: per the contract, `n` readable entries; read only when n == 1 and non-NULL.
        let ioc = (n == 1 && !v.is_null()).then(|| unsafe { *v })?;
        (ioc.count == count).then_some(ioc.addr)
    };
    let operand = if m.op == ffi::FI_ATOMIC_READ { std::ptr::null() } else { one((m.msg_iov, m.iov_count))? };
    let compare = if kind == Kind::Compare { one(compare)? } else { std::ptr::null_mut() };
    let result = if kind == Kind::Write { std::ptr::null_mut() } else { one(result)? };
    Some(Contiguous { kind, op: m.op, datatype: m.datatype, count, operand, compare, result })
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
    crate::boundary::guard("fi_atomic", FiError::OTHER.code() as isize, || {
        let c =
            Contiguous { kind: Kind::Write, op, datatype, count, operand: buf, compare: null(), result: null_mut() };
        call_contiguous(ep, true, |f| target(dest, addr, key, ctx, f), c)
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
    crate::boundary::guard("fi_atomicv", FiError::OTHER.code() as isize, || {
        call(ep, true, |f| {
            // SAFETY: the caller's fi_ioc array.
            let operand = unsafe { iocs(iov, count, datatype) }?;
            let o = atomic_op(Kind::Write, op, datatype, operand, Ranges::new(), Ranges::new())?;
            Ok((target(dest, addr, key, ctx, f), o))
        })
    })
}

unsafe extern "C" fn atomic_writemsg(ep: *mut ffi::fid_ep, msg: *const ffi::fi_msg_atomic, flags: u64) -> isize {
    crate::boundary::guard("fi_atomicmsg", FiError::OTHER.code() as isize, || {
        // SAFETY: the caller's message; a base atomic has no compare or result array.
        run(ep, false, |st, id, _| unsafe { start_msg(st, id, msg, flags, Kind::Write, NO_IOCS, NO_IOCS) })
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
    crate::boundary::guard("fi_inject_atomic", FiError::OTHER.code() as isize, || {
        let c =
            Contiguous { kind: Kind::Write, op, datatype, count, operand: buf, compare: null(), result: null_mut() };
        call_contiguous(ep, false, |_| injected(dest, addr, key), c)
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
    crate::boundary::guard("fi_fetch_atomic", FiError::OTHER.code() as isize, || {
        let c = Contiguous { kind: Kind::Fetch, op, datatype, count, operand: buf, compare: null(), result };
        call_contiguous(ep, true, |f| target(dest, addr, key, ctx, f), c)
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
    crate::boundary::guard("fi_fetch_atomicv", FiError::OTHER.code() as isize, || {
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
    crate::boundary::guard("fi_fetch_atomicmsg", FiError::OTHER.code() as isize, || {
        let result = (resultv.cast_const(), result_count);
        // SAFETY: the caller's message and result array.
        run(ep, false, |st, id, _| unsafe { start_msg(st, id, msg, flags, Kind::Fetch, NO_IOCS, result) })
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
    crate::boundary::guard("fi_compare_atomic", FiError::OTHER.code() as isize, || {
        let c = Contiguous { kind: Kind::Compare, op, datatype, count, operand: buf, compare, result };
        call_contiguous(ep, true, |f| target(dest, addr, key, ctx, f), c)
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
    crate::boundary::guard("fi_compare_atomicv", FiError::OTHER.code() as isize, || {
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
    crate::boundary::guard("fi_compare_atomicmsg", FiError::OTHER.code() as isize, || {
        let (compare, result) = ((comparev, compare_count), (resultv.cast_const(), result_count));
        // SAFETY: the caller's message, compare and result arrays.
        run(ep, false, |st, id, _| unsafe { start_msg(st, id, msg, flags, Kind::Compare, compare, result) })
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
            crate::boundary::guard($what, FiError::OTHER.code(), || {
                // SAFETY: libfabric contract: a live endpoint of ours.
                if let Err(e) = unsafe { handle::get(ep.cast()) } {
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
    crate::boundary::guard("fi_query_atomic", FiError::OTHER.code(), || {
        // SAFETY: libfabric contract: a live domain of ours.
        if let Err(e) = unsafe { crate::state::get(domain) } {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ioc(buf: &mut [u64], count: usize) -> ffi::fi_ioc {
        ffi::fi_ioc { addr: buf.as_mut_ptr().cast(), count }
    }

    /// `msg_contiguous` on a message of `op` over `operand` (remote array: `count` elements)
    /// with these compare and result arrays.
    fn shape(
        op: u32,
        kind: Kind,
        operand: &[ffi::fi_ioc],
        compare: &[ffi::fi_ioc],
        result: &[ffi::fi_ioc],
        count: usize,
    ) -> Option<Contiguous> {
        let remote = ffi::fi_rma_ioc { addr: 0, count, key: 1 };
        let m = ffi::fi_msg_atomic {
            msg_iov: operand.as_ptr(),
            desc: null_mut(),
            iov_count: operand.len(),
            addr: 0,
            rma_iov: &remote,
            rma_iov_count: 1,
            datatype: ffi::FI_UINT64,
            op,
            context: null_mut(),
            data: 0,
        };
        let arr = |v: &[ffi::fi_ioc]| (v.as_ptr(), v.len());
        // SAFETY: the message, its remote array and the three arrays are borrowed for the call.
        unsafe { msg_contiguous(&m, kind, arr(compare), arr(result)) }
    }

    /// Only a message whose arrays are one entry each, of the remote array's count, takes the
    /// short way; every other shape is left to the general path (and its checks).
    #[test]
    fn msg_forms_take_the_short_way_only_when_every_array_is_one_buffer_of_the_remote_count() {
        let (mut a, mut b, mut c) = ([1u64; 4], [2u64; 4], [3u64; 4]);
        let (operand, compare, result) = ([ioc(&mut a, 2)], [ioc(&mut b, 2)], [ioc(&mut c, 2)]);
        let got = shape(ffi::FI_SUM, Kind::Fetch, &operand, &[], &result, 2).expect("one buffer each");
        assert_eq!(got.count, 2);
        assert_eq!((got.operand, got.result.cast_const()), (operand[0].addr.cast_const(), result[0].addr.cast_const()));
        assert!(shape(ffi::FI_CSWAP, Kind::Compare, &operand, &compare, &result, 2).is_some());
        // A missing compare or result array, two operand entries, a local count other than the
        // remote one: the general path.
        assert!(shape(ffi::FI_CSWAP, Kind::Compare, &operand, &[], &result, 2).is_none());
        assert!(shape(ffi::FI_SUM, Kind::Fetch, &operand, &[], &[], 2).is_none());
        let two = [ioc(&mut a, 1), ioc(&mut b, 1)];
        assert!(shape(ffi::FI_SUM, Kind::Write, &two, &[], &[], 2).is_none());
        assert!(shape(ffi::FI_SUM, Kind::Write, &operand, &[], &[], 3).is_none());
        // FI_ATOMIC_READ reads no operand array: none is needed.
        let got = shape(ffi::FI_ATOMIC_READ, Kind::Fetch, &[], &[], &result, 2).expect("no operand for a read");
        assert!(got.operand.is_null());
    }

    /// The short way checks what `describe` checks, and builds the request `rma_start::start` would.
    #[test]
    fn small_requests_are_checked_and_built_like_the_general_ones() {
        let (operand, compare, mut result) = (7u64, 9u64, 0u64);
        let result: *mut c_void = (&raw mut result).cast();
        let c = |kind, op, datatype, count| Contiguous {
            kind,
            op,
            datatype,
            count,
            operand: (&raw const operand).cast(),
            compare: (&raw const compare).cast(),
            result,
        };
        let mut req = [0xAAu8; SMALL_REQUEST];
        let (desc, len) =
            small_request(&c(Kind::Compare, ffi::FI_CSWAP, ffi::FI_UINT64, 1), &mut req).unwrap().unwrap();
        assert_eq!((desc.count, len), (1, 24));
        assert_eq!(&req[8..24], &[7u64.to_ne_bytes(), 9u64.to_ne_bytes()].concat()[..]);
        let (_, len) =
            small_request(&c(Kind::Fetch, ffi::FI_ATOMIC_READ, ffi::FI_UINT64, 1), &mut req).unwrap().unwrap();
        assert_eq!(len, 8, "a read carries no operand");
        // Too large for the stack request: the general path.
        assert!(small_request(&c(Kind::Write, ffi::FI_SUM, ffi::FI_UINT64, 9), &mut req).unwrap().is_none());
        // Errors as `describe` gives them.
        let err = |x: Contiguous| small_request(&x, &mut [0; SMALL_REQUEST]).unwrap_err();
        assert_eq!(err(c(Kind::Write, ffi::FI_ATOMIC_READ, ffi::FI_UINT64, 1)), FiError::OPNOTSUPP);
        assert_eq!(err(c(Kind::Write, ffi::FI_BOR, ffi::FI_DOUBLE, 1)), FiError::OPNOTSUPP);
        assert_eq!(err(c(Kind::Write, ffi::FI_SUM, ffi::FI_UINT64, 0)), FiError::INVAL);
        assert_eq!(err(c(Kind::Write, ffi::FI_SUM, ffi::FI_UINT64, usize::MAX)), FiError::INVAL);
        assert_eq!(
            err(Contiguous { result: null_mut(), ..c(Kind::Fetch, ffi::FI_SUM, ffi::FI_UINT64, 1) }),
            FiError::INVAL
        );
        assert_eq!(
            err(Contiguous { operand: null(), ..c(Kind::Write, ffi::FI_SUM, ffi::FI_UINT64, 1) }),
            FiError::INVAL
        );
        assert_eq!(
            err(Contiguous { compare: null(), ..c(Kind::Compare, ffi::FI_CSWAP, ffi::FI_UINT64, 1) }),
            FiError::INVAL
        );
    }
}
