//! Reads and fetching atomics waiting for their data, by operation id.
//!
//! An operation id is its slot here and a sequence number (`seq << 32 | slot`), so finding an
//! operation is an index and a comparison: no hashing on the path of every read and fetching
//! atomic (a hash map insert, two lookups and a remove cost about 170 instructions per fetch).
//! Ids come back from peers (a READ_RESP's tag): one of a finished operation, or a forged one,
//! finds nothing, because the slot's current id differs.

use slab::Slab;
use smr_core::iov::{LocalIov, Ranges};

/// A reply buffer of a read or fetching atomic, until its data and its answer arrive.
pub struct Pending {
    /// Its operation id.
    id: u64,
    /// Its tx slot.
    pub slot: usize,
    /// The caller's buffer for the data, until the data (or a READ_RESP to carry it) arrives.
    pub dest: Option<Ranges>,
    pub got: Option<smr_core::Result<usize>>,
    pub answered: bool,
    pub want: usize,
    /// Asked the target to write the bytes into `dest` with CMA: a successful answer with no
    /// reply before it means they are there (a target refused CMA replies first instead).
    pub write_back: bool,
}

impl Pending {
    pub fn new(slot: usize, dest: Ranges, want: usize, write_back: bool) -> Pending {
        Pending { id: 0, slot, dest: Some(dest), got: None, answered: false, want, write_back }
    }

    /// The caller's buffer, lent to the engine for a READ_RESP to fill (once).
    ///
    /// # Safety
    /// The buffer must be the application's result buffer of a pending operation, which it
    /// leaves alone until the operation completes.
    pub unsafe fn lend_dest(&mut self) -> Option<LocalIov> {
        // SAFETY: per this function's contract.
        self.dest.take().map(|r| unsafe { LocalIov::from_ranges(r) })
    }
}

/// Operations waiting for replies.
#[derive(Default)]
pub struct Replies {
    slots: Slab<Pending>,
    seq: u64,
}

/// Sequence numbers wrap below 2^30, so ids stay below the context bits (CTX_REPLY, CTX_TARGET)
/// that share their word.
const SEQ_MASK: u64 = (1 << 30) - 1;

impl Replies {
    /// The id the next `insert` gives (an operation names it in its request first).
    pub fn next_id(&mut self) -> u64 {
        self.seq = (self.seq + 1) & SEQ_MASK;
        if self.seq == 0 {
            self.seq = 1;
        }
        self.seq << 32 | self.slots.vacant_key() as u64
    }

    /// Keep `p` under `id`, which must come from the `next_id` just before.
    pub fn insert(&mut self, id: u64, p: Pending) {
        let slot = self.slots.insert(Pending { id, ..p });
        debug_assert_eq!(slot as u64, id & 0xffff_ffff);
    }

    fn slot(id: u64) -> usize {
        (id & 0xffff_ffff) as usize
    }

    pub fn get_mut(&mut self, id: u64) -> Option<&mut Pending> {
        self.slots.get_mut(Self::slot(id)).filter(|p| p.id == id)
    }

    pub fn remove(&mut self, id: u64) -> Option<Pending> {
        self.get_mut(id)?;
        Some(self.slots.remove(Self::slot(id)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending() -> Pending {
        Pending::new(0, Ranges::new(), 8, false)
    }

    #[test]
    fn ids_of_finished_or_forged_operations_find_nothing() {
        let mut r = Replies::default();
        let a = r.next_id();
        r.insert(a, pending());
        assert!(r.get_mut(a).is_some());
        assert!(r.get_mut(a ^ 1 << 32).is_none(), "another sequence number in the same slot");
        assert!(r.get_mut(a + 1).is_none(), "an empty slot");
        assert!(r.remove(a).is_some());
        assert!(r.get_mut(a).is_none() && r.remove(a).is_none(), "removed");
        // The slot is reused under a new id; the old id still finds nothing.
        let b = r.next_id();
        r.insert(b, pending());
        assert_eq!(b & 0xffff_ffff, a & 0xffff_ffff);
        assert_ne!(a, b);
        assert!(r.get_mut(a).is_none() && r.get_mut(b).is_some());
        assert!(r.get_mut(u64::MAX).is_none());
    }

    #[test]
    fn ids_stay_clear_of_the_context_bits() {
        let mut r = Replies { seq: SEQ_MASK - 1, ..Replies::default() };
        for _ in 0..4 {
            let id = r.next_id();
            assert!(id >> 32 != 0 && id < 1 << 62, "{id:#x}");
        }
    }
}
