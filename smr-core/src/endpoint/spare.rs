//! Keeping the inject pool's shared words off a message's critical path.
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
//! A spare is recorded in the sender's entry of the receiver's peer table (`PeerSlot::spare`,
//! a `held` word tagged with the sender's incarnation), so that none is lost:
//! - a sender gives its spare back on the first liveness tick on which it has not sent to that
//!   receiver since the last, and before it disconnects;
//! - a receiver that forgets a sender (dead or gone) takes back the spare that sender's
//!   incarnation left in the entry, and only that one (a successor in the entry keeps its own);
//! - a sender that claims an entry whose previous holder died gives back that holder's spare.
//!
//! A sender that dies between taking a buffer and recording it, or between clearing the record
//! and publishing the command that names the buffer, leaves that buffer in use, as one that
//! dies between its pop and its push always did.

use crate::held;
use crate::layout::PeerSlot;
use crate::region::Region;

/// Sender: the spare we hold in `region`'s pool (our entry `slot` records it), now ours to fill
/// and no longer recorded; None if we hold none.
#[inline(always)]
pub(super) fn take(region: &Region, slot: u32) -> Option<u32> {
    held::take(&region.peer_slots().get(slot as usize)?.spare)
}

/// Sender: after a message to `region` went out, take the buffer for the next one now, while
/// the receiver is busy with this one (nothing if we hold one already or the pool is empty).
#[inline]
pub(super) fn refill(region: &Region, slot: u32, incarnation: u64) {
    let Some(entry) = region.peer_slots().get(slot as usize) else { return };
    if held::is_held(&entry.spare) {
        return;
    }
    if let Ok(index) = region.inject_stack().pop() {
        held::record(&entry.spare, incarnation, index);
    }
}

/// Sender: give our spare in `region`'s pool back (a receiver we stopped sending to, or leave).
pub(super) fn give_back(region: &Region, slot: u32) {
    if let Some(entry) = region.peer_slots().get(slot as usize) {
        held::give_back(&entry.spare, &region.inject_stack());
    }
}

/// Receiver: the spare that the sender of `incarnation` left in `entry` of our table when it
/// died or left goes back into our pool (`region`). A successor's spare stays.
pub(super) fn reclaim(region: &Region, entry: &PeerSlot, incarnation: u64) {
    let _ = held::reclaim(&entry.spare, &region.inject_stack(), incarnation);
}

/// Sender claiming `entry` of `region`'s table: a spare its previous holder (dead, or our own
/// earlier incarnation of the link) left there goes back into the pool.
pub(super) fn reclaim_left(region: &Region, entry: &PeerSlot) {
    let _ = held::reclaim_any(&entry.spare, &region.inject_stack());
}

impl super::Endpoint {
    /// Receiver: the inject buffer of a message taken in this pass goes back to our pool at
    /// the start of the next one (or before we sleep), once the application has the message.
    #[inline(always)]
    pub(super) fn give_back_later(&mut self, buf: u32) {
        self.taken_injects.push(buf);
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
}
