//! The data-transfer entry points (fi_ops_msg and fi_ops_tagged): argument checks, then
//! `tx::send` or `rx::post`.

use super::rx::{self, PostCtx, PostedRecv};
use super::state::Sinks;
use super::tx::{self, SendArgs};
use super::{get, Ep};
use crate::error::{FiError, FiResult};
use crate::iov::{many, one};
use crate::state::DomainState;
use rshm_ffi as ffi;
use smr_core::iov::Ranges;
use std::ffi::c_void;

fn ret(r: FiResult<()>) -> isize {
    match r {
        Ok(()) => 0,
        Err(e) => e.code() as isize,
    }
}

/// Run `f` on the endpoint's locked state.
pub(super) fn with_ep(ep: *mut ffi::fid_ep, f: impl FnOnce(&Ep, &mut DomainState) -> FiResult<()>) -> isize {
    // SAFETY: libfabric contract: a live endpoint of ours.
    let ep = match unsafe { get(ep.cast()) } {
        Ok(e) => e,
        Err(e) => return e.code() as isize,
    };
    let mut st = ep.shared.lock();
    ret(f(ep, &mut st))
}

fn send(ep: *mut ffi::fid_ep, make: impl FnOnce(u64) -> FiResult<SendArgs>, default_flags: bool) -> isize {
    with_ep(ep, |ep, st| {
        // The short forms take the endpoint's default flags; *msg and inject calls bring theirs.
        let args = make(if default_flags { st.eps[ep.id].tx_op_flags } else { 0 })?;
        send_locked(st, ep.id, args)
    })
}

#[inline(always)]
fn send_locked(st: &mut DomainState, id: usize, args: SendArgs) -> FiResult<()> {
    let DomainState { eps, cqs, cntrs, avs, .. } = &mut *st;
    let result = match eps.get_mut(id) {
        Some(ep) => tx::send(ep, cqs, cntrs, avs, args),
        None => Err(FiError::INVAL),
    };
    if result == Err(FiError::AGAIN) {
        // Make room: drain our rings (responses free peers' buffers and our tx slots).
        crate::progress::endpoint(st, id);
    }
    result
}

/// The fi_inject family: the express path (`tx::inject_express`) where it applies, else `send`.
fn inject(
    ep: *mut ffi::fid_ep,
    buf: *const c_void,
    len: usize,
    dest: u64,
    tag: Option<u64>,
    data: Option<u64>,
) -> isize {
    with_ep(ep, |ep, st| {
        if !buf.is_null() {
            // SAFETY: the caller's buffer of `len` bytes, readable during the call (fi_msg(3)).
            let bytes = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) };
            if st.eps.get_mut(ep.id).is_some_and(|e| tx::inject_express(e, bytes, dest, tag, data)) {
                return Ok(());
            }
        }
        send_locked(st, ep.id, inject_args(one(buf, len)?, dest, tag, data))
    })
}

fn recv(ep: *mut ffi::fid_ep, make: impl FnOnce(u64) -> FiResult<PostedRecv>, default_flags: bool) -> isize {
    with_ep(ep, |ep, st| {
        let DomainState { eps, cqs, cntrs, .. } = st;
        let s = &mut eps[ep.id];
        let flags = if default_flags { s.rx_op_flags } else { 0 };
        let recv = make(flags)?;
        if s.rx.posted_count() >= s.rx_size {
            return Err(FiError::AGAIN);
        }
        let directed = s.directed();
        let engine = s.engine.as_mut().ok_or(FiError::NOTCONN)?;
        let mut sinks = Sinks { cqs, cntrs, b: &s.bindings };
        let ctx = PostCtx { rx: &mut s.rx, engine, sinks: &mut sinks, directed };
        if recv.tagged && recv.flags & ffi::FI_PEEK as u64 != 0 {
            rx::peek(ctx, &recv);
            return Ok(());
        }
        if recv.tagged && recv.flags & ffi::FI_CLAIM != 0 {
            return rx::claim(ctx, &recv);
        }
        rx::post(ctx, recv)
    })
}

fn posted(iov: Ranges, src: u64, ctx: *mut c_void, tagged: bool, tag: u64, ignore: u64, flags: u64) -> PostedRecv {
    PostedRecv { ctx: ctx as usize, iov, src, tag, ignore, tagged, flags, used: 0 }
}

fn args(iov: Ranges, dest: u64, ctx: *mut c_void, tag: Option<u64>, data: Option<u64>, flags: u64) -> SendArgs {
    SendArgs { iov, dest, ctx: ctx as usize, tag, data, flags, inject_call: false }
}

/// The fi_inject family: the buffer is free on return and no CQ entry is ever written (counters
/// still count). The FI_INJECT *flag* on other calls only promises the first half.
fn inject_args(iov: Ranges, dest: u64, tag: Option<u64>, data: Option<u64>) -> SendArgs {
    SendArgs { iov, dest, ctx: 0, tag, data, flags: ffi::FI_INJECT as u64, inject_call: true }
}

// ---- FI_MSG ----

unsafe extern "C" fn msg_recv(
    ep: *mut ffi::fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    src: ffi::fi_addr_t,
    ctx: *mut c_void,
) -> isize {
    crate::guard("fi_recv", FiError::OTHER.code() as isize, || {
        recv(ep, |f| Ok(posted(one(buf, len)?, src, ctx, false, 0, 0, f)), true)
    })
}

unsafe extern "C" fn msg_recvv(
    ep: *mut ffi::fid_ep,
    iov: *const ffi::iovec,
    _desc: *mut *mut c_void,
    count: usize,
    src: ffi::fi_addr_t,
    ctx: *mut c_void,
) -> isize {
    crate::guard("fi_recvv", FiError::OTHER.code() as isize, || {
        recv(
            ep,
            |f| {
                // SAFETY: the caller's iovec array.
                let iov = unsafe { many(iov, count) }?;
                Ok(posted(iov, src, ctx, false, 0, 0, f))
            },
            true,
        )
    })
}

unsafe extern "C" fn msg_recvmsg(ep: *mut ffi::fid_ep, msg: *const ffi::fi_msg, flags: u64) -> isize {
    crate::guard("fi_recvmsg", FiError::OTHER.code() as isize, || {
        recv(
            ep,
            |_| {
                // SAFETY: the caller's message descriptor and its iovec array.
                let m = unsafe { msg.as_ref() }.ok_or(FiError::INVAL)?;
                // SAFETY: as above.
                Ok(posted(unsafe { many(m.msg_iov, m.iov_count) }?, m.addr, m.context, false, 0, 0, flags))
            },
            false,
        )
    })
}

unsafe extern "C" fn msg_send(
    ep: *mut ffi::fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest: ffi::fi_addr_t,
    ctx: *mut c_void,
) -> isize {
    crate::guard("fi_send", FiError::OTHER.code() as isize, || {
        send(ep, |f| Ok(args(one(buf, len)?, dest, ctx, None, None, f)), true)
    })
}

unsafe extern "C" fn msg_sendv(
    ep: *mut ffi::fid_ep,
    iov: *const ffi::iovec,
    _desc: *mut *mut c_void,
    count: usize,
    dest: ffi::fi_addr_t,
    ctx: *mut c_void,
) -> isize {
    crate::guard("fi_sendv", FiError::OTHER.code() as isize, || {
        send(
            ep,
            |f| {
                // SAFETY: the caller's iovec array.
                let iov = unsafe { many(iov, count) }?;
                Ok(args(iov, dest, ctx, None, None, f))
            },
            true,
        )
    })
}

unsafe extern "C" fn msg_sendmsg(ep: *mut ffi::fid_ep, msg: *const ffi::fi_msg, flags: u64) -> isize {
    crate::guard("fi_sendmsg", FiError::OTHER.code() as isize, || {
        send(
            ep,
            |_| {
                // SAFETY: the caller's message descriptor and its iovec array.
                let m = unsafe { msg.as_ref() }.ok_or(FiError::INVAL)?;
                let data = (flags & ffi::FI_REMOTE_CQ_DATA as u64 != 0).then_some(m.data);
                // SAFETY: as above.
                Ok(args(unsafe { many(m.msg_iov, m.iov_count) }?, m.addr, m.context, None, data, flags))
            },
            false,
        )
    })
}

unsafe extern "C" fn msg_inject(ep: *mut ffi::fid_ep, buf: *const c_void, len: usize, dest: ffi::fi_addr_t) -> isize {
    crate::guard("fi_inject", FiError::OTHER.code() as isize, || inject(ep, buf, len, dest, None, None))
}

unsafe extern "C" fn msg_senddata(
    ep: *mut ffi::fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    data: u64,
    dest: ffi::fi_addr_t,
    ctx: *mut c_void,
) -> isize {
    crate::guard("fi_senddata", FiError::OTHER.code() as isize, || {
        send(ep, |f| Ok(args(one(buf, len)?, dest, ctx, None, Some(data), f)), true)
    })
}

unsafe extern "C" fn msg_injectdata(
    ep: *mut ffi::fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: ffi::fi_addr_t,
) -> isize {
    crate::guard("fi_injectdata", FiError::OTHER.code() as isize, || inject(ep, buf, len, dest, None, Some(data)))
}

pub static MSG_OPS: ffi::fi_ops_msg = ffi::fi_ops_msg {
    size: size_of::<ffi::fi_ops_msg>(),
    recv: Some(msg_recv),
    recvv: Some(msg_recvv),
    recvmsg: Some(msg_recvmsg),
    send: Some(msg_send),
    sendv: Some(msg_sendv),
    sendmsg: Some(msg_sendmsg),
    inject: Some(msg_inject),
    senddata: Some(msg_senddata),
    injectdata: Some(msg_injectdata),
};

// ---- FI_TAGGED ----

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tagged_recv(
    ep: *mut ffi::fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    src: ffi::fi_addr_t,
    tag: u64,
    ignore: u64,
    ctx: *mut c_void,
) -> isize {
    crate::guard("fi_trecv", FiError::OTHER.code() as isize, || {
        recv(ep, |f| Ok(posted(one(buf, len)?, src, ctx, true, tag, ignore, f)), true)
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tagged_recvv(
    ep: *mut ffi::fid_ep,
    iov: *const ffi::iovec,
    _desc: *mut *mut c_void,
    count: usize,
    src: ffi::fi_addr_t,
    tag: u64,
    ignore: u64,
    ctx: *mut c_void,
) -> isize {
    crate::guard("fi_trecvv", FiError::OTHER.code() as isize, || {
        recv(
            ep,
            |f| {
                // SAFETY: the caller's iovec array.
                let iov = unsafe { many(iov, count) }?;
                Ok(posted(iov, src, ctx, true, tag, ignore, f))
            },
            true,
        )
    })
}

unsafe extern "C" fn tagged_recvmsg(ep: *mut ffi::fid_ep, msg: *const ffi::fi_msg_tagged, flags: u64) -> isize {
    crate::guard("fi_trecvmsg", FiError::OTHER.code() as isize, || {
        recv(
            ep,
            |_| {
                // SAFETY: the caller's message descriptor and its iovec array.
                let m = unsafe { msg.as_ref() }.ok_or(FiError::INVAL)?;
                // SAFETY: as above.
                Ok(posted(unsafe { many(m.msg_iov, m.iov_count) }?, m.addr, m.context, true, m.tag, m.ignore, flags))
            },
            false,
        )
    })
}

unsafe extern "C" fn tagged_send(
    ep: *mut ffi::fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest: ffi::fi_addr_t,
    tag: u64,
    ctx: *mut c_void,
) -> isize {
    crate::guard("fi_tsend", FiError::OTHER.code() as isize, || {
        send(ep, |f| Ok(args(one(buf, len)?, dest, ctx, Some(tag), None, f)), true)
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tagged_sendv(
    ep: *mut ffi::fid_ep,
    iov: *const ffi::iovec,
    _desc: *mut *mut c_void,
    count: usize,
    dest: ffi::fi_addr_t,
    tag: u64,
    ctx: *mut c_void,
) -> isize {
    crate::guard("fi_tsendv", FiError::OTHER.code() as isize, || {
        send(
            ep,
            |f| {
                // SAFETY: the caller's iovec array.
                let iov = unsafe { many(iov, count) }?;
                Ok(args(iov, dest, ctx, Some(tag), None, f))
            },
            true,
        )
    })
}

unsafe extern "C" fn tagged_sendmsg(ep: *mut ffi::fid_ep, msg: *const ffi::fi_msg_tagged, flags: u64) -> isize {
    crate::guard("fi_tsendmsg", FiError::OTHER.code() as isize, || {
        send(
            ep,
            |_| {
                // SAFETY: the caller's message descriptor and its iovec array.
                let m = unsafe { msg.as_ref() }.ok_or(FiError::INVAL)?;
                let data = (flags & ffi::FI_REMOTE_CQ_DATA as u64 != 0).then_some(m.data);
                // SAFETY: as above.
                Ok(args(unsafe { many(m.msg_iov, m.iov_count) }?, m.addr, m.context, Some(m.tag), data, flags))
            },
            false,
        )
    })
}

unsafe extern "C" fn tagged_inject(
    ep: *mut ffi::fid_ep,
    buf: *const c_void,
    len: usize,
    dest: ffi::fi_addr_t,
    tag: u64,
) -> isize {
    crate::guard("fi_tinject", FiError::OTHER.code() as isize, || inject(ep, buf, len, dest, Some(tag), None))
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tagged_senddata(
    ep: *mut ffi::fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    data: u64,
    dest: ffi::fi_addr_t,
    tag: u64,
    ctx: *mut c_void,
) -> isize {
    crate::guard("fi_tsenddata", FiError::OTHER.code() as isize, || {
        send(ep, |f| Ok(args(one(buf, len)?, dest, ctx, Some(tag), Some(data), f)), true)
    })
}

unsafe extern "C" fn tagged_injectdata(
    ep: *mut ffi::fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: ffi::fi_addr_t,
    tag: u64,
) -> isize {
    crate::guard("fi_tinjectdata", FiError::OTHER.code() as isize, || inject(ep, buf, len, dest, Some(tag), Some(data)))
}

pub static TAGGED_OPS: ffi::fi_ops_tagged = ffi::fi_ops_tagged {
    size: size_of::<ffi::fi_ops_tagged>(),
    recv: Some(tagged_recv),
    recvv: Some(tagged_recvv),
    recvmsg: Some(tagged_recvmsg),
    send: Some(tagged_send),
    sendv: Some(tagged_sendv),
    sendmsg: Some(tagged_sendmsg),
    inject: Some(tagged_inject),
    senddata: Some(tagged_senddata),
    injectdata: Some(tagged_injectdata),
};
