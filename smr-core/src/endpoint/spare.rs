//! Keeping the inject pool's shared words off a message's critical path, and no buffer lost to
//! a sender that dies.
//!
//! An inject message takes a buffer from the receiver's free stack (`free_stack`), and the
//! receiver gives it back once it has taken the message. The stack's head and link words are
//! written by both processes, so every pop and push first takes their cache lines from the
//! other side. In a ping-pong both stood on the critical path: the sender's pop before it could
//! copy, the receiver's push before the application saw the message. Now both happen while the
//! other side is busy:
//! - the sender keeps one buffer of each receiver's pool in hand, its *spare*, taken right after
//!   it pushed a message (while the receiver works on it), and fills it with its next inject
//!   message to that receiver;
//! - the receiver gives the buffers of the messages it took back at the start of its next
//!   progress pass, or before it sleeps (`Endpoint::give_back_taken`), not in the pass that
//!   hands the messages over.
//!
//! The buffer a sender holds, a spare or one that carries its message, is recorded in its entry
//! of the receiver's peer table (`PeerSlot::held`, a `held::Record` tagged with the sender's
//! incarnation), so that none is lost:
//! - a sender gives its spare back on the first liveness tick on which it has not sent to that
//!   receiver since the last, and before it disconnects;
//! - a receiver that forgets a sender (dead or gone) decides about its record once it has
//!   handled every command the sender pushed (`Decision`): a spare, or a buffer whose message
//!   never arrived (the sender died copying it), goes back to the pool.
//!
//! The SAR buffer a sender copies a segment into is recorded the same way (`PeerSlot::sar_held`)
//! from its pop until the segment's command is pushed, and decided about with the inject one.
//!
//! Not recorded, and so lost if the sender dies before it pushes the command: a buffer filled
//! while the record is taken (a second message staged behind `SendOpts::more`, or a record a
//! predecessor in the entry left that the receiver has not decided about yet).

use super::{Endpoint, SrcId};
use crate::held::Record;
use crate::layout::PeerSlot;
use crate::region::Region;

fn record(entry: &PeerSlot) -> Record<'_> {
    Record { word: &entry.held, msg: &entry.held_msg }
}

fn sar_record(entry: &PeerSlot) -> Record<'_> {
    Record { word: &entry.sar_held, msg: &entry.sar_held_msg }
}

/// A SAR segment's place in its sender's order of segments to one receiver: its message's id,
/// then its offset (messages are below 2^30 bytes). A sender pushes the segments of a message in
/// order, and messages mostly in order of id; where not, a decision only keeps a buffer.
pub(super) fn sar_key(msg_id: u64, offset: u64) -> u64 {
    msg_id << 30 | (offset & ((1 << 30) - 1))
}

/// Sender: a SAR buffer of `region`'s pool (our entry `slot`) for the segment `key`, recorded
/// while we copy into it, until `sar_pushed`.
#[inline]
pub(super) fn take_sar(region: &Region, slot: u32, incarnation: u64, key: u64) -> Option<u32> {
    let index = region.sar_stack().pop().ok()?;
    if let Some(entry) = region.peer_slots().get(slot as usize) {
        sar_record(entry).hold_in_flight(incarnation, index, key);
    }
    Some(index)
}

/// Sender: the segment in SAR buffer `index` is pushed (`pushed`), or the buffer goes back to
/// the pool; no longer recorded either way.
#[inline]
pub(super) fn sar_done(region: &Region, slot: u32, incarnation: u64, index: u32, pushed: bool) {
    if let Some(entry) = region.peer_slots().get(slot as usize) {
        sar_record(entry).clear(incarnation, index);
    }
    if !pushed {
        let _ = region.sar_stack().push(index);
    }
}

/// Sender: the buffer to carry message `msg_id` to `region` (our entry `slot`): the spare we
/// hold, or one from its pool, recorded as in flight where the record allows.
#[inline(always)]
pub(super) fn take(region: &Region, slot: u32, incarnation: u64, msg_id: u64) -> Option<u32> {
    let entry = region.peer_slots().get(slot as usize)?;
    let rec = record(entry);
    if let Some(index) = rec.take_spare(incarnation, msg_id) {
        return Some(index);
    }
    let index = region.inject_stack().pop().ok()?;
    rec.hold_in_flight(incarnation, index, msg_id);
    Some(index)
}

/// Sender: the message in `index` was not sent after all; the buffer goes back to the pool.
pub(super) fn untake(region: &Region, slot: u32, incarnation: u64, index: u32) {
    if let Some(entry) = region.peer_slots().get(slot as usize) {
        record(entry).clear(incarnation, index);
    }
    let _ = region.inject_stack().push(index);
}

/// Sender: after a message to `region` went out, take the buffer for the next one now, while
/// the receiver is busy with this one (none if the pool is empty, or the record is not ours to
/// write).
#[inline]
pub(super) fn refill(region: &Region, slot: u32, incarnation: u64) {
    let Some(entry) = region.peer_slots().get(slot as usize) else { return };
    let rec = record(entry);
    if rec.wants_spare(incarnation) {
        rec.sent(incarnation, region.inject_stack().pop().ok());
    }
}

/// Sender: give our spare in `region`'s pool back (a receiver we stopped sending to, or leave).
pub(super) fn give_back(region: &Region, slot: u32, incarnation: u64) {
    if let Some(entry) = region.peer_slots().get(slot as usize) {
        record(entry).give_back(incarnation, &region.inject_stack());
    }
}

/// Receiver: what to do about the record of a sender we forgot, once our command ring has
/// passed `until` (every command it pushed before we forgot it is handled by then).
pub(super) struct Decision {
    src: SrcId,
    incarnation: u64,
    until: u64,
}

impl Endpoint {
    /// Receiver: the inject buffer of a message taken in this pass goes back to our pool at
    /// the start of the next one (or before we sleep), once the application has the message.
    /// Message `msg_id` from `src` counts as handled for `Decision`.
    #[inline(always)]
    pub(super) fn give_back_later(&mut self, src: SrcId, msg_id: u64, buf: u32) {
        self.note_inject_handled(src, msg_id);
        self.taken_injects.push(buf);
    }

    /// Receiver: an inject message `msg_id` from `src` was handled (its buffer given back).
    #[inline(always)]
    pub(super) fn note_inject_handled(&mut self, src: SrcId, msg_id: u64) {
        if let Some(seen) = self.inject_handled.get_mut(src as usize) {
            *seen = Some(seen.map_or(msg_id, |s| s.max(msg_id)));
        }
    }

    /// Receiver: a command naming a SAR buffer (segment `key`, `sar_key`) from `src` is handled:
    /// the buffer comes back through it.
    pub(super) fn note_sar_handled(&mut self, src: SrcId, key: u64) {
        if let Some(seen) = self.sar_handled.get_mut(src as usize) {
            *seen = Some(seen.map_or(key, |s| s.max(key)));
        }
    }

    /// Give the inject buffers of the messages taken since the last pass back to our pool.
    /// `progress` does it first thing; a caller about to sleep after a pass calls it, so that
    /// no buffer stays out while we sleep.
    #[inline]
    pub fn give_back_taken(&mut self) {
        if !self.taken_injects.is_empty() {
            self.give_back_taken_now();
        }
    }

    #[inline(never)]
    fn give_back_taken_now(&mut self) {
        let stack = self.region.inject_stack();
        for buf in self.taken_injects.drain(..) {
            let _ = stack.push(buf);
        }
    }

    /// Receiver forgetting the sender of `incarnation` in entry `src`: decide about the buffer
    /// it holds once every command it pushed so far is handled.
    pub(super) fn decide_later(&mut self, src: SrcId, incarnation: u64) {
        let until = self.cmd_rx.claimed(&self.region.cmd_ring());
        self.decisions.push(Decision { src, incarnation, until });
    }

    /// On the liveness tick: the decisions whose commands are all handled.
    pub(super) fn decide_due(&mut self) {
        if self.decisions.is_empty() {
            return;
        }
        let (rx, region) = (&self.cmd_rx, &self.region);
        let (injects, sars) = (&self.inject_handled, &self.sar_handled);
        self.decisions.retain(|d| {
            if !rx.passed(d.until) {
                return true;
            }
            if let Some(entry) = region.peer_slots().get(d.src as usize) {
                let seen = |handled: &[Option<u64>]| handled.get(d.src as usize).copied().flatten();
                record(entry).decide(d.incarnation, seen(injects), &region.inject_stack());
                sar_record(entry).decide(d.incarnation, seen(sars), &region.sar_stack());
            }
            false
        });
    }
}
