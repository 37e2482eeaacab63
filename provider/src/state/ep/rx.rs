//! Receive side: posted receives, unexpected messages, matching, multi-receive buffers,
//! peek/claim/discard, cancel, and the completions receives produce.
//!
//! The engine offers each arriving message once (`on_message`). A matching posted receive
//! takes it at once; otherwise the engine holds it and we queue its header here as unexpected,
//! so a receive posted later finds it. Unexpected messages are bounded by memory, not by
//! rx_size: a receiver that posts late never makes a sender hang.

use super::sinks::{ctx_completion, Sinks, APP_DATA, APP_TAGGED};
use super::tx::TxOp;
use crate::error::FiError;
use crate::state::av::AvState;
use crate::state::cq::{Completion, CqEvent};
use rshm_ffi as ffi;
use slab::Slab;
use smr_core::cmd::MsgHeader;
use smr_core::endpoint::{Delivered, Disposition, Endpoint, Incoming, MsgKey};
use smr_core::idmap::IdMap;
use smr_core::iov::{LocalIov, Ranges};
use smr_core::Error as EngineError;
use std::collections::VecDeque;

/// A receive the application posted.
#[derive(Debug, Clone)]
pub struct PostedRecv {
    pub ctx: usize,
    pub iov: Ranges,
    pub src: u64,
    pub tag: u64,
    pub ignore: u64,
    pub tagged: bool,
    pub flags: u64,
    /// Bytes of a multi-receive buffer already handed out.
    pub used: usize,
}

impl PostedRecv {
    fn multi(&self) -> bool {
        self.flags & ffi::FI_MULTI_RECV as u64 != 0
    }

    fn total(&self) -> usize {
        self.iov.iter().map(|p| p.1).sum()
    }

    fn matches(&self, src: u64, tag: u64, directed: bool) -> bool {
        let src_ok = !directed || self.src == ffi::FI_ADDR_UNSPEC || self.src == src;
        let tag_ok = !self.tagged || (tag | self.ignore) == (self.tag | self.ignore);
        src_ok && tag_ok
    }

    /// Whether this receive reports a successful completion (errors always are).
    fn wants_completion(&self, selective: bool) -> bool {
        !selective || self.flags & ffi::FI_COMPLETION as u64 != 0
    }

    /// The destination of a `len`-byte message in this buffer. A multi-receive buffer hands out
    /// its next bytes, and says whether what is left is too little to keep it posted.
    fn carve(&mut self, len: usize, min_multi_recv: usize) -> (Ranges, bool) {
        if !self.multi() {
            return (self.iov.clone(), false);
        }
        let len = len.min(self.total() - self.used);
        let dest = crate::iov::sub_ranges(&self.iov, self.used, len);
        self.used += len;
        (dest, self.total() - self.used < min_multi_recv.max(1))
    }
}

/// A message the engine holds because no receive matched it yet.
#[derive(Debug, Clone, Copy)]
pub struct Unexpected {
    pub key: MsgKey,
    pub src: u64,
    pub hdr: MsgHeader,
}

/// A delivery under way: what its completion will say.
#[derive(Debug, Clone, Copy)]
struct RecvOp {
    ctx: usize,
    buf: usize,
    src: u64,
    hdr: MsgHeader,
    wanted: bool,
    /// This message used up a multi-receive buffer: its completion carries FI_MULTI_RECV.
    retire: bool,
}

impl RecvOp {
    fn new(recv: &PostedRecv, src: u64, hdr: MsgHeader, dest: &Ranges, selective: bool, retire: bool) -> RecvOp {
        let buf = dest.first().map_or(0, |p| p.0);
        RecvOp { ctx: recv.ctx, buf, src, hdr, wanted: recv.wants_completion(selective), retire }
    }
}

#[derive(Default)]
pub struct RxState {
    posted: [VecDeque<PostedRecv>; 2],
    unexpected: [VecDeque<Unexpected>; 2],
    in_flight: Slab<RecvOp>,
    /// Messages claimed by FI_PEEK|FI_CLAIM, by the context of the peek.
    claimed: IdMap<usize, Unexpected>,
    /// Held messages whose sender was not in the AV when they arrived (their `src` is
    /// FI_ADDR_NOTAVAIL), with the sender's name: an insert of that name gives them its fi_addr
    /// (`resolve_senders`). Empty unless peers send before they are inserted.
    unknown_senders: Vec<(MsgKey, Box<str>)>,
    pub min_multi_recv: usize,
}

/// The held messages (unexpected, or claimed by a peek) whose sender had no fi_addr.
fn held_from_unknown<'a>(
    unexpected: &'a mut [VecDeque<Unexpected>; 2],
    claimed: &'a mut IdMap<usize, Unexpected>,
) -> impl Iterator<Item = &'a mut Unexpected> {
    unexpected.iter_mut().flatten().chain(claimed.values_mut()).filter(|u| u.src == ffi::FI_ADDR_NOTAVAIL)
}

fn queue(tagged: bool) -> usize {
    usize::from(tagged)
}

fn recv_flags(hdr: &MsgHeader) -> u64 {
    let kind = if hdr.app & APP_TAGGED != 0 { ffi::FI_TAGGED } else { ffi::FI_MSG } as u64;
    let data = if hdr.app & APP_DATA != 0 { ffi::FI_REMOTE_CQ_DATA as u64 } else { 0 };
    ffi::FI_RECV as u64 | kind | data
}

impl RxState {
    /// The AV gained names: held messages from senders unknown when they arrived take the
    /// fi_addr their sender now has, so that receives directed at it match them. Open MPI's
    /// MPI_Comm_spawn children hear from their parent before they insert its address; the
    /// receive they then post names the parent's fi_addr (libfabric 2.x's peer SRX does the same
    /// for its providers: `foreach_unspec_addr`).
    pub fn resolve_senders(&mut self, av: &AvState) {
        if self.unknown_senders.is_empty() {
            return;
        }
        let RxState { unexpected, claimed, unknown_senders, .. } = self;
        let mut entries: Vec<&mut Unexpected> = held_from_unknown(unexpected, claimed).collect();
        unknown_senders.retain(|(key, name)| {
            let Some(at) = entries.iter().position(|u| u.key == *key) else { return false };
            match av.addr_of(name) {
                Some(addr) => {
                    entries.swap_remove(at).src = addr;
                    false
                }
                None => true,
            }
        });
    }

    /// Note the sender of a held message that has no fi_addr. Entries of messages a receive has
    /// taken since are dropped whenever the list doubles, so that an application that never
    /// inserts such senders (taking their messages with wildcard receives) does not grow it.
    fn remember_unknown_sender(&mut self, key: MsgKey, name: Box<str>) {
        let len = self.unknown_senders.len();
        if len >= 16 && len.is_power_of_two() {
            let RxState { unexpected, claimed, unknown_senders, .. } = self;
            let held: std::collections::HashSet<MsgKey> =
                held_from_unknown(unexpected, claimed).map(|u| u.key).collect();
            unknown_senders.retain(|(k, _)| held.contains(k));
        }
        self.unknown_senders.push((key, name));
    }

    pub fn posted_count(&self) -> usize {
        self.posted[0].len() + self.posted[1].len()
    }

    /// Whether posting a receive of this kind (tagged or not) that neither peeks nor claims is
    /// only queueing it: no held message for `take_unexpected` to look through, and no debug
    /// line of the post for it to write.
    #[inline(always)]
    pub fn only_queues(&self, tagged: bool) -> bool {
        self.unexpected[queue(tagged)].is_empty() && !crate::core_api::debug_enabled()
    }

    /// Queue a posted receive that no unexpected message used up (`take_unexpected`).
    #[inline(always)]
    pub fn queue_posted(&mut self, recv: PostedRecv) {
        self.posted[queue(recv.tagged)].push_back(recv);
    }

    /// Find a posted receive for this message and use its buffer (for multi-receive, its next
    /// bytes) with `place`, where it sits; the receive leaves the queue once used up. `place`
    /// may take the ranges (`std::mem::take`): they are not looked at after it.
    fn take_posted<R>(
        &mut self,
        src: u64,
        hdr: &MsgHeader,
        (directed, selective): (bool, bool),
        place: impl FnOnce(&mut Ranges) -> R,
    ) -> Option<(RecvOp, R)> {
        let q = &mut self.posted[queue(hdr.app & APP_TAGGED != 0)];
        // Receives are usually posted ahead in the order messages come: the first one matches,
        // and looking at it alone skips setting up the search over the deque's two halves.
        let at = if q.front()?.matches(src, hdr.tag, directed) {
            0
        } else {
            q.iter().skip(1).position(|r| r.matches(src, hdr.tag, directed))? + 1
        };
        let recv = &mut q[at];
        let (op, placed, retire) = if recv.multi() {
            let (mut dest, retire) = recv.carve(hdr.len as usize, self.min_multi_recv);
            (RecvOp::new(recv, src, *hdr, &dest, selective, retire), place(&mut dest), retire)
        } else {
            // The common case: the whole receive is used up.
            let op = RecvOp::new(recv, src, *hdr, &recv.iov, selective, false);
            (op, place(&mut recv.iov), true)
        };
        // `pop_front` for the first: `VecDeque::remove(0)` is the general shuffle (about 20
        // instructions more per message).
        if retire && at == 0 {
            q.pop_front();
        } else if retire {
            q.remove(at);
        }
        Some((op, placed))
    }

    /// The express path's whole receive, where a stream's message usually goes: into the first
    /// posted receive of its queue, when that matches and is not a multi-receive buffer. The
    /// payload is copied in and the completion reported where the receive sits, before it
    /// leaves the queue; false (nothing done) sends the message the general way
    /// (`take_posted`). Returning the receive's `RecvOp` and the bytes copied to the caller, as
    /// `take_posted` does, moved them through two frames.
    #[inline(always)]
    fn take_front(&mut self, src: u64, hdr: &MsgHeader, how: (bool, bool), payload: &[u8], sinks: &mut Sinks) -> bool {
        // SAFETY: the application's posted receive buffer, which it may not touch until the
        // receive completes (libfabric's buffer contract).
        self.place_front(src, hdr, how, |iov| Some(unsafe { crate::iov::scatter(iov, payload) }), sinks)
    }

    /// The express path of a CMA or one-segment SAR message (`Handler::on_fill_express`):
    /// `take_front` for a receive of one buffer, which `fill` places the message in. False,
    /// with nothing changed, for a receive of several ranges or when `fill` failed (None): the
    /// message goes the general way.
    #[inline(always)]
    fn fill_front(
        &mut self,
        src: u64,
        hdr: &MsgHeader,
        how: (bool, bool),
        fill: impl FnOnce(smr_core::iov::LentRange) -> Option<usize>,
        sinks: &mut Sinks,
    ) -> bool {
        let one_buffer = |iov: &Ranges| match *iov.as_slice() {
            // SAFETY: the application's posted receive buffer, which it may not touch until the
            // receive completes (libfabric's buffer contract); it completes after the fill.
            [(addr, len)] => fill(unsafe { smr_core::iov::LentRange::new(addr, len) }),
            _ => None,
        };
        self.place_front(src, hdr, how, one_buffer, sinks)
    }

    /// The two express paths' common part: when the first posted receive of the message's
    /// queue matches it and is not a multi-receive buffer, `place` puts the message in the
    /// receive's ranges (the bytes placed; None: not placed, nothing changed), and the receive
    /// completes where it sits and leaves the queue.
    #[inline(always)]
    fn place_front(
        &mut self,
        src: u64,
        hdr: &MsgHeader,
        (directed, selective): (bool, bool),
        place: impl FnOnce(&Ranges) -> Option<usize>,
        sinks: &mut Sinks,
    ) -> bool {
        let q = &mut self.posted[queue(hdr.app & APP_TAGGED != 0)];
        let Some(recv) = q.front() else { return false };
        if recv.multi() || !recv.matches(src, hdr.tag, directed) {
            return false;
        }
        let Some(n) = place(&recv.iov) else { return false };
        let op = RecvOp::new(recv, src, *hdr, &recv.iov, selective, false);
        complete_op(&op, smr_core::endpoint::outcome(hdr.len, n), sinks);
        q.pop_front();
        true
    }

    /// A delivery finished: report it.
    fn complete(&mut self, key: usize, result: smr_core::Result<usize>, sinks: &mut Sinks) {
        let Some(op) = self.in_flight.try_remove(key) else { return };
        complete_op(&op, result, sinks);
    }

    /// Remove a posted receive by context and report it canceled.
    pub fn cancel(&mut self, ctx: usize, sinks: &mut Sinks) -> bool {
        for q in &mut self.posted {
            if let Some(at) = q.iter().position(|r| r.ctx == ctx) {
                let r = q.remove(at).expect("found");
                let kind = if r.tagged { ffi::FI_TAGGED } else { ffi::FI_MSG } as u64;
                let mut entry = ctx_completion(ctx, ffi::FI_RECV as u64 | kind);
                entry.tag = r.tag;
                sinks.recv_done(CqEvent::Failed { entry, err: ffi::FI_ECANCELED, olen: 0 }, true);
                return true;
            }
        }
        false
    }
}

// Forced inline: on a small message's path it saves building the completion in one frame and
// copying it into another (about 15 instructions per message).
#[inline(always)]
fn complete_op(op: &RecvOp, result: smr_core::Result<usize>, sinks: &mut Sinks) {
    if crate::core_api::debug_enabled() {
        log_recv_done(op.ctx, op.src, op.hdr.tag, op.retire, result.clone());
    }
    let mut flags = recv_flags(&op.hdr);
    if op.retire {
        flags |= ffi::FI_MULTI_RECV as u64;
    }
    let mut entry =
        Completion { op_context: op.ctx, flags, len: 0, buf: op.buf, data: op.hdr.data, tag: op.hdr.tag, src: op.src };
    if op.hdr.app & APP_DATA == 0 {
        entry.data = 0;
    }
    let event = match result {
        Ok(n) => {
            entry.len = n;
            CqEvent::Done(entry)
        }
        Err(EngineError::Truncated { delivered, sent }) => {
            entry.len = delivered;
            CqEvent::Failed { entry, err: ffi::FI_ETRUNC, olen: sent - delivered }
        }
        Err(e) => {
            crate::warn!(EpData, "receive ctx {:#x} failed: {e}", entry.op_context);
            CqEvent::Failed { entry, err: FiError::from(e).0, olen: 0 }
        }
    };
    sinks.recv_done(event, op.wanted);
}

/// The debug line of a finished receive, out of line and given copies (`sinks::log_completion`
/// says why).
#[cold]
#[inline(never)]
fn log_recv_done(ctx: usize, src: u64, tag: u64, retire: bool, result: smr_core::Result<usize>) {
    crate::debug!(EpData, "recv done ctx {ctx:#x} from {src} tag {tag:#x} result {result:?} retire {retire}");
}

/// A sender's fi_addr, cached by source id (see `Handler::source`).
#[derive(Clone)]
pub struct SourceAddr {
    gen: u64,
    name: Box<str>,
    addr: u64,
}

/// The engine's view of an endpoint's receive side, during progress.
pub struct Handler<'a> {
    pub rx: &'a mut RxState,
    pub tx_ops: &'a mut Slab<TxOp>,
    /// One-sided operations: ours in flight, and peers' against our registrations.
    pub target: super::rma::Target<'a>,
    pub sinks: Sinks<'a>,
    pub av: Option<&'a AvState>,
    pub src_addrs: &'a mut Vec<Option<SourceAddr>>,
    pub directed: bool,
}

impl Handler<'_> {
    /// The fi_addr of a sender, cached per engine source id. A source id is reused after its
    /// sender goes away: the cache entry holds the sender's generation (`Incoming::src_gen`),
    /// and its name for senders whose generation is unknown (0).
    fn source(&mut self, msg: &Incoming, name: &str) -> u64 {
        if let Some(addr) = self.cached_source(msg.src, msg.src_gen) {
            return addr;
        }
        // A sender already gone (generation 0) is known by its name.
        if msg.src_gen == 0 {
            if let Some(Some(c)) = self.src_addrs.get(msg.src as usize) {
                if *c.name == *name {
                    return c.addr;
                }
            }
        }
        self.source_first_seen(msg, name)
    }

    /// The fi_addr of a sender known by its generation, if cached (the express path's lookup:
    /// no name to compare).
    #[inline(always)]
    fn cached_source(&self, src: smr_core::endpoint::SrcId, src_gen: u64) -> Option<u64> {
        match self.src_addrs.get(src as usize) {
            Some(Some(c)) if src_gen != 0 && c.gen == src_gen => Some(c.addr),
            _ => None,
        }
    }

    /// `source` of a sender not cached yet (or whose id went to another sender): look its name
    /// up in the AV and cache it.
    #[cold]
    fn source_first_seen(&mut self, msg: &Incoming, name: &str) -> u64 {
        let at = msg.src as usize;
        let addr = self.av.and_then(|av| av.addr_of(name)).unwrap_or(ffi::FI_ADDR_NOTAVAIL);
        if at < 1 << 20 {
            if self.src_addrs.len() <= at {
                self.src_addrs.resize(at + 1, None);
            }
            self.src_addrs[at] = Some(SourceAddr { gen: msg.src_gen, name: name.into(), addr });
        }
        addr
    }
}

impl Handler<'_> {
    /// Match an arriving message from `src` (its fi_addr) against the posted receives: the
    /// receive and what `place` made of the buffer it goes to, or, with none posted for it, the
    /// message queued as unexpected (`Err(Hold)`: the engine keeps its bytes).
    fn take_or_hold<R>(
        &mut self,
        msg: &Incoming,
        src: u64,
        place: impl FnOnce(&mut Ranges) -> R,
    ) -> Result<(RecvOp, R), Disposition> {
        crate::debug!(EpData, "arrived from {src} len {} tag {:#x} app {}", msg.hdr.len, msg.hdr.tag, msg.hdr.app);
        let how = (self.directed, self.sinks.b.rx_selective);
        self.rx.take_posted(src, &msg.hdr, how, place).ok_or_else(|| self.hold(msg, src))
    }

    /// A message from `src` that no posted receive matched: queued as unexpected, so a receive
    /// posted later finds it; the engine keeps its bytes.
    fn hold(&mut self, msg: &Incoming, src: u64) -> Disposition {
        if src == ffi::FI_ADDR_NOTAVAIL {
            self.note_unknown_sender(msg);
        }
        let tagged = msg.hdr.app & APP_TAGGED != 0;
        self.rx.unexpected[queue(tagged)].push_back(Unexpected { key: msg.key, src, hdr: msg.hdr });
        Disposition::Hold
    }
}

impl Handler<'_> {
    /// Remember who sent a message held with no fi_addr (`RxState::resolve_senders`): its name
    /// is in the cache `source` filled.
    #[cold]
    fn note_unknown_sender(&mut self, msg: &Incoming) {
        if let Some(Some(c)) = self.src_addrs.get(msg.src as usize) {
            self.rx.remember_unknown_sender(msg.key, c.name.clone());
        }
    }
}

impl smr_core::endpoint::Handler for Handler<'_> {
    fn on_message(&mut self, msg: &Incoming, src_name: &str) -> Disposition {
        if super::rma::kind_of(msg.hdr.app) != super::rma::KIND_MSG {
            return self.target.on_message(msg);
        }
        let src = self.source(msg, src_name);
        // The receive's ranges, taken: it leaves the queue (a copy of them cost about 55
        // instructions of a CMA or SAR message's arrival).
        let (op, dest) = match self.take_or_hold(msg, src, std::mem::take) {
            Ok(matched) => matched,
            Err(hold) => return hold,
        };
        let ctx = self.rx.in_flight.insert(op) as u64;
        // SAFETY: the ranges are the application's posted receive buffer, which it may not touch
        // until the receive completes (libfabric's buffer contract).
        let dest = unsafe { crate::iov::lend(dest) };
        Disposition::Deliver { dest, ctx }
    }

    fn on_payload(&mut self, msg: &Incoming, src_name: &str, payload: &[u8]) -> Disposition {
        if super::rma::kind_of(msg.hdr.app) != super::rma::KIND_MSG {
            return match self.target.on_payload(msg, payload, &mut self.sinks) {
                Some(d) => d,
                None => self.on_message(msg, src_name),
            };
        }
        let src = self.source(msg, src_name);
        // The small message's whole path: copy into the posted buffer where the receive sits,
        // and complete, with no delivery to come back from.
        // SAFETY: the application's posted receive buffer, which it may not touch until the
        // receive completes (libfabric's buffer contract).
        let copy = |dest: &mut Ranges| unsafe { crate::iov::scatter(dest, payload) };
        let (op, n) = match self.take_or_hold(msg, src, copy) {
            Ok(matched) => matched,
            Err(hold) => return hold,
        };
        complete_op(&op, smr_core::endpoint::outcome(msg.hdr.len, n), &mut self.sinks);
        Disposition::Taken { answer_later: false }
    }

    fn on_inline(&mut self, msg: &Incoming, payload: &[u8]) -> Option<Disposition> {
        if super::rma::kind_of(msg.hdr.app) != super::rma::KIND_MSG {
            // Served here in full (a write, a small read, an atomic), or the general way.
            return self.target.on_payload(msg, payload, &mut self.sinks);
        }
        // `on_payload` for a sender seen before (the general path caches it), without its
        // name. Written out rather than shared with `on_payload`: sharing its tail
        // (`take_or_hold` and the `Disposition` it returns) cost 50 instructions per message.
        let src = self.cached_source(msg.src, msg.src_gen)?;
        let hdr = &msg.hdr;
        crate::debug!(EpData, "arrived from {src} len {} tag {:#x} app {} (express)", hdr.len, hdr.tag, hdr.app);
        let how = (self.directed, self.sinks.b.rx_selective);
        if self.rx.take_front(src, hdr, how, payload, &mut self.sinks) {
            return Some(Disposition::Taken { answer_later: false });
        }
        // SAFETY: as in `on_payload`.
        let copy = |dest: &mut Ranges| unsafe { crate::iov::scatter(dest, payload) };
        let Some((op, n)) = self.rx.take_posted(src, hdr, how, copy) else { return Some(self.hold(msg, src)) };
        complete_op(&op, smr_core::endpoint::outcome(hdr.len, n), &mut self.sinks);
        Some(Disposition::Taken { answer_later: false })
    }

    fn on_fill_express(
        &mut self,
        msg: &Incoming,
        fill: impl FnOnce(smr_core::iov::LentRange) -> Option<usize>,
    ) -> bool {
        if super::rma::kind_of(msg.hdr.app) != super::rma::KIND_MSG {
            return false;
        }
        // A sender seen before, as for `on_inline`.
        let Some(src) = self.cached_source(msg.src, msg.src_gen) else { return false };
        let hdr = &msg.hdr;
        crate::debug!(
            EpData,
            "arrived from {src} len {} tag {:#x} app {} (express, filled)",
            hdr.len,
            hdr.tag,
            hdr.app
        );
        let how = (self.directed, self.sinks.b.rx_selective);
        self.rx.fill_front(src, hdr, how, fill, &mut self.sinks)
    }

    fn on_recv_done(&mut self, ctx: u64, result: smr_core::Result<usize>, dest: LocalIov) {
        use super::rma::{CTX_REPLY, CTX_TARGET};
        if ctx & CTX_REPLY != 0 {
            let rma = &mut *self.target.rma;
            super::rma::reply_delivered(rma, self.tx_ops, ctx & !CTX_REPLY, result, &mut self.sinks);
        } else if ctx & CTX_TARGET != 0 {
            self.target.on_delivered((ctx & !CTX_TARGET) as usize, result, dest, &mut self.sinks);
        } else {
            self.rx.complete(ctx as usize, result, &mut self.sinks);
        }
    }

    fn on_send_answer(&mut self, cookie: u64, parts: &[&[u8]]) {
        if cookie & (super::rma::COOKIE_REPLY | super::rma::COOKIE_UNTRACKED) == 0 {
            super::rma::answer_data(self.target.rma, self.tx_ops, cookie as usize, parts);
        }
    }

    fn on_send_answer_part(&mut self, cookie: u64, parts: &[&[u8]]) {
        if cookie & (super::rma::COOKIE_REPLY | super::rma::COOKIE_UNTRACKED) == 0 {
            super::rma::answer_part(self.tx_ops, cookie as usize, parts);
        }
    }

    fn on_send_done(&mut self, cookie: u64, result: smr_core::Result<()>) {
        use super::rma::{COOKIE_REPLY, COOKIE_UNTRACKED};
        if let Err(smr_core::Error::Os(libc::ENOSPC)) = result {
            super::tx::no_room_for_pools();
        }
        if cookie & COOKIE_REPLY != 0 {
            // Not the list before a segmented operation (both bits): that operation reports.
            if cookie != super::rma::COOKIE_SEGMENTS {
                super::rma::reply_sent(self.target.rma, (cookie & !COOKIE_REPLY) as usize, result);
            }
        } else if cookie & COOKIE_UNTRACKED != 0 {
            super::rma::untracked_done(self.target.rma, cookie, result, &mut self.sinks);
        } else {
            super::rma::answered(self.target.rma, self.tx_ops, cookie as usize, result, &mut self.sinks);
        }
    }
}

/// Everything posting a receive needs from the endpoint state.
pub struct PostCtx<'a, 'b> {
    pub rx: &'a mut RxState,
    pub engine: &'a mut Endpoint,
    pub sinks: &'a mut Sinks<'b>,
    pub directed: bool,
}

/// Post a receive, first part: match it against unexpected messages. True when they used it
/// up; otherwise the caller queues it (`RxState::queue_posted`). The caller keeps the receive
/// and pushes it itself: moved down by value into here, it was copied once more on its way into
/// the queue (8 instructions per fi_trecv: 183 -> 175).
#[inline(always)]
pub fn take_unexpected(ctx: PostCtx, recv: &mut PostedRecv) -> bool {
    let PostCtx { rx, engine, sinks, directed } = ctx;
    if crate::core_api::debug_enabled() {
        log_post(recv.ctx, recv.total(), recv.src, (recv.tagged, recv.tag, recv.ignore), recv.flags);
    }
    let q = queue(recv.tagged);
    // Nothing waiting, the usual case: no search to set up.
    while !rx.unexpected[q].is_empty() {
        let at = rx.unexpected[q].iter().position(|u| recv.matches(u.src, u.hdr.tag, directed));
        let Some(at) = at else { break };
        let u = rx.unexpected[q].remove(at).expect("found");
        let (dest, retire) = recv.carve(u.hdr.len as usize, rx.min_multi_recv);
        let op = RecvOp::new(recv, u.src, u.hdr, &dest, sinks.b.rx_selective, retire);
        deliver(rx, engine, sinks, u.key, op, dest);
        if !recv.multi() || retire {
            return true;
        }
    }
    false
}

/// The debug line of a posted receive, out of line and given copies (`sinks::log_completion`
/// says why).
#[cold]
#[inline(never)]
fn log_post(ctx: usize, len: usize, src: u64, (tagged, tag, ignore): (bool, u64, u64), flags: u64) {
    crate::debug!(
        EpData,
        "post recv ctx {ctx:#x} len {len} src {src} tagged {tagged} tag {tag:#x} ignore {ignore:#x} flags {flags:#x}"
    );
}

fn deliver(rx: &mut RxState, engine: &mut Endpoint, sinks: &mut Sinks, key: MsgKey, op: RecvOp, dest: Ranges) {
    let slot = rx.in_flight.insert(op);
    // SAFETY: the application's receive buffer, lent until completion.
    let lent = unsafe { crate::iov::lend(dest) };
    match engine.deliver(key, lent, slot as u64) {
        Ok(Delivered::Now(result, _)) => rx.complete(slot, result, sinks),
        Ok(Delivered::Later) => {}
        Err(e) => rx.complete(slot, Err(e), sinks),
    }
}

/// FI_PEEK (optionally with FI_CLAIM or FI_DISCARD) on the tagged queue.
pub fn peek(ctx: PostCtx, recv: &PostedRecv) {
    let PostCtx { rx, engine, sinks, directed } = ctx;
    let q = queue(true);
    let found = rx.unexpected[q].iter().position(|u| recv.matches(u.src, u.hdr.tag, directed));
    let Some(at) = found else {
        let mut entry = ctx_completion(recv.ctx, ffi::FI_RECV as u64 | ffi::FI_TAGGED as u64);
        entry.tag = recv.tag;
        sinks.recv_done(CqEvent::Failed { entry, err: ffi::FI_ENOMSG, olen: 0 }, true);
        return;
    };
    let u = rx.unexpected[q][at];
    if recv.flags & ffi::FI_CLAIM != 0 {
        rx.unexpected[q].remove(at);
        rx.claimed.insert(recv.ctx, u);
    } else if recv.flags & ffi::FI_DISCARD != 0 {
        rx.unexpected[q].remove(at);
        let _ = engine.discard(u.key);
    }
    let entry = Completion {
        op_context: recv.ctx,
        flags: recv_flags(&u.hdr),
        len: u.hdr.len as usize,
        buf: 0,
        data: if u.hdr.app & APP_DATA != 0 { u.hdr.data } else { 0 },
        tag: u.hdr.tag,
        src: u.src,
    };
    sinks.recv_done(CqEvent::Done(entry), true);
}

/// FI_CLAIM without FI_PEEK: receive (or with FI_DISCARD, drop) the message a peek claimed.
pub fn claim(ctx: PostCtx, recv: &PostedRecv) -> Result<(), FiError> {
    let PostCtx { rx, engine, sinks, .. } = ctx;
    let u = rx.claimed.remove(&recv.ctx).ok_or(FiError::INVAL)?;
    if recv.flags & ffi::FI_DISCARD != 0 {
        let _ = engine.discard(u.key);
        let entry = Completion {
            op_context: recv.ctx,
            flags: recv_flags(&u.hdr),
            tag: u.hdr.tag,
            src: u.src,
            ..Completion::default()
        };
        sinks.recv_done(CqEvent::Done(entry), true);
        return Ok(());
    }
    let op = RecvOp::new(recv, u.src, u.hdr, &recv.iov, sinks.b.rx_selective, false);
    deliver(rx, engine, sinks, u.key, op, recv.iov.clone());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(rx: &mut RxState, key: MsgKey, src: u64) {
        rx.unexpected[0].push_back(Unexpected { key, src, hdr: MsgHeader::default() });
    }

    #[test]
    fn a_held_message_takes_its_senders_fi_addr_once_the_sender_is_inserted() {
        let mut rx = RxState::default();
        let mut av = AvState::default();
        av.insert("known".into());
        held(&mut rx, 1, ffi::FI_ADDR_NOTAVAIL);
        rx.remember_unknown_sender(1, "late".into());
        held(&mut rx, 2, 0);
        rx.resolve_senders(&av);
        assert_eq!(rx.unexpected[0][0].src, ffi::FI_ADDR_NOTAVAIL, "not inserted yet");
        let (late, _) = av.insert("late".into());
        rx.resolve_senders(&av);
        assert_eq!(rx.unexpected[0][0].src, late);
        assert_eq!(rx.unexpected[0][1].src, 0, "a message with a sender is left alone");
        assert!(rx.unknown_senders.is_empty());
    }

    #[test]
    fn senders_of_messages_taken_since_are_forgotten_as_the_list_grows() {
        let mut rx = RxState::default();
        // 1,000 messages from senders never inserted, each taken by a wildcard receive before
        // the next arrives; one more stays held.
        for key in 0..1000 {
            held(&mut rx, key, ffi::FI_ADDR_NOTAVAIL);
            rx.remember_unknown_sender(key, "stranger".into());
            if key != 500 {
                rx.unexpected[0].pop_back();
            }
        }
        assert!(rx.unknown_senders.len() <= 32, "{} entries kept", rx.unknown_senders.len());
        assert!(rx.unknown_senders.iter().any(|(k, _)| *k == 500), "the held message's sender was dropped");
    }
}
