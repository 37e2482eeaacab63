//! The buffer that a sender holds out of its receiver's free stack (`free_stack`) while no
//! command the receiver has handled names it, recorded in shared memory so that the receiver
//! can give it back if the sender dies (`endpoint::spare` records a sender's inject buffer, its
//! spare or one carrying a message, and the SAR buffer it copies a segment into, this way).
//!
//! A `Record` is two words of the sender's entry in the receiver's peer table. The first is 0
//! when nothing is held, else the `HELD` flag, the holder's incarnation (its low 45 bits), the
//! buffer's index (16 bits: pools hold at most 2^16 buffers, `layout`), `IN_FLIGHT` once the
//! buffer carries a message, and `PENDING` while the pop that may take it runs; the second is
//! then that message's id (a SAR segment's sequence number). Only the live holder stores to
//! them, and only to a record that is empty or its own.
//!
//! The holder records the buffer before it has it: before each attempt of its pop's head CAS
//! (`announce`, from `FreeStack::pop_as`), marked `PENDING` until the pop returned. A holder that
//! dies anywhere in its pop so leaves a record naming the buffer it may have taken, and the
//! stack's in-use mark, tagged with the holder's slot in the peer table, says whether it did.
//! (A pop killed between its CAS and that mark leaves a buffer the stack's own repair finds.)
//!
//! A holder that gives a buffer back (its spare, or one whose message it did not send) marks
//! its record `PENDING` again until the push returned: a pending record speaks for its buffer
//! while the stack's words say neither free nor in use (`free_stack`'s repair leaves it alone).
//!
//! The receiver decides about the record of a holder that is gone (`decide`) once every command
//! that holder pushed is handled: a spare goes back; a buffer in flight goes back unless the
//! receiver handled that message (a command of its kind from that entry with that id or a later
//! one); a pending one goes back if the stack still marks it the holder's (its pop took it, or
//! its push had not yet given it back). An id of a successor in the entry
//! can only make it keep a buffer, never give one back twice. The words are peer-written like
//! the rest of a region: the stack's push range-checks the index and refuses a buffer that is
//! not in use.

use crate::free_stack::FreeStack;
use crate::sync::{AtomicU64, Ordering};

const NONE: u64 = 0;
const HELD: u64 = 1 << 63;
const IN_FLIGHT: u64 = 1 << 62;
const PENDING: u64 = 1 << 61;
const INDEX_BITS: u32 = 16;
const TAG_MASK: u64 = (1 << (61 - INDEX_BITS)) - 1;

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

/// Whether `word` records a spare that the holder of `incarnation` has (not one it carries a
/// message in, nor one its pop may not have taken).
fn holds_spare(word: u64, incarnation: u64) -> bool {
    ours(word, incarnation) && word & (IN_FLIGHT | PENDING) == 0
}

impl Record<'_> {
    /// Holder: take the spare we hold to carry message `msg_id`; None if we hold none.
    /// Relaxed: the command that names the buffer is published with a release store after
    /// these, and the receiver reads the record only once we are gone.
    #[inline(always)]
    pub fn take_spare(&self, incarnation: u64, msg_id: u64) -> Option<u32> {
        let w = self.word.load(Ordering::Relaxed);
        if !holds_spare(w, incarnation) {
            return None;
        }
        self.msg.store(msg_id, Ordering::Relaxed);
        self.word.store(w | IN_FLIGHT, Ordering::Relaxed);
        Some(index_of(w))
    }

    /// Holder, before each attempt of a pop that may take `index` (`FreeStack::pop_as`): record
    /// it as pending, to carry message `msg_id` (`Some`) or as our spare (`None`). Only over an
    /// empty record or our own (see `hold_in_flight`). Relaxed: the pop's head CAS, a release,
    /// orders it first.
    #[inline(always)]
    pub fn announce(&self, incarnation: u64, index: u32, msg_id: Option<u64>) {
        let w = self.word.load(Ordering::Relaxed);
        if w != NONE && !ours(w, incarnation) {
            return;
        }
        let mut pending = held(incarnation, index) | PENDING;
        if let Some(id) = msg_id {
            self.msg.store(id, Ordering::Relaxed);
            pending |= IN_FLIGHT;
        }
        self.word.store(pending, Ordering::Relaxed);
    }

    /// Holder: `index`, just popped (`None`: the pop found no buffer), carries message `msg_id`.
    /// Recorded if the record is empty or our pending one (rewritten whole: one branch costs
    /// fewer instructions than keeping what the pop's last `announce` wrote). A predecessor's
    /// record is decided about before its entry passes on, so another one here is a scribble,
    /// which the receiver's decision must not take our buffer by.
    #[inline(always)]
    pub fn hold_in_flight(&self, incarnation: u64, index: Option<u32>, msg_id: u64) {
        let w = self.word.load(Ordering::Relaxed);
        let pending = ours(w, incarnation) && w & PENDING != 0;
        match index {
            Some(index) if w == NONE || pending => {
                self.msg.store(msg_id, Ordering::Relaxed);
                self.word.store(held(incarnation, index) | IN_FLIGHT, Ordering::Relaxed);
            }
            None if pending => self.word.store(NONE, Ordering::Relaxed),
            _ => {}
        }
    }

    /// Holder: the message in flight was published; hold `next` (just popped, announced as our
    /// spare) as our spare, or nothing. Only after `wants_spare` said yes.
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
        if holds_spare(w, incarnation) {
            self.push_announced(w, stack);
        }
    }

    /// Holder: give back `index`, the buffer our record holds in flight, whose message was not
    /// sent after all. (A buffer the record does not name, which a scribble kept us from
    /// recording, goes back unannounced.)
    pub fn give_back_in_flight(&self, incarnation: u64, index: u32, stack: &FreeStack<'_>) {
        let w = self.word.load(Ordering::Relaxed);
        if ours(w, incarnation) && w & IN_FLIGHT != 0 && index_of(w) == index {
            self.push_announced(w & !IN_FLIGHT, stack);
        } else {
            let _ = stack.push(index);
        }
    }

    /// Push the buffer of our record `w` back to `stack`, the record pending meanwhile, as for a
    /// pop: the push frees the buffer's link before its head CAS, and the owner's repair must
    /// not take the buffer for a dead process's orphan in between (`free_stack`). If we die in
    /// the push, the owner's decision reads the stack's mark: still ours, the push did not
    /// happen and the buffer goes back; not ours, it did (or another pop has it since).
    /// Relaxed: the push's release of the link orders the record first.
    fn push_announced(&self, w: u64, stack: &FreeStack<'_>) {
        self.word.store(w | PENDING, Ordering::Relaxed);
        let _ = stack.push(index_of(w));
        self.word.store(NONE, Ordering::Relaxed);
    }

    /// Anyone: the buffer a pop or push of the record's holder is in the middle of (a pending
    /// record), which the owner's repair of the stack must leave alone (`free_stack`). Acquire:
    /// read after the stack's words it judges, it sees the record written before them.
    pub fn pending(&self) -> Option<u32> {
        let w = self.word.load(Ordering::Acquire);
        (w & (HELD | PENDING) == HELD | PENDING).then(|| index_of(w))
    }

    /// Receiver, once every command the holder of `incarnation` pushed is handled (the holder is
    /// gone): give its buffer back to `stack` unless a handled command named it, or, if its pop
    /// or push was pending, unless the buffer is not the holder's (the stack's mark for `tag`,
    /// the holder's slot in our peer table: a pop that did not take it, or a push that gave it
    /// back). `handled` is the highest id of the messages (sequence number of
    /// the segments) of this kind handled from this entry, 0 for none (ids start at 1). True if
    /// a buffer went back.
    pub fn decide(&self, incarnation: u64, handled: u64, tag: u32, stack: &FreeStack<'_>) -> bool {
        let w = self.word.load(Ordering::Acquire);
        if !ours(w, incarnation) {
            return false;
        }
        // A pending pop named a buffer it had not yet taken, or never took; no command named it.
        let back = if w & PENDING != 0 {
            stack.popped_as(index_of(w), tag)
        } else {
            w & IN_FLIGHT == 0 || handled < self.msg.load(Ordering::Acquire)
        };
        if self.word.compare_exchange(w, NONE, Ordering::AcqRel, Ordering::Relaxed).is_err() {
            return false;
        }
        if back {
            let _ = stack.push(index_of(w));
        }
        back
    }
}
