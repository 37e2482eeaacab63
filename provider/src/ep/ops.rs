//! The data-transfer entry points (fi_ops_msg and fi_ops_tagged): argument checks, then
//! `send` or `rx::take_unexpected`.

use super::handle::with_ep;
use crate::error::{FiError, FiResult};
use crate::getinfo::INJECT_SIZE;
use crate::iov::{many, one};
use crate::state::av::AvState;
use crate::state::cntr::CntrState;
use crate::state::cq::{CqEvent, CqState};
use crate::state::ep::rx::{self, PostCtx, PostedRecv};
use crate::state::ep::sinks::Sinks;
use crate::state::ep::sinks::TxKind;
use crate::state::ep::tx::{self, SendArgs, TxOp};
use crate::state::ep::EpState;
use crate::state::DomainState;
use rshm_ffi as ffi;
use slab::Slab;
use smr_core::endpoint::{SendOpts, SendStatus};
use smr_core::iov::Ranges;
use std::ffi::c_void;

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
        Some(ep) => {
            if send_express_done(ep, cqs, cntrs, &args) {
                Ok(())
            } else {
                start_send(ep, cqs, cntrs, avs, args)
            }
        }
        None => Err(FiError::INVAL),
    };
    if result == Err(FiError::AGAIN) {
        // Make room: drain our rings (responses free peers' buffers and our tx slots).
        crate::progress::endpoint(st, id);
    }
    result
}

/// The fi_inject family: the express path (`inject_express`) where it applies, else `send`.
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
            if st.eps.get_mut(ep.id).is_some_and(|e| inject_express(e, bytes, dest, tag, data)) {
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
        let mut recv = make(flags)?;
        if s.rx.posted_count() >= s.rx_size {
            return Err(FiError::AGAIN);
        }
        let directed = s.directed();
        let engine = s.engine.as_mut().ok_or(FiError::NOTCONN)?;
        let peek = recv.tagged && recv.flags & ffi::FI_PEEK as u64 != 0;
        let claim = recv.tagged && recv.flags & ffi::FI_CLAIM != 0;
        // The usual post: no peek or claim, and nothing held that it could match. It only
        // queues, with no sinks or post context to set up.
        if !peek && !claim && s.rx.only_queues(recv.tagged) {
            s.rx.queue_posted(recv);
            return Ok(());
        }
        let mut sinks = Sinks::new(cqs, cntrs, &s.bindings);
        let ctx = PostCtx { rx: &mut s.rx, engine, sinks: &mut sinks, directed };
        if peek {
            rx::peek(ctx, &recv);
            return Ok(());
        }
        if claim {
            return rx::claim(ctx, &recv);
        }
        if !rx::take_unexpected(ctx, &mut recv) {
            s.rx.queue_posted(recv);
        }
        Ok(())
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
    crate::boundary::guard("fi_recv", FiError::OTHER.code() as isize, || {
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
    crate::boundary::guard("fi_recvv", FiError::OTHER.code() as isize, || {
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
    crate::boundary::guard("fi_recvmsg", FiError::OTHER.code() as isize, || {
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
    crate::boundary::guard("fi_send", FiError::OTHER.code() as isize, || {
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
    crate::boundary::guard("fi_sendv", FiError::OTHER.code() as isize, || {
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
    crate::boundary::guard("fi_sendmsg", FiError::OTHER.code() as isize, || {
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
    crate::boundary::guard("fi_inject", FiError::OTHER.code() as isize, || inject(ep, buf, len, dest, None, None))
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
    crate::boundary::guard("fi_senddata", FiError::OTHER.code() as isize, || {
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
    crate::boundary::guard("fi_injectdata", FiError::OTHER.code() as isize, || {
        inject(ep, buf, len, dest, None, Some(data))
    })
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
    crate::boundary::guard("fi_trecv", FiError::OTHER.code() as isize, || {
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
    crate::boundary::guard("fi_trecvv", FiError::OTHER.code() as isize, || {
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
    crate::boundary::guard("fi_trecvmsg", FiError::OTHER.code() as isize, || {
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
    crate::boundary::guard("fi_tsend", FiError::OTHER.code() as isize, || {
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
    crate::boundary::guard("fi_tsendv", FiError::OTHER.code() as isize, || {
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
    crate::boundary::guard("fi_tsendmsg", FiError::OTHER.code() as isize, || {
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
    crate::boundary::guard("fi_tinject", FiError::OTHER.code() as isize, || inject(ep, buf, len, dest, Some(tag), None))
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
    crate::boundary::guard("fi_tsenddata", FiError::OTHER.code() as isize, || {
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
    crate::boundary::guard("fi_tinjectdata", FiError::OTHER.code() as isize, || {
        inject(ep, buf, len, dest, Some(tag), Some(data))
    })
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

/// The express path of the fi_inject family: from an endpoint with no send counter (an inject
/// writes no CQ entry, so there is nothing to report), `express`. False, with nothing sent, for
/// anything else: `start_send` takes it, and also says why a send fails.
#[inline(always)]
fn inject_express(ep: &mut EpState, bytes: &[u8], dest: u64, tag: Option<u64>, data: Option<u64>) -> bool {
    ep.bindings.send_cntr.is_none() && express(ep, bytes, dest, tag, data)
}

/// The express path of a send that completes within its call (fi_send, fi_tsend, fi_tsenddata,
/// the *msg forms): one buffer, neither batched (FI_MORE) nor acknowledged
/// (FI_DELIVERY_COMPLETE), sent by `express` and reported as `start_send` reports a send done at
/// once; what `start_send` would build for it (a transmit slot, the engine's options, a lent
/// iov) it never needed. False, with nothing sent, for anything else: `start_send` takes it, and
/// says why a send fails.
#[inline(always)]
fn send_express_done(ep: &mut EpState, cqs: &mut Slab<CqState>, cntrs: &mut Slab<CntrState>, args: &SendArgs) -> bool {
    if args.flags & (ffi::FI_MORE | ffi::FI_DELIVERY_COMPLETE) as u64 != 0 {
        return false;
    }
    let (addr, len) = match *args.iov.as_slice() {
        [] => (0, 0),
        [(addr, len)] => (addr, len),
        _ => return false,
    };
    if args.flags & ffi::FI_INJECT as u64 != 0 && len > INJECT_SIZE {
        return false;
    }
    // SAFETY: the application's send buffer of `len` bytes, readable during the call
    // (fi_msg(3)); `express` copies it before it returns.
    let bytes = unsafe { crate::iov::bytes(addr, len) };
    if !express(ep, bytes, args.dest, args.tag, args.data) {
        return false;
    }
    report_sent(ep, cqs, cntrs, &send_op(ep, args));
    true
}

/// A message of up to the inject size (inline in the command, or in one of the receiver's inject
/// buffers: the engine's `send_express`, which copies it before it returns) to a peer already in
/// use, with room for it in the transmit queue. False, with nothing sent, otherwise.
#[inline(always)]
fn express(ep: &mut EpState, bytes: &[u8], dest: u64, tag: Option<u64>, data: Option<u64>) -> bool {
    if ep.tx_outstanding() >= ep.tx_size {
        return false;
    }
    let Some(&Some(peer)) = ep.peers.get(dest as usize) else { return false };
    let Some(engine) = ep.engine.as_mut() else { return false };
    let hdr = tx::header(tag, data, bytes.len());
    crate::debug!(EpData, "send to {dest} len {} tag {:#x} app {} (express)", hdr.len, hdr.tag, hdr.app);
    engine.send_express(peer, &hdr, bytes)
}

/// The transmit record of send `args`.
#[inline(always)]
fn send_op(ep: &EpState, args: &SendArgs) -> TxOp {
    let kind = if args.tag.is_some() { ffi::FI_TAGGED } else { ffi::FI_MSG } as u64;
    // The FI_INJECT flag (on fi_sendmsg or in the endpoint's op_flags) frees the buffer at once
    // but still completes as usual; only the inject calls are silent.
    let wanted = !args.inject_call && (!ep.bindings.tx_selective || args.flags & ffi::FI_COMPLETION as u64 != 0);
    TxOp::new(args.ctx, ffi::FI_SEND as u64 | kind, wanted, TxKind::Send)
}

/// Report send `op`, done within its call: its CQ entry and counter, unless nothing would see it
/// (an inject with no counter).
#[inline(always)]
fn report_sent(ep: &EpState, cqs: &mut Slab<CqState>, cntrs: &mut Slab<CntrState>, op: &TxOp) {
    if op.wanted() || ep.bindings.tx_cntr(TxKind::Send).is_some() {
        Sinks::new(cqs, cntrs, &ep.bindings).tx_done(CqEvent::Done(op.entry()), op.wanted(), TxKind::Send);
    }
}

/// Start a send on endpoint `ep`.
// Forced inline into its one caller (`send_locked`), which built the arguments.
#[inline(always)]
fn start_send(
    ep: &mut EpState,
    cqs: &mut Slab<CqState>,
    cntrs: &mut Slab<CntrState>,
    avs: &Slab<AvState>,
    args: SendArgs,
) -> FiResult<()> {
    if ep.engine.is_none() {
        return Err(FiError::NOTCONN);
    }
    let len: usize = args.iov.iter().map(|p| p.1).sum();
    let inject = args.flags & ffi::FI_INJECT as u64 != 0;
    if inject && len > INJECT_SIZE {
        return Err(FiError::MSGSIZE);
    }
    if len as u64 > crate::params::config().engine.max_msg_size {
        return Err(FiError::MSGSIZE);
    }
    if ep.tx_outstanding() >= ep.tx_size {
        return Err(FiError::AGAIN);
    }
    let peer = ep.peer_for(avs, args.dest)?;
    let hdr = tx::header(args.tag, args.data, len);
    let op = send_op(ep, &args);
    // The slot a pending send will take; most sends finish at once and never take it.
    let slot = ep.tx_ops.vacant_key();
    let opts = SendOpts {
        cookie: slot as u64,
        // The engine copies every message up to INJECT_SIZE before returning, so FI_INJECT and
        // an acknowledged delivery go together.
        delivery_complete: args.flags & ffi::FI_DELIVERY_COMPLETE as u64 != 0,
        // FI_MORE: the engine batches small messages to a peer until the next call without it.
        more: args.flags & ffi::FI_MORE as u64 != 0,
        // Messages: both sides are active, SAR or CMA by measurement or by size (`Params`).
        pull: false,
        split_early: false,
    };
    crate::debug!(
        EpData,
        "send to {} len {len} tag {:?} data {:?} flags {:#x} ctx {:#x}",
        args.dest,
        args.tag,
        args.data,
        args.flags,
        args.ctx
    );
    let engine = ep.engine.as_mut().expect("checked above");
    // SAFETY: the application's send buffer, which it keeps unchanged until the send completes.
    let sent = unsafe { tx::engine_send(engine, peer, hdr, args.iov, opts) };
    match sent {
        Ok(SendStatus::Done) => {
            report_sent(ep, cqs, cntrs, &op);
            Ok(())
        }
        Ok(SendStatus::Pending) => {
            let taken = ep.tx_ops.insert(op);
            debug_assert_eq!(taken, slot);
            Ok(())
        }
        Err(smr_core::Error::Again) => Err(FiError::AGAIN),
        Err(e) => Err(tx::refused("send", args.dest, e)),
    }
}
