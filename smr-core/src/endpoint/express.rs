//! The express paths of the commonest arrivals: a message taken by the handler where it lands,
//! in the same step, with none of the general path's machinery (`recv.rs`: the command decoded
//! into a `Command`, a destination lent and a delivery recorded in flight, `on_recv_done`).
//!
//! - A message whose bytes are here in full, inline in its command or in one of our inject
//!   buffers (`express`, before the command is decoded): offered with them (`Handler::on_inline`).
//! - A message the engine can place in one step into one buffer of the handler's
//!   (`Handler::on_fill_express`): a CMA message of one range (`express_cma`, one
//!   `process_vm_readv`) and a SAR message whose first segment holds all of it (`express_sar`,
//!   copied out of our SAR buffer).
//!
//! Each ends its message as the general path would (the same answer to the sender, the same
//! buffers given back), and a handler that declines sends it the general way unchanged
//! (`endpoint::tests`, `..._taken_express_end_as_delivered_ones_do`).

use super::recv::{outcome, status_of, time_since};
use super::{Disposition, Endpoint, Handler, Incoming, SrcId};
use crate::cmd::{op, proto, CmdEntry, MsgHeader, RespEntry, SarSeg, Status, FLAG_ACK, FLAG_TIMED, INLINE_MAX};
use crate::layout::INJECT_SIZE;

/// Lines of an inline payload that `fetch_beyond_first_line` asks for: enough to cover what
/// the handler's work on the header can hide; the copy itself brings longer payloads in at
/// full speed (fetching all 16 lines of a kilobyte cost 80 instructions and gained nothing).
const EARLY_LINES: usize = 4;

/// Ask for the lines of an inline payload past the slot's first line (which holds the header
/// and the payload's first 8 bytes, already read), up to `EARLY_LINES`, all at once: they cross
/// from the sender's cache while the handler matches the header, instead of one after another
/// when it copies the payload out (tagged one-way 64 B and 256 B -4%, 21 alternated runs).
#[inline(always)]
fn fetch_beyond_first_line(payload: &[u8]) {
    let first = crate::cmd::FIRST_LINE_PAYLOAD;
    let end = payload.len().min(first + EARLY_LINES * 64);
    let mut at = first;
    while at < end {
        crate::sync::prefetch_addr(payload.as_ptr().wrapping_add(at), crate::sync::Prefetch::Read);
        at += 64;
    }
}

impl Endpoint {
    /// Offer a message whose payload is here in full (inline in the command, or in one of our
    /// inject buffers) from a connected sender to the handler's express path
    /// (`Handler::on_inline`), and finish it as `on_msg` finishes one offered with its payload;
    /// false if the command is anything else, or the handler declined (then `handle_command`
    /// takes it). Its checks are `decode`'s for these two kinds of command: the source is one we
    /// accepted, the length within the slot (the inject size) and our limit, the inject buffer
    /// inside our pool.
    ///
    /// `entry` holds the command's header (`Consumer::peek_into`); the payload is read where
    /// it lies, in the ring slot `in_slot` or in the inject buffer the command names (given
    /// back once the command is finished), so that the handler's copy into the posted buffer
    /// is the only one (a peer's payload is as untrusted as ever: bytes, copied out once).
    ///
    /// # Safety
    /// `in_slot` is the popped, not yet released command slot whose header `entry` holds, in
    /// our own region, which stays mapped for the call.
    #[inline(always)]
    pub(super) unsafe fn express(&mut self, entry: &CmdEntry, in_slot: *const CmdEntry, h: &mut impl Handler) -> bool {
        if entry.op != op::MSG || entry.len > self.limits.max_msg_size {
            return false;
        }
        let len = entry.len;
        // The two kinds apart: with the inject buffer's return a branch after the handler, the
        // inline kind took 14 instructions more per arrival (profile-guided build).
        match entry.proto {
            proto::INLINE if len <= INLINE_MAX as u64 => {
                // SAFETY: `len` is at most INLINE_MAX (checked above), the size of `payload`, in
                // the slot our own mapping holds for this call (this function's contract). Any
                // byte value is a valid `u8`; a peer that writes the slot meanwhile garbles only
                // its own message.
                let payload = unsafe {
                    std::slice::from_raw_parts(std::ptr::addr_of!((*in_slot).payload).cast::<u8>(), len as usize)
                };
                fetch_beyond_first_line(payload);
                self.offer_express(entry, payload, h)
            }
            proto::INJECT if len <= INJECT_SIZE => self.express_inject(entry, h),
            // Its payload is in the slot's first line, which `entry` holds.
            proto::COMPACT | proto::COMPACT_DATA if entry.flags & FLAG_ACK == 0 => match entry.compact_header() {
                Some(hdr) => self.offer_express_as(entry.src, 0, false, hdr, &entry.inline_bytes()[..len as usize], h),
                None => false,
            },
            // An RMA write's (`aux`, an answer wanted).
            proto::COMPACT_AUX => match entry.compact_header() {
                Some(hdr) => {
                    let (msg_id, ack) = (entry.compact_msg_id(), entry.flags & FLAG_ACK != 0);
                    self.offer_express_as(entry.src, msg_id, ack, hdr, &entry.inline_bytes()[..len as usize], h)
                }
                None => false,
            },
            _ => false,
        }
    }

    /// `express` for a message in one of our inject buffers, given back once it is taken. Out
    /// of line: the inline kind's path stays as short as without it.
    #[inline(never)]
    fn express_inject(&mut self, entry: &CmdEntry, h: &mut impl Handler) -> bool {
        // The buffer's name is in the header's line, copied out of the slot.
        let buf = entry.inject_buf();
        // SAFETY: used only in this call, while `self.region` stays mapped. A buffer outside
        // the pool is left to the general path, which counts it as corrupt.
        let Some(payload) = (unsafe { self.inject_payload(buf, entry.len) }) else { return false };
        let taken = self.offer_express(entry, payload, h);
        if taken {
            self.give_back_later(entry.src, entry.msg_id, buf);
        }
        taken
    }

    /// `express`'s offer of a command from a connected sender whose payload it found.
    #[inline(always)]
    fn offer_express(&mut self, entry: &CmdEntry, payload: &[u8], h: &mut impl Handler) -> bool {
        let hdr = MsgHeader { app: entry.app, tag: entry.tag, data: entry.data, aux: entry.aux, len: entry.len };
        self.offer_express_as(entry.src, entry.msg_id, entry.flags & FLAG_ACK != 0, hdr, payload, h)
    }

    /// `offer_express` of a command whose fields are given: those the command carries, or for
    /// a compact one, 0 for those it leaves out.
    #[inline(always)]
    fn offer_express_as(
        &mut self,
        src: SrcId,
        msg_id: u64,
        ack: bool,
        hdr: MsgHeader,
        payload: &[u8],
        h: &mut impl Handler,
    ) -> bool {
        let Some(msg) = self.express_incoming(src, msg_id, ack, hdr) else { return false };
        match h.on_inline(&msg, payload) {
            None => return false,
            // The commonest answer (a message received, a write applied), without the match
            // of `finish_with_payload`.
            Some(Disposition::Taken { answer_later: false }) => {
                if ack {
                    self.answer_ok(src, msg_id);
                }
            }
            Some(d) => self.finish_with_payload(src, msg.key, msg_id, ack, hdr, payload, d, h),
        }
        true
    }

    /// A message as an express path offers it: from a sender connected now (None otherwise: the
    /// general path), with a key as the general path gives every offered message (one declined
    /// wastes one).
    #[inline(always)]
    fn express_incoming(&mut self, src: SrcId, msg_id: u64, ack: bool, hdr: MsgHeader) -> Option<Incoming> {
        let src_gen = self.inp.incarnation(src)?;
        Some(Incoming { key: self.new_key(), src, src_gen, msg_id, hdr, acked: ack })
    }

    /// The express path of a CMA message of one range (`Handler::on_fill_express`): read straight
    /// into the receive the handler has at hand, and answer. False, with nothing done, sends
    /// the message the general way (`offer`, `pull_cma`); the caller sends one the two sides
    /// copy together (`splits`) that way without asking. What it skips: the delivery's lent
    /// `LocalIov`, the handler's record of a delivery in flight and the `on_recv_done` that
    /// ends it. `timed` is read from `entry`, as `express_sar` reads it.
    #[inline(always)]
    pub(super) fn express_cma(
        &mut self,
        entry: &CmdEntry,
        src: SrcId,
        msg_id: u64,
        ack: bool,
        hdr: MsgHeader,
        h: &mut impl Handler,
    ) -> bool {
        let timed = entry.flags & FLAG_TIMED != 0;
        let Some(msg) = self.express_incoming(src, msg_id, ack, hdr) else { return false };
        let remote = entry.iov(0);
        let mut read = None;
        let taken = h.on_fill_express(&msg, |local| {
            read = self.timed_cma(src, timed, |pid| crate::cma::read_into(pid, remote, local)).ok();
            read.map(|(n, _)| n)
        });
        match (taken, read) {
            (true, Some((n, ns))) => {
                let status = status_of(&outcome(hdr.len, n));
                self.send_resp(src, RespEntry::done_timed(msg_id, status, n as u64, ns));
                true
            }
            // A handler that took the message without reading it: the sender still waits.
            (true, None) => {
                self.send_resp(src, RespEntry::done(msg_id, Status::Dropped, 0));
                true
            }
            (false, _) => false,
        }
    }

    /// The express path of a SAR message whose first segment holds all of it (up to 16 KiB,
    /// `SAR_FIRST_SEGMENT`: the usual 4-16 KiB message by SAR), as `express_cma` is for CMA:
    /// copied out of our SAR buffer straight into the receive the handler has at hand
    /// (`Handler::on_fill_express`), the buffer given back and the sender answered with the
    /// copy's time if it asked (`FLAG_TIMED`). False, with nothing done, for the general path
    /// (`SarRx`, `on_segment`), which a corrupt segment takes too. What it skips: the delivery's
    /// lent `LocalIov` and record in flight, the reassembly's `SarRx`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) fn express_sar(
        &mut self,
        entry: &CmdEntry,
        src: SrcId,
        msg_id: u64,
        ack: bool,
        hdr: MsgHeader,
        seg: SarSeg,
        h: &mut impl Handler,
    ) -> bool {
        if seg.offset != 0 || u64::from(seg.len) != hdr.len {
            return false;
        }
        // SAFETY: the slice is used within this function only, where `self.region` stays.
        let Some(bytes) = (unsafe { self.sar_payload(seg.buf, hdr.len) }) else { return false };
        let Some(msg) = self.express_incoming(src, msg_id, ack, hdr) else { return false };
        let timed = entry.flags & FLAG_TIMED != 0;
        let (mut placed, mut ns) = (0, 0);
        let taken = h.on_fill_express(&msg, |local| {
            let started = timed.then(std::time::Instant::now);
            placed = local.len().min(bytes.len());
            // SAFETY: `local` is writable for its length (a `LentRange`), `bytes` are ours and
            // readable; one is the application's receive buffer, the other our region.
            unsafe { crate::copy::copy_bytes(bytes.as_ptr(), local.addr() as *mut u8, placed) };
            ns = time_since(started);
            Some(placed)
        });
        if !taken {
            return false;
        }
        self.give_back_sar(seg.buf);
        if ack {
            let status = status_of(&outcome(hdr.len, placed));
            self.send_resp(src, RespEntry::done_timed(msg_id, status, hdr.len, ns));
        }
        true
    }
}
