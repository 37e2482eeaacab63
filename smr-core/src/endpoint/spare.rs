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
//! A message of one SAR segment (up to 16 KiB) leaves a spare of the receiver's SAR pool in the
//! sender's hand too: without it a message just above the inject size paid the stack's pop on
//! its critical path and copied into a buffer last used dozens of messages before (`cold`). The
//! receiver still gives a SAR buffer back as soon as it copied out of it: deferred to its next
//! pass, as inject buffers are, a stream of 6-16 KiB messages found the few buffers not held
//! back cold all out (docs/perf/protocols.md).
//!
//! The receiver frees a forgotten sender's entry only after that decision (layout version 22),
//! so a new sender in the entry always finds the record empty. A sender records a buffer before
//! its pop takes it (layout version 23): each attempt of the pop announces the index it tries,
//! and the pop marks what it took with the sender's entry index, so a sender killed inside its
//! pop leaves a record that the decision checks against that mark (`held`). (Inject messages
//! are never staged behind `SendOpts::more`, which could hold many buffers at once:
//! `Endpoint::more_if_inline`.)

use super::entry::free_entry_of;
use super::{Endpoint, SrcId};
use crate::free_stack::FreeStack;
use crate::held::Record;
use crate::layout::PeerSlot;
use crate::region::Region;

/// The two pools a sender takes buffers of the receiver's from, each with its record in the
/// sender's peer-table entry.
#[derive(Clone, Copy)]
pub(super) enum Pool {
    Inject,
    Sar,
}

impl Pool {
    fn record(self, entry: &PeerSlot) -> Record<'_> {
        match self {
            Pool::Inject => Record { word: &entry.held, msg: &entry.held_msg },
            Pool::Sar => Record { word: &entry.sar_held, msg: &entry.sar_held_msg },
        }
    }

    fn stack(self, region: &Region) -> FreeStack<'_> {
        match self {
            Pool::Inject => region.inject_stack(),
            Pool::Sar => region.sar_stack(),
        }
    }

    /// Where buffer `index` of this pool lies in `region`.
    fn offset(self, region: &Region, index: u32) -> crate::error::Result<u64> {
        match self {
            Pool::Inject => region.geometry().inject_offset(index),
            Pool::Sar => region.geometry().sar_offset(index),
        }
    }
}

/// A sender as the receiver's pools know it: its entry in the receiver's peer table, the
/// entry's index (which tags the buffers it pops: `FreeStack::pop_as`), and its incarnation
/// (which tags its records).
#[derive(Clone, Copy)]
pub(super) struct Holder<'a> {
    pub entry: &'a PeerSlot,
    pub slot: u32,
    pub incarnation: u64,
}

/// Sender: a buffer of `region`'s `pool` for message `key` (a SAR segment's sequence number):
/// the spare we hold, else one popped and recorded as in flight where the record allows
/// (announced before the pop: `held`).
#[inline(always)]
pub(super) fn take(region: &Region, us: Holder<'_>, pool: Pool, key: u64) -> Option<u32> {
    let rec = pool.record(us.entry);
    if let Some(index) = rec.take_spare(us.incarnation, key) {
        return Some(index);
    }
    let popped = pool.stack(region).pop_as(us.slot, |i| rec.announce(us.incarnation, i, Some(key))).ok();
    rec.hold_in_flight(us.incarnation, popped, key);
    popped
}

/// Sender: the command naming `index` is pushed (`pushed`), or the buffer goes back to the
/// pool; no longer recorded as in flight either way. With `next` (the length of the message
/// likely to follow: after an inject message, or a SAR message of one segment) the buffer for
/// the next one is taken now, while the receiver is busy with this one (none if the pool is
/// empty, or the record is not ours to write), and its first `next` bytes are fetched writable
/// (`warm`).
#[inline(always)]
pub(super) fn done(region: &Region, us: Holder<'_>, pool: Pool, index: u32, pushed: bool, next: Option<u64>) {
    let (rec, incarnation) = (pool.record(us.entry), us.incarnation);
    match (next, pushed) {
        (Some(len), true) if rec.wants_spare(incarnation) => {
            // Announced before each attempt: a buffer the pop took is recorded if we die in it.
            let spare = pool.stack(region).pop_as(us.slot, |i| rec.announce(incarnation, i, None)).ok();
            rec.sent(incarnation, spare);
            if let Some(spare) = spare {
                warm(region, pool, spare, len);
            }
        }
        (_, true) => rec.clear(incarnation, index),
        (_, false) => rec.give_back_in_flight(incarnation, index, &pool.stack(region)),
    }
}

/// Sender: ask for the first `len` bytes of buffer `index` of `pool` (our new spare) in a
/// writable state, while we wait for the receiver. The receiver copied an earlier message out of
/// it, so its lines sit in the receiver's cache: taken now, the copy of our next message of
/// about this size finds them in ours instead of waiting for them one after another. A hint only.
#[inline(always)]
fn warm(region: &Region, pool: Pool, index: u32, len: u64) {
    let Ok(at) = pool.offset(region, index).and_then(|off| region.mapping().bytes_ptr(off, len)) else {
        return;
    };
    for line in (0..len as usize).step_by(64) {
        // SAFETY: `line` is below `len`, and `at..at + len` lies inside the mapping (checked);
        // a prefetch reads and writes nothing anyway.
        crate::sync::prefetch_addr(unsafe { at.add(line) }, crate::sync::Prefetch::Write);
    }
}

/// Sender: give our spare in `region`'s pool back (a receiver we stopped sending to, or leave).
pub(super) fn give_back(region: &Region, slot: u32, incarnation: u64) {
    if let Some(entry) = region.peer_slots().get(slot as usize) {
        for pool in [Pool::Inject, Pool::Sar] {
            pool.record(entry).give_back(incarnation, &pool.stack(region));
        }
    }
}

/// Owner: the buffers of our `pool` that a sender's pop or push is in the middle of (a pending
/// record in its entry of our table), which the stack's repair leaves alone (`free_stack`). A
/// gone sender's record stays pending until we decide about it; after that its orphan, if it
/// left one, is the repair's to give back.
pub(super) fn spoken_for(region: &Region, pool: Pool) -> Vec<u32> {
    region.peer_slots().iter().filter_map(|entry| pool.record(entry).pending()).collect()
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
        self.note_handled(src, Pool::Inject, msg_id);
        self.taken_injects.push(buf);
    }

    /// Receiver: a command from `src` naming a buffer of `pool` (message id, or segment sequence number) is
    /// handled: the buffer comes back through it.
    #[inline(always)]
    pub(super) fn note_handled(&mut self, src: SrcId, pool: Pool, key: u64) {
        if let Some(seen) = self.handled.get_mut(src as usize) {
            seen[pool as usize] = seen[pool as usize].max(key);
        }
    }

    /// The highest id (sequence number) of the commands naming a buffer of `pool` handled from `src`.
    #[cfg(test)]
    pub(super) fn handled(&self, src: SrcId, pool: Pool) -> Option<u64> {
        self.handled.get(src as usize).map(|seen| seen[pool as usize]).filter(|&k| k > 0)
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
            self.inject_cold.give_back(&stack, buf);
        }
    }

    /// Receiver forgetting the sender of `incarnation` in entry `src`: decide about the buffers
    /// it holds, and free its entry, once every command it pushed so far is handled.
    pub(super) fn decide_later(&mut self, src: SrcId, incarnation: u64) {
        let until = self.cmd_rx.claimed(&self.region.cmd_ring());
        self.decisions.push(Decision { src, incarnation, until });
    }

    /// Whether a decision about the sender of `incarnation` in entry `src` waits.
    pub(super) fn decision_waits(&self, src: SrcId, incarnation: u64) -> bool {
        self.decisions.iter().any(|d| d.src == src && d.incarnation == incarnation)
    }

    /// On the liveness tick: the decisions whose commands are all handled. The entry is freed
    /// last, so that the next sender in it finds no record of its predecessor's (it could not
    /// record a buffer of its own beside one), and the count of what was handled from the
    /// entry starts again with it (a predecessor's higher message ids made a buffer in flight
    /// look delivered). Not while we know the sender (it connected again meanwhile).
    pub(super) fn decide_due(&mut self) {
        if self.decisions.is_empty() {
            return;
        }
        let (rx, region, handled, inp, me) = (&self.cmd_rx, &self.region, &mut self.handled, &self.inp, self.me);
        let forgotten = &mut self.forgotten;
        self.decisions.retain(|d| {
            if !rx.passed(d.until) {
                return true;
            }
            let (Some(entry), Some(seen)) = (region.peer_slots().get(d.src as usize), handled.get_mut(d.src as usize))
            else {
                return false;
            };
            for pool in [Pool::Inject, Pool::Sar] {
                pool.record(entry).decide(d.incarnation, seen[pool as usize], d.src, &pool.stack(region));
            }
            if inp.incarnation(d.src) != Some(d.incarnation) && free_entry_of(entry, d.incarnation, me) {
                *seen = [0; 2];
                // A sender we gave up may claim an entry again, and is met afresh then.
                if forgotten.get(&d.src).is_some_and(|f| f.given_up && f.incarnation == d.incarnation) {
                    forgotten.remove(&d.src);
                }
            }
            false
        });
    }
}
