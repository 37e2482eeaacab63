//! The receiving side: commands in, messages offered to the handler, held messages, SAR
//! reassembly, and the responses that complete the senders. The commonest arrivals take the
//! express paths first (`express.rs`).

use super::{AnswerTo, Delivered, Disposition, Endpoint, Handler, Incoming, MsgKey, SrcId};
use crate::cmd::{
    decode, Body, CmdEntry, Command, MsgHeader, RemoteIov, RespEntry, SarSeg, Status, ANSWER_DATA_MAX, FLAG_TIMED,
};
use crate::error::{Error, Result};
use crate::iov::LocalIov;

/// A SAR message being reassembled.
pub(super) struct SarRx {
    hdr: MsgHeader,
    received: u64,
    sink: Sink,
    /// Our time copying its segments out, for a message whose sender asked for it
    /// (`cmd::FLAG_TIMED`; the time reported to it, `measured.rs`). Only the copies count, not the time from the first
    /// segment to the last: in a stream of messages sent some by SAR and some by CMA, a SAR
    /// message's later segments queue behind the CMA messages sent after it while its sender
    /// waits for buffers, and that span took up to 850 us for 64 KiB where the copies took 3.
    copy_ns: Option<u64>,
}

impl SarRx {
    /// `timed`: its sender learns from its time (`cmd::FLAG_TIMED` on its first segment).
    fn new(hdr: MsgHeader, sink: Sink, timed: bool) -> SarRx {
        SarRx { hdr, received: 0, sink, copy_ns: timed.then_some(0) }
    }

    /// The time reported to its sender (0: not timed).
    fn time(&self) -> u64 {
        self.copy_ns.map_or(0, |ns| ns.max(1))
    }
}

enum Sink {
    /// `answer`: the engine answers the sender once the last segment is in (not for `Later`).
    Deliver {
        dest: LocalIov,
        ctx: u64,
        answer: bool,
    },
    Held(MsgKey),
    Dropped,
    Refused(u32),
}

/// A received message the engine keeps until the handler asks for it.
pub(super) struct Held {
    src: SrcId,
    hdr: MsgHeader,
    data: HeldData,
}

enum HeldData {
    Bytes(Vec<u8>),
    /// Still in the sender's memory; read with CMA on delivery.
    Cma {
        iovs: crate::iov::RemoteIovs,
        msg_id: u64,
        /// The sender asked for the read's time (`cmd::FLAG_TIMED`).
        timed: bool,
    },
    /// SAR segments still arriving; `waiting` is a delivery asked for meanwhile.
    Arriving {
        bytes: Vec<u8>,
        waiting: Option<(LocalIov, u64)>,
    },
    /// Every SAR segment is in, and the sender waits for the answer that its message was
    /// delivered: it is not answered before (as a message held for a CMA read is not), so a
    /// sender learns of a receiver that dies before receiving it, instead of completing.
    Reassembled {
        bytes: Vec<u8>,
        msg_id: u64,
        /// How long its segments took (`measured.rs`): the answer reports it.
        ns: u64,
    },
    Failed(Error),
}

/// The result a receive reports: everything, or a truncation. Public for handlers that place a
/// message's bytes themselves (`Handler::on_payload`).
pub fn outcome(sent: u64, delivered: usize) -> Result<usize> {
    if (delivered as u64) < sent {
        Err(Error::Truncated { delivered, sent: sent as usize })
    } else {
        Ok(delivered)
    }
}

/// The time since `started`, for an answer that reports it (`RespEntry::done_timed`): at least
/// 1 ns, since 0 says "not timed"; 0 when not `started`.
pub(super) fn time_since(started: Option<std::time::Instant>) -> u64 {
    started.map_or(0, |t| (t.elapsed().as_nanos() as u64).max(1))
}

/// The answer to message `msg_id` whose bytes we could not read (`e`: a CMA read that failed
/// other than by policy, which falls back to SAR instead; a split whose tail went missing): its
/// sender's send fails, as our receive does, instead of completing as if it was delivered.
/// The errno (EIO where there is none) rides in `Status::Refused`.
pub(super) fn unread(msg_id: u64, e: &Error) -> RespEntry {
    let errno = match *e {
        Error::Os(n) if n > 0 => n as u64,
        _ => libc::EIO as u64,
    };
    RespEntry::done(msg_id, Status::Refused, errno)
}

pub(super) fn status_of(result: &Result<usize>) -> Status {
    match result {
        Ok(_) => Status::Ok,
        Err(Error::Truncated { .. }) => Status::Truncated,
        Err(_) => Status::Dropped,
    }
}

impl Endpoint {
    pub(super) fn handle_command(&mut self, entry: &CmdEntry, h: &mut impl Handler) {
        let cmd = match decode(entry, &self.limits) {
            Ok(c) => c,
            Err(_) => {
                self.stats.corrupt_commands += 1;
                return;
            }
        };
        if !self.parked.is_empty() && self.park_if_parked(&cmd, entry, h) {
            return;
        }
        // Whatever becomes of it, a segment's SAR buffer comes back through this command.
        match &cmd {
            Command::Msg { src, body: Body::Sar(seg), .. } | Command::SarSeg { src, seg, .. } => {
                self.note_handled(*src, super::spare::Pool::Sar, seg.seq);
            }
            _ => {}
        }
        match cmd {
            Command::Connect { src, incarnation } if !self.entry_holds(src, incarnation) => {
                self.note_gone_sender(src, incarnation)
            }
            // Its entry is freed soon, by which it learns (`parked`).
            Command::Connect { src, .. } if self.gave_up(src) => {}
            Command::Connect { src, .. } => match self.accept(src, h) {
                Err(Error::Again) => self.park(src, entry),
                // A sender that has already gone is not corruption (`accept` remembers it).
                Err(_) if !self.forgotten.contains_key(&src) => self.stats.corrupt_commands += 1,
                _ => {}
            },
            Command::Disconnect { src } => {
                if self.inp.contains_key(&src) {
                    self.forget_in_peer(src, h);
                }
            }
            Command::Msg { src, msg_id, ack, hdr, body } => {
                if !self.inp.contains_key(&src) {
                    // Left by a sender we forgot, in an entry another holds now (`Forgotten`),
                    // or by one we gave up (`parked`).
                    let gone = self.left_by_forgotten(src) || self.gave_up(src);
                    let accepted = if gone { Err(Error::PeerDead) } else { self.accept(src, h) };
                    match accepted {
                        Ok(()) => {}
                        Err(Error::Again) => return self.park(src, entry),
                        Err(_) => return self.msg_of_no_sender(entry, src, msg_id, hdr, body, gone, h),
                    }
                }
                self.on_msg(entry, src, msg_id, ack, hdr, body, h);
            }
            Command::SarSeg { src, msg_id, seg } => self.on_segment(src, msg_id, seg, h),
        }
    }

    /// A message from entry `src`, which no sender we know holds (`gone`: left by one we
    /// forgot). From a sender we knew that went away after queueing it, an inline or inject
    /// message is complete in our memory and is delivered; anything else needs the sender, so
    /// only its buffers come back. From anyone else it is a peer's error.
    #[allow(clippy::too_many_arguments)]
    #[cold]
    fn msg_of_no_sender(
        &mut self,
        entry: &CmdEntry,
        src: SrcId,
        msg_id: u64,
        hdr: MsgHeader,
        body: Body,
        gone: bool,
        h: &mut impl Handler,
    ) {
        let knew = self.knew_forgotten(src);
        if knew && matches!(body, Body::Inline { .. } | Body::Inject { .. }) {
            return self.on_msg(entry, src, msg_id, false, hdr, body, h);
        }
        if !gone {
            self.stats.corrupt_commands += 1;
        }
        // Only a sender we knew (now dead) really holds buffers of ours.
        if knew {
            self.release_buffers(&body);
        }
    }

    /// Give back our pool buffers a command referred to, once it is handled or dropped.
    fn release_buffers(&self, body: &Body) {
        match body {
            Body::Inject { buf } => {
                let _ = self.region.inject_stack().push(*buf);
            }
            Body::Sar(seg) => self.push_back_sar(seg.buf),
            Body::Inline { .. } | Body::Iov { .. } => {}
        }
    }

    /// Offer a message to the handler; one whose payload is here in full comes with it
    /// (`on_payload`).
    #[allow(clippy::too_many_arguments)]
    // Forced inline into `on_msg`, its one caller: passing the header and payload down one call
    // more cost about 40 instructions per message.
    #[inline(always)]
    fn offer(
        &mut self,
        src: SrcId,
        msg_id: u64,
        hdr: MsgHeader,
        acked: bool,
        payload: Option<&[u8]>,
        h: &mut impl Handler,
    ) -> (MsgKey, Disposition) {
        let key = self.new_key();
        let (name, src_gen) = match self.inp.get(&src) {
            Some(p) => (p.name.as_str(), p.incarnation),
            None => (self.forgotten.get(&src).and_then(|f| f.name.as_deref()).unwrap_or(""), 0),
        };
        let msg = Incoming { key, src, src_gen, msg_id, hdr, acked };
        let d = match payload {
            Some(payload) => h.on_payload(&msg, name, payload),
            None => h.on_message(&msg, name),
        };
        (key, d)
    }

    #[allow(clippy::too_many_arguments)]
    fn on_msg(
        &mut self,
        entry: &CmdEntry,
        src: SrcId,
        msg_id: u64,
        ack: bool,
        hdr: MsgHeader,
        body: Body,
        h: &mut impl Handler,
    ) {
        // A payload that is here in full (inline in the command, or in one of our inject
        // buffers) is offered with the message: the handler copies it where it belongs and
        // completes in this one step, with no destination lent and no delivery to report back.
        // Whether a CMA message is copied in halves with its sender is decided once, here, for
        // the express path and the general one (`splits`).
        let mut split = false;
        let payload = match body {
            Body::Inline { len } => Some(&entry.inline_bytes()[..len]),
            // SAFETY: the slice is used within this function only, where `self.region` stays.
            Body::Inject { buf } => match unsafe { self.inject_payload(buf, hdr.len) } {
                Some(bytes) => Some(bytes),
                None => {
                    self.stats.corrupt_commands += 1;
                    self.release_buffers(&body);
                    if ack {
                        self.send_resp(src, RespEntry::done(msg_id, Status::Refused, libc::EINVAL as u64));
                    }
                    return;
                }
            },
            Body::Iov { count, split_early, .. } => {
                split = self.splits(hdr.len, split_early);
                if count == 1 && !split && self.express_cma(entry, src, msg_id, ack, hdr, h) {
                    return;
                }
                None
            }
            Body::Sar(seg) if self.express_sar(entry, src, msg_id, ack, hdr, seg, h) => return,
            Body::Sar(_) => None,
        };
        let (key, disposition) = self.offer(src, msg_id, hdr, ack, payload, h);
        if let Some(bytes) = payload {
            self.finish_with_payload(src, key, msg_id, ack, hdr, bytes, disposition, h);
            match body {
                Body::Inject { buf } => self.give_back_later(src, msg_id, buf),
                _ => self.release_buffers(&body),
            }
            return;
        }
        // An answer is for a request whose payload is here, handled in the same step.
        let disposition = match disposition {
            Disposition::AnswerInto { .. } | Disposition::AnswerWith(_) => Disposition::Refuse(libc::EINVAL as u32),
            d => d,
        };
        // `Later` is delivered like `Deliver`, but the handler answers (except for CMA).
        let ack = ack && !matches!(disposition, Disposition::Later { .. });
        match body {
            // Offered with their payload, and finished above.
            Body::Inline { .. } | Body::Inject { .. } => {}
            // The CMA path answers for itself.
            Body::Iov { count, timed, .. } => {
                // The usual message names one range: no list gathered for it.
                let (one, many): ([RemoteIov; 1], crate::iov::RemoteIovs);
                let iovs: &[RemoteIov] = if count == 1 {
                    one = [entry.iov(0)];
                    &one
                } else {
                    many = (0..count).map(|i| entry.iov(i)).collect();
                    &many
                };
                match disposition {
                    Disposition::Deliver { dest, ctx } | Disposition::Later { dest, ctx } => {
                        self.pull_cma(src, msg_id, hdr, iovs, timed, split, dest, ctx, h)
                    }
                    Disposition::Hold => {
                        let iovs = iovs.into();
                        self.held.insert(key, Held { src, hdr, data: HeldData::Cma { iovs, msg_id, timed } });
                    }
                    // Only inline messages can be taken.
                    Disposition::Discard
                    | Disposition::Taken { .. }
                    | Disposition::AnswerInto { .. }
                    | Disposition::AnswerWith(_) => self.send_resp(src, RespEntry::done(msg_id, Status::Dropped, 0)),
                    Disposition::Refuse(errno) => {
                        self.send_resp(src, RespEntry::done(msg_id, Status::Refused, errno.into()))
                    }
                }
            }
            // The last segment answers.
            Body::Sar(seg) => {
                let sink = match disposition {
                    Disposition::Deliver { dest, ctx } => Sink::Deliver { dest, ctx, answer: ack },
                    Disposition::Later { dest, ctx } => Sink::Deliver { dest, ctx, answer: false },
                    Disposition::Hold => match zeroed_bytes(hdr.len) {
                        Some(bytes) => {
                            self.held.insert(key, Held { src, hdr, data: HeldData::Arriving { bytes, waiting: None } });
                            Sink::Held(key)
                        }
                        // The sender's send fails; we go on.
                        None => Sink::Refused(libc::ENOMEM as u32),
                    },
                    Disposition::Discard
                    | Disposition::Taken { .. }
                    | Disposition::AnswerInto { .. }
                    | Disposition::AnswerWith(_) => Sink::Dropped,
                    Disposition::Refuse(errno) => Sink::Refused(errno),
                };
                let timed = entry.flags & FLAG_TIMED != 0;
                self.sar_rx.insert((src, msg_id), SarRx::new(hdr, sink, timed));
                self.on_segment(src, msg_id, seg, h);
            }
        }
    }

    /// The `len` bytes of our inject buffer `buf`, or None if they fall outside our mapping
    /// (`decode` already refused a buffer index or a length outside the pool; this is the bounds
    /// check the slice itself rests on). The slice is of our own region: the sender wrote the bytes
    /// before it published the command, which we popped (Acquire), and gave the buffer up to
    /// us. A misbehaving sender can still write it while the handler copies it out, which
    /// garbles only the bytes of its own message.
    ///
    /// # Safety
    /// The slice does not borrow `self` (the handler calls that read it need `&mut self`): the
    /// caller must use it only while `self.region` stays mapped, as it does for the rest of
    /// `on_msg`, where nothing unmaps or replaces it.
    pub(super) unsafe fn inject_payload<'r>(&self, buf: u32, len: u64) -> Option<&'r [u8]> {
        // The sender reserved our pool's pages before it wrote the payload: the reserve here
        // finds them (a payload from a sender that did not is refused like any corrupt one).
        self.region.map_inject_pool().ok()?;
        // SAFETY: this function's contract, passed on.
        unsafe { self.pool_bytes(self.region.geometry().inject_offset(buf).ok()?, len) }
    }

    /// `inject_payload` for a message whose one SAR segment is in our SAR buffer `buf` (`decode`
    /// refused a segment longer than a buffer).
    ///
    /// # Safety
    /// As `inject_payload`.
    pub(super) unsafe fn sar_payload<'r>(&self, buf: u32, len: u64) -> Option<&'r [u8]> {
        self.region.map_sar_pool().ok()?;
        // SAFETY: this function's contract, passed on.
        unsafe { self.pool_bytes(self.region.geometry().sar_offset(buf).ok()?, len) }
    }

    /// The `len` bytes at offset `off` of our region, if they lie inside our mapping.
    ///
    /// # Safety
    /// As `inject_payload`.
    unsafe fn pool_bytes<'r>(&self, off: u64, len: u64) -> Option<&'r [u8]> {
        let ptr = self.region.mapping().bytes_ptr(off, len).ok()?;
        // SAFETY: `len` bytes inside our own mapping (checked), used only while it stays mapped
        // (this function's contract). Any byte value is a valid `u8` (see `inject_payload` for
        // concurrent writes).
        Some(unsafe { std::slice::from_raw_parts(ptr, len as usize) })
    }

    /// Finish a message offered with its payload (inline, or in one of our inject buffers), on
    /// the general path or the express one: place its bytes as the handler decided, and answer
    /// its sender if it asked (`ack`), unless the handler answers itself.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) fn finish_with_payload(
        &mut self,
        src: SrcId,
        key: MsgKey,
        msg_id: u64,
        ack: bool,
        hdr: MsgHeader,
        bytes: &[u8],
        d: Disposition,
        h: &mut impl Handler,
    ) {
        match d {
            // The answer placed in the sender's buffer is the response.
            Disposition::AnswerInto { buf, data } => self.place_answer(src, msg_id, buf, &data),
            Disposition::AnswerWith(data) if ack => self.send_answer(src, msg_id, data.as_slice()),
            Disposition::Refuse(errno) if ack => {
                self.send_resp(src, RespEntry::done(msg_id, Status::Refused, errno.into()))
            }
            Disposition::AnswerWith(_) | Disposition::Refuse(_) => {}
            // The handler answers.
            Disposition::Later { .. } | Disposition::Taken { answer_later: true } => {
                self.take_bytes(src, key, hdr, bytes, d, h)
            }
            Disposition::Deliver { .. } | Disposition::Hold | Disposition::Discard | Disposition::Taken { .. } => {
                self.take_bytes(src, key, hdr, bytes, d, h);
                if ack {
                    self.answer_ok(src, msg_id);
                }
            }
        }
    }

    fn take_bytes(
        &mut self,
        src: SrcId,
        key: MsgKey,
        hdr: MsgHeader,
        bytes: &[u8],
        d: Disposition,
        h: &mut impl Handler,
    ) {
        match d {
            Disposition::Deliver { mut dest, ctx } | Disposition::Later { mut dest, ctx } => {
                let n = dest.write_at(0, bytes);
                h.on_recv_done(ctx, outcome(hdr.len, n), dest);
            }
            Disposition::Hold => {
                self.held.insert(key, Held { src, hdr, data: HeldData::Bytes(bytes.to_vec()) });
            }
            Disposition::Discard
            | Disposition::Refuse(_)
            | Disposition::Taken { .. }
            | Disposition::AnswerInto { .. }
            | Disposition::AnswerWith(_) => {}
        }
    }

    /// Read a message out of the sender with CMA and answer it; falls back to SAR if refused.
    /// `timed`: the command's flag (`Body::Iov`); `split`: `splits` said to copy it in halves
    /// with its sender.
    #[allow(clippy::too_many_arguments)]
    fn pull_cma(
        &mut self,
        src: SrcId,
        msg_id: u64,
        hdr: MsgHeader,
        iovs: &[RemoteIov],
        timed: bool,
        split: bool,
        mut dest: LocalIov,
        ctx: u64,
        h: &mut impl Handler,
    ) {
        let split = if split { self.split_read(src, msg_id, iovs, &mut dest, hdr.len, h) } else { None };
        match split {
            None => {}
            Some(super::split::Split::Later(rx)) => return self.splits.push(rx.with_ctx(ctx)),
            Some(super::split::Split::Deferred(rx)) => return self.heads.push(rx.with_ctx(ctx)),
            Some(super::split::Split::Done(Ok(ns))) => {
                let result = outcome(hdr.len, hdr.len as usize);
                self.send_resp(src, RespEntry::done_timed(msg_id, Status::Ok, hdr.len, ns));
                return h.on_recv_done(ctx, result, dest);
            }
            Some(super::split::Split::Done(Err(e))) if crate::cma::refused(&e) => {
                return self.refuse_cma(src, msg_id, hdr, Sink::Deliver { dest, ctx, answer: true });
            }
            Some(super::split::Split::Done(Err(e))) => {
                self.send_resp(src, unread(msg_id, &e));
                return h.on_recv_done(ctx, Err(e), dest);
            }
        }
        match self.timed_cma_read(src, iovs, timed, &mut dest) {
            Ok((n, ns)) => {
                let result = outcome(hdr.len, n);
                self.send_resp(src, RespEntry::done_timed(msg_id, status_of(&result), n as u64, ns));
                h.on_recv_done(ctx, result, dest);
            }
            Err(e) if crate::cma::refused(&e) => {
                self.refuse_cma(src, msg_id, hdr, Sink::Deliver { dest, ctx, answer: true });
            }
            Err(e) => {
                self.send_resp(src, unread(msg_id, &e));
                h.on_recv_done(ctx, Err(e), dest);
            }
        }
    }

    fn refuse_cma(&mut self, src: SrcId, msg_id: u64, hdr: MsgHeader, sink: Sink) {
        self.stats.cma_fallbacks += 1;
        // Its sender learns nothing from a message that fell back (`sar_continuation`).
        self.sar_rx.insert((src, msg_id), SarRx::new(hdr, sink, false));
        self.send_resp(src, RespEntry::done(msg_id, Status::CmaFailed, 0));
    }

    /// `cma_read`, and how long it took if the sender asked (`timed`; reported to it,
    /// `measured.rs`), else 0.
    fn timed_cma_read(
        &mut self,
        src: SrcId,
        iovs: &[RemoteIov],
        timed: bool,
        dest: &mut LocalIov,
    ) -> Result<(usize, u64)> {
        self.timed_cma(src, timed, |pid| crate::cma::read_from(pid, iovs, dest, 0))
    }

    /// A CMA read out of sender `src` (`read`, given its pid), and how long it took if the
    /// sender asked (`timed`), else 0.
    #[inline(always)]
    pub(super) fn timed_cma(
        &mut self,
        src: SrcId,
        timed: bool,
        read: impl FnOnce(u32) -> Result<usize>,
    ) -> Result<(usize, u64)> {
        let started = timed.then(std::time::Instant::now);
        let copied = read(self.live_pid(src)?);
        self.stats.cma_reads += u64::from(copied.is_ok());
        let n = self.dead_if_gone(src, copied)?;
        Ok((n, time_since(started)))
    }

    /// Copy `data` straight into the memory of sender `src` that `remote` names, with CMA: a
    /// target answering a read in its initiator's own buffer (the initiator named the ranges in
    /// its request, and lends them until the read completes). Returns the bytes copied (the
    /// shorter of the two lengths). `PeerDead` for a sender that is gone; a refusal by the
    /// kernel (`Error::Os(EPERM)`, say) leaves the caller to send the data another way.
    pub fn cma_write(&mut self, to: AnswerTo, data: &LocalIov, remote: &[RemoteIov]) -> Result<usize> {
        if !self.cma_ok {
            return Err(Error::Os(libc::EPERM));
        }
        if !self.still_sends(to) {
            return Err(Error::PeerDead);
        }
        let copied = crate::cma::write_to(self.live_pid(to.src)?, data, remote);
        self.stats.cma_writes += u64::from(copied.is_ok());
        self.dead_if_gone(to.src, copied)
    }

    /// A CMA copy with sender `src` that failed because the sender died: its process gone
    /// (ESRCH), or nothing copied (EFAULT) from a process whose exit has begun, whose memory is
    /// torn down before its pidfd reads as exited (a kill storm's receive from a process being
    /// killed failed with EFAULT where it must fail as the sender's death).
    pub(super) fn dead_if_gone(&self, src: SrcId, copied: Result<usize>) -> Result<usize> {
        match copied {
            Err(Error::Os(libc::ESRCH)) => Err(Error::PeerDead),
            Err(Error::Os(libc::EFAULT))
                if self.inp.get(&src).map_or(true, |p| crate::liveness::exiting(p.watch.ident().pid)) =>
            {
                Err(Error::PeerDead)
            }
            other => other,
        }
    }

    /// The pid of sender `src`, if it was alive a moment ago (`Watch::alive_lately`): a dead
    /// sender's pid may already belong to another process, so CMA never goes to one blindly.
    /// Refused (as the kernel refuses CMA) for a sender of another pid namespace, whose pid
    /// names some other process here.
    pub(super) fn live_pid(&mut self, src: SrcId) -> Result<u32> {
        let peer = self.inp.get_mut(&src).ok_or(Error::PeerDead)?;
        if !peer.watch.alive_lately() {
            return Err(Error::PeerDead);
        }
        if !peer.watch.pid_usable() {
            return Err(Error::Os(libc::EPERM));
        }
        Ok(peer.watch.ident().pid)
    }

    fn on_segment(&mut self, src: SrcId, msg_id: u64, seg: SarSeg, h: &mut impl Handler) {
        let map = self.region.mapping();
        // The sender reserved our pool's pages before it wrote the segment: the reserve here
        // finds them (one from a sender that did not is refused like any corrupt segment).
        let at = self.region.map_sar_pool().and_then(|()| self.region.geometry().sar_offset(seg.buf));
        let Some(rx) = self.sar_rx.get_mut(&(src, msg_id)) else {
            // A segment of a message we gave up on (its sender died) still holds a buffer of
            // ours; one from a stranger refers to a buffer that is not its own to return. One
            // left by a sender we forgot, in an entry another holds now, is no one's error.
            if !self.left_by_forgotten(src) {
                self.stats.corrupt_commands += 1;
            }
            if self.knew_forgotten(src) {
                self.push_back_sar(seg.buf);
            }
            return;
        };
        let (off, len) = (seg.offset as usize, seg.len as usize);
        let started = rx.copy_ns.is_some().then(std::time::Instant::now);
        let copied = at.and_then(|at| match &mut rx.sink {
            Sink::Deliver { dest, .. } => {
                let ptr = map.bytes_ptr(at, u64::from(seg.len))?;
                // SAFETY: `ptr` is `len` bytes inside our own mapping (bounds-checked).
                unsafe { dest.write_from_raw(off, ptr, len) };
                Ok(())
            }
            Sink::Held(key) => match self.held.get_mut(key) {
                // A segment command carries its own message length: check it against ours.
                Some(Held { data: HeldData::Arriving { bytes, .. }, .. }) => match bytes.get_mut(off..off + len) {
                    Some(part) => map.read_bytes(at, part),
                    None => Err(Error::Corrupt("SAR segment beyond the message")),
                },
                _ => Ok(()),
            },
            Sink::Dropped | Sink::Refused(_) => Ok(()),
        });
        if copied.is_ok() {
            rx.received += u64::from(seg.len);
        }
        if let (Some(ns), Some(started)) = (rx.copy_ns.as_mut(), started) {
            *ns = ns.saturating_add(started.elapsed().as_nanos() as u64);
        }
        let complete = rx.received >= rx.hdr.len;
        self.give_back_sar(seg.buf);
        if complete {
            let rx = self.sar_rx.remove(&(src, msg_id)).expect("present");
            self.finish_sar(src, msg_id, rx, h);
        }
    }

    fn finish_sar(&mut self, src: SrcId, msg_id: u64, rx: SarRx, h: &mut impl Handler) {
        let len = rx.hdr.len;
        let ns = rx.time();
        match rx.sink {
            Sink::Deliver { dest, ctx, answer } => {
                let result = outcome(len, dest.len().min(len as usize));
                if answer {
                    self.send_resp(src, RespEntry::done_timed(msg_id, status_of(&result), len, ns));
                }
                h.on_recv_done(ctx, result, dest);
            }
            Sink::Held(key) => {
                // Not arriving any more (dropped meanwhile): answered now, as it always was.
                let Some(held) = self.held.get_mut(&key) else {
                    return self.send_resp(src, RespEntry::done(msg_id, Status::Ok, len));
                };
                let HeldData::Arriving { bytes, waiting } = &mut held.data else {
                    return self.send_resp(src, RespEntry::done(msg_id, Status::Ok, len));
                };
                let bytes = std::mem::take(bytes);
                match waiting.take() {
                    Some((mut dest, ctx)) => {
                        self.held.remove(&key);
                        let result = self.hand_over(src, msg_id, len, &bytes, &mut dest, ns);
                        h.on_recv_done(ctx, result, dest);
                    }
                    // Answered when delivered (`deliver`).
                    None => held.data = HeldData::Reassembled { bytes, msg_id, ns },
                }
            }
            Sink::Dropped => self.send_resp(src, RespEntry::done(msg_id, Status::Dropped, 0)),
            Sink::Refused(errno) => self.send_resp(src, RespEntry::done(msg_id, Status::Refused, errno.into())),
        }
    }

    /// Copy a reassembled SAR message into the receive it matched and answer its sender, who
    /// waited for this delivery. The time reported: the segments' (`ns`) and this copy's.
    fn hand_over(
        &mut self,
        src: SrcId,
        msg_id: u64,
        len: u64,
        bytes: &[u8],
        dest: &mut LocalIov,
        ns: u64,
    ) -> Result<usize> {
        let started = (ns > 0).then(std::time::Instant::now);
        let result = outcome(len, dest.write_at(0, bytes));
        let ns = started.map_or(0, |t| ns.saturating_add(t.elapsed().as_nanos() as u64));
        self.send_resp(src, RespEntry::done_timed(msg_id, status_of(&result), len, ns));
        result
    }

    /// Deliver a held message into `dest`.
    pub fn deliver(&mut self, key: MsgKey, mut dest: LocalIov, ctx: u64) -> Result<Delivered> {
        let Some(held) = self.held.remove(&key) else {
            return Err(Error::Invalid("no held message with that key"));
        };
        let (src, hdr) = (held.src, held.hdr);
        match held.data {
            HeldData::Bytes(bytes) => {
                let n = dest.write_at(0, &bytes);
                Ok(Delivered::Now(outcome(hdr.len, n), dest))
            }
            HeldData::Cma { iovs, msg_id, timed } => match self.timed_cma_read(src, &iovs, timed, &mut dest) {
                Ok((n, ns)) => {
                    let result = outcome(hdr.len, n);
                    self.send_resp(src, RespEntry::done_timed(msg_id, status_of(&result), n as u64, ns));
                    Ok(Delivered::Now(result, dest))
                }
                Err(e) if crate::cma::refused(&e) => {
                    self.refuse_cma(src, msg_id, hdr, Sink::Deliver { dest, ctx, answer: true });
                    Ok(Delivered::Later)
                }
                Err(e) => {
                    self.send_resp(src, unread(msg_id, &e));
                    Ok(Delivered::Now(Err(e), dest))
                }
            },
            HeldData::Reassembled { bytes, msg_id, ns } => {
                let result = self.hand_over(src, msg_id, hdr.len, &bytes, &mut dest, ns);
                Ok(Delivered::Now(result, dest))
            }
            HeldData::Arriving { bytes, .. } => {
                let data = HeldData::Arriving { bytes, waiting: Some((dest, ctx)) };
                self.held.insert(key, Held { src, hdr, data });
                Ok(Delivered::Later)
            }
            HeldData::Failed(e) => Ok(Delivered::Now(Err(e), dest)),
        }
    }

    /// Answer a message the handler took with `Disposition::Later`: its sender completes, with
    /// `Err(errno)` as `Error::Refused(errno)`. A sender that has gone is not told.
    pub fn answer(&mut self, to: AnswerTo, result: std::result::Result<(), u32>) {
        if !self.still_sends(to) {
            return;
        }
        let entry = match result {
            Ok(()) => RespEntry::done(to.msg_id, Status::Ok, 0),
            Err(errno) => RespEntry::done(to.msg_id, Status::Refused, errno.into()),
        };
        self.send_resp(to.src, entry);
    }

    /// Answer a message taken with `Disposition::Later` with a few bytes of data (at most
    /// `ANSWER_DATA_MAX`): its sender completes and its handler gets them (`on_send_answer`)
    /// first. One response entry, where a reply message and an answer would take two.
    pub fn answer_with(&mut self, to: AnswerTo, bytes: &[u8]) -> Result<()> {
        if bytes.len() > ANSWER_DATA_MAX {
            return Err(Error::Invalid("answer data too long"));
        }
        if self.still_sends(to) {
            self.send_answer(to.src, to.msg_id, bytes);
        }
        Ok(())
    }

    /// Whether the sender of `to` still holds its entry of our peer table (`AnswerTo`).
    pub(super) fn still_sends(&self, to: AnswerTo) -> bool {
        self.sender_at(to.src, to.src_gen).is_some()
    }

    /// Drop a held message; its sender completes normally.
    pub fn discard(&mut self, key: MsgKey) -> Result<()> {
        let held = self.held.remove(&key).ok_or(Error::Invalid("no held message with that key"))?;
        match held.data {
            HeldData::Cma { msg_id, .. } | HeldData::Reassembled { msg_id, .. } => {
                self.send_resp(held.src, RespEntry::done(msg_id, Status::Dropped, 0))
            }
            HeldData::Arriving { .. } => {
                for rx in self.sar_rx.values_mut() {
                    if matches!(rx.sink, Sink::Held(k) if k == key) {
                        rx.sink = Sink::Dropped;
                    }
                }
            }
            HeldData::Bytes(_) | HeldData::Failed(_) => {}
        }
        Ok(())
    }

    /// Stop placing the SAR message arriving into the destination delivered with `ctx`: its
    /// remaining segments are dropped, and its sender is refused with `errno` once they are in.
    /// For a destination about to become invalid (a registration closed under a write). The
    /// handler hears no more of `ctx` (no `on_recv_done`). False when no message arrives for
    /// `ctx`.
    pub fn refuse_arriving(&mut self, ctx: u64, errno: u32) -> bool {
        // A sender writing the tail of a split copy into it is waited for first (`split`).
        if self.refuse_split(ctx, errno) {
            return true;
        }
        let Some(rx) = self.sar_rx.values_mut().find(|rx| matches!(rx.sink, Sink::Deliver { ctx: c, .. } if c == ctx))
        else {
            return false;
        };
        rx.sink = Sink::Refused(errno);
        true
    }

    /// Number of messages the engine holds for the handler.
    pub fn held_count(&self) -> usize {
        self.held.len()
    }

    /// SAR buffers of our pool we hold back on their way to it (`cold.rs`): not free in the
    /// stack, but not lost either (a check that every buffer came back counts them).
    pub fn sar_held_back(&self) -> usize {
        self.sar_cold.held()
    }

    /// `sar_held_back` for our inject pool.
    pub fn inject_held_back(&self) -> usize {
        self.inject_cold.held()
    }

    /// Fail what waits on sender `src`. Returns the number of completions raised.
    pub(super) fn fail_receives_from(&mut self, src: SrcId, h: &mut impl Handler) -> usize {
        let mut events = 0;
        let keys: Vec<(SrcId, u64)> = self.sar_rx.keys().filter(|k| k.0 == src).copied().collect();
        for k in keys {
            let rx = self.sar_rx.remove(&k).expect("listed");
            match rx.sink {
                Sink::Deliver { dest, ctx, .. } => {
                    h.on_recv_done(ctx, Err(Error::PeerDead), dest);
                    events += 1;
                }
                Sink::Held(key) => {
                    if let Some(held) = self.held.get_mut(&key) {
                        if let HeldData::Arriving { waiting: Some(_), .. } = &held.data {
                            let Some(Held { data: HeldData::Arriving { waiting: Some((dest, ctx)), .. }, .. }) =
                                self.held.remove(&key)
                            else {
                                unreachable!("matched above")
                            };
                            h.on_recv_done(ctx, Err(Error::PeerDead), dest);
                            events += 1;
                        } else {
                            held.data = HeldData::Failed(Error::PeerDead);
                        }
                    }
                }
                Sink::Dropped | Sink::Refused(_) => {}
            }
        }
        for held in self.held.values_mut().filter(|held| held.src == src) {
            match &mut held.data {
                HeldData::Cma { .. } => held.data = HeldData::Failed(Error::PeerDead),
                // Whole here: delivered still, but answered to nobody (the sender's entry of our
                // peer table may pass to another, whose message ids are its own).
                HeldData::Reassembled { bytes, .. } => held.data = HeldData::Bytes(std::mem::take(bytes)),
                _ => {}
            }
        }
        events
    }
}

/// `len` zero bytes, or None where the allocator has no room for them: the length of a message
/// that arrives before its receive is a peer's, up to `max_msg_size`, and an allocation that
/// fails must refuse that message, not abort the process.
fn zeroed_bytes(len: u64) -> Option<Vec<u8>> {
    let len = usize::try_from(len).ok()?;
    let mut bytes = Vec::new();
    bytes.try_reserve_exact(len).ok()?;
    bytes.resize(len, 0);
    Some(bytes)
}
