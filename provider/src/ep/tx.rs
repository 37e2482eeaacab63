//! Send side: resolve the destination, hand the message to the engine, report completions.

use super::state::{ctx_completion, EpState, Sinks, APP_DATA, APP_TAGGED};
use crate::error::{FiError, FiResult};
use crate::getinfo::INJECT_SIZE;
use crate::state::av::AvState;
use crate::state::cntr::CntrState;
use crate::state::cq::CqEvent;
use crate::state::cq::CqState;
use rshm_ffi as ffi;
use slab::Slab;
use smr_core::cmd::MsgHeader;
use smr_core::endpoint::{PeerId, SendOpts, SendStatus};
use smr_core::iov::Ranges;

/// A transmit operation waiting for the engine to finish it: a send, or a one-sided operation.
#[derive(Debug, Clone, Copy)]
pub struct TxOp {
    ctx: usize,
    flags: u64,
    wanted: bool,
    kind: TxKind,
    /// Where the data of a read or fetching atomic comes back.
    pub returns: Returns,
}

/// Where the data of a transmit operation comes back, if it waits for any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Returns {
    /// None: a send, a write, a base atomic.
    Nothing,
    /// In a reply message, or written back by the target, matched by this operation id in
    /// `RmaState`'s replies.
    Reply(u64),
    /// In the target's answer itself (`Handler::on_send_answer`: the bytes ride in the response
    /// entry or in an answer buffer of ours), into one buffer of the caller's, `len` bytes at
    /// `addr`. `got` says whether an answer's bytes came, and whether of that length: nothing
    /// to look up by id, and nothing kept outside this record.
    Answer { addr: usize, len: usize, got: Option<bool> },
}

/// Which counter a transmit operation bumps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxKind {
    Send,
    Write,
    Read,
}

impl TxOp {
    pub fn new(ctx: usize, flags: u64, wanted: bool, kind: TxKind) -> TxOp {
        TxOp { ctx, flags, wanted, kind, returns: Returns::Nothing }
    }

    pub fn returning(self, returns: Returns) -> TxOp {
        TxOp { returns, ..self }
    }

    pub fn kind(&self) -> TxKind {
        self.kind
    }

    pub fn wanted(&self) -> bool {
        self.wanted
    }

    pub fn flags(&self) -> u64 {
        self.flags
    }
}

/// What a send call asks for.
pub struct SendArgs {
    pub iov: Ranges,
    pub dest: u64,
    pub ctx: usize,
    pub tag: Option<u64>,
    pub data: Option<u64>,
    /// Operation flags (the endpoint's defaults for the short forms).
    pub flags: u64,
    /// fi_inject/fi_injectdata/fi_tinject/fi_tinjectdata: never a CQ entry, even on a CQ bound
    /// without FI_SELECTIVE_COMPLETION (fi_msg(3)); counters still count the send.
    pub inject_call: bool,
}

/// The engine peer of fi_addr `dest`: one load once known (inline on every send path).
#[inline(always)]
pub(super) fn peer_for(ep: &mut EpState, avs: &Slab<AvState>, dest: u64) -> FiResult<PeerId> {
    match ep.peers.get(dest as usize) {
        Some(&Some(p)) => Ok(p),
        _ => peer_first_use(ep, avs, dest),
    }
}

/// `peer_for` of an fi_addr not used yet: look its name up in the AV and add the peer.
#[cold]
fn peer_first_use(ep: &mut EpState, avs: &Slab<AvState>, dest: u64) -> FiResult<PeerId> {
    let av = ep.av.and_then(|a| avs.get(a)).ok_or(FiError::NOAV)?;
    let name = av.name(dest).ok_or_else(|| {
        crate::warn!(EpData, "send to fi_addr {dest}, which is not in the AV");
        FiError::ADDRNOTAVAIL
    })?;
    let engine = ep.engine.as_mut().ok_or(FiError::NOTCONN)?;
    let peer = engine.add_peer(name).map_err(FiError::from)?;
    let at = dest as usize;
    if ep.peers.len() <= at {
        ep.peers.resize(at + 1, None);
    }
    ep.peers[at] = Some(peer);
    Ok(peer)
}

/// The engine header of a message of `len` bytes, with or without a tag and CQ data (the
/// provider's bits in its `app` byte say which).
#[inline(always)]
fn header(tag: Option<u64>, data: Option<u64>, len: usize) -> MsgHeader {
    let mut app = 0;
    if tag.is_some() {
        app |= APP_TAGGED;
    }
    if data.is_some() {
        app |= APP_DATA;
    }
    MsgHeader { app, tag: tag.unwrap_or(0), data: data.unwrap_or(0), aux: 0, len: len as u64 }
}

/// The express path of the fi_inject family: a message of up to the inject size (inline in the
/// command, or in one of the receiver's inject buffers: the engine's `send_express`), to a peer
/// already in use, from an endpoint with no send counter (an inject writes no CQ entry, so
/// there is nothing to report). False, with nothing sent, for anything else: `send` takes it,
/// and also says why a send fails.
#[inline(always)]
pub fn inject_express(ep: &mut EpState, bytes: &[u8], dest: u64, tag: Option<u64>, data: Option<u64>) -> bool {
    if ep.bindings.send_cntr.is_some() || ep.tx_outstanding() >= ep.tx_size {
        return false;
    }
    let Some(&Some(peer)) = ep.peers.get(dest as usize) else { return false };
    let Some(engine) = ep.engine.as_mut() else { return false };
    let hdr = header(tag, data, bytes.len());
    crate::debug!(EpData, "inject to {dest} len {} tag {:#x} app {} (express)", hdr.len, hdr.tag, hdr.app);
    engine.send_express(peer, &hdr, bytes)
}

/// Start a send on endpoint `id`.
// Forced inline into its one caller (`ops::send`), which built the arguments.
#[inline(always)]
pub fn send(
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
    let peer = peer_for(ep, avs, args.dest)?;
    let hdr = header(args.tag, args.data, len);
    let kind = if args.tag.is_some() { ffi::FI_TAGGED } else { ffi::FI_MSG } as u64;
    // The FI_INJECT flag (on fi_sendmsg or in the endpoint's op_flags) frees the buffer at once
    // but still completes as usual; only the inject calls are silent.
    let wanted = !args.inject_call && (!ep.bindings.tx_selective || args.flags & ffi::FI_COMPLETION as u64 != 0);
    let op = TxOp::new(args.ctx, ffi::FI_SEND as u64 | kind, wanted, TxKind::Send);
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
    let sent = unsafe { engine_send(engine, peer, hdr, args.iov, opts) };
    match sent {
        // Done at once: report it, unless nothing would see it (an inject with no counter).
        Ok(SendStatus::Done) if op.wanted || ep.bindings.tx_cntr(TxKind::Send).is_some() => {
            let mut sinks = Sinks { cqs, cntrs, b: &ep.bindings };
            sinks.tx_done(CqEvent::Done(ctx_completion(op.ctx, op.flags)), op.wanted, TxKind::Send);
            Ok(())
        }
        Ok(SendStatus::Done) => Ok(()),
        Ok(SendStatus::Pending) => {
            let taken = ep.tx_ops.insert(op);
            debug_assert_eq!(taken, slot);
            Ok(())
        }
        Err(e) => {
            if e == smr_core::Error::Again {
                return Err(FiError::AGAIN);
            }
            crate::warn!(EpData, "send to fi_addr {} failed: {e}", args.dest);
            Err(FiError::from(e))
        }
    }
}

/// Hand a message in application memory to the engine: a small one in one buffer is copied
/// straight from it (`send_bytes`), anything else is lent as an iov.
///
/// # Safety
/// The ranges must be the caller's readable memory, unchanged until the send completes (small
/// ones are copied before this returns).
// Forced inline (two callers): the header and ranges were passed down one frame more.
#[inline(always)]
pub(super) unsafe fn engine_send(
    engine: &mut smr_core::endpoint::Endpoint,
    peer: PeerId,
    hdr: MsgHeader,
    iov: Ranges,
    opts: SendOpts,
) -> smr_core::Result<SendStatus> {
    match *iov.as_slice() {
        [] => engine.send_bytes(peer, hdr, &[], opts),
        [(addr, n)] if n <= engine.params().inject_max => {
            // SAFETY: per this function's contract, `n` readable bytes at `addr`.
            let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, n) };
            engine.send_bytes(peer, hdr, bytes, opts)
        }
        // SAFETY: per this function's contract.
        _ => engine.send(peer, hdr, unsafe { smr_core::iov::LocalIov::from_ranges(iov) }, opts),
    }
}

/// The engine finished a pending send.
// Forced inline, as `Sinks::tx_done`: a completion built in one frame was copied into the next
// (about 30 instructions per acknowledged write or atomic).
#[inline(always)]
pub fn send_finished(tx_ops: &mut Slab<TxOp>, slot: usize, result: smr_core::Result<()>, sinks: &mut Sinks) {
    let Some(op) = tx_ops.try_remove(slot) else { return };
    let entry = ctx_completion(op.ctx, op.flags);
    let event = match result {
        Ok(()) => CqEvent::Done(entry),
        Err(e) => CqEvent::Failed { entry, err: FiError::from(e).0, olen: 0 },
    };
    sinks.tx_done(event, op.wanted, op.kind);
}
