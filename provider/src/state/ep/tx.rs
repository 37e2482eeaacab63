//! Send side: resolve the destination, hand the message to the engine, report completions.

use super::sinks::{ctx_completion, Sinks, TxKind, APP_DATA, APP_TAGGED};
use crate::error::FiError;
use crate::state::cq::{Completion, CqEvent};
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
    /// to look up by id, and nothing kept outside this record. `taken`: the answer's first bytes
    /// copied out already, as the target announced them (`Handler::on_send_answer_part`). 32-bit
    /// lengths, so that `taken` costs every transmit record nothing: an answer holds at most
    /// `ANSWER_BUFS_MAX` pool buffers (`answered_into`).
    Answer { addr: usize, len: u32, taken: u32, got: Option<bool> },
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

    /// Its completion entry: its context and flags.
    pub fn entry(&self) -> Completion {
        ctx_completion(self.ctx, self.flags)
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

/// The engine header of a message of `len` bytes, with or without a tag and CQ data (the
/// provider's bits in its `app` byte say which).
#[inline(always)]
pub(crate) fn header(tag: Option<u64>, data: Option<u64>, len: usize) -> MsgHeader {
    let mut app = 0;
    if tag.is_some() {
        app |= APP_TAGGED;
    }
    if data.is_some() {
        app |= APP_DATA;
    }
    MsgHeader { app, tag: tag.unwrap_or(0), data: data.unwrap_or(0), aux: 0, len: len as u64 }
}

/// Hand a message in application memory to the engine: a small one in one buffer is copied
/// straight from it (`send_bytes`), anything else is lent as an iov.
///
/// # Safety
/// The ranges must be the caller's readable memory, unchanged until the send completes (small
/// ones are copied before this returns).
// Forced inline (two callers): the header and ranges were passed down one frame more.
#[inline(always)]
pub(crate) unsafe fn engine_send(
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
    let entry = op.entry();
    let event = match result {
        Ok(()) => CqEvent::Done(entry),
        Err(e) => {
            crate::warn!(EpData, "operation ctx {:#x} failed: {e}", entry.op_context);
            CqEvent::Failed { entry, err: FiError::from(e).0, olen: 0 }
        }
    };
    sinks.tx_done(event, op.wanted, op.kind);
}

/// An engine send refused when it was posted (not `Again`): log it, with what to change when a
/// receiver's pool found no room (`no_room_for_pools`), and the libfabric code to return.
/// `what` names the operation for the log ("send", "one-sided operation").
#[cold]
pub fn refused(what: &str, dest: u64, e: smr_core::Error) -> FiError {
    crate::warn!(EpData, "{what} to fi_addr {dest} failed: {e}");
    if e == smr_core::Error::Os(libc::ENOSPC) {
        no_room_for_pools();
    }
    FiError::from(e)
}

/// A send failed with ENOSPC, when posted (`refused`) or later (`rx::Handler::on_send_done`):
/// the receiver's inject or SAR pool, whose pages are reserved in /dev/shm when the pool is
/// first used (`smr_core::region::Region::map_inject_pool`, `map_sar_pool`), found no room.
/// Says what to change.
#[cold]
pub fn no_room_for_pools() {
    let c = crate::params::config().engine.counts;
    crate::warn!(
        EpData,
        "no room in /dev/shm for the receiver's message buffers (inject {} KiB, SAR {} KiB, each reserved \
         when first used): enlarge /dev/shm (e.g. mount -o remount,size=... /dev/shm, or docker --shm-size), \
         or shrink them with FI_RSHM_INJECT_COUNT, FI_RSHM_SAR_COUNT, FI_RSHM_SAR_SIZE",
        c.inject_count * smr_core::layout::INJECT_SIZE / 1024,
        c.sar_count * c.sar_size / 1024
    );
}
