//! The buffer that a sender holds out of its receiver's free stack (`free_stack`) while no
//! command the receiver has handled names it, recorded in shared memory so that the receiver
//! can give it back if the sender dies (`endpoint::spare` records a sender's inject buffer, its
//! spare or one carrying a message, and the SAR buffer it copies a segment into, this way).
//!
//! A `Record` is two words of the sender's entry in the receiver's peer table. The first is 0
//! when nothing is held, else the `HELD` flag, the holder's incarnation (its low 46 bits), the
//! buffer's index (16 bits: pools hold at most 2^16 buffers, `layout`) and `IN_FLIGHT` once the
//! buffer carries a message; the second is then that message's id (a SAR segment's sequence number). Only
//! the live holder stores to them, and only to a record that is empty or its own. The receiver
//! decides about the record of a holder that is gone (`decide`) once every command that holder
//! pushed is handled: a spare goes back; a buffer in flight goes back unless the receiver
//! handled that message (a command of its kind from that entry with that id or a later one). An
//! id of a successor in the entry can only make it keep a buffer, never give one back twice. The words are peer-written
//! like the rest of a region: the stack's push range-checks the index and refuses a buffer that
//! is not in use.

use crate::free_stack::FreeStack;
use crate::sync::{AtomicU64, Ordering};

const NONE: u64 = 0;
const HELD: u64 = 1 << 63;
const IN_FLIGHT: u64 = 1 << 62;
const INDEX_BITS: u32 = 16;
const TAG_MASK: u64 = (1 << (62 - INDEX_BITS)) - 1;

/// The two words of a record (see the module's comment).
#[derive(Clone, Copy)]
pub struct Record<'a> {
    pub word: &'a AtomicU64,
    pub msg: &'a AtomicU64,
}

fn held(incarnation: u64, index: u32) -> u64 {
    HELD | (incarnation & TAG_MASK) << INDEX_BITS | u64::from(index)
}

fn index_of(word: u64) -> u32 {
    (word & ((1 << INDEX_BITS) - 1)) as u32
}

/// Whether `word` is a record of the holder of `incarnation`.
fn ours(word: u64, incarnation: u64) -> bool {
    word & HELD != 0 && (word >> INDEX_BITS) & TAG_MASK == incarnation & TAG_MASK
}

impl Record<'_> {
    /// Holder: take the spare we hold to carry message `msg_id`; None if we hold none.
    /// Relaxed: the command that names the buffer is published with a release store after
    /// these, and the receiver reads the record only once we are gone.
    #[inline(always)]
    pub fn take_spare(&self, incarnation: u64, msg_id: u64) -> Option<u32> {
        let w = self.word.load(Ordering::Relaxed);
        if !ours(w, incarnation) || w & IN_FLIGHT != 0 {
            return None;
        }
        self.msg.store(msg_id, Ordering::Relaxed);
        self.word.store(w | IN_FLIGHT, Ordering::Relaxed);
        Some(index_of(w))
    }

    /// Holder: `index`, just popped, carries message `msg_id` (recorded if the record is empty:
    /// a predecessor's record is decided about before its entry passes on, so another one here
    /// is a scribble, which the receiver's decision must not take our buffer by).
    #[inline(always)]
    pub fn hold_in_flight(&self, incarnation: u64, index: u32, msg_id: u64) {
        if self.word.load(Ordering::Relaxed) == NONE {
            self.msg.store(msg_id, Ordering::Relaxed);
            self.word.store(held(incarnation, index) | IN_FLIGHT, Ordering::Relaxed);
        }
    }

    /// Holder: the message in flight was published; hold `next` (just popped) as our spare, or
    /// nothing. Only after `wants_spare` said yes.
    #[inline(always)]
    pub fn sent(&self, incarnation: u64, next: Option<u32>) {
        self.word.store(next.map_or(NONE, |i| held(incarnation, i)), Ordering::Relaxed);
    }

    /// Holder: whether we may record (the record is empty or ours, and holds no spare).
    #[inline(always)]
    pub fn wants_spare(&self, incarnation: u64) -> bool {
        let w = self.word.load(Ordering::Relaxed);
        w == NONE || (ours(w, incarnation) && w & IN_FLIGHT != 0)
    }

    /// Holder: `index` no longer needs recording: the command that names it is published, or
    /// the message was not sent after all (the caller gives the buffer back).
    #[inline(always)]
    pub fn clear(&self, incarnation: u64, index: u32) {
        let w = self.word.load(Ordering::Relaxed);
        if ours(w, incarnation) && w & IN_FLIGHT != 0 && index_of(w) == index {
            self.word.store(NONE, Ordering::Relaxed);
        }
    }

    /// Holder: give our spare back to `stack`.
    pub fn give_back(&self, incarnation: u64, stack: &FreeStack<'_>) {
        let w = self.word.load(Ordering::Relaxed);
        if ours(w, incarnation) && w & IN_FLIGHT == 0 {
            self.word.store(NONE, Ordering::Relaxed);
            let _ = stack.push(index_of(w));
        }
    }

    /// Receiver, once every command the holder of `incarnation` pushed is handled (the holder is
    /// gone): give its buffer back to `stack` unless a handled command named it. `handled` is
    /// the highest id of the messages (sequence number of the segments) of this kind handled from this
    /// entry, 0 for none (ids start at 1). True if a buffer went back.
    pub fn decide(&self, incarnation: u64, handled: u64, stack: &FreeStack<'_>) -> bool {
        let w = self.word.load(Ordering::Acquire);
        if !ours(w, incarnation) {
            return false;
        }
        let delivered = w & IN_FLIGHT != 0 && handled >= self.msg.load(Ordering::Acquire);
        if self.word.compare_exchange(w, NONE, Ordering::AcqRel, Ordering::Relaxed).is_err() {
            return false;
        }
        if !delivered {
            let _ = stack.push(index_of(w));
        }
        !delivered
    }
}
