//! Starting a one-sided operation on the locked domain: the endpoint, its peer and the
//! CQs and counters it reports to are taken from the state (`begin`), the request goes to the
//! engine, and `rma::launched` keeps or reports what was started. The RMA and atomic entry
//! points (`rma_ops`) call these; what the operations are and how their answers complete is
//! `rma`'s.

use crate::atomic::apply::Kind;
use crate::error::{FiError, FiResult};
use crate::state::cntr::CntrState;
use crate::state::cq::CqState;
use crate::state::ep::read_req::{Bytes, ReadReq, ReturnBy, SHORT_MAX, WRITE_BACK_RANGES_MAX};
use crate::state::ep::rma::segments::Segments;
use crate::state::ep::rma::*;
use crate::state::ep::sinks::{Sinks, TxKind};
use crate::state::ep::tx::TxOp;
use crate::state::ep::EpState;
use crate::state::DomainState;
use rshm_ffi as ffi;
use slab::Slab;
use smr_core::cmd::{RemoteIov, ANSWER_DATA_MAX};
use smr_core::endpoint::lone::Lone;
use smr_core::endpoint::measured::Via;
use smr_core::endpoint::{Endpoint, PeerId, SendOpts, SendStatus};
use smr_core::iov::{LocalIov, Ranges};
use smr_core::published::Published;
use smr_core::Error as EngineError;
use std::time::Instant;

/// The smallest read pushed by a target that only has a CPU to spare (its application asleep in
/// a blocking wait), not polling. OpenSHMEM's default build, 2 PEs: pushed, its gets of
/// 256 KiB-1 MiB ran 13.2-17.7 GB/s against 7.5-10.1 by the reader's CMA, but 2.2-4.9 against
/// 5.2-9.5 at 16-32 KiB.
const SPARE_PUSH_MIN: usize = 256 * 1024;

/// Reads sent alone up to this size always take the target's answer: below it our CMA read's
/// system call cannot beat the answered read (SOS gets alone on the Intel host of 2026-12-06:
/// 0.64-0.71 us at 256-512 B, where our read took 0.67-0.89 at 512 B). Above it, to 2 KiB, the
/// answer's copies cost more (1 KiB 0.95-1.11 us, 2 KiB 1.05-1.36) and our read took 0.85-1.13
/// at 2 KiB in the same rounds, so those reads have a chooser of their own
/// (`lone::SMALL_READ_TOP`), which settles where the host puts them.
const LONE_READ_MIN: usize = 512;

/// Writes sent alone up to this size may be ours to copy (`start_inline`). Above the one-trip
/// size a write to a free target is otherwise pushed through its SAR buffers, two copies in turn
/// for a write that fits one buffer: SOS puts alone, alternated on the Intel host of 2026-12-02,
/// took 5.1-6.1 us that way at 32 KiB against 3.5-3.6 by our CMA write (the C shm 3.7-5.5), and
/// 5.5-7.3 against 4.7-5.5 at 64 KiB; at 128 KiB the two ways tied (7.5-9.4 us), and from
/// 256 KiB, where SAR pipelines, it won (11.7-13.8 against 14.4-17).
const LONE_WRITE_MAX: usize = 64 * 1024;

/// Writes sent alone above this size, to an inject buffer's (4 KiB), may be ours to copy too,
/// learnt by a chooser of their own (`lone::SMALL_WRITE_TOP`): through the target they take one
/// of its inject buffers, two copies in turn. SOS puts alone of 4 KiB on the Intel host of
/// 2026-12-06, 4 alternated rounds: 1.19-1.27 us that way, 0.98-1.10 with the choice (the C shm
/// 1.74). At 2 KiB the target's way stays ahead (0.82-0.86 us against 0.93-0.97 when the chooser
/// may pick our copy), and a chooser from 1 KiB, which saw our copy timed faster there, made
/// them slower.
const LONE_WRITE_MIN: usize = 2048;

/// Start a one-sided operation on endpoint `id`.
pub fn start(st: &mut DomainState, id: usize, a: OneSided, op: Op) -> FiResult<()> {
    start_inline(st, id, a, op)
}

/// `start`, inlined into the caller: the RMA entry points take it (`rma_ops::call`), where
/// moving the operation into a frame of its own cost about 130 instructions per fi_write and
/// fi_read. The less frequent general atomic forms call `start`.
#[inline(always)]
pub fn start_inline(st: &mut DomainState, id: usize, a: OneSided, op: Op) -> FiResult<()> {
    start_way(st, id, a, op, false)
}

/// Start operation `op`, whose remote ranges are `segments` (fi_writemsg, fi_readmsg and the
/// atomic msg forms with several: `rma::segments`). The list goes first, in a command of its own
/// pushed at once (so that nothing of ours, staged or pushed, can pass it), then the operation,
/// marked, through the target: never by our own copy, which takes one registration.
#[cold]
pub fn start_segmented(st: &mut DomainState, id: usize, a: OneSided, segments: Segments, op: Op) -> FiResult<()> {
    let len = match &op {
        Op::Read { local } | Op::Write { local, .. } => local.iter().map(|p| p.1 as u64).sum(),
        Op::Atomic { desc, .. } => desc.bytes() as u64,
    };
    if segments.total() != Some(len) {
        return Err(FiError::INVAL);
    }
    // Admitted first: no list goes for an operation refused here.
    let Start { ep, peer, .. } = begin(st, id, &a)?;
    let engine = ep.engine.as_mut().expect("checked by admit");
    let (bytes, n) = segments.encode();
    let hdr = header(app(KIND_SEGMENTS, 0), 0, 0, 0, n);
    let opts =
        SendOpts { cookie: COOKIE_SEGMENTS, delivery_complete: false, more: false, pull: true, split_early: false };
    match engine.send_bytes(peer, hdr, &bytes[..n], opts) {
        Ok(_) => {}
        Err(EngineError::Again) => return Err(FiError::AGAIN),
        Err(e) => return Err(crate::state::ep::tx::refused("one-sided operation", a.dest, e)),
    }
    start_way(st, id, a, op, true)
}

/// `start_inline`, and `start_segmented`'s operation once its list is out (`segmented`).
#[inline(always)]
fn start_way(st: &mut DomainState, id: usize, a: OneSided, op: Op, segmented: bool) -> FiResult<()> {
    // The bytes a read or write moves (an atomic's are bounded by one inject buffer).
    let len: usize = match &op {
        Op::Read { local } | Op::Write { local, .. } => local.iter().map(|p| p.1).sum(),
        Op::Atomic { .. } => 0,
    };
    // Checked before any way is chosen: a write ours to copy would otherwise complete.
    if matches!(op, Op::Write { .. }) && a.flags & ffi::FI_INJECT as u64 != 0 && len > crate::getinfo::INJECT_SIZE {
        return Err(FiError::MSGSIZE);
    }
    let large = len >= large_min();
    // The operations that may go by our own CMA copy when sent alone (below).
    let lone_kind = match op {
        Op::Write { data: None, .. } if len > LONE_WRITE_MIN && len <= LONE_WRITE_MAX => Some(Lone::Write),
        Op::Read { .. } if len > LONE_READ_MIN && !large => Some(Lone::Read),
        _ => None,
    };
    // Whether nothing was started since the application last polled, for a large write that
    // may be alone: read before the pass below, which counts as a poll.
    let quiet_before_pass =
        (large && lone_kind.is_some()).then(|| st.eps.get(id).is_some_and(|e| e.rma.nothing_issued_since_poll()));
    if large {
        // Serve what peers asked of us before we start a large operation of our own: a peer
        // that reads us while we read it (fi_rma_bw) then finds us progressing and has its
        // reads answered into its buffers (below), not made by its own CMA call, and neither
        // waits for the other's whole burst of operations. Against the operation's copy, an
        // idle pass is nothing.
        crate::progress::endpoint(st, id);
    }
    let Start { ep, cqs, cntrs, peer, wanted } = begin(st, id, &a)?;
    // Nothing of ours is outstanding, so nothing of ours waits in the target's ring.
    let ring_clear = ep.tx_outstanding() == 0;
    // Whether our own copy, which completes in its call, keeps the order promised: a write only
    // with the ring clear, or it could land before an earlier operation the target has yet to
    // apply (a burst of overlapping writes, some pushed through SAR, would end with the wrong
    // bytes where the copy passed them); a read of up to `MAX_ORDER_SIZE` (FI_ORDER_RMA_RAW)
    // with the ring clear and never after an unacknowledged write. Larger reads are promised no
    // order. Every way of ours below asks this one question.
    let copy_keeps_order = match op {
        Op::Read { .. } if len > crate::getinfo::MAX_ORDER_SIZE => ring_clear || large,
        Op::Read { .. } => ring_clear && !ep.rma.sent_unacked,
        _ => ring_clear,
    };
    let quiet_since_poll = quiet_before_pass.unwrap_or_else(|| ep.rma.nothing_issued_since_poll());
    let engine = ep.engine.as_mut().expect("checked above");
    // The registration the target published under the key, if any: looked up once, at the first
    // way below that asks (`Endpoint::peer_mr`), and the copy of ours uses the same entry.
    let mut published: Option<Option<Published>> = None;
    // A segmented operation has none: it goes through the target.
    let mut peer_mr = |engine: &mut Endpoint| {
        *published.get_or_insert_with(|| if segmented { None } else { engine.peer_mr(peer, a.key) })
    };
    // A read's answer buffer (one-trip reads): owned by the engine once the send is called.
    let mut answer_buf = None;
    // A large read of up to `ANSWER_BUFS_MAX` SAR buffers from a target that calls progress,
    // free or busy with its own operations (fi_rma_bw, where both read each other), is answered
    // into buffers of ours as a one-trip read: at 32 KiB, 12-13 GB/s and 2.6-2.8 us against
    // 6.8-8.7 GB/s and 3.8 us pushed through SAR, and in fi_rma_bw 8-22 GB/s against 3.2-5 by
    // our CMA read (docs/perf/protocols.md); at 48-128 KiB, spanning buffers, 7.9-15.7 GB/s
    // against 4.5-6.8 (docs/perf/where-the-time-goes.md). A target that computes or sleeps
    // would keep us waiting.
    let read = large && matches!(op, Op::Read { .. });
    let answerable_read = read && len <= engine.answer_buf_max();
    // A larger read from such a target is pushed through our SAR buffers (below), both CPUs
    // copying at once: in fi_rma_bw at 192 KiB-1 MiB 19-24 GB/s against 12-15 by our CMA read
    // (docs/perf/one-sided.md, forty-second session). A target that computes or sleeps gets
    // our CMA read.
    let beyond_answers = read && !answerable_read;
    let progresses = read && engine.peer_progresses(peer);
    let answering_target = answerable_read && progresses;
    // From a target that progresses while busy with operations of its own, a read whose reply
    // the two processes can copy in halves (from half of `split_min`, at our request below it)
    // has that reply pushed, or is ours by CMA, as measured for such reads
    // (`Endpoint::choose_busy_read`): pushed, fi_rma_bw's two-way reads of 64-128 KiB ran
    // 1.2-1.6x faster; OpenSHMEM's two-way gets between separate buffers, half as fast.
    let busy = if answering_target
        && len >= engine.early_split_min()
        && peer_mr(engine).is_some()
        && engine.peer_busy_with_own(peer)
    {
        engine.choose_busy_read(len)
    } else {
        None
    };
    let busy_push = busy.filter(|c| c.via == Via::Sar);
    // Where the target also published the registration, our own CMA read is the other way, and
    // on some states of the host the faster (32 KiB in fi_rma_bw: 3.9 GB/s against 2.0 answered,
    // where answered reads run 8-15 GB/s in others): the faster one as measured
    // (`Endpoint::choose_read`).
    let choice = match busy {
        None if answering_target && peer_mr(engine).is_some() => engine.choose_read(len),
        busy => busy,
    };
    // Chosen for our CMA read, chosen pushed (a busy read, timed by its reply's split), or
    // chosen answered: then timed where the choice says so (one in eight of the way in use,
    // once both are learnt: `Choice::timed`), its request asking the target for its copy's time
    // (`AnswerBuf::timed`).
    let (by_cma, timed) = match choice {
        Some(c) if c.via == Via::Cma => (Some(c), None),
        Some(_) if busy.is_some() => (None, None),
        answered => (None, answered.filter(|c| c.timed())),
    };
    if answering_target && by_cma.is_none() && busy_push.is_none() {
        answer_buf = engine.reserve_answer_buf(len).ok();
    }
    // Other large data to or from a target that polls with nothing of its own to do goes
    // through SAR, both CPUs copying at once: it pushes a read's reply, and takes a write's
    // segments as they come. So does a read beyond the answer buffers from a target that polls
    // while busy with operations of its own. From any other target a large read is ours to
    // make, where the target published the registration (its CPU is busy, or not in the
    // provider at all), and a large write is pulled by the target with CMA in one step of its
    // progress. A target just found not progressing is not free either (its free polls are
    // polls): no second look, which could watch it for another microsecond.
    let still = answerable_read && !progresses;
    // A read of `SPARE_PUSH_MIN` or more from a target whose application sleeps in a blocking
    // wait while its progress thread serves (`Endpoint::peer_has_spare_cpu`) is pushed too: the
    // thread's wake-up is small beside the copy, which both CPUs then share. Asked last, only
    // of a read nothing else decided: it reads a line of the target's region.
    let spare_read = read && len >= SPARE_PUSH_MIN;
    let pushed = busy_push.is_some()
        || (large
            && answer_buf.is_none()
            && !still
            && by_cma.is_none()
            && (if beyond_answers { progresses } else { engine.peer_is_free(peer) }
                || spare_read && engine.peer_has_spare_cpu(peer)));
    // A read or write sent alone, which would go through the target (a write above
    // `LONE_WRITE_MIN`, up to `LONE_WRITE_MAX`; a read above `LONE_READ_MIN`, up to the one-trip
    // size), goes by our own CMA copy instead where that measured faster
    // (`smr_core::endpoint::lone`): alone, it pays the whole latency of the ordinary way. Not a
    // larger write to a free target, which the rule above pushes through SAR: alone and in turn
    // with CMA writes while the chooser learnt, SAR writes of 256 KiB took 61-132 us, where in a
    // row they take 10-13 (SOS puts, Intel host of 2026-12-01), so that the chooser kept CMA
    // writes at 14-17.
    // Alone: nothing outstanding, and nothing started since the application last polled.
    let lone = match lone_kind {
        Some(kind) if ring_clear && quiet_since_poll && !more(&a) && copy_keeps_order => {
            ep.rma.lone.teach(engine);
            peer_mr(engine).and_then(|_| engine.choose_lone(kind, len)).map(|c| (kind, c))
        }
        _ => None,
    };
    let lone_by_cma = lone.filter(|(_, c)| c.via == Via::Cma);
    // Up to the one-trip size, a read or write of those kinds that is not going by our copy (not
    // alone, or alone with the ordinary way chosen) still does, where the target published the
    // registration, as larger ones to a target that is not free do:
    // - to a target that does not progress (it computes or sleeps): the ordinary way would wait
    //   for it, our copy needs nothing of it;
    // - a write to a target busy with operations of its own, where writes of the size sent alone
    //   settled on our copy (the system call is cheap on this host). fi_rma_bw's two-way writes
    //   of 6-16 KiB, Intel host of 2026-12-02: 2.7-6.0 GB/s against 2.6-6.3 through the target's
    //   SAR buffers, where each side also copies the other's writes out (8 and 12 KiB: 2.9-5.2
    //   against 2.6-3.9; the C shm 2.5-6.6). Not to a target that serves only us: a stream of
    //   writes (`write_bw`) took 2.0-2.4 us a write of 8 KiB by our copy against 0.7-1.3 through
    //   SAR, both CPUs copying. Not a write that fits an inject buffer, which costs the stream
    //   far less that way than a system call: fi_rma_bw's two-way writes of 4 KiB, Intel host of
    //   2026-12-06, 3.6 GB/s with 1,374 of 2,010 by our copy, 6.2 through inject buffers.
    // The registration is looked up first: it is a line the target rarely writes, where its
    // progress counts are lines it writes at every call.
    let ours_anyway = lone_kind.is_some()
        && lone_by_cma.is_none()
        && !large
        && copy_keeps_order
        && peer_mr(engine).is_some()
        && (lone_kind == Some(Lone::Write)
            && len > crate::getinfo::INJECT_SIZE
            && engine.peer_busy_with_own(peer)
            && engine.lone_settled_on_cma(Lone::Write, len)
            || !engine.peer_progresses(peer));
    // The clock of a timed choice: a large read's (`by_cma`) or one alone's, either way (once
    // their chooser has learnt, one in a few: `Choice::timed`).
    // At most one of the two: a read alone is never large.
    let started = by_cma.or(lone.map(|(_, c)| c)).is_some_and(|c| c.timed()).then(Instant::now);
    // A large write not pushed and not ours (the ring not clear) is pulled by the target in its
    // turn.
    let large_ours = large && !pushed && answer_buf.is_none() && copy_keeps_order;
    if large_ours || lone_by_cma.is_some() || ours_anyway {
        if let Some((kind, flags)) = peer_mr(engine).and_then(|p| copy_published(engine, peer, &p, &a, &op)) {
            let ns = || started.map_or(0, |t| t.elapsed().as_nanos() as u64);
            match (lone_by_cma, by_cma) {
                (Some((lone_kind, c)), _) => engine.learn_lone(lone_kind, c, len, ns()),
                (None, Some(c)) if busy.is_some() => engine.learn_busy_read(c, len, ns()),
                (None, Some(c)) => engine.learn_read(c, len, ns()),
                (None, None) => {}
            }
            let tx = TxOp::new(a.ctx, flags, wanted, kind);
            ep.rma.issued += 1;
            done_at_once(&mut crate::state::ep::sinks::Sinks::new(cqs, cntrs, &ep.bindings), a.ctx, &tx);
            return Ok(());
        }
        if by_cma.is_some() {
            // The registration went away, or the copy failed: the target answers it after all,
            // untimed.
            answer_buf = engine.reserve_answer_buf(len).ok();
        }
    }
    let slot = ep.tx_ops.vacant_key();
    let (mut hdr, payload, tx, reply_to) = match op {
        Op::Write { local, data } => {
            let (hdr, tx) = write_request(&a, len, data, wanted);
            (hdr, Payload::App(local), tx, None)
        }
        Op::Read { local } => {
            let engine = ep.engine.as_mut().expect("checked above");
            // One round trip: the target answers with the bytes (up to ANSWER_DATA_MAX), places
            // them in a buffer of ours, named here, or (larger ones, where CMA works) writes
            // them straight into the caller's buffer. Otherwise (a target with time to spare,
            // no answer buffer free, too many ranges, no CMA) it sends a reply.
            if answer_buf.is_none() && len > ANSWER_DATA_MAX && len <= crate::params::config().read_one_trip_max {
                answer_buf = engine.reserve_answer_buf(len).ok();
            }
            let answered = len <= ANSWER_DATA_MAX || answer_buf.is_some();
            let write_back = !answered
                && !pushed
                && len > engine.params().inject_max
                && local.len() <= WRITE_BACK_RANGES_MAX
                && engine.cma_with(peer);
            let by = match answer_buf {
                Some(buf) if timed.is_some() => ReturnBy::AnswerBuf(buf.timed()),
                Some(buf) => ReturnBy::AnswerBuf(buf),
                None if pushed => ReturnBy::Pushed,
                None if write_back => ReturnBy::WriteBack(
                    local.iter().map(|&(a, n)| RemoteIov { addr: a as u64, len: n as u64 }).collect(),
                ),
                None => ReturnBy::Reply,
            };
            let (op_id, returns, reply) = ep.rma.returns(local, len, answered, write_back);
            let payload = ReadReq { op_id, len: len as u64, by }.encode();
            let hdr = header(app(KIND_READ_REQ, 0), a.key, a.addr, 0, payload.len());
            let tx = TxOp::new(a.ctx, (ffi::FI_RMA | ffi::FI_READ) as u64, wanted, TxKind::Read).returning(returns);
            (hdr, Payload::Own(payload), tx, reply)
        }
        Op::Atomic { desc, operand, compare, result } => {
            let (op_id, tx, reply) = atomic_tx(&mut ep.rma, desc, &a, wanted, result);
            let desc = desc.for_op(op_id);
            // The request: the op id if there is one, then the operands and compare values,
            // copied from the application's buffers into one array sized by the operation
            // (checked against their lengths by the entry point).
            let mut payload = Bytes::from_elem(0, desc.payload());
            let (id, values) = payload.split_at_mut(desc.id_bytes());
            id.copy_from_slice(&op_id.to_le_bytes()[..desc.id_bytes()]);
            // SAFETY: the application's operand and compare buffers (non-NULL, of their
            // lengths: checked by the entry point), read during this call only.
            let copied = unsafe {
                let n = crate::iov::gather(&operand, values);
                n + crate::iov::gather(&compare, &mut values[n..])
            };
            if copied != values.len() {
                return Err(FiError::INVAL);
            }
            let hdr = header(app(KIND_ATOMIC, 0), a.key, a.addr, desc.pack(), payload.len());
            (hdr, Payload::Own(payload), tx, reply)
        }
    };
    if segmented {
        hdr.app |= APP_SEGMENTED;
    }
    crate::debug!(EpData, "one-sided {:#x} to {} key {:#x} addr {:#x} len {}", hdr.app, a.dest, a.key, a.addr, hdr.len);
    let engine = ep.engine.as_mut().expect("checked above");
    let acked = acknowledged(ep.tx_op_flags, &a, &tx, &mut ep.rma, engine, peer);
    // A one-sided target may progress rarely: a large write is pulled with CMA where allowed,
    // unless the target has a CPU to spare (above).
    let cookie = cookie_of(&a, &tx, slot);
    let opts = SendOpts { cookie, delivery_complete: acked, more: more(&a), pull: !pushed, split_early: false };
    let sent = match (payload, answer_buf) {
        // SAFETY: the application's source buffer, which it leaves unchanged until the write
        // completes (the engine copies inject-sized ones before returning).
        (Payload::App(local), _) => unsafe { crate::state::ep::tx::engine_send(engine, peer, hdr, local, opts) },
        (Payload::Own(bytes), Some(buf)) => {
            engine.send_bytes_answered(peer, hdr, &bytes, opts, buf, timed.map(|c| (c, len)))
        }
        (Payload::Own(bytes), None) if bytes.len() <= engine.params().inject_max => {
            engine.send_bytes(peer, hdr, &bytes, opts)
        }
        (Payload::Own(bytes), None) => engine.send(peer, hdr, LocalIov::owned(bytes.into_vec()), opts),
    };
    if let (Some(c), Ok(_)) = (busy_push, &sent) {
        engine.expect_pushed_read(c, len);
    }
    let result = launched(ep, cqs, cntrs, &a, sent, acked, tx, reply_to, cookie);
    if let (Some((kind, c)), Some(t)) = (lone.filter(|(_, c)| c.via == Via::Sar && ep.tx_ops.contains(slot)), started) {
        ep.rma.lone.time(slot, kind, c, len, t);
    }
    result
}

/// The header and transmit record of a write of `len` bytes, with remote CQ data `data`.
#[inline(always)]
fn write_request(a: &OneSided, len: usize, data: Option<u64>, wanted: bool) -> (smr_core::cmd::MsgHeader, TxOp) {
    let low = if data.is_some() { crate::state::ep::sinks::APP_DATA } else { 0 };
    let hdr = header(app(KIND_WRITE, low), a.key, a.addr, data.unwrap_or(0), len);
    (hdr, TxOp::new(a.ctx, (ffi::FI_RMA | ffi::FI_WRITE) as u64, wanted, TxKind::Write))
}

/// Start a write of `len` bytes from the caller's buffer at `buf` (checked by the entry point:
/// non-NULL when `len > 0`), with remote CQ data `data`. The short way of the usual small write
/// (fi_write, fi_inject_write, their data forms and a one-buffer fi_writemsg; OpenSHMEM's put):
/// at most an inject buffer, which the engine copies before it returns, sent without the iov
/// list, the read and large-transfer decisions and the request tuple that `start_inline` builds
/// and moves. Larger writes, and those without CQ data above `LONE_WRITE_MIN` (which may be
/// alone: ours to copy), go as any write does.
pub fn start_write(
    st: &mut DomainState,
    id: usize,
    a: OneSided,
    buf: usize,
    len: usize,
    data: Option<u64>,
) -> FiResult<()> {
    let general = |st: &mut DomainState, a: OneSided| {
        start_inline(st, id, a, Op::Write { local: crate::iov::one_range(buf, len), data })
    };
    if len > crate::getinfo::INJECT_SIZE || (data.is_none() && len > LONE_WRITE_MIN) {
        return general(st, a);
    }
    let Start { ep, cqs, cntrs, peer, wanted } = begin(st, id, &a)?;
    let engine = ep.engine.as_mut().expect("checked by admit");
    if len > engine.params().inject_max {
        return general(st, a);
    }
    let slot = ep.tx_ops.vacant_key();
    let (hdr, tx) = write_request(&a, len, data, wanted);
    crate::debug!(EpData, "one-sided {:#x} to {} key {:#x} addr {:#x} len {}", hdr.app, a.dest, a.key, a.addr, len);
    // SAFETY: the application's buffer of `len` bytes (checked by the entry point), read during
    // this call only: the engine copies a message of at most `inject_max` bytes before it returns.
    let bytes = unsafe { crate::iov::bytes(buf, len) };
    send_small(Start { ep, cqs, cntrs, peer, wanted }, slot, &a, hdr, bytes, tx, None)
}

/// Send a request of at most `inject_max` bytes from `bytes` (copied before this returns) for
/// operation `a` with transmit record `tx` (and reply buffer `reply`) in tx slot `slot`,
/// acknowledged as its flags ask: the tail of the short ways (`start_write`, `start_atomic`).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn send_small(
    Start { ep, cqs, cntrs, peer, .. }: Start<'_>,
    slot: usize,
    a: &OneSided,
    hdr: smr_core::cmd::MsgHeader,
    bytes: &[u8],
    tx: TxOp,
    reply: Option<Reply>,
) -> FiResult<()> {
    let engine = ep.engine.as_mut().expect("checked by admit");
    let acked = acknowledged(ep.tx_op_flags, a, &tx, &mut ep.rma, engine, peer);
    let cookie = cookie_of(a, &tx, slot);
    let opts = SendOpts { cookie, delivery_complete: acked, more: more(a), pull: true, split_early: false };
    let sent = engine.send_bytes(peer, hdr, bytes, opts);
    launched(ep, cqs, cntrs, a, sent, acked, tx, reply, cookie)
}

/// Start a read of `len` bytes into the caller's buffer at `buf` (checked by the entry point:
/// non-NULL when `len > 0`). The short way of the usual read (fi_read, SOS's get): one the target
/// answers in one round trip, with the bytes in the answer (up to `ANSWER_DATA_MAX`) or in an
/// answer buffer of ours, takes no iov list, request builder or reply record; the transmit record
/// says where the bytes go. A larger read, or one for which no answer buffer is free, goes as
/// any read does (`start_inline`).
pub fn start_read(st: &mut DomainState, id: usize, a: OneSided, buf: usize, len: usize) -> FiResult<()> {
    let general = |st: &mut DomainState, a: OneSided| {
        start_inline(st, id, a, Op::Read { local: crate::iov::one_range(buf, len) })
    };
    // Above `LONE_READ_MIN` a read sent alone may be ours to make (`start_inline`).
    if len > LONE_READ_MIN || (len > ANSWER_DATA_MAX && len > crate::params::config().read_one_trip_max) {
        return general(st, a);
    }
    let Start { ep, cqs, cntrs, peer, wanted } = begin(st, id, &a)?;
    let slot = ep.tx_ops.vacant_key();
    let engine = ep.engine.as_mut().expect("checked by admit");
    let answer_buf = if len > ANSWER_DATA_MAX {
        match engine.reserve_answer_buf(len) {
            Ok(b) => Some(b),
            Err(_) => return general(st, a),
        }
    } else {
        None
    };
    let mut req = [0u8; SHORT_MAX];
    let n = ReadReq::encode_answered(len as u64, answer_buf, &mut req);
    let hdr = header(app(KIND_READ_REQ, 0), a.key, a.addr, 0, n);
    let (_, returns, _) = answered_into(buf, len);
    let tx = TxOp::new(a.ctx, (ffi::FI_RMA | ffi::FI_READ) as u64, wanted, TxKind::Read).returning(returns);
    // A read always completes on its answer (`acknowledged`).
    let cookie = slot as u64;
    let opts = SendOpts { cookie, delivery_complete: true, more: more(&a), pull: true, split_early: false };
    let sent = match answer_buf {
        Some(b) => engine.send_bytes_answered(peer, hdr, &req[..n], opts, b, None),
        None => engine.send_bytes(peer, hdr, &req[..n], opts),
    };
    launched(ep, cqs, cntrs, &a, sent, true, tx, None, cookie)
}

/// Start a one-sided atomic whose request (`req`: 8 bytes left for an op id, then operands and
/// compare values; 8 + `desc.payload()` long) the caller built from one contiguous buffer each: the
/// short way of the usual small atomic (`rma_ops::call_contiguous`), with no iov lists to build,
/// move and walk. `result` receives the old values of a fetching or compare atomic.
pub fn start_atomic(
    st: &mut DomainState,
    id: usize,
    a: OneSided,
    desc: Desc,
    req: &mut [u8],
    result: usize,
) -> FiResult<()> {
    let Start { ep, cqs, cntrs, peer, wanted } = begin(st, id, &a)?;
    let slot = ep.tx_ops.vacant_key();
    let want = desc.bytes();
    let (op_id, tx, reply) = if desc.kind != Kind::Write && want <= ANSWER_DATA_MAX {
        // Answered with the old values, straight into `result` (`RmaState::returns`, without
        // the range list it would take).
        let (op_id, returns, reply) = answered_into(result, want);
        (op_id, fetch_tx(&a, wanted).returning(returns), reply)
    } else {
        let mut local = Ranges::new();
        if desc.kind != Kind::Write {
            local.push((result, want));
        }
        atomic_tx(&mut ep.rma, desc, &a, wanted, local)
    };
    // `req` keeps 8 bytes in front for an op id; most requests carry none (`Desc::with_op_id`).
    let desc = desc.for_op(op_id);
    let req = if desc.with_op_id {
        req.get_mut(..8).ok_or(FiError::INVAL)?.copy_from_slice(&op_id.to_le_bytes());
        req
    } else {
        req.get_mut(8..).ok_or(FiError::INVAL)?
    };
    let hdr = header(app(KIND_ATOMIC, 0), a.key, a.addr, desc.pack(), req.len());
    send_small(Start { ep, cqs, cntrs, peer, wanted }, slot, &a, hdr, req, tx, reply)
}

/// What starting a one-sided operation on an endpoint needs, checked (`admit`): the endpoint,
/// the completion queues and counters it reports to, the target peer, and whether a success
/// makes a CQ entry (`wanted`).
struct Start<'a> {
    ep: &'a mut EpState,
    cqs: &'a mut Slab<CqState>,
    cntrs: &'a mut Slab<CntrState>,
    peer: PeerId,
    wanted: bool,
}

/// `Start` for operation `a` on endpoint `id`.
#[inline(always)]
fn begin<'a>(st: &'a mut DomainState, id: usize, a: &OneSided) -> FiResult<Start<'a>> {
    let DomainState { eps, avs, cqs, cntrs, .. } = st;
    let ep = eps.get_mut(id).ok_or(FiError::INVAL)?;
    admit(ep, a)?;
    let peer = ep.peer_for(avs, a.dest)?;
    let wanted = wanted(ep, a);
    Ok(Start { ep, cqs, cntrs, peer, wanted })
}

/// Whether endpoint `ep` can start a one-sided operation now.
#[inline(always)]
fn admit(ep: &EpState, a: &OneSided) -> FiResult<()> {
    if ep.engine.is_none() {
        return Err(FiError::NOTCONN);
    }
    if ep.tx_outstanding() >= ep.tx_size {
        return Err(FiError::AGAIN);
    }
    // A fenced operation starts once everything before it has completed; until then the caller
    // progresses and retries.
    if a.flags & ffi::FI_FENCE as u64 != 0 && ep.tx_outstanding() > 0 {
        return Err(FiError::AGAIN);
    }
    Ok(())
}

/// Whether the operation's successful completion makes a CQ entry.
#[inline(always)]
fn wanted(ep: &EpState, a: &OneSided) -> bool {
    !a.inject_call && (!ep.bindings.tx_selective || a.flags & ffi::FI_COMPLETION as u64 != 0)
}

/// After the engine took (or refused) a one-sided operation's request: report one that is
/// complete already, or keep its transmit record (and reply buffer) in tx slot `slot`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn launched(
    ep: &mut EpState,
    cqs: &mut Slab<CqState>,
    cntrs: &mut Slab<CntrState>,
    a: &OneSided,
    sent: smr_core::Result<SendStatus>,
    acked: bool,
    tx: TxOp,
    reply: Option<Reply>,
    cookie: u64,
) -> FiResult<()> {
    match sent {
        // Queued and complete (never so for an acknowledged send): report it now, unless
        // nothing would see it (an inject with no counter).
        Ok(SendStatus::Done) if !acked => {
            ep.rma.issued += 1;
            done_at_once(&mut Sinks::new(cqs, cntrs, &ep.bindings), a.ctx, &tx);
            return Ok(());
        }
        // The answer (or, for a batched one, its push into the ring) completes it.
        Ok(SendStatus::Pending | SendStatus::Done) => {}
        Err(EngineError::Again) => return Err(FiError::AGAIN),
        Err(e) => return Err(crate::state::ep::tx::refused("one-sided operation", a.dest, e)),
    }
    ep.rma.issued += 1;
    if cookie & COOKIE_UNTRACKED != 0 {
        ep.rma.untracked += 1;
        return Ok(());
    }
    let slot = cookie as usize;
    if let Some(reply) = reply {
        ep.rma.await_reply(slot, reply);
    }
    let taken = ep.tx_ops.insert(tx);
    debug_assert_eq!(taken, slot);
    Ok(())
}
