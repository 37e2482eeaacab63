//! A buffer that one process holds out of a free stack (`free_stack`) without a command naming
//! it yet, recorded in a shared word so that it comes back exactly once however the holding
//! ends: the holder uses it or gives it back, or, once the holder is gone, the stack's owner or
//! the next holder of the word returns it (`endpoint::spare` keeps a sender's next inject
//! buffer this way).
//!
//! The word is 0 when nothing is held, else the `HELD` flag, the holder's incarnation (its low
//! 47 bits) and the buffer's index (16 bits: pools hold at most 2^16 buffers, `layout`). Only
//! the live holder stores to it; the others clear it with one atomic read-modify-write, so of
//! any two that find the holder gone exactly one returns the buffer. The word is peer-written
//! like the rest of a region: the stack's push range-checks the index and refuses a buffer that
//! is not in use.

use crate::free_stack::FreeStack;
use crate::sync::{AtomicU64, Ordering};

const NONE: u64 = 0;
const HELD: u64 = 1 << 63;
const INDEX_BITS: u32 = 16;
const TAG_MASK: u64 = (1 << (63 - INDEX_BITS)) - 1;

fn held(incarnation: u64, index: u32) -> u64 {
    HELD | (incarnation & TAG_MASK) << INDEX_BITS | u64::from(index)
}

fn index_of(word: u64) -> u32 {
    (word & ((1 << INDEX_BITS) - 1)) as u32
}

/// Holder: whether the word records a buffer (ours, while we live).
#[inline(always)]
pub fn is_held(word: &AtomicU64) -> bool {
    word.load(Ordering::Relaxed) & HELD != 0
}

/// Holder: record `index`, just popped, as held by us (`incarnation`).
#[inline(always)]
pub fn record(word: &AtomicU64, incarnation: u64, index: u32) {
    word.store(held(incarnation, index), Ordering::Relaxed);
}

/// Holder: the buffer we hold, now ours to use and no longer recorded; None if none. Relaxed:
/// the caller publishes whatever names the buffer with a release store after this one, so
/// nobody who finds us gone sees both that and the record.
#[inline(always)]
pub fn take(word: &AtomicU64) -> Option<u32> {
    let w = word.load(Ordering::Relaxed);
    if w & HELD == 0 {
        return None;
    }
    word.store(NONE, Ordering::Relaxed);
    Some(index_of(w))
}

/// Holder: give the buffer we hold back to `stack`.
pub fn give_back(word: &AtomicU64, stack: &FreeStack<'_>) {
    if let Some(index) = take(word) {
        let _ = stack.push(index);
    }
}

/// Owner, for a holder of `incarnation` that is gone: its buffer back to `stack` (true if
/// there was one, and this call took it). A buffer recorded by another incarnation (a successor
/// in the word) stays where it is.
pub fn reclaim(word: &AtomicU64, stack: &FreeStack<'_>, incarnation: u64) -> bool {
    let w = word.load(Ordering::Acquire);
    if w & HELD == 0 || w != held(incarnation, index_of(w)) {
        return false;
    }
    let took = word.compare_exchange(w, NONE, Ordering::AcqRel, Ordering::Relaxed).is_ok();
    if took {
        let _ = stack.push(index_of(w));
    }
    took
}

/// A new holder taking over the word from one that is gone: whatever that one held, back to
/// `stack` (true if there was something, and this call took it).
pub fn reclaim_any(word: &AtomicU64, stack: &FreeStack<'_>) -> bool {
    let w = word.swap(NONE, Ordering::AcqRel);
    let took = w & HELD != 0;
    if took {
        let _ = stack.push(index_of(w));
    }
    took
}
