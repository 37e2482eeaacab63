//! The sending side: protocol choice, SAR segmentation, and completions from responses.
//!
//! | size                         | protocol | completes                                   |
//! |------------------------------|----------|---------------------------------------------|
//! | <= inline_max (*)            | inline   | at once (or on the receiver's ack if asked) |
//! | <= inject_max                | inject   | at once (or on the receiver's ack if asked) |
//! | larger, CMA on both sides    | iov      | when the receiver acks its CMA read         |
//! | larger otherwise             | SAR      | when the receiver acks the last segment     |
//!
//! (*) `pingpong_inline_max` for a message sent alone (`Endpoint::inline_limit`).

use super::answer::AnswerBuf;
use super::measured::{Choice, Overlap, Via};
use super::{Endpoint, Handler, PeerId, SendOpts, SendStatus};
use crate::cmd::{
    compact_proto, op, proto, resp, CmdEntry, MsgHeader, RespEntry, SarSeg, Status, IOV_MAX, SAR_FIRST_SEGMENT,
};
use crate::error::{Error, Result};
use crate::iov::LocalIov;
use crate::layout::PeerSlot;
use crate::region::Region;
use crate::ring::Pop;

/// How far past the slot it is about to take a streaming sender fetches a slot: two, far
/// enough ahead that no receiver polls that slot yet (fetching the slot it polls pulls the line
/// from under it: +12 ns a ping-pong when tried), near enough to be in time. Measured: 2 and 3
/// alike, 8 too late to help.
const STREAM_AHEAD: u64 = 2;

/// Cache lines of the slot a streaming sender fetches ahead for an inline message of `len`
/// bytes: the stamp's line (8 B stream +10-16%), and only that up to eight lines (256 B +6%),
/// where fetching every line took from the receiver's copy; none above, where the copy streams.
/// (Both lines of a two-line entry were fetched until the twenty-seventh session, when
/// fetching the first only measured 8% faster at 64 B: 5.8-6.2 against 5.3-6.1 Mmsg/s, 10
/// alternated runs; the eleventh had measured the opposite, +18% for both lines.)
fn stream_lines(len: usize) -> core::ops::Range<usize> {
    match crate::ring::slot_lines::<CmdEntry>(crate::cmd::HEADER_BYTES + len) {
        lines @ 0..=1 => 0..lines,
        2..=8 => 0..1,
        _ => 0..0,
    }
}

/// The cache lines of the next slot that a sender not streaming (a ping-pong) fetches writable
/// right after pushing an inline message of `len` bytes, while it waits for the reply: all but
/// the stamp's line, which the receiver polls (fetching it pulls the line from under the poll),
/// and only for a message of more than twelve lines (`NEXT_LINES_FROM`). The next message is
/// usually as long, and its copy into the slot then finds the lines in this cache instead of
/// waiting for them to come from the receiver, which read them a lap ago. Measured,
/// profile-guided builds alternated: 1 KiB one-way 0.62 -> 0.52-0.55 us with the host's two CPUs
/// placed apart (a cache-line handoff of 0.2 us), unchanged with them close (0.15 us); 768 B
/// -3% apart, +3% close; 512 B lost 2-3% either way, so shorter messages do not fetch.
#[inline(never)]
fn fetch_next_lines(region: &Region, len: usize) {
    let lines = crate::ring::slot_lines::<CmdEntry>(crate::cmd::HEADER_BYTES + len);
    region.cmd_ring().prefetch_for_claim(0, 1..lines);
}

/// The largest message sent alone (`Params::pingpong_inline_max`) that goes inline by default;
/// longer ones go through an inject buffer. `rshm-engine-pingpong` on the Intel host, us one way,
/// inline / through an inject buffer, builds alternated:
///
/// | host state (handoff) | 128 B | 256 B | 384 B | 512 B | 1 KiB |
/// |---|---:|---:|---:|---:|---:|
/// | CPUs apart (0.06-0.09 us) | 0.35-0.39 / 0.31-0.35 | 0.40-0.42 / 0.34-0.38 | 0.43-0.48 / 0.39-0.40 | 0.50-0.51 / 0.38-0.44 | 0.65-0.67 / 0.39-0.45 |
/// | CPUs close (0.015 us) | 0.108 / 0.126 | 0.113 / 0.137 | | 0.13 / 0.13 | 0.16 / 0.145 |
///
/// Up to 256 B an inline message costs a little more where the CPUs are apart and less where
/// they are close; above it, an inject buffer wins more the longer the message, and loses
/// nothing where they are close. A stream keeps its messages inline: the inject buffers' turnover
/// halved the rate of 256 B-1 KiB streams.
pub(crate) const PINGPONG_INLINE_MAX: usize = 256;

/// The shortest inline message whose slot spans more than twelve lines (`fetch_next_lines`).
const NEXT_LINES_FROM: usize = 12 * 64 + 1 - crate::cmd::HEADER_BYTES - 8;

/// Where a small message's bytes come from.
#[derive(Clone, Copy)]
enum Small<'a> {
    Iov(&'a LocalIov),
    Bytes(&'a [u8]),
}

impl Small<'_> {
    fn copy_to(self, dst: &mut [u8]) {
        match self {
            Small::Iov(iov) => _ = iov.read_at(0, dst),
            Small::Bytes(b) => dst.copy_from_slice(&b[..dst.len()]),
        }
    }

    /// # Safety
    /// `dst..dst+len` must be valid for writes, and `len` at most the source's length.
    unsafe fn copy_to_raw(self, dst: *mut u8, len: usize) {
        match self {
            // SAFETY: per this function's contract.
            Small::Iov(iov) => _ = unsafe { iov.read_to_raw(0, dst, len) },
            // SAFETY: per this function's contract; `b` holds at least `len` bytes.
            Small::Bytes(b) => unsafe { crate::copy::copy_bytes(b.as_ptr(), dst, len) },
        }
    }
}

/// A message whose payload travels in its command.
struct InlineMsg<'a> {
    src_slot: u32,
    msg_id: u64,
    hdr: &'a MsgHeader,
    ack: bool,
}

impl InlineMsg<'_> {
    /// The compact protocol the command goes by, if any (`cmd::compact_proto`: short, and no
    /// `aux` and no answer wanted, or 9 to 16 bytes with no CQ data). From 9 to 32 bytes (24 with
    /// CQ data, 16 with `aux` or an answer wanted: an RMA write's) it is then one cache line for
    /// the receiver to fetch instead of two in a row.
    #[inline(always)]
    fn compact(&self) -> Option<u8> {
        compact_proto(self.hdr, self.ack)
    }

    /// The command, with its payload filled by `fill`, in `e` (a ring slot or a staged entry).
    #[inline(always)]
    fn write(&self, e: &mut CmdEntry, fill: impl FnOnce(&mut [u8])) {
        if let Some(proto) = self.compact() {
            fill(e.set_compact(proto, self.src_slot, self.msg_id, self.ack, self.hdr));
        } else {
            self.write_inline(e, fill);
        }
    }

    /// The payload first, the header (in the line of the stamp the receiver polls) last, right
    /// before the publish: the receiver's polls take that line back while the payload's lines
    /// are written, and written first it had to come back once more for the publish.
    /// `rshm-engine-pingpong` on the Intel host with its CPUs apart, us one way, alternated:
    /// 256 B 0.48-0.50 -> 0.40-0.43, 1 KiB 0.73-0.78 -> 0.67-0.72. Out of line: inlined, the
    /// compact path beside it lost 0.08 us at 8 B (0.21-0.26 -> 0.30-0.36), in three rounds of
    /// three.
    #[inline(never)]
    fn write_inline(&self, e: &mut CmdEntry, fill: impl FnOnce(&mut [u8])) {
        fill(&mut e.payload[..self.hdr.len as usize]);
        e.set_message(self.src_slot, self.msg_id, self.hdr, self.ack);
        e.proto = proto::INLINE;
    }

    /// Into the receiver's ring, written straight into the claimed slot (no command built aside
    /// and copied); a `streaming` sender first fetches the slots it is about to claim, another
    /// fetches the next slot's lines afterwards (`fetch_next_lines`).
    #[inline(always)]
    fn push(&self, region: &Region, streaming: bool, fill: impl FnOnce(&mut [u8])) -> Result<()> {
        let len = self.hdr.len as usize;
        if streaming {
            region.cmd_ring().prefetch_for_claim(STREAM_AHEAD, stream_lines(len));
        }
        let pushed = super::peers::push_cmd_with(region, self.src_slot, |e| self.write(e, fill));
        if !streaming && len >= NEXT_LINES_FROM {
            fetch_next_lines(region, len);
        }
        pushed
    }
}

/// A message whose payload travels in one of the receiver's inject buffers.
struct InjectMsg<'a> {
    src_slot: u32,
    msg_id: u64,
    hdr: &'a MsgHeader,
    ack: bool,
    /// Our incarnation, which tags the spare buffer we keep in the receiver's pool (`spare`).
    incarnation: u64,
}

impl InjectMsg<'_> {
    /// Take one of the receiver's inject buffers and copy the payload into it; its index. Through
    /// our `entry` of the receiver's peer table: the spare we hold, or a buffer recorded as in
    /// flight (`spare`).
    #[inline(always)]
    fn fill(&self, region: &Region, entry: &PeerSlot, src: Small<'_>) -> Result<u32> {
        use super::spare::Pool;
        let len = self.hdr.len;
        // ENOSPC when the receiver's pool finds no room in /dev/shm (`Region::map_inject_pool`):
        // the send fails with it.
        region.map_inject_pool()?;
        let us = self.holder(entry);
        let index = super::spare::take(region, us, Pool::Inject, self.msg_id).ok_or(Error::Again)?;
        let dst = match region.geometry().inject_offset(index).and_then(|off| region.mapping().bytes_ptr(off, len)) {
            Ok(dst) => dst,
            Err(e) => {
                super::spare::done(region, us, Pool::Inject, index, false, None);
                return Err(e);
            }
        };
        // SAFETY: `dst` is `len` bytes inside the peer's mapping (bounds-checked above), and
        // `len` is the source's length (the header's, which the callers checked).
        unsafe { src.copy_to_raw(dst, len as usize) };
        Ok(index)
    }

    /// The command naming inject buffer `index`, in `e` (a ring slot or a staged entry).
    #[inline(always)]
    fn write(&self, e: &mut CmdEntry, index: u32) {
        e.set_message(self.src_slot, self.msg_id, self.hdr, self.ack);
        e.set_inject(index);
    }

    /// Filled and pushed into the receiver's ring; the buffer goes back if the ring is full.
    /// Once it is out, the buffer for the next message is taken while the receiver copies this
    /// one (`spare`).
    #[inline(always)]
    fn push(&self, region: &Region, src: Small<'_>) -> Result<()> {
        let entry = region.peer_slots().get(self.src_slot as usize).ok_or(Error::Again)?;
        let index = self.fill(region, entry, src)?;
        let pushed = super::peers::push_cmd_with(region, self.src_slot, |e| self.write(e, index));
        super::spare::done(
            region,
            self.holder(entry),
            super::spare::Pool::Inject,
            index,
            pushed.is_ok(),
            Some(self.hdr.len),
        );
        pushed
    }

    /// Us, as the receiver's pools know us through `entry`.
    #[inline(always)]
    fn holder<'e>(&self, entry: &'e PeerSlot) -> super::spare::Holder<'e> {
        super::spare::Holder { entry, slot: self.src_slot, incarnation: self.incarnation }
    }
}

/// A send waiting for the receiver.
pub(super) struct PendingSend {
    pub peer: PeerId,
    pub cookie: u64,
    pub hdr: MsgHeader,
    pub buf: LocalIov,
    /// Next byte to put in a SAR segment, while segments remain.
    pub sar_next: Option<u64>,
    /// After a CMA refusal every segment is a continuation of the already matched message.
    pub sar_continuation: bool,
    /// The buffer of ours its answer goes into (`answer.rs`): freed when the send ends.
    pub answer: Option<AnswerBuf>,
    /// Its protocol was chosen by measurement: the receiver's time in the answer teaches the
    /// chooser (`measured.rs`).
    pub measured: Option<Choice>,
    /// Nanoseconds we spent copying its SAR segments in (measured sends only): a SAR message
    /// costs the chooser the larger of this and its receiver's time, or their sum (`overlap`).
    pub copy_ns: u64,
    /// What its two sides' copies overlap, for a timed SAR message (`measured::sar_time`).
    pub overlap: Overlap,
}

impl PendingSend {
    /// A SAR message whose first segment, the one its receiver matches, is not out yet.
    fn unstarted(&self) -> bool {
        self.sar_next == Some(0) && !self.sar_continuation
    }
}

/// An acknowledged small send: in the receiver's ring whole, waiting for its answer. Nothing of
/// it is sent again, so no buffer or header is kept.
#[derive(Clone, Copy)]
pub(super) struct AckedSend {
    pub peer: PeerId,
    pub cookie: u64,
    /// The buffer of ours its answer goes into (`answer.rs`): freed when the send ends.
    pub answer: Option<AnswerBuf>,
}

impl Endpoint {
    /// Send `buf` with header `hdr` to `peer`.
    ///
    /// `Err(Error::Again)` means nothing was sent: run `progress` and retry.
    pub fn send(&mut self, peer: PeerId, hdr: MsgHeader, buf: LocalIov, opts: SendOpts) -> Result<SendStatus> {
        if buf.len() as u64 != hdr.len {
            return Err(Error::Invalid("header length differs from the buffer length"));
        }
        self.within_max_msg_size(hdr.len)?;
        let msg_id = self.new_msg_id();
        match self.start_send(peer, msg_id, hdr, buf, opts) {
            Err(Error::Again) => Err(self.check_full_peer(peer)),
            other => other,
        }
    }

    /// `Invalid` for a message longer than `max_msg_size`, which no path sends.
    #[inline(always)]
    fn within_max_msg_size(&self, len: u64) -> Result<()> {
        if len > self.params.max_msg_size {
            return Err(Error::Invalid("message longer than max_msg_size"));
        }
        Ok(())
    }

    /// Give the pending send with `cookie` a new buffer holding the same bytes: the segments not
    /// yet sent are taken from it. For a sender whose buffer is about to become invalid (a
    /// registration closed under a reply still going out through SAR). False when no send with
    /// that cookie is pending, or the new buffer's length differs (nothing changed then).
    pub fn rebuffer_pending(&mut self, cookie: u64, buf: LocalIov) -> bool {
        match self.pending.values_mut().find(|s| s.cookie == cookie) {
            Some(send) if send.buf.len() == buf.len() => {
                send.buf = buf;
                true
            }
            _ => false,
        }
    }

    /// Send a message of at most `inject_max` bytes from one contiguous buffer, which is copied
    /// before this returns: the small-message path without an iov to walk. Same results as
    /// `send`; longer messages are refused (`Error::Invalid`), not sent another way. A send that
    /// is not batched takes the express path where it can (`send_express_with`): a plain one is done once
    /// it is in the ring, an acknowledged one waits for its answer, as from the general path.
    /// Forced inline, as `send_small_bytes`: the header and payload were passed down one frame
    /// more (fi_tsend of 4 KiB: 45 instructions).
    #[inline(always)]
    pub fn send_bytes(&mut self, peer: PeerId, hdr: MsgHeader, bytes: &[u8], opts: SendOpts) -> Result<SendStatus> {
        self.send_small_bytes(peer, hdr, bytes, opts, None)
    }

    /// The express path of `send_bytes` for the commonest send: a message of at most
    /// `inject_max` bytes (inline, or in one of the receiver's inject buffers) that wants no
    /// answer and is not batched (FI_MORE), to a connected peer, with nothing staged or queued
    /// ahead of it. True when it is in the peer's ring. False, with nothing sent, when any of
    /// that does not hold or the ring or the inject pool is full: `send_bytes` then sends it or
    /// says why not. It skips the general path's options and its completion bookkeeping.
    #[inline(always)]
    pub fn send_express(&mut self, peer: PeerId, hdr: &MsgHeader, bytes: &[u8]) -> bool {
        self.send_express_with(peer, hdr, bytes, false)
    }

    /// `send_express`, for a message that may ask for an answer too (`ack`). It goes with the id
    /// `next_msg_id` held before the call, for the caller's bookkeeping (`after_small`).
    #[inline(always)]
    fn send_express_with(&mut self, peer: PeerId, hdr: &MsgHeader, bytes: &[u8], ack: bool) -> bool {
        if bytes.len() > self.inline_limit(false) {
            return self.send_express_inject(peer, hdr, bytes, ack);
        }
        let pushed = self.express_push(peer, hdr, bytes.len(), |region, src_slot, msg_id, streaming| {
            InlineMsg { src_slot, msg_id, hdr, ack }.push(region, streaming, |p| p.copy_from_slice(bytes))
        });
        self.stats.sent_inline += u64::from(pushed);
        pushed
    }

    /// `send_express_with` for a message above the inline size, through one of the receiver's inject
    /// buffers. Out of line: the inline kind's path stays as short as without it.
    #[inline(never)]
    fn send_express_inject(&mut self, peer: PeerId, hdr: &MsgHeader, bytes: &[u8], ack: bool) -> bool {
        if bytes.len() > self.params.inject_max {
            return false;
        }
        let incarnation = self.region.incarnation();
        let pushed = self.express_push(peer, hdr, bytes.len(), |region, src_slot, msg_id, _| {
            InjectMsg { src_slot, msg_id, hdr, ack, incarnation }.push(region, Small::Bytes(bytes))
        });
        self.stats.sent_inject += u64::from(pushed);
        pushed
    }

    /// `send_express_with`'s checks, and its bookkeeping once `push` put the message of `len` bytes in the
    /// ready peer's ring (given the peer's region, our slot in its table, the message's id, which
    /// is `next_msg_id`, and whether we are streaming).
    #[inline(always)]
    fn express_push(
        &mut self,
        peer: PeerId,
        hdr: &MsgHeader,
        len: usize,
        push: impl FnOnce(&Region, u32, u64, bool) -> Result<()>,
    ) -> bool {
        if len as u64 != hdr.len
            || len as u64 > self.params.max_msg_size
            || !self.staged.is_empty()
            || !self.sar_tx.is_empty()
        {
            return false;
        }
        let (msg_id, streaming) = (self.next_msg_id, self.sent_since_poll > 0);
        let Some(link) = self.ready_link(peer) else { return false };
        if push(&link.region, link.slot, msg_id, streaming).is_err() {
            return false;
        }
        link.used = true;
        self.next_msg_id += 1;
        self.sent_since_poll = self.sent_since_poll.saturating_add(1);
        true
    }

    /// `send_bytes`, with the answer buffer an acknowledged send keeps until it ends (the
    /// caller frees it if this fails). Forced inline into its two callers: with the provider's
    /// own wrappers inlined as well, a small send is about 50 instructions shorter.
    #[inline(always)]
    pub(super) fn send_small_bytes(
        &mut self,
        peer: PeerId,
        hdr: MsgHeader,
        bytes: &[u8],
        opts: SendOpts,
        answer: Option<AnswerBuf>,
    ) -> Result<SendStatus> {
        if bytes.len() as u64 != hdr.len || bytes.len() > self.params.inject_max {
            return Err(Error::Invalid("send_bytes takes one inject-sized buffer of the header's length"));
        }
        let opts = self.more_if_inline(opts, bytes.len());
        let msg_id = self.next_msg_id;
        if !opts.more && self.send_express_with(peer, &hdr, bytes, opts.delivery_complete) {
            return Ok(self.after_small(peer, msg_id, opts, answer));
        }
        // Here, not above: the express path declines such a message itself.
        self.within_max_msg_size(hdr.len)?;
        let msg_id = self.new_msg_id();
        match self.push_small(peer, msg_id, &hdr, opts, Small::Bytes(bytes)) {
            Err(Error::Again) => Err(self.check_full_peer(peer)),
            Err(e) => Err(e),
            Ok(()) => Ok(self.after_small(peer, msg_id, opts, answer)),
        }
    }

    fn start_send(
        &mut self,
        peer: PeerId,
        msg_id: u64,
        hdr: MsgHeader,
        buf: LocalIov,
        opts: SendOpts,
    ) -> Result<SendStatus> {
        if buf.len() <= self.params.inject_max {
            let opts = self.more_if_inline(opts, buf.len());
            self.push_small(peer, msg_id, &hdr, opts, Small::Iov(&buf))?;
            return Ok(self.after_small(peer, msg_id, opts, None));
        }
        if !self.flush_staged_before(peer) {
            return Err(Error::Again);
        }
        let (cma_ok, cma_min) = (self.cma_ok, self.params.cma_min);
        let link = self.link(peer)?;
        link.used = true;
        let link_cma = link.cma;
        // A message that fits the first SAR segment (of the receiver's buffers) asks its
        // receiver for one step of progress either way (copy one segment out, or make one CMA
        // read), so `pull` leaves it to SAR, which spares both sides the system call.
        let one_segment = buf.len() as u64 <= segment_len(0, link.region.geometry().counts.sar_size);
        // Where both ways are open, the faster one as measured, if asked: one segment too, whose
        // two copies through a SAR buffer cost twice one CMA read when the host is in its slow
        // state (cache lines crossing between the CPUs at 0.16 us; docs/perf/protocols.md).
        let measurable = self.params.measure_protocol
            && cma_ok
            && link_cma
            && !opts.pull
            && buf.len() as u64 > super::measured::MEASURED_ABOVE;
        // A SAR message to this peer still waiting for its first segment's buffer is matched
        // when that segment arrives: a CMA command pushed now would be matched before it. (One
        // that has started may still have segments to push: a CMA command may go in before them.
        // Matching is in order; a CMA write to bytes its last segments write is beyond the 4 KiB
        // that RMA ordering promises. Waiting for the last segment too cost 1 MiB streams 5-23%
        // while the chooser tried SAR.)
        let behind_sar = self.sar_unstarted(peer);
        // Then a message the chooser would send by CMA could only go by SAR (below): it waits
        // instead, as small ones do. When the chooser tried SAR amid CMA messages (a recheck),
        // every later message of a window of 64 followed it into SAR, one in six of a 256 KiB
        // stream; with SAR at 2 GB/s in the host's slow state that halved the stream
        // (docs/perf/protocols.md).
        if measurable && behind_sar {
            return Err(Error::Again);
        }
        let measured = measurable.then(|| self.chooser.choose(buf.len() as u64)).flatten();
        let my_cma = match measured {
            Some(choice) => choice.via == Via::Cma,
            None => cma_ok && ((opts.pull && !one_segment) || buf.len() >= cma_min),
        };
        // A CMA message by the fixed rule goes by SAR too, queued behind it.
        let remote = (my_cma && link_cma && !behind_sar).then(|| buf.as_remote(IOV_MAX)).flatten();
        // A CMA choice that fell back to SAR (too many ranges, or behind a SAR message) teaches
        // nothing.
        let measured = measured.filter(|c| (c.via == Via::Cma) == remote.is_some());
        // Asked only of a SAR message the chooser learns from, and the receiver's line read only
        // when we have others outstanding.
        let overlap = match measured {
            Some(c) if c.via == Via::Sar && c.timed() => {
                Overlap::of(self.outstanding() > 0, || self.peer_busy_with_own(peer))
            }
            _ => Overlap::Pipeline,
        };
        let mut pending = PendingSend {
            peer,
            cookie: opts.cookie,
            hdr,
            buf,
            sar_next: None,
            sar_continuation: false,
            answer: None,
            measured,
            copy_ns: 0,
            overlap,
        };
        match remote {
            Some(iovs) => {
                let link = self.link(peer)?;
                let src_slot = link.slot;
                let timed = pending.measured.is_some_and(|c| c.timed());
                super::peers::push_cmd_with(&link.region, src_slot, |e| {
                    e.set_message(src_slot, msg_id, &hdr, true);
                    e.set_iovs(&iovs);
                    if timed {
                        e.flags |= crate::cmd::FLAG_TIMED;
                    }
                    if opts.split_early {
                        e.flags |= crate::cmd::FLAG_SPLIT_EARLY;
                    }
                })?;
                self.stats.sent_cma += 1;
            }
            None => {
                self.stats.sent_sar += 1;
                pending.sar_next = Some(0);
                self.sar_tx.push_back(msg_id);
            }
        }
        self.pending.insert(msg_id, pending);
        if !self.sar_tx.is_empty() {
            self.push_sar_segments();
        }
        Ok(SendStatus::Pending)
    }

    /// Put a message of at most `inject_max` bytes in the peer's ring: inline in the command, or
    /// through one of its inject buffers.
    /// With `opts.more` it is built (and an inject buffer filled) but staged, not pushed.
    fn push_small(&mut self, peer: PeerId, msg_id: u64, hdr: &MsgHeader, opts: SendOpts, src: Small<'_>) -> Result<()> {
        if !opts.more && !self.flush_staged_before(peer) {
            return Err(Error::Again);
        }
        // A SAR message to this peer still waiting for a buffer for its first segment (the one
        // the receiver matches) would be overtaken by a message pushed straight into the ring:
        // messages must be matched in the order they were sent. Later SAR messages queue behind
        // it in `sar_tx` (FIFO), and so do CMA-sized ones (sent by SAR instead, `send`); inline
        // and inject ones wait until it has started.
        if self.sar_unstarted(peer) {
            return Err(Error::Again);
        }
        let len = hdr.len as usize;
        let (inline_max, inline_at_most) = (self.inline_limit(opts.more), self.params.inline_max);
        let ack = opts.delivery_complete;
        // A second message with no poll since the first: a stream, whose next slots are worth
        // fetching ahead (`Ring::prefetch_for_claim`). A ping-pong fetches only the next slot's
        // lines that the receiver does not poll, and only for a long message (`fetch_next_lines`).
        let streaming = !opts.more && self.sent_since_poll > 0;
        self.sent_since_poll = self.sent_since_poll.saturating_add(1);
        let incarnation = self.region.incarnation();
        let link = self.link(peer)?;
        link.used = true;
        let src_slot = link.slot;
        if len <= inline_max {
            let inline = InlineMsg { src_slot, msg_id, hdr, ack };
            if opts.more {
                self.stage_with(peer, (!ack).then_some(opts.cookie), |e| inline.write(e, |p| src.copy_to(p)));
            } else {
                inline.push(&link.region, streaming, |p| src.copy_to(p))?;
            }
            self.stats.sent_inline += 1;
            return Ok(());
        }
        debug_assert!(!opts.more, "only inline messages are staged (`more_if_inline`)");
        let inject = InjectMsg { src_slot, msg_id, hdr, ack, incarnation };
        match inject.push(&link.region, src) {
            // A message sent alone that could go inline after all, when no inject buffer is free.
            Err(Error::Again) if len <= inline_at_most => {
                InlineMsg { src_slot, msg_id, hdr, ack }.push(&link.region, false, |p| src.copy_to(p))?;
                self.stats.sent_inline += 1;
            }
            pushed => {
                pushed?;
                self.stats.sent_inject += 1;
            }
        }
        Ok(())
    }

    /// The largest message that goes inline now: `inline_max` in a stream (a send since the last
    /// poll) or a batch (`more`), `pingpong_inline_max` for a message sent alone.
    #[inline(always)]
    fn inline_limit(&self, more: bool) -> usize {
        if more || self.sent_since_poll > 0 {
            self.params.inline_max
        } else {
            self.params.pingpong_inline_max.min(self.params.inline_max)
        }
    }

    /// `SendOpts::more` stages inline messages only. An inject message pushed at once has its
    /// buffer recorded in our entry of the receiver's peer table until the push (`spare`), so
    /// that the buffer comes back should we die in between; a staged one could not be (the
    /// record holds one buffer), and a batch of up to `BATCH_MAX` of them was lost with us.
    #[inline(always)]
    fn more_if_inline(&self, opts: SendOpts, len: usize) -> SendOpts {
        SendOpts { more: opts.more && len <= self.params.inline_max, ..opts }
    }

    /// A small message is out: done, unless its sender wants the receiver's acknowledgement.
    fn after_small(&mut self, peer: PeerId, msg_id: u64, opts: SendOpts, answer: Option<AnswerBuf>) -> SendStatus {
        if !opts.delivery_complete {
            // A staged message completes once it is in the ring (reported by `progress`).
            return if opts.more { SendStatus::Pending } else { SendStatus::Done };
        }
        self.acked.insert(msg_id, AckedSend { peer, cookie: opts.cookie, answer });
        SendStatus::Pending
    }

    /// True if a SAR message to `peer` has not pushed its first segment yet. Inline: every
    /// small send asks, and the queue is nearly always empty.
    #[inline(always)]
    pub(super) fn sar_unstarted(&self, peer: PeerId) -> bool {
        !self.sar_tx.is_empty()
            && self.sar_tx.iter().any(|id| self.pending.get(id).is_some_and(|s| s.peer == peer && s.unstarted()))
    }

    /// Move as many SAR segments as the receivers' pools and rings take.
    pub(super) fn push_sar_segments(&mut self) {
        // The queue keeps send order, whole messages at a time: a SAR message to a peer pushes
        // segments only once every earlier one to that peer has pushed its last. A receiver
        // matches a SAR message at its first segment, so messages must start in send order;
        // and it places each segment as it arrives, so two RMA writes to the same bytes land in
        // send order only if their segments do not interleave. (A later message used to go on
        // as soon as the earlier had started: when the earlier found no buffer and the receiver
        // gave one back just before the later looked, the later took it, and a 64 KiB write's
        // second segment landed after the next write's first, over the same bytes. Before that,
        // a message that found no buffer was rotated to the back and a later one could even
        // start first.)
        // One turn of the queue in place: each message is taken from the front, and those that
        // stay go to the back in the same order. (Taking the whole queue out and pushing into
        // an empty one allocated and freed its storage on every pass: one of each per SAR
        // message.)
        let incarnation = self.region.incarnation();
        let mut waiting: smallvec::SmallVec<[PeerId; 4]> = smallvec::SmallVec::new();
        for _ in 0..self.sar_tx.len() {
            let Some(msg_id) = self.sar_tx.pop_front() else { break };
            let Some(send) = self.pending.get(&msg_id) else { continue };
            let peer = send.peer;
            if waiting.contains(&peer) {
                self.sar_tx.push_back(msg_id);
                continue;
            }
            let Some(link) = self.out.get(peer as usize).and_then(|p| p.link.as_ref()) else {
                continue; // the peer died; check_peers fails the send
            };
            let send = self.pending.get_mut(&msg_id).expect("looked up above");
            match push_segments(link, incarnation, msg_id, &mut self.next_sar_seq, send) {
                Ok(true) => {}
                // A send the receiver's pool cannot take fails (only one that has not started:
                // the pool is reserved before any segment goes out); `progress` reports it.
                Err(e) if send.unstarted() => {
                    let failed = self.pending.remove(&msg_id).expect("looked up above");
                    self.release_answer_buf(failed.answer);
                    self.staged_done.push((failed.cookie, Err(e)));
                }
                Ok(false) | Err(_) => {
                    waiting.push(peer);
                    self.sar_tx.push_back(msg_id);
                }
            }
        }
    }

    /// Drain our response ring: connection acks and finished sends. With nothing there (the
    /// common case, on every progress pass) that is one load: forced inline so that the idle
    /// pass does not enter the drain's large frame (153 -> 109 instructions per idle pass).
    #[inline(always)]
    pub(super) fn drain_responses(&mut self, h: &mut impl Handler) -> usize {
        if self.resp_rx.is_empty(&self.region.resp_ring()) {
            return 0;
        }
        self.drain_published_responses(h)
    }

    /// `drain_responses` once the head slot is taken (published or being written).
    #[inline(never)]
    fn drain_published_responses(&mut self, h: &mut impl Handler) -> usize {
        let mut events = 0;
        // One entry for the pass: a pop copies only the bytes in use (the first line, and the
        // second only for a long answer), where `pop` would clear and move the whole entry.
        let mut entry = RespEntry::default();
        loop {
            match self.resp_rx.pop_into(&self.region.resp_ring(), &mut entry) {
                Pop::Item(()) => {}
                Pop::Empty => break,
                Pop::Pending => {
                    // A responder is mid-push, or died there: the liveness tick skips it later.
                    self.resp_stall.note(&self.resp_rx);
                    break;
                }
            };
            match entry.kind {
                resp::CONN_ACK => self.on_conn_ack(entry.value),
                resp::DONE => events += self.on_done(&entry, h),
                resp::DONE_MANY => events += self.on_done_many(&entry, h),
                resp::SPLIT => self.on_split_offer(&entry),
                resp::PART => self.on_answer_part(&entry, h),
                _ => self.stats.corrupt_commands += 1,
            }
        }
        if !self.tails.is_empty() {
            self.write_tails();
        }
        events
    }

    /// A `PART` response: the answer to a send still waiting for it is in its buffers up to
    /// `entry.value`; the handler may copy that much out now (`Handler::on_send_answer_part`).
    fn on_answer_part(&mut self, entry: &RespEntry, h: &mut impl Handler) {
        let send = match self.acked.get(entry.msg_id) {
            Some(send) => Some((send.cookie, send.answer)),
            None => self.pending.get(&entry.msg_id).map(|send| (send.cookie, send.answer)),
        };
        match send {
            Some((cookie, Some(buf))) => h.on_send_answer_part(cookie, self.placed_answer(buf, entry.value).as_slice()),
            None => self.on_unmatched_answer(entry.msg_id),
            // For a send that named no buffer: a peer's error.
            Some((_, None)) => self.stats.corrupt_commands += 1,
        }
    }

    fn on_done(&mut self, entry: &RespEntry, h: &mut impl Handler) -> usize {
        let Ok(status) = Status::decode(entry.status) else {
            self.stats.corrupt_commands += 1;
            return 0;
        };
        if let Some(send) = self.acked.remove(entry.msg_id) {
            // A small send has no CMA read to fail: that answer is a peer's error.
            let status = if status == Status::CmaFailed { None } else { Some(status) };
            // A read being timed (`read_way.rs`) is timed through the handler's copy out.
            let timed = if self.timed_reads.is_empty() { None } else { self.timed_reads.remove(&entry.msg_id) };
            let started = timed.map(|t| (t, std::time::Instant::now()));
            self.finish_send(status, entry, send.cookie, send.answer, h);
            if let Some((timed, started)) = started {
                self.learn_answer(timed, entry, started);
            }
            return 1;
        }
        if status == Status::CmaFailed {
            let Some(send) = self.pending.get_mut(&entry.msg_id) else {
                self.on_unmatched_answer(entry.msg_id);
                return 0;
            };
            // The receiver kept its match and now expects the same message as SAR segments.
            self.stats.cma_fallbacks += 1;
            send.sar_next = Some(0);
            send.sar_continuation = true;
            if let Some(link) = self.out.get_mut(send.peer as usize).and_then(|p| p.link.as_mut()) {
                link.cma = false;
            }
            self.sar_tx.push_back(entry.msg_id);
            return 0;
        }
        // Every other answer ends the send: taken out with the one lookup.
        let Some(send) = self.pending.remove(&entry.msg_id) else {
            self.on_unmatched_answer(entry.msg_id);
            return 0;
        };
        if let (Some(choice), Status::Ok, false) = (send.measured, status, send.sar_continuation) {
            // A SAR message costs at least our copies in: in a stream the receiver may find every
            // segment already in and copy at memory speed while ours set the pace (`measured.rs`);
            // with both sides busy with their own, both copies.
            let ns = match choice.via {
                Via::Sar => {
                    super::measured::sar_time(entry.time(), send.copy_ns, send.hdr.len, SAR_FIRST_SEGMENT, send.overlap)
                }
                Via::Cma => entry.time(),
            };
            self.chooser.learn(choice, send.hdr.len, ns);
        }
        self.finish_send(Some(status), entry, send.cookie, send.answer, h);
        1
    }

    /// A `DONE_MANY` answer: each of its ids an acknowledged small send finished with
    /// `Status::Ok` (`ok_run.rs`).
    fn on_done_many(&mut self, entry: &RespEntry, h: &mut impl Handler) -> usize {
        let mut events = 0;
        for id in entry.many_ids() {
            let Some(send) = self.acked.remove(id) else {
                // Not ours, or answered already (a peer's error), or late.
                self.on_unmatched_answer(id);
                continue;
            };
            // A timed read is answered with its bytes, not in a run: a peer's error too.
            self.forget_timed_reads(std::iter::once(id));
            self.finish_send(Some(Status::Ok), entry, send.cookie, send.answer, h);
            events += 1;
        }
        events
    }

    /// A send's answer (`entry`, of `status`; None: one that makes no sense for the send)
    /// arrived: hand the handler its bytes, if it has any, free its answer buffer, and finish it.
    fn finish_send(
        &mut self,
        status: Option<Status>,
        entry: &RespEntry,
        cookie: u64,
        answer: Option<AnswerBuf>,
        h: &mut impl Handler,
    ) {
        let mut result = match status {
            Some(Status::Refused) => Err(Error::Refused(entry.value.min(u64::from(u32::MAX)) as u32)),
            Some(_) => Ok(()),
            None => Err(Error::Corrupt("an answer that does not fit the send")),
        };
        match (status, answer) {
            (Some(Status::Answered), _) => {
                // A peer's count: clamp it to what the entry holds.
                let n = (entry.value as usize).min(entry.data.len());
                h.on_send_answer(cookie, &[&entry.data[..n]]);
            }
            (Some(Status::Placed), Some(buf)) => {
                h.on_send_answer(cookie, self.placed_answer(buf, entry.value).as_slice())
            }
            (Some(Status::Placed), None) => {
                self.stats.corrupt_commands += 1;
                result = Err(Error::Corrupt("answer placed for a send that named no buffer"));
            }
            (None, _) => self.stats.corrupt_commands += 1,
            _ => {}
        }
        // The handler has copied the answer out: the buffer is free again.
        self.release_answer_buf(answer);
        h.on_send_done(cookie, result);
    }

    /// Fail every send waiting on `peer`.
    pub(super) fn fail_sends_to(&mut self, peer: PeerId, h: &mut impl Handler) -> usize {
        // (message id, cookie, answer buffer) of each.
        let mut ended: Vec<(u64, u64, Option<AnswerBuf>)> =
            self.acked.take_to(peer).into_iter().map(|(id, s)| (id, s.cookie, s.answer)).collect();
        self.pending.retain(|&id, s| {
            if s.peer == peer {
                ended.push((id, s.cookie, s.answer));
            }
            s.peer != peer
        });
        // In send order (ids grow), whichever map held them.
        ended.sort_unstable_by_key(|e| e.0);
        self.forget_timed_reads(ended.iter().map(|e| e.0));
        self.expect_late_answers(ended.iter().map(|e| e.0));
        for &(_, cookie, answer) in &ended {
            // A dead receiver writes no more: its answer buffer is ours again.
            self.release_answer_buf(answer);
            h.on_send_done(cookie, Err(Error::PeerDead));
        }
        self.sar_tx.retain(|id| self.pending.contains_key(id));
        ended.len()
    }
}

/// The longest SAR segment that starts at byte `offset` of a message, into buffers of
/// `sar_size` bytes. Segments double from SAR_FIRST_SEGMENT up to a whole buffer: the receiver
/// starts copying out after a short first copy (latency), while long messages move in whole
/// buffers (fewer commands per byte: bandwidth).
fn segment_len(offset: u64, sar_size: u64) -> u64 {
    sar_size.min(offset.max(SAR_FIRST_SEGMENT))
}

/// Push segments of one SAR send until done or out of buffers. True when all are out; an error
/// when the receiver's pool has no room in /dev/shm (`Region::map_sar_pool`: then no segment to
/// that receiver went out yet). `next_seq`: the sequence number of our next segment (`SarSeg::seq`).
fn push_segments(
    link: &super::peers::Link,
    incarnation: u64,
    msg_id: u64,
    next_seq: &mut u64,
    send: &mut PendingSend,
) -> Result<bool> {
    use super::spare::Pool;
    let geo = *link.region.geometry();
    let sar_size = geo.counts.sar_size;
    let Some(entry) = link.region.peer_slots().get(link.slot as usize) else { return Ok(false) };
    let us = super::spare::Holder { entry, slot: link.slot, incarnation };
    link.region.map_sar_pool()?;
    // Our copies count only for a message the chooser learns from, as the receiver's do
    // (`cmd::FLAG_TIMED` on its first segment).
    let timed = send.measured.is_some_and(|c| c.timed());
    while let Some(offset) = send.sar_next {
        if offset >= send.hdr.len {
            send.sar_next = None;
            return Ok(true);
        }
        let seq = *next_seq;
        *next_seq += 1;
        let Some(index) = super::spare::take(&link.region, us, Pool::Sar, seq) else {
            return Ok(false);
        };
        let seg_len = (send.hdr.len - offset).min(segment_len(offset, sar_size));
        let started = timed.then(std::time::Instant::now);
        let copied = geo
            .sar_offset(index)
            .and_then(|off| link.region.mapping().bytes_ptr(off, seg_len))
            // SAFETY: `dst` is `seg_len` bytes inside the peer's mapping (bounds-checked).
            .map(|dst| unsafe { send.buf.read_to_raw(offset as usize, dst, seg_len as usize) });
        if copied.is_err() {
            super::spare::done(&link.region, us, Pool::Sar, index, false, None);
            return Ok(false);
        }
        if let Some(started) = started {
            send.copy_ns = send.copy_ns.saturating_add(started.elapsed().as_nanos() as u64);
        }
        let first = offset == 0 && !send.sar_continuation;
        // Written in place into the claimed slot, as small messages are (a command is over a
        // kilobyte; a segment uses its first line).
        let segment = |e: &mut CmdEntry| {
            e.set_message(link.slot, msg_id, &send.hdr, true);
            if !first {
                e.op = op::SAR_SEG;
            } else if timed {
                e.flags |= crate::cmd::FLAG_TIMED;
            }
            e.set_sar(SarSeg { buf: index, len: seg_len as u32, offset, seq });
        };
        let pushed = super::peers::push_cmd_with(&link.region, link.slot, segment).is_ok();
        // A message of one segment leaves a spare in hand for the next (`spare`): its buffer
        // taken off the receiver's stack and warmed while the receiver copies this one.
        let one_segment = offset == 0 && seg_len == send.hdr.len;
        super::spare::done(&link.region, us, Pool::Sar, index, pushed, one_segment.then_some(seg_len));
        if !pushed {
            return Ok(false);
        }
        let next = offset + seg_len;
        send.sar_next = (next < send.hdr.len).then_some(next);
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `NEXT_LINES_FROM` is the shortest inline message whose slot spans more than twelve lines
    /// (checked here once, not on every send).
    #[test]
    fn next_lines_from_is_the_first_length_past_twelve_lines() {
        let lines = |len| crate::ring::slot_lines::<CmdEntry>(crate::cmd::HEADER_BYTES + len);
        assert_eq!(lines(NEXT_LINES_FROM - 1), 12);
        assert_eq!(lines(NEXT_LINES_FROM), 13);
    }
}
