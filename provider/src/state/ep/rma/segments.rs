//! Operations with several remote ranges: fi_writemsg, fi_readmsg and the fi_*atomicmsg forms
//! with an `rma_iov_count` of 2 to `RMA_IOV_LIMIT` (the C shm's limit too; MPICH sends
//! noncontiguous windows so where the limit allows).
//!
//! The initiator sends the list in a command of its own (`KIND_SEGMENTS`, inline, unanswered)
//! right before the operation, whose header says it has one (`APP_SEGMENTED`). Both go through
//! the target's ring, which serves one sender's commands in order, so the target keeps the latest
//! list per source and the operation takes it when it arrives: its key and address words are
//! then unused. Everything after that (every protocol that carries a write's bytes, every way a
//! read is answered, the atomics) works on the list's ranges as on those of one registration of
//! several ranges. A list left over (the operation's own command refused with -FI_EAGAIN after
//! the list went) is replaced by the next, and an operation that finds none is refused.
//!
//! Segmented operations never take the initiator's own CMA copy, which looks up one published
//! registration; they go through the target.

use crate::state::mr::{MrEntry, MrTable};
use rshm_ffi as ffi;
use smr_core::iov::Ranges;

pub use crate::getinfo::RMA_IOV_LIMIT;

/// Bytes of one segment on the wire: key, address, length.
const SEGMENT_BYTES: usize = 24;

/// Longest `KIND_SEGMENTS` payload.
pub const SEGMENTS_MAX_BYTES: usize = RMA_IOV_LIMIT * SEGMENT_BYTES;

/// One remote range: `len` bytes at `addr` in the registration with key `key`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Segment {
    pub key: u64,
    pub addr: u64,
    pub len: u64,
}

/// The remote ranges of one operation, 1 to `RMA_IOV_LIMIT`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Segments {
    n: u8,
    seg: [Segment; RMA_IOV_LIMIT],
}

impl Segments {
    /// None for an empty list or one longer than `RMA_IOV_LIMIT`.
    pub fn new(list: &[Segment]) -> Option<Segments> {
        if list.is_empty() || list.len() > RMA_IOV_LIMIT {
            return None;
        }
        let mut s = Segments { n: list.len() as u8, ..Segments::default() };
        s.seg[..list.len()].copy_from_slice(list);
        Some(s)
    }

    pub fn as_slice(&self) -> &[Segment] {
        &self.seg[..self.n as usize]
    }

    /// The bytes they cover; None if the sum overflows.
    pub fn total(&self) -> Option<u64> {
        self.as_slice().iter().try_fold(0u64, |t, s| t.checked_add(s.len))
    }

    /// The `KIND_SEGMENTS` payload: its bytes and their length.
    pub fn encode(&self) -> ([u8; SEGMENTS_MAX_BYTES], usize) {
        let mut out = [0u8; SEGMENTS_MAX_BYTES];
        for (chunk, s) in out.chunks_exact_mut(SEGMENT_BYTES).zip(self.as_slice()) {
            chunk[..8].copy_from_slice(&s.key.to_le_bytes());
            chunk[8..16].copy_from_slice(&s.addr.to_le_bytes());
            chunk[16..].copy_from_slice(&s.len.to_le_bytes());
        }
        (out, self.n as usize * SEGMENT_BYTES)
    }

    /// A peer's `KIND_SEGMENTS` payload; None unless it holds 1 to `RMA_IOV_LIMIT` whole
    /// segments whose lengths sum without overflow.
    pub fn decode(payload: &[u8]) -> Option<Segments> {
        if !payload.len().is_multiple_of(SEGMENT_BYTES) {
            return None;
        }
        let mut list = [Segment::default(); RMA_IOV_LIMIT];
        let n = payload.len() / SEGMENT_BYTES;
        if n == 0 || n > RMA_IOV_LIMIT {
            return None;
        }
        for (s, chunk) in list.iter_mut().zip(payload.chunks_exact(SEGMENT_BYTES)) {
            let word = |i: usize| u64::from_le_bytes(chunk[i..i + 8].try_into().expect("8 bytes"));
            *s = Segment { key: word(0), addr: word(8), len: word(16) };
        }
        let s = Segments::new(&list[..n])?;
        s.total().map(|_| s)
    }
}

/// The counters of the registrations an operation touches (`MrEntry::write_cntr`, `read_cntr`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MrCntrs {
    pub write: Option<usize>,
    pub read: Option<usize>,
}

impl MrCntrs {
    pub fn of(mr: &MrEntry) -> MrCntrs {
        MrCntrs { write: mr.write_cntr, read: mr.read_cntr }
    }
}

/// Where an operation lands in the target's memory: one address under one key (the header's
/// words, the usual operation), or a list sent before it. Three words, the list boxed: it is
/// passed along the target's paths, where the list itself (a hundred bytes) cost about 35
/// instructions per operation in copies.
#[derive(Clone, Debug)]
pub struct Remote {
    key: u64,
    addr: u64,
    list: Option<Box<Segments>>,
}

impl Remote {
    #[inline(always)]
    pub fn one_range(key: u64, addr: u64) -> Remote {
        Remote { key, addr, list: None }
    }

    pub fn list(list: Box<Segments>) -> Remote {
        Remote { key: 0, addr: 0, list: Some(list) }
    }

    /// The target memory of an access of `len` bytes, checked against the registrations as
    /// `MrTable::resolve` checks one, and the counters it moves. A list must cover exactly `len`
    /// bytes; one whose registrations have different counters bound is refused, since one event
    /// counts once (FI_EINVAL, logged).
    pub fn resolve(&self, mrs: &MrTable, len: u64, access: u64) -> Result<(Ranges, MrCntrs), u32> {
        let Some(segs) = &self.list else {
            return mrs.resolve(self.key, self.addr, len, access).map(|(r, mr)| (r, MrCntrs::of(mr)));
        };
        if segs.total() != Some(len) {
            return Err(ffi::FI_EINVAL);
        }
        let mut ranges = Ranges::new();
        let mut cntrs = None;
        for s in segs.as_slice() {
            let (r, mr) = mrs.resolve(s.key, s.addr, s.len, access)?;
            let these = MrCntrs::of(mr);
            if *cntrs.get_or_insert(these) != these {
                crate::warn!(
                    EpData,
                    "refused an operation whose remote ranges lie in registrations bound to different counters"
                );
                return Err(ffi::FI_EINVAL);
            }
            ranges.extend_from_slice(&r);
        }
        Ok((ranges, cntrs.unwrap_or_default()))
    }

    /// The one range's key and address, for the ways that take only one.
    #[inline(always)]
    pub fn one(&self) -> Option<(u64, u64)> {
        self.list.is_none().then_some((self.key, self.addr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(key: u64, addr: u64, len: u64) -> Segment {
        Segment { key, addr, len }
    }

    #[test]
    fn a_list_survives_the_wire_and_a_bad_one_does_not_decode() {
        let s = Segments::new(&[seg(1, 16, 100), seg(7, 0, 5), seg(u64::MAX, 3, 0)]).unwrap();
        let (bytes, n) = s.encode();
        assert_eq!(n, 72);
        assert_eq!(Segments::decode(&bytes[..n]), Some(s));
        assert_eq!(s.total(), Some(105));
        // Not whole segments, none, too many, lengths that overflow.
        assert_eq!(Segments::decode(&bytes[..n - 1]), None);
        assert_eq!(Segments::decode(&[]), None);
        assert_eq!(Segments::decode(&[0u8; SEGMENTS_MAX_BYTES + SEGMENT_BYTES]), None);
        let (over, n) = Segments::new(&[seg(0, 0, u64::MAX), seg(0, 0, 1)]).unwrap().encode();
        assert_eq!(Segments::decode(&over[..n]), None);
        assert!(Segments::new(&[seg(0, 0, 1); RMA_IOV_LIMIT + 1]).is_none());
    }
}
