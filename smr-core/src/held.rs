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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::free_stack::heap_parts;

    /// Our incarnation, and another holder's (a predecessor's, or a scribble), which differs
    /// from ours in the highest bit a record keeps only.
    const US: u64 = 0x1234;
    const OTHER: u64 = US ^ 1 << 44;
    /// Our slot in the owner's peer table: the tag of our pops.
    const TAG: u32 = 3;

    /// Runs `test` on a stack of four free buffers and an empty record, both on the heap.
    fn with_pool(test: impl FnOnce(&FreeStack<'_>, Record<'_>)) {
        let (head, links) = heap_parts(4);
        let stack = FreeStack::new(&head, &links);
        stack.fill();
        let (word, msg) = (AtomicU64::new(NONE), AtomicU64::new(0));
        test(&stack, Record { word: &word, msg: &msg });
    }

    /// The record's first word, for the checks that a call left it alone.
    fn word(rec: &Record<'_>) -> u64 {
        rec.word.load(Ordering::Relaxed)
    }

    /// A spare is taken once, for the message it then carries, and only from our own record.
    #[test]
    fn a_spare_is_taken_once_and_only_from_our_record() {
        with_pool(|_, rec| {
            assert_eq!(rec.take_spare(US, 7), None, "an empty record holds no spare");
            rec.sent(US, Some(5));
            assert!(!rec.wants_spare(US), "a record that holds a spare wants none");
            assert_eq!(rec.pending(), None);
            assert_eq!(rec.take_spare(OTHER, 7), None, "another holder took our spare");
            assert_eq!(rec.take_spare(US, 7), Some(5));
            assert_eq!(rec.msg.load(Ordering::Relaxed), 7, "the message the spare carries");
            assert_eq!(word(&rec), held(US, 5) | IN_FLIGHT, "the spare taken is recorded in flight");
            assert_eq!(rec.take_spare(US, 8), None, "a spare in flight taken again");
            assert!(rec.wants_spare(US), "a record whose buffer is in flight may take a spare");
            assert!(!rec.wants_spare(OTHER));
            rec.sent(US, None);
            assert_eq!(word(&rec), NONE);
            assert!(rec.wants_spare(OTHER), "an empty record is anyone's");
        });
    }

    /// A pop's announcement writes over an empty record or ours, never another holder's; it
    /// is pending until the pop returned, and then in flight (popped) or gone (nothing popped).
    #[test]
    fn a_pop_is_announced_pending_then_held_in_flight_or_forgotten() {
        with_pool(|_, rec| {
            rec.announce(US, 4, Some(9));
            assert_eq!(rec.pending(), Some(4));
            assert_eq!(rec.msg.load(Ordering::Relaxed), 9);
            rec.announce(US, 6, Some(9));
            assert_eq!(rec.pending(), Some(6), "a later attempt's announcement replaces ours");
            rec.hold_in_flight(US, Some(6), 9);
            assert_eq!(rec.pending(), None, "held in flight once the pop returned");
            assert!(rec.wants_spare(US) && rec.take_spare(US, 10).is_none());
            rec.clear(US, 5);
            assert_ne!(word(&rec), NONE, "cleared for another buffer");
            rec.clear(OTHER, 6);
            assert_ne!(word(&rec), NONE, "cleared by another holder");
            rec.clear(US, 6);
            assert_eq!(word(&rec), NONE);
            // A pop that found no buffer: the pending record goes, and a later pop is recorded.
            rec.announce(US, 2, None);
            assert_eq!(rec.pending(), Some(2));
            rec.hold_in_flight(US, None, 11);
            assert_eq!(word(&rec), NONE, "a pop that took nothing left its announcement");
            rec.hold_in_flight(US, Some(3), 11);
            assert!(rec.wants_spare(US) && rec.pending().is_none());
            assert_eq!(rec.msg.load(Ordering::Relaxed), 11);
            // A pop that found nothing leaves a record that is not pending alone.
            let before = word(&rec);
            rec.hold_in_flight(US, None, 12);
            assert_eq!(word(&rec), before, "a record in flight dropped by a pop that took nothing");
            rec.sent(US, Some(1));
            let spare = word(&rec);
            rec.hold_in_flight(US, None, 12);
            assert_eq!(word(&rec), spare, "a spare dropped by a pop that took nothing");
            // Another holder's record (a scribble): neither an announcement nor a pop writes over it.
            rec.word.store(held(OTHER, 8) | IN_FLIGHT, Ordering::Relaxed);
            rec.msg.store(77, Ordering::Relaxed);
            let theirs = word(&rec);
            rec.announce(US, 4, Some(13));
            rec.hold_in_flight(US, Some(4), 13);
            rec.hold_in_flight(US, None, 13);
            assert_eq!(
                (word(&rec), rec.msg.load(Ordering::Relaxed)),
                (theirs, 77),
                "another holder's record was written"
            );
            rec.announce(US, 4, None);
            assert_eq!(word(&rec), theirs);
            // Nor over another holder's pending one.
            let pending = held(OTHER, 8) | PENDING;
            rec.word.store(pending, Ordering::Relaxed);
            rec.hold_in_flight(US, Some(4), 13);
            assert_eq!(word(&rec), pending, "another holder's pending record taken for ours");
            rec.hold_in_flight(US, None, 13);
            assert_eq!(word(&rec), pending, "another holder's pending record dropped");
        });
    }

    /// Giving a buffer back: a spare through the record (pending while the push runs), a
    /// buffer in flight likewise if the record names it, else pushed back unannounced.
    #[test]
    fn buffers_given_back_leave_the_record_empty() {
        with_pool(|stack, rec| {
            let spare = stack.pop_as(TAG, |i| rec.announce(US, i, None)).unwrap();
            rec.sent(US, Some(spare));
            rec.clear(US, spare);
            assert_ne!(word(&rec), NONE, "a spare cleared as if its message were sent");
            rec.give_back(OTHER, stack);
            assert!(stack.in_use(spare), "another holder gave our spare back");
            rec.give_back(US, stack);
            assert!(!stack.in_use(spare) && word(&rec) == NONE);
            // In flight: given back only through the record that names it.
            let a = stack.pop_as(TAG, |i| rec.announce(US, i, Some(1))).unwrap();
            rec.hold_in_flight(US, Some(a), 1);
            rec.give_back(US, stack);
            assert!(stack.in_use(a), "a buffer in flight given back as a spare");
            let b = stack.pop().unwrap();
            rec.give_back_in_flight(US, b, stack);
            assert!(!stack.in_use(b), "a buffer the record does not name is pushed back all the same");
            assert!(stack.in_use(a) && word(&rec) != NONE, "and the record stays");
            rec.give_back_in_flight(US, a, stack);
            assert!(!stack.in_use(a) && word(&rec) == NONE);
            // Another holder's record naming the buffer we give back: it stays, ours goes back.
            let c = stack.pop().unwrap();
            let theirs = held(OTHER, c) | IN_FLIGHT;
            rec.word.store(theirs, Ordering::Relaxed);
            rec.give_back_in_flight(US, c, stack);
            assert!(!stack.in_use(c) && word(&rec) == theirs, "another holder's record taken for ours");
        });
    }

    /// The receiver's decision about a holder that is gone: a spare goes back, a buffer in flight
    /// unless the receiver handled its message, a pending one if the stack marks it the holder's;
    /// another holder's record is left alone. A decided record is empty.
    #[test]
    fn the_receiver_gives_back_exactly_what_a_gone_holder_kept() {
        with_pool(|stack, rec| {
            // A spare.
            let spare = stack.pop_as(TAG, |i| rec.announce(US, i, None)).unwrap();
            rec.sent(US, Some(spare));
            assert!(!rec.decide(OTHER, 0, TAG, stack), "decided as another holder's");
            assert!(stack.in_use(spare) && word(&rec) != NONE);
            assert!(rec.decide(US, 0, TAG, stack));
            assert!(!stack.in_use(spare) && word(&rec) == NONE);
            // In flight with message 5: kept once message 5 (or a later one) was handled.
            for (handled, back) in [(4, true), (5, false), (6, false)] {
                let a = stack.pop_as(TAG, |i| rec.announce(US, i, Some(5))).unwrap();
                rec.hold_in_flight(US, Some(a), 5);
                assert_eq!(rec.decide(US, handled, TAG, stack), back, "message 5 in flight, {handled} handled");
                assert_eq!(stack.in_use(a), !back);
                assert_eq!(word(&rec), NONE);
                if !back {
                    stack.push(a).unwrap();
                }
            }
            // Pending, the pop done (the stack marks the buffer ours): it goes back, whatever the
            // receiver handled.
            let a = stack.pop_as(TAG, |i| rec.announce(US, i, Some(5))).unwrap();
            assert_eq!(rec.pending(), Some(a));
            assert!(rec.decide(US, 9, TAG, stack));
            assert!(!stack.in_use(a) && word(&rec) == NONE);
            // Pending, the pop never took it (another tag's, or free): it stays where it is.
            let theirs = stack.pop_as(TAG + 1, |_| {}).unwrap();
            rec.announce(US, theirs, Some(6));
            assert!(!rec.decide(US, 0, TAG, stack));
            assert!(stack.popped_as(theirs, TAG + 1) && word(&rec) == NONE);
            let free = (0..4).find(|&i| !stack.in_use(i)).unwrap();
            rec.announce(US, free, None);
            assert!(!rec.decide(US, 0, TAG, stack));
            assert!(!stack.in_use(free) && word(&rec) == NONE);
            stack.push(theirs).unwrap();
            let mut all: Vec<u32> = std::iter::from_fn(|| stack.pop().ok()).collect();
            all.sort();
            assert_eq!(all, vec![0, 1, 2, 3], "a buffer went back twice or never");
        });
    }
}
