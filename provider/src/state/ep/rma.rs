//! One-sided operations (RMA and atomics) over the engine's messages.
//!
//! Each operation is a message whose `app` byte names its kind (upper nibble); the engine's
//! protocols (inline, inject, CMA, SAR) carry the data, so one-sided works with and without CMA.
//!
//! | kind       | header                                   | payload                           | answered                          |
//! |------------|------------------------------------------|-----------------------------------|-----------------------------------|
//! | WRITE      | tag = key, aux = address, data = CQ data | the bytes                         | if acknowledged                   |
//! | READ_REQ   | tag = key, aux = address                 | [op id,] length[, answer buffer] (`read_req.rs`) | with the bytes, or after the reply |
//! | READ_RESP  | tag = op id                              | the bytes read / old values       | -                                 |
//! | ATOMIC     | tag = key, aux = address, data = `Desc`  | [op id,] operands, compares       | if acknowledged / reply           |
//! | SEGMENTS   | -                                        | key, address, length per range    | never: the operation after it, marked `APP_SEGMENTED`, takes the list (`segments.rs`) |
//!
//! An op id travels only in a request whose data comes back in a READ_RESP (which names it), so
//! that the usual small atomic and read request fits the command's first cache line.
//!
//! A read travels one of seven ways, by size (the request's format: `read_req.rs`):
//!
//! | length                              | ring entries | the bytes travel                                           |
//! |-------------------------------------|--------------|------------------------------------------------------------|
//! | <= 96 B (`ANSWER_DATA_MAX`)         | 2            | in the answer's response entry (`answer_with`)             |
//! | 97 B ..= FI_RSHM_READ_ONE_TRIP_MAX  | 2            | in an answer buffer of the initiator's region (`answer_into`) |
//! | larger up to four SAR buffers (`Endpoint::answer_buf_max`), from a target that calls progress (`Endpoint::peer_progresses`) | 2 | in answer buffers, as the one-trip read, spanning them above one (or, where the registration is published, by the fifth row when measured faster: `Endpoint::choose_read`) |
//! | larger, from a target with a CPU to spare (`Endpoint::peer_is_free`), or beyond four SAR buffers from one that calls progress | 2 + segments | pushed by the target through the initiator's SAR buffers while the initiator copies out (`ReturnBy::Pushed`) |
//! | larger, from a registration the target published | 0 | read by the initiator itself with CMA (`copy_published`; `published.rs`) |
//! | larger otherwise (or no answer buffer free and above 4 KiB), CMA both ways | 2 | written by the target into the initiator's buffer (`Endpoint::cma_write`), then the answer |
//! | otherwise                           | 3            | in a READ_RESP message (inline, inject, CMA or SAR), then the answer |
//!
//! "Calls progress": the target's count of progress calls (`OwnerBeat::polls`) moved since our
//! last look a moment ago, or under 200 us before this look, or while we watch for a
//! microsecond. Free or busy with operations of its own (fi_rma_bw's two-way reads), it then
//! answers within microseconds, and its copy into our buffer and ours out of it beat both the
//! pushed reply (SOS gets of 32 KiB: 2.3-2.8 us against 3.3-4.0) and our CMA read (fi_rma_bw at
//! 24-32 KiB: 2.4-4.8x). "A CPU to spare": the target kept progressing with no operation of its
//! own outstanding or started (`OwnerBeat::free_polls`). Then both processes copy at once, each
//! at memcpy speed, which beats one kernel copy (SOS `shmem_bw_get_perf` at 1 MiB: 15-16 GB/s
//! pushed against 8-11 by CMA). A read beyond the answer buffers is pushed by a target that
//! calls progress while busy too: in fi_rma_bw, where each side also copies out its own
//! pushed reads, 19-24 GB/s at 192 KiB-1 MiB against 12-15 by CMA (the kernel's copy). A
//! target that computes or sleeps gets the fifth row, which needs no step of the target's: it still serves reads from a
//! registration it published while it has not progressed since it started, counting the reads
//! a FI_REMOTE_READ counter must count on its next pass (`state::ep::published`).
//!
//! The one-trip read (the middle row, 16 KiB by default): the initiator reserves a buffer of its
//! own region (an inject buffer up to 4 KiB, a SAR buffer above; for the third row's reads
//! above one SAR buffer, as many as they fill), names it in the request, and the target copies
//! the registered memory into it when the request arrives and answers with the length. Why a buffer of the initiator's, not the target's: the initiator then copies out of
//! its own memory and frees the buffer locally, with no free-list push into a peer's region and
//! nothing to trust from the target but a length, which it checks against what it asked; the
//! target needs no connection back (it writes through the mapping it holds of the initiator) and
//! no ring entry of its own. Against the READ_RESP message this saves a ring entry, the
//! target's send path and, from 4 KiB, the initiator's CMA system call (about 1.5 us here
//! whatever the size: docs/perf/protocols.md). The engine owns the buffer from the send on and
//! frees it however the read ends (answered, refused, the target dead). The name is peer-written
//! for the target: the engine checks it against the initiator's geometry and refuses a bad one
//! (EINVAL) without writing.
//!
//! A write larger than one SAR segment (16 KiB) travels one of three ways: to a target with a CPU
//! to spare, through the target's SAR buffers, the initiator copying in while the target copies
//! each segment straight into the registration (SOS `shmem_bw_put_perf` at 128 KiB-1 MiB:
//! 12-17 GB/s against 6-10 pulled); to any other, into a registration it published for peers to
//! write, by the initiator itself with one `process_vm_writev`, complete (delivery complete) in
//! the call (`copy_published`; fi_rma_bw's two-way writes at 24 KiB: 6.1 GB/s against 3.7
//! pulled); otherwise pulled by the target with one CMA read in one step of its progress (its
//! CPU is busy or elsewhere, and SAR would need it for every segment). A write into a registration
//! that a FI_REMOTE_WRITE counter counts is counted in the target's table by the initiator and
//! taken into the counter on the target's next pass (`state::ep::published`); a write with
//! remote CQ data always goes through the target, which must report it.
//! A write sent alone (nothing of ours outstanding, nothing started since the application last
//! polled, no FI_MORE: an OpenSHMEM put and its `shmem_quiet`) above 2 KiB and up to 64 KiB (its
//! own chooser to 4 KiB), and a read above 512 B and up to 16 KiB (its own chooser to 2 KiB), take our own
//! `process_vm_writev`/`readv`
//! instead where the target published the registration and that way measured faster
//! (`smr_core::endpoint::lone`, `rma::lone`): alone, an operation pays the ordinary way's whole
//! latency, two copies and a round trip. SOS on the Intel host of 2026-12-01, slow state: puts of
//! 8 KiB 1.4-2.3 us against 3.3-3.4, of 16 KiB 1.7-2.9 against 4.4-5.2; gets of 4-16 KiB
//! 0.29-0.41x the C shm's latency against 0.58-0.69x. `write_lat` of 32 KiB on 2026-12-02:
//! 3.3-3.9 us against 4.2-5.3 pushed through SAR. Streams keep the ordinary way, where both
//! CPUs copy at once, but for reads and writes of those kinds up to 16 KiB to a target that
//! does not progress (ours whether alone or not: the ordinary way would wait for it) and writes
//! to a target busy with operations of its own where writes alone settled on our copy
//! (fi_rma_bw's two-way writes; `ours_anyway` in `ep/rma_start.rs`). A write is ours only with
//! nothing of ours outstanding, and a read within `MAX_ORDER_SIZE` never after an
//! unacknowledged write (`sent_unacked`): a copy that completes in its call must not pass an
//! operation still in the target's ring (FI_ORDER_RMA_WAW/RAW).
//! A registration closed while segments still arrive takes no more of them: `fi_close(mr)` turns
//! the write into a refusal before it returns (`refuse_writes_into`).
//!
//! ## Completion levels
//!
//! Reads and fetching (or compare) atomics complete when their data is back, which is
//! FI_DELIVERY_COMPLETE whatever the caller asked (fi_atomic(3): "atomic fetch operations have
//! FI_DELIVERY_COMPLETE semantics"). Writes and base atomics are *acknowledged* by default: the
//! target answers once the data is placed, and the answer completes them (delivery complete);
//! the engine answers a run of them handled in one pass with one response (`ok_run.rs`).
//! That default is deliberate. SOS's default context is its target endpoint, whose tx op_flags
//! it sets to 0 (SOS.md 1.3), and `shmem_quiet` counts on a completed put being visible to every
//! PE: were a put complete once queued in the target's ring, a third PE told about it could read
//! the old bytes through a path that does not pass that ring (a CMA read of the target's memory),
//! or the target itself could load them before it drains its ring.
//!
//! Only a caller that asks for less gets less: a write or base atomic whose flags (on the call,
//! or the endpoint's tx op_flags) include FI_TRANSMIT_COMPLETE or FI_INJECT_COMPLETE, and neither
//! FI_DELIVERY_COMPLETE nor FI_COMMIT_COMPLETE, completes as soon as its command, the data inline
//! or in an inject buffer, is in the target's ring: no answer, no tx slot, no round trip (the C
//! shm and sm2 complete there even by default). fi_cq(3): "if an RMA operation completes at the
//! initiator as either FI_INJECT_COMPLETE or FI_TRANSMIT_COMPLETE, the data visibility at the
//! target is not guaranteed"; fi_atomic(3): completions of base atomics "indicate that it is safe
//! to re-use the source data buffers". Still acknowledged whatever the flags: operations to this
//! endpoint itself (the data would wait in our own ring, where a local load after the completion
//! would miss it) and writes larger than an inject buffer (CMA and SAR: the target reads the
//! initiator's buffer, so the engine always answers).
//!
//! What holds for an unacknowledged operation:
//! - Ordering from one initiator: the target serves its ring in order and places inline and
//!   inject data in the step in which it pops the command, so a later read, fetch or atomic from
//!   the same initiator to the same endpoint sees it (FI_ORDER_RMA_RAW and friends).
//! - FI_FENCE waits for the earlier operations' completions, for these their queueing; ring
//!   order does the rest.
//! - Counters: the initiator's FI_WRITE counter counts it at its completion; the target's remote
//!   counters when it is applied.
//! - A refusal (bad key, range or access) cannot reach the initiator's completion, reported
//!   already: the target leaves its memory untouched and logs the refusal at warn level
//!   (`refuse`). An application that needs the verdict asks for FI_DELIVERY_COMPLETE.
//!
//! The target checks key, range and access against its domain's registrations
//! (`MrTable::resolve`) before it touches memory and refuses what fails (the initiator gets an
//! error completion if it waits for one, the target's memory is untouched, and so is the initiator's buffer). It
//! applies atomics itself, in arrival order, under the domain lock, so they are atomic with
//! respect to each other from any peer and from the endpoint itself: the usual one (one 4- or
//! 8-byte integer in a registration of one range) in place (`Target::atomic_in_place`), every
//! other on a copy (`apply_atomic`). A read (or
//! fetching atomic) completes at the initiator when the target's answer and the reply's data
//! have both arrived: the target answers only after its reply is in the initiator's memory, so a
//! dead target fails the read through the engine's liveness checks instead of leaving it
//! waiting. Reads up to `READ_SNAPSHOT_MAX`, and every one-trip read, are copied when the
//! request arrives (FI_ORDER_WAR).

use super::read_req::{u64_at, Bytes, ReadReq, ReturnBy};
use super::replies::{Pending, Replies};
use super::sinks::Sinks;
use super::tx::Returns;
use super::tx::TxOp;
use crate::atomic::apply::{self, Kind};
use crate::error::FiError;
use crate::state::cq::CqEvent;
use crate::state::mr::MrTable;
use rshm_ffi as ffi;
use segments::{Remote, Segments};
use slab::Slab;
use smr_core::cmd::RemoteIov;
use smr_core::cmd::{MsgHeader, ANSWER_DATA_MAX};
use smr_core::endpoint::{
    AnswerBuf, AnswerData, AnswerTo, Disposition, Endpoint, Incoming, PeerId, SendOpts, SendStatus, SrcId,
};
use smr_core::iov::{LocalIov, Ranges};
use smr_core::Error as EngineError;
use std::collections::{HashMap, VecDeque};

mod answers;
#[cfg(test)]
mod delivered;
#[cfg(test)]
mod hostile;
pub mod lone;
pub mod segments;
mod target;
mod wire;
pub use answers::*;
pub use target::Target;
pub use wire::*;

/// What the target still has to do for an operation that arrived.
enum TargetOp {
    /// A write placed straight into registered memory `mem`: in the step it arrives (inline,
    /// inject, CMA), or over several steps (SAR segments), during which a close of the
    /// registration stops it (`refuse_writes_into`).
    Write {
        mr_cntr: Option<usize>,
        data: Option<u64>,
        len: u64,
        mem: Ranges,
    },
    ReadReq {
        to: AnswerTo,
        remote: Remote,
    },
    Atomic {
        desc: Desc,
        target: Ranges,
        mr_cntr: Option<usize>,
        reply: Option<AnswerTo>,
    },
}

/// Work for after the engine's progress returns (the engine cannot be called from inside it).
enum Outgoing {
    Answer {
        to: AnswerTo,
        result: Result<(), u32>,
    },
    /// A reply small enough to ride in the answer itself (`Endpoint::answer_with`).
    AnswerData {
        to: AnswerTo,
        data: AnswerData,
    },
    Reply {
        to: AnswerTo,
        op_id: u64,
        data: ReplyData,
        /// The initiator pulls it with CMA (where allowed), instead of our pushing it through
        /// its SAR buffers (`ReturnBy::Pushed`).
        pull: bool,
    },
    /// A read whose initiator asked for its bytes to be written into its buffer with CMA.
    WriteBack(WriteBack),
    /// A read's bytes, copied when it arrived, for the answer buffer its initiator named
    /// (`Endpoint::answer_into`).
    AnswerInto {
        to: AnswerTo,
        buf: AnswerBuf,
        data: Vec<u8>,
    },
}

/// How a read request is answered, as far as its caller can do it at once (`serve_read`).
enum ReadAnswer {
    /// With its bytes, which fit in the answer.
    With(AnswerData),
    /// In the answer buffer the request named: copy this target memory into it.
    Into(AnswerBuf, LocalIov),
    /// Refused, or answered later: through the outbox.
    Queued,
}

/// A read request to answer by writing into its initiator's memory (`ReturnBy::WriteBack`).
struct WriteBack {
    to: AnswerTo,
    op_id: u64,
    /// Where the bytes are read in our memory.
    at: Remote,
    len: u64,
    remote: Vec<RemoteIov>,
}

/// What a reply carries: a copy (small reads, atomics' old values) or registered memory.
enum ReplyData {
    Copy(Vec<u8>),
    Memory(Ranges),
}

impl ReplyData {
    fn len(&self) -> usize {
        match self {
            ReplyData::Copy(v) => v.len(),
            ReplyData::Memory(r) => r.iter().map(|p| p.1).sum(),
        }
    }

    /// The bytes, lent to the engine (no copy).
    ///
    /// # Safety
    /// `self` must stay alive, and unmoved in the case of registered memory, until the send
    /// that takes the iov is finished (`RmaState::replying` keeps it).
    unsafe fn lend(&self) -> LocalIov {
        match self {
            // SAFETY: the copy's heap buffer lives as long as `self` (per this function's
            // contract), and moving the Vec does not move it.
            ReplyData::Copy(v) => unsafe { LocalIov::from_raw(&[(v.as_ptr().cast_mut(), v.len())]) },
            // SAFETY: registered memory the application exposed for remote reads (checked by
            // `resolve` when the request arrived).
            ReplyData::Memory(r) => unsafe { crate::iov::lend(r.clone()) },
        }
    }
}

#[derive(Default)]
pub struct RmaState {
    pending: Replies,
    target: Slab<TargetOp>,
    outbox: VecDeque<Outgoing>,
    /// Replies whose data the initiator still has to take (CMA, SAR): answered when it has.
    /// The reply's data stays here, lent to the engine, until the send finishes.
    replying: Slab<(AnswerTo, ReplyData)>,
    /// Per source, the remote ranges it sent for its next segmented operation (`segments.rs`).
    segments: HashMap<SrcId, Box<Segments>>,
    /// Operations this endpoint started, and peers' operations it served (for the close log,
    /// which client checks read to prove that one-sided traffic went through rshm).
    pub issued: u64,
    pub served: u64,
    /// Acknowledged operations in flight without a transmit record (`COOKIE_UNTRACKED`): they
    /// count against the transmit queue's size and hold back a fenced operation as records do.
    pub untracked: usize,
    /// An unacknowledged write or atomic was sent (transmit or inject completion asked): it
    /// completed once queued, and nothing says when the target applied it. Reads up to
    /// `MAX_ORDER_SIZE` then never take our own copy, which could pass it (FI_ORDER_RMA_RAW).
    pub sent_unacked: bool,
    /// Reads and writes sent alone, timed for the engine's choice of way (`lone.rs`).
    pub lone: lone::LoneOps,
    /// Per engine peer: whether it is this endpoint itself (`loopback`).
    loopback: Vec<Option<bool>>,
    /// `issued` at the last progress pass (`issued_since_last_poll`).
    issued_seen: u64,
    /// Progress calls in a row with nothing of our own outstanding or started, when the clock
    /// started on them, and whether they have lasted `FREE_AFTER` since (`poll_is_free`).
    quiet_polls: u32,
    quiet_since: Option<std::time::Instant>,
    free: bool,
}

/// How long an endpoint must have progressed with nothing of its own to do before peers are
/// told it has a CPU to spare (`poll_is_free`). A process that only pauses between bursts of its
/// own operations is not free: fi_rma_bw's two sides, each reading its completions between
/// windows of 64 writes (a few microseconds), were taken for free and sent a third of their
/// large writes through SAR, which then waited for a peer busy with its own.
const FREE_AFTER: std::time::Duration = std::time::Duration::from_micros(20);
/// Quiet progress calls before the clock starts, and between its looks while waiting for
/// `FREE_AFTER`.
const FREE_CHECK_EVERY: u32 = 64;

/// What a one-sided call asks for, once the entry point has checked its arguments.
pub struct OneSided {
    pub dest: u64,
    pub addr: u64,
    pub key: u64,
    pub ctx: usize,
    pub flags: u64,
    /// fi_inject_write / fi_inject_writedata / fi_inject_atomic: no CQ entry, ever.
    pub inject_call: bool,
}

pub enum Op {
    Write { local: Ranges, data: Option<u64> },
    Read { local: Ranges },
    Atomic { desc: Desc, operand: Ranges, compare: Ranges, result: Ranges },
}

/// FI_MORE: the engine batches small requests to a peer until the next call without it.
#[inline(always)]
pub(crate) fn more(a: &OneSided) -> bool {
    a.flags & ffi::FI_MORE as u64 != 0
}

/// Whether the operation `tx` completes on the target's answer. Reads and fetching atomics
/// always do: they complete when their bytes are in the caller's buffer, whatever completion
/// level the call or the endpoint's op_flags ask for. A write or base atomic (see the module
/// doc) does unless it asks for transmit or inject completion and for nothing stronger, and
/// targets another endpoint; the engine acknowledges the large ones (CMA, SAR) anyway.
#[inline(always)]
pub(crate) fn acknowledged(
    op_flags: u64,
    a: &OneSided,
    tx: &TxOp,
    rma: &mut RmaState,
    engine: &Endpoint,
    peer: PeerId,
) -> bool {
    if tx.kind() == super::sinks::TxKind::Read {
        return true;
    }
    let flags = a.flags | op_flags;
    let early = flags & (ffi::FI_TRANSMIT_COMPLETE | ffi::FI_INJECT_COMPLETE) as u64 != 0
        && flags & (ffi::FI_DELIVERY_COMPLETE | ffi::FI_COMMIT_COMPLETE) as u64 == 0;
    if !early {
        return true;
    }
    // Only the rare early forms note it: the usual acknowledged write stores nothing more.
    let acked = rma.loopback(engine, peer);
    rma.sent_unacked |= !acked;
    acked
}

/// An atomic's operation id for its request, its transmit record, and where a fetching one's
/// old values go (`RmaState::returns`: the target answers with them when they fit the answer).
/// A base atomic sends id 0.
#[inline(always)]
pub(crate) fn atomic_tx(
    rma: &mut RmaState,
    desc: Desc,
    a: &OneSided,
    wanted: bool,
    result: Ranges,
) -> (u64, TxOp, Option<Reply>) {
    match desc.kind {
        Kind::Write => {
            (0, TxOp::new(a.ctx, (ffi::FI_ATOMIC | ffi::FI_WRITE) as u64, wanted, super::sinks::TxKind::Write), None)
        }
        _ => {
            let want = desc.bytes();
            let (op_id, returns, reply) = rma.returns(result, want, want <= ANSWER_DATA_MAX, false);
            (op_id, fetch_tx(a, wanted).returning(returns), reply)
        }
    }
}

/// What an operation whose bytes come back in its answer, into one buffer of the caller's
/// (`addr`, `len` bytes), keeps (`RmaState::returns`): op id 0 in its request, which the
/// target answers itself, the place in its transmit record, and no reply record.
#[inline(always)]
pub(crate) fn answered_into(addr: usize, len: usize) -> (u64, Returns, Option<Reply>) {
    // Every such operation fits an answer's buffers, far below 4 GiB; a length that did not
    // would match no answer (`answer_data`), and the operation would fail.
    let len = u32::try_from(len).unwrap_or(u32::MAX);
    (0, Returns::Answer { addr, len, taken: 0, got: None }, None)
}

/// The transmit record of a fetching or compare atomic, before it says where its old values go.
#[inline(always)]
pub(crate) fn fetch_tx(a: &OneSided, wanted: bool) -> TxOp {
    TxOp::new(a.ctx, (ffi::FI_ATOMIC | ffi::FI_READ) as u64, wanted, super::sinks::TxKind::Read)
}

/// The cookie of operation `tx`: tx slot `slot`, where its record will be kept, unless it keeps
/// none (`COOKIE_UNTRACKED`). An inject write or base atomic (no context, no CQ entry on
/// success: `wanted` is false for inject calls; a write brings nothing back) needs only its
/// kind at completion, and that fits the cookie. It saves the record's insertion, look-up and
/// removal on the path of SOS's puts and non-fetching atomics.
#[inline(always)]
pub(crate) fn cookie_of(a: &OneSided, tx: &TxOp, slot: usize) -> u64 {
    if !a.inject_call || tx.kind() != super::sinks::TxKind::Write {
        return slot as u64;
    }
    let atomic = tx.flags() & ffi::FI_ATOMIC as u64 != 0;
    COOKIE_UNTRACKED | if atomic { UNTRACKED_ATOMIC } else { 0 }
}

/// Reads and writes at least this long are pushed through SAR to a target with a CPU to spare;
/// to another, reads and writes try its published registrations first (`copy_published`): one system
/// call of the initiator's, against a round trip through the target. Shorter reads are cheaper
/// through the target's answer (docs/perf/protocols.md), and shorter writes fit one SAR segment.
pub(crate) fn large_min() -> usize {
    crate::params::config().read_one_trip_max + 1
}

/// Make a read, or a write without CQ data, here with CMA, in the registration `p` the target
/// published for it (`smr_core::published`, `Endpoint::peer_mr`): complete when this returns its
/// kind and completion flags. None: nothing is complete, take the ordinary path (a copy that
/// fell short may have placed some bytes; the ordinary path copies them all again).
pub(crate) fn copy_published(
    engine: &mut Endpoint,
    peer: PeerId,
    p: &smr_core::published::Published,
    a: &OneSided,
    op: &Op,
) -> Option<(super::sinks::TxKind, u64)> {
    let (local, read) = match op {
        Op::Read { local } => (local, true),
        Op::Write { local, data: None } => (local, false),
        _ => return None,
    };
    // SAFETY: the application's buffer (the read's destination, the write's source), lent for
    // the operation, which ends within this call.
    let mut iov = unsafe { crate::iov::lend(local.clone()) };
    let copied = if read {
        engine.read_published(peer, p, a.addr, &mut iov)
    } else {
        engine.write_published(peer, p, a.addr, &iov)
    };
    let (kind, dir) =
        if read { (super::sinks::TxKind::Read, ffi::FI_READ) } else { (super::sinks::TxKind::Write, ffi::FI_WRITE) };
    copied.is_ok().then_some((kind, (ffi::FI_RMA | dir) as u64))
}

/// Where the bytes of a read or fetching atomic go when they come back.
pub(crate) struct Reply {
    op_id: u64,
    local: Ranges,
    want: usize,
    /// The target writes them into `local` itself (`ReturnBy::WriteBack`).
    write_back: bool,
}

/// What an operation sends: the application's memory (writes) or its own request.
pub(crate) enum Payload {
    App(Ranges),
    Own(Bytes),
}

impl RmaState {
    fn new_op(&mut self) -> u64 {
        self.pending.next_id()
    }

    /// Where the `want` bytes of a read or fetching atomic for `local` come back, and the
    /// operation id its request carries. In the answer itself when the target will answer with
    /// them (`answered`: they fit the response entry, or an answer buffer of ours is named) and
    /// they go to at most one buffer of the caller's: the transmit record holds where (id 0,
    /// which the target does not use then). Otherwise in a reply (or by a write-back), matched
    /// by a new operation id.
    #[inline(always)]
    pub(crate) fn returns(
        &mut self,
        local: Ranges,
        want: usize,
        answered: bool,
        write_back: bool,
    ) -> (u64, Returns, Option<Reply>) {
        match *local.as_slice() {
            [] if answered => answered_into(0, want),
            [(addr, _)] if answered => answered_into(addr, want),
            _ => {
                let op_id = self.new_op();
                (op_id, Returns::Reply(op_id), Some(Reply { op_id, local, want, write_back }))
            }
        }
    }

    /// Whether `peer` is this endpoint itself (remembered per peer: ids are never reused).
    fn loopback(&mut self, engine: &Endpoint, peer: PeerId) -> bool {
        let i = peer as usize;
        match self.loopback.get(i) {
            Some(&Some(me)) => me,
            _ => {
                let me = engine.peer_name(peer) == Some(engine.name());
                if self.loopback.len() <= i {
                    self.loopback.resize(i + 1, None);
                }
                self.loopback[i] = Some(me);
                me
            }
        }
    }

    /// Called once per progress call, `quiet` when no operation of ours is outstanding and none
    /// was started since the last call (`issued_since_last_poll`): true while this endpoint is
    /// free to serve its peers' copies (`Endpoint::note_poll`), that is, once it has gone
    /// `FREE_CHECK_EVERY` calls and then `FREE_AFTER` quiet. An endpoint whose application
    /// issues one-sided operations (even ones that complete within the call, like copies of
    /// published registrations) is busy. The clock is read every `FREE_CHECK_EVERY` quiet calls,
    /// never on every idle poll.
    pub fn poll_is_free(&mut self, quiet: bool) -> bool {
        if !quiet {
            (self.quiet_polls, self.quiet_since, self.free) = (0, None, false);
            return false;
        }
        if self.free {
            return true;
        }
        self.quiet_polls = self.quiet_polls.wrapping_add(1);
        // The clock starts at the `FREE_CHECK_EVERY`th quiet call, not the first: the short
        // quiet runs of a message path (the idle polls between a send's completion and the next
        // arrival) then cost no clock read at all.
        if self.quiet_polls.is_multiple_of(FREE_CHECK_EVERY) {
            let now = std::time::Instant::now();
            match self.quiet_since {
                Some(since) => self.free = now.saturating_duration_since(since) >= FREE_AFTER,
                None => self.quiet_since = Some(now),
            }
        }
        self.free
    }

    /// Operation `slot`, just started, waits for its reply `reply` (`RmaState::returns`).
    pub(crate) fn await_reply(&mut self, slot: usize, reply: Reply) {
        let Reply { op_id, local, want, write_back } = reply;
        self.pending.insert(op_id, Pending::new(slot, local, want, write_back));
    }

    /// Nothing was started since the last progress pass (`issued_since_last_poll`).
    pub fn nothing_issued_since_poll(&self) -> bool {
        self.issued == self.issued_seen
    }

    /// Whether the application started a one-sided operation since the last call (once per
    /// progress pass).
    #[inline]
    pub fn issued_since_last_poll(&mut self) -> bool {
        std::mem::replace(&mut self.issued_seen, self.issued) != self.issued
    }

    /// Replies or answers are waiting to go out.
    pub fn has_outgoing(&self) -> bool {
        !self.outbox.is_empty()
    }
}

/// A reply the target sent finished (cookie without COOKIE_REPLY): answer its request.
pub fn reply_sent(rma: &mut RmaState, idx: usize, result: smr_core::Result<()>) {
    if let Some((to, _data)) = rma.replying.try_remove(idx) {
        let result = result.map_err(|_| ffi::FI_EIO);
        rma.outbox.push_back(Outgoing::Answer { to, result });
    }
}

/// A registration over `mr` goes away: replies still going out (or queued to go out) from its
/// memory by reference take a copy of it now, while the memory is still the application's.
/// Through SAR this process copies their segments over later steps; a reply the initiator pulls
/// with CMA falls back to SAR if the kernel refuses the pull. Returns how many took a copy.
pub fn detach_replies(rma: &mut RmaState, engine: &mut Endpoint, mr: &[(usize, usize)]) -> usize {
    let overlaps = |ranges: &Ranges| overlaps(ranges, mr);
    let copy_of = |ranges: &Ranges| {
        // SAFETY: registered memory that is still registered (the close is in progress).
        let mem = unsafe { crate::iov::lend(ranges.clone()) };
        let mut bytes = vec![0; mem.len()];
        mem.read_at(0, &mut bytes);
        ReplyData::Copy(bytes)
    };
    let mut detached = 0;
    // Replies not sent yet (queued behind a full ring) take their copy before they go out.
    for out in rma.outbox.iter_mut() {
        let Outgoing::Reply { data, .. } = out else { continue };
        let ReplyData::Memory(ranges) = data else { continue };
        if overlaps(ranges) {
            *data = copy_of(ranges);
            detached += 1;
        }
    }
    for (idx, (_, data)) in rma.replying.iter_mut() {
        let ReplyData::Memory(ranges) = data else { continue };
        if !overlaps(ranges) {
            continue;
        }
        let copy = copy_of(ranges);
        // SAFETY: the Vec's heap buffer lent here moves with `copy` into `replying`, where it
        // stays until the send ends (`reply_sent`).
        let iov = unsafe { copy.lend() };
        if engine.rebuffer_pending(COOKIE_REPLY | idx as u64, iov) {
            *data = copy;
            detached += 1;
        }
    }
    detached
}

/// A registration over `mr` is closing: writes still arriving into it (SAR segments) place no
/// more bytes there, and their initiators fail with -FI_EACCES. Returns how many.
pub fn refuse_writes_into(rma: &mut RmaState, engine: &mut Endpoint, mr: &[(usize, usize)]) -> usize {
    let stopped: Vec<usize> = rma
        .target
        .iter()
        .filter(|(_, op)| matches!(op, TargetOp::Write { mem, .. } if overlaps(mem, mr)))
        .map(|(idx, _)| idx)
        .filter(|&idx| engine.refuse_arriving(CTX_TARGET | idx as u64, ffi::FI_EACCES))
        .collect();
    for idx in &stopped {
        rma.target.remove(*idx);
    }
    stopped.len()
}

/// Whether memory `ranges` overlaps a registration over `mr`.
fn overlaps(ranges: &Ranges, mr: &[(usize, usize)]) -> bool {
    ranges.iter().any(|&(a, n)| mr.iter().any(|&(b, m)| a < b.saturating_add(m) && b < a.saturating_add(n)))
}

/// Send the replies and answers progress queued. Stops at the first full queue (retried on the
/// next progress).
pub fn flush(rma: &mut RmaState, engine: &mut Endpoint, mrs: &MrTable) {
    while let Some(out) = rma.outbox.pop_front() {
        match out {
            Outgoing::WriteBack(req) => write_back(rma, engine, mrs, req),
            Outgoing::Answer { to, result } => engine.answer(to, result),
            Outgoing::AnswerData { to, data } => {
                if engine.answer_with(to, data.as_slice()).is_err() {
                    engine.answer(to, Err(ffi::FI_EIO));
                }
            }
            Outgoing::AnswerInto { to, buf, data } => engine.answer_into(to, buf, &LocalIov::owned(data)),
            Outgoing::Reply { to, op_id, data, pull } => {
                let peer = match engine.peer_of(to) {
                    Ok(p) => p,
                    Err(_) => {
                        engine.answer(to, Err(ffi::FI_EIO));
                        continue;
                    }
                };
                // Registered memory goes out by reference: the initiator reads it with CMA, or
                // this process copies it into SAR segments over later steps; a registration
                // closed meanwhile hands those a copy first (`detach_replies`).
                let hdr = header(app(KIND_READ_RESP, 0), op_id, 0, 0, data.len());
                let idx = rma.replying.vacant_key();
                // The initiator pulls a large reply with CMA where allowed (SAR would need this
                // target's progress for every segment), unless it asked us to push it: then it
                // chose to copy the reply in halves with us (`Endpoint::choose_busy_read`, below
                // `split_min` too), or we have a CPU to spare (`Endpoint::peer_is_free`), where a
                // reply that small would go as answered were an answer buffer free.
                let opts = SendOpts {
                    cookie: COOKIE_REPLY | idx as u64,
                    delivery_complete: false,
                    more: false,
                    pull,
                    split_early: !pull,
                };
                // SAFETY: `data` outlives the send: it is dropped after a send that is done at
                // once (copied), kept in `replying` while one is pending, and kept for the retry
                // after one that was refused.
                let iov = unsafe { data.lend() };
                match engine.send(peer, hdr, iov, opts) {
                    Ok(SendStatus::Done) => engine.answer(to, Ok(())),
                    Ok(SendStatus::Pending) => {
                        rma.replying.insert((to, data));
                    }
                    Err(EngineError::Again) => {
                        rma.outbox.push_front(Outgoing::Reply { to, op_id, data, pull });
                        break;
                    }
                    Err(e) => {
                        crate::debug!(EpData, "reply to source {} failed: {e}", to.src);
                        engine.answer(to, Err(ffi::FI_EIO));
                    }
                }
            }
        }
    }
}

/// Answer a read by writing its bytes into the initiator's memory with CMA. A kernel that
/// refuses CMA between the two (a policy the probes at start did not see) sends them in a reply
/// instead, and the initiator takes that as usual.
fn write_back(rma: &mut RmaState, engine: &mut Endpoint, mrs: &MrTable, req: WriteBack) {
    let WriteBack { to, op_id, at, len, remote } = req;
    let ranges = match at.resolve(mrs, len, ffi::FI_REMOTE_READ as u64) {
        Ok((ranges, _)) => ranges,
        Err(errno) => return engine.answer(to, Err(errno)),
    };
    // SAFETY: registered memory the application exposed for remote reads, looked up just now;
    // the copy ends before this function returns.
    let mem = unsafe { crate::iov::lend(ranges.clone()) };
    match engine.cma_write(to, &mem, &remote) {
        Ok(n) if n as u64 == len => engine.answer(to, Ok(())),
        Ok(_) => engine.answer(to, Err(ffi::FI_EIO)),
        Err(EngineError::PeerDead) => {}
        Err(e) if smr_core::cma::refused(&e) => {
            crate::debug!(EpData, "CMA write to source {} refused ({e}): replying instead", to.src);
            rma.outbox.push_front(Outgoing::Reply { to, op_id, data: ReplyData::Memory(ranges), pull: true });
        }
        Err(e) => {
            crate::debug!(EpData, "CMA write to source {} failed: {e}", to.src);
            engine.answer(to, Err(ffi::FI_EIO));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The op id's bit survives packing, counts in the payload, and an 8-byte atomic without
    /// one (every atomic whose old values come back in its answer) fits the command's first line.
    #[test]
    fn an_atomic_request_carries_an_op_id_only_when_it_says_so() {
        let sum = Desc { kind: Kind::Fetch, op: ffi::FI_SUM, datatype: ffi::FI_UINT64, count: 1, with_op_id: false };
        for desc in [sum, Desc { with_op_id: true, ..sum }, Desc { kind: Kind::Compare, op: ffi::FI_CSWAP, ..sum }] {
            assert_eq!(Desc::unpack(desc.pack()), Some(desc));
        }
        assert_eq!(sum.payload(), 8);
        assert!(sum.payload() <= smr_core::cmd::FIRST_LINE_PAYLOAD);
        assert_eq!(Desc { with_op_id: true, ..sum }.payload(), 16);
        let read = Desc { op: ffi::FI_ATOMIC_READ, ..sum };
        assert_eq!((read.payload(), Desc { with_op_id: true, ..read }.payload()), (0, 8));
        // The operands start after the op id, where there is one.
        let operand = 5u64.to_le_bytes();
        let with_id = [7u64.to_le_bytes(), operand].concat();
        assert_eq!(target::operands(sum, &operand), Ok((&operand[..], &[][..])));
        assert_eq!(target::operands(Desc { with_op_id: true, ..sum }, &with_id), Ok((&operand[..], &[][..])));
        assert_eq!(target::operands(sum, &[]), Err(ffi::FI_EINVAL), "a payload without the operand");
    }

    /// A read of `want` bytes into `buf`, pending in tx slot 0.
    fn pending_read(buf: &mut [u8], want: usize) -> (RmaState, Slab<TxOp>, u64) {
        let mut rma = RmaState::default();
        let mut tx_ops = Slab::new();
        let op_id = rma.new_op();
        let slot =
            tx_ops.insert(TxOp::new(0, 0, false, super::super::sinks::TxKind::Read).returning(Returns::Reply(op_id)));
        let dest = [(buf.as_mut_ptr() as usize, buf.len())].into_iter().collect();
        rma.pending.insert(op_id, Pending::new(slot, dest, want, false));
        (rma, tx_ops, op_id)
    }

    /// A hostile target's answer of another length than the read asked for (placed in the
    /// answer buffer, or in the response entry) fails the read and leaves the user's buffer
    /// untouched; the right length is copied.
    #[test]
    fn answers_of_the_wrong_length_fail_the_read_untouched() {
        for (want, answer) in [(100usize, 4096usize), (100, 99), (33, 32), (16384, 0)] {
            let mut buf = vec![0xC5u8; want];
            let (mut rma, tx_ops, op_id) = pending_read(&mut buf, want);
            answer_data(&mut rma, &mut { tx_ops }, 0, &[&vec![7u8; answer]]);
            let got = rma.pending.get_mut(op_id).and_then(|p| p.got.clone());
            assert!(matches!(got, Some(Err(EngineError::Corrupt(_)))), "{want} B read, {answer} B answer: {got:?}");
            drop(rma);
            assert!(buf.iter().all(|&b| b == 0xC5), "{want} B read: buffer written by a {answer} B answer");
        }
        // Parts that add up to another length (an answer spanning buffers) fail it too.
        let mut buf = vec![0xC5u8; 1000];
        let (mut rma, tx_ops, op_id) = pending_read(&mut buf, 1000);
        answer_data(&mut rma, &mut { tx_ops }, 0, &[&[7u8; 600], &[7u8; 600]]);
        assert!(matches!(rma.pending.get_mut(op_id).and_then(|p| p.got.clone()), Some(Err(_))));
        drop(rma);
        assert!(buf.iter().all(|&b| b == 0xC5), "buffer written by parts of the wrong length");
        // The right length is copied, whole or in parts, in order.
        let whole: Vec<u8> = (0..1000).map(|i| (i * 7) as u8).collect();
        for parts in [vec![&whole[..]], vec![&whole[..400], &whole[400..999], &whole[999..]]] {
            let mut buf = vec![0u8; 1000];
            let (mut rma, mut tx_ops, op_id) = pending_read(&mut buf, 1000);
            answer_data(&mut rma, &mut tx_ops, 0, &parts);
            assert_eq!(rma.pending.get_mut(op_id).and_then(|p| p.got.clone()), Some(Ok(1000)));
            drop(rma);
            assert_eq!(buf, whole, "{} parts", parts.len());
        }
    }

    /// A read or fetching atomic answered with its bytes (`Returns::Answer`, no reply id):
    /// completes with the right length copied, and fails with the buffer untouched for an answer
    /// of another length, an answer with no bytes, or a refusal. `answer`: the bytes the target
    /// answered with (None: none), `result`: the answer's status. Returns the counter's
    /// (value, errors) and the buffer.
    fn answered_read(want: usize, answer: Option<&[&[u8]]>, result: smr_core::Result<()>) -> ((u64, u64), Vec<u8>) {
        answered_in_pieces(want, &[], answer, result)
    }

    /// `answered_read`, the answer's first bytes announced first (`answer_part`), in `pieces`.
    fn answered_in_pieces(
        want: usize,
        pieces: &[&[&[u8]]],
        answer: Option<&[&[u8]]>,
        result: smr_core::Result<()>,
    ) -> ((u64, u64), Vec<u8>) {
        let mut buf = vec![0xC5u8; want];
        let mut rma = RmaState::default();
        let (op_id, returns, reply) =
            rma.returns([(buf.as_mut_ptr() as usize, want)].into_iter().collect(), want, true, false);
        assert!(op_id == 0 && reply.is_none(), "an answered read keeps no reply record");
        let mut tx_ops = Slab::new();
        let slot = tx_ops.insert(TxOp::new(0, 0, false, super::super::sinks::TxKind::Read).returning(returns));
        let (mut cqs, mut cntrs) = (Slab::new(), Slab::new());
        let cntr = cntrs.insert(crate::state::cntr::CntrState::default());
        let b = super::super::sinks::Bindings { read_cntr: Some(cntr), ..Default::default() };
        let mut sinks = Sinks::new(&mut cqs, &mut cntrs, &b);
        for piece in pieces {
            answer_part(&mut tx_ops, slot, piece);
        }
        if let Some(data) = answer {
            answer_data(&mut rma, &mut tx_ops, slot, data);
        }
        answered(&mut rma, &mut tx_ops, slot, result, &mut sinks);
        assert!(tx_ops.is_empty(), "the operation finished");
        ((cntrs[cntr].value, cntrs[cntr].errors), buf)
    }

    #[test]
    fn reads_answered_with_their_bytes_complete_only_with_the_length_asked() {
        for want in [0usize, 1, 8, 32, 1000] {
            let bytes: Vec<u8> = (0..want).map(|i| i as u8 ^ 0x5A).collect();
            let (counted, buf) = answered_read(want, Some(&[&bytes]), Ok(()));
            assert_eq!((counted, &buf), ((1, 0), &bytes), "{want} B answered with {want} B");
            let (half, rest) = bytes.split_at(want / 2);
            let (counted, buf) = answered_read(want, Some(&[half, rest]), Ok(()));
            assert_eq!((counted, &buf), ((1, 0), &bytes), "{want} B answered in two parts");
        }
        for (want, answer) in [(8usize, 7usize), (8, 9), (32, 0), (1, 32)] {
            let (counted, buf) = answered_read(want, Some(&[&vec![7u8; answer]]), Ok(()));
            assert_eq!(counted, (0, 1), "{want} B read, {answer} B answer: an error");
            assert!(buf.iter().all(|&b| b == 0xC5), "{want} B read: buffer written by a {answer} B answer");
        }
        let (counted, buf) = answered_read(8, None, Ok(()));
        assert_eq!(counted, (0, 1), "answered without its bytes: an error");
        assert!(buf.iter().all(|&b| b == 0xC5));
        let (counted, buf) = answered_read(8, None, Err(EngineError::Refused(ffi::FI_EACCES)));
        assert_eq!(counted, (0, 1), "refused: an error");
        assert!(buf.iter().all(|&b| b == 0xC5));
    }

    /// An answer announced in pieces (`answer_part`): each piece's new bytes are copied once, as
    /// announced (a later copy of the same bytes is not taken again), the whole answer adds only
    /// its tail, and the read completes as if answered whole. A piece longer than the read, or
    /// one not past what was taken, copies nothing; the whole answer's length still decides.
    #[test]
    fn reads_answered_in_pieces_take_each_byte_once() {
        let want = 20000;
        let bytes: Vec<u8> = (0..want).map(|i| (i * 13) as u8).collect();
        // The target rewrote the first piece after announcing it: what was taken stays.
        let mut later = bytes.clone();
        later[..8192].fill(0xEE);
        let (first, second) = (&bytes[..8192], &bytes[..16384]);
        let pieces: &[&[&[u8]]] = &[&[first], &[&second[..5000], &second[5000..]], &[&bytes[..100]]];
        let (counted, buf) = answered_in_pieces(want, pieces, Some(&[&later[..12000], &later[12000..]]), Ok(()));
        assert_eq!(counted, (1, 0));
        assert!(buf == bytes, "pieces not taken once each");
        // Hostile pieces: longer than the read, or a length the final answer disowns.
        let too_long = vec![7u8; want + 1];
        let (counted, buf) = answered_in_pieces(want, &[&[&too_long]], Some(&[&bytes]), Ok(()));
        assert_eq!((counted, buf == bytes), ((1, 0), true), "a piece longer than the read was taken");
        let (counted, _) = answered_in_pieces(want, &[&[first]], Some(&[&bytes[..want - 1]]), Ok(()));
        assert_eq!(counted, (0, 1), "pieces then an answer of the wrong length: an error");
        // Pieces and no answer (the target refused, or died): an error.
        let (counted, _) = answered_in_pieces(want, &[&[first]], None, Err(EngineError::PeerDead));
        assert_eq!(counted, (0, 1));
    }

    #[test]
    fn reads_into_several_buffers_or_not_answered_keep_a_reply_record() {
        let mut rma = RmaState::default();
        let two: Ranges = [(0x1000usize, 4usize), (0x2000, 4)].into_iter().collect();
        let (op_id, returns, reply) = rma.returns(two, 8, true, false);
        assert!(op_id != 0 && returns == Returns::Reply(op_id) && reply.is_some());
        let one: Ranges = [(0x1000usize, 64usize)].into_iter().collect();
        let (op_id, returns, reply) = rma.returns(one, 64, false, false);
        assert!(op_id != 0 && returns == Returns::Reply(op_id) && reply.is_some());
    }
}
