//! The batch format: what a source PE writes into a target's inbox slot.
//!
//! A batch is a sequence of native-endian u64 words (built in a [`Batch`], shipped as its
//! bytes): a 2-word header (`records_len` in bytes, `reply_len`), then records. A record is two
//! words, then its payload padded to whole words:
//! - word 0: `op` (bits 0..8), element size in bytes (bits 8..16), element count (bits 16..64);
//! - word 1: the target address as a signed offset from the queue's symmetric block;
//! - payload: the elements for PUT and ATOMIC_ADD; nothing for GET and ATOMIC_INC.
//!
//! A one-element ATOMIC_INC, ATOMIC_ADD or GET whose offset is a multiple of the element size
//! (the histogram and index-gather cases) takes the compact form: one word, `op | 0x80` (bits 0..8), element size
//! (bits 8..16), offset / element size as a signed 48-bit number (bits 16..64), then for ADD
//! the element padded to 8 bytes. An increment thus costs 8 bytes of batch.
//!
//! GET records are answered in order into the slot's reply area: each one's elements, padded to
//! 8 bytes. Decoding checks every length against the batch (a batch comes from another process).
//! [`apply`] carries a decoded record out on this process's memory (through `mem`), and
//! [`scatter`] hands GET answers to the buffers that asked.
//!
//! The one-element increment of an 8- or 4-byte integer (the histogram's operation) is one word
//! whose low 16 bits are [`INC8`] or [`INC4`]: the pushing side builds it with [`inc_word`] and
//! the applying side tests for it before any decoding ([`compact_offset`] gives its target).

use crate::config::{OP_ATOMIC_ADD, OP_ATOMIC_INC, OP_GET, OP_PUT};
use crate::mem;

pub const BATCH_HEADER: usize = 16;
/// The header in words.
pub const HEADER_WORDS: usize = BATCH_HEADER / 8;
pub const RECORD_HEADER: usize = 16;
const MAX_NELEMS: u64 = (1 << 48) - 1;
const COMPACT: u64 = 0x80;
/// The low 16 bits of a compact one-element increment of an 8-byte integer.
pub const INC8: u64 = COMPACT | OP_ATOMIC_INC | (8 << 8);
/// The same for a 4-byte integer.
pub const INC4: u64 = COMPACT | OP_ATOMIC_INC | (4 << 8);

/// One decoded record.
#[derive(Debug, PartialEq, Eq)]
pub struct Record<'a> {
    pub op: u64,
    pub esize: usize,
    pub nelems: usize,
    pub offset: i64,
    pub payload: &'a [u8],
}

pub fn pad8(n: usize) -> usize {
    (n + 7) & !7
}

/// The payload bytes a record of this op carries.
pub fn payload_len(op: u64, esize: usize, nelems: usize) -> usize {
    match op {
        OP_PUT | OP_ATOMIC_ADD => pad8(esize * nelems),
        _ => 0,
    }
}

/// The reply bytes a record of this op asks for.
pub fn reply_len(op: u64, esize: usize, nelems: usize) -> usize {
    if op == OP_GET {
        pad8(esize * nelems)
    } else {
        0
    }
}

/// The compact index of a one-element atomic at `offset`, if it has one.
#[inline]
pub fn compact_index(op: u64, esize: usize, offset: i64) -> Option<i64> {
    if op != OP_ATOMIC_INC && op != OP_ATOMIC_ADD && op != OP_GET {
        return None;
    }
    // esize is 1, 2, 4 or 8: shifts, not a 64-bit division (this is on every push).
    let shift = esize.trailing_zeros();
    let idx = offset >> shift;
    (offset & (esize as i64 - 1) == 0 && (idx << 16) >> 16 == idx).then_some(idx)
}

/// Words of a compact record.
pub fn compact_words(op: u64) -> usize {
    if op == OP_ATOMIC_ADD {
        2
    } else {
        1
    }
}

/// The word of a compact record (see [`compact_index`]).
#[inline]
fn compact_word(op: u64, esize: usize, idx: i64) -> u64 {
    (op | COMPACT) | ((esize as u64) << 8) | ((idx as u64) << 16)
}

/// The word of a one-element increment of `esize` (4 or 8) bytes at element `idx` (the
/// offset divided by `esize`), if it has a compact form (`idx` fits 48 bits).
#[inline]
pub fn inc_word(esize: usize, idx: i64) -> Option<u64> {
    ((idx << 16) >> 16 == idx).then(|| compact_word(OP_ATOMIC_INC, esize, idx))
}

/// The target offset of a compact record of `esize` bytes whose word is `w`.
#[inline]
pub fn compact_offset(w: u64, esize: usize) -> i64 {
    ((w as i64) >> 16) * esize as i64
}

/// A batch under construction: a fixed array of `slot_bytes / 8` words and how many of them are
/// used (the header's included). Callers check that a record fits ([`Batch::fits`]) before
/// appending it; [`Batch::push_word`] checks by itself (the increment fast path).
pub struct Batch {
    words: Box<[u64]>,
    len: usize,
}

impl Batch {
    pub fn new(slot_bytes: usize) -> Self {
        Batch { words: vec![0; (slot_bytes / 8).max(HEADER_WORDS)].into_boxed_slice(), len: HEADER_WORDS }
    }

    /// No record yet.
    pub fn is_empty(&self) -> bool {
        self.len == HEADER_WORDS
    }

    /// Whether `bytes` more (a multiple of 8) fit.
    pub fn fits(&self, bytes: usize) -> bool {
        self.len * 8 + bytes <= self.words.len() * 8
    }

    /// Appends one word if it fits; false if the batch is full.
    #[inline]
    pub fn push_word(&mut self, w: u64) -> bool {
        match self.words.get_mut(self.len) {
            Some(slot) => {
                *slot = w;
                self.len += 1;
                true
            }
            None => false,
        }
    }

    fn push(&mut self, w: u64) {
        self.words[self.len] = w;
        self.len += 1;
    }

    /// Appends a record. `payload` is the PUT/ADD data.
    pub fn push_record(&mut self, op: u64, esize: usize, nelems: usize, offset: i64, payload: &[u8]) {
        debug_assert!(esize < 256 && (nelems as u64) <= MAX_NELEMS);
        self.push(op | ((esize as u64) << 8) | ((nelems as u64) << 16));
        self.push(offset as u64);
        if op == OP_PUT || op == OP_ATOMIC_ADD {
            let words = payload.chunks_exact(8);
            let tail = words.remainder();
            for w in words {
                self.push(u64::from_ne_bytes(w.try_into().unwrap_or_default()));
            }
            if !tail.is_empty() {
                let mut last = [0u8; 8];
                last[..tail.len()].copy_from_slice(tail);
                self.push(u64::from_ne_bytes(last));
            }
        }
    }

    /// Appends a compact record (see [`compact_index`]); `value` is the ADD operand.
    pub fn push_compact(&mut self, op: u64, esize: usize, idx: i64, value: u64) {
        self.push(compact_word(op, esize, idx));
        if op == OP_ATOMIC_ADD {
            self.push(value);
        }
    }

    /// Writes the header and returns the whole batch (to ship).
    pub fn finish(&mut self, reply: usize) -> &[u64] {
        self.words[0] = ((self.len - HEADER_WORDS) * 8) as u64;
        self.words[1] = reply as u64;
        &self.words[..self.len]
    }

    /// Empties the batch (after it was shipped).
    pub fn clear(&mut self) {
        self.len = HEADER_WORDS;
    }
}

/// The (records_len, reply_len) of a batch header.
pub fn batch_header(b: &[u64]) -> Option<(usize, usize)> {
    Some((usize::try_from(*b.first()?).ok()?, usize::try_from(*b.get(1)?).ok()?))
}

/// Decodes the record at word `at` of a batch body: the record and the index of the next one;
/// `None` if it is malformed.
pub fn decode(body: &[u64], at: usize) -> Option<(Record<'_>, usize)> {
    let w0 = *body.get(at)?;
    let esize = ((w0 >> 8) & 0xff) as usize;
    if w0 & COMPACT != 0 {
        let op = w0 & 0x7f;
        let atomic = op == OP_ATOMIC_INC || op == OP_ATOMIC_ADD;
        if !(atomic && matches!(esize, 4 | 8) || op == OP_GET && matches!(esize, 1 | 2 | 4 | 8)) {
            return None;
        }
        let next = at + compact_words(op);
        let payload = if op == OP_ATOMIC_ADD { &mem::as_bytes(body.get(at + 1..next)?)[..esize] } else { &[] };
        let rec = Record { op, esize, nelems: 1, offset: compact_offset(w0, esize), payload };
        return Some((rec, next));
    }
    let offset = *body.get(at + 1)? as i64;
    let op = w0 & 0xff;
    let nelems = usize::try_from(w0 >> 16).ok()?;
    if op > OP_ATOMIC_INC || !matches!(esize, 1 | 2 | 4 | 8) {
        return None;
    }
    if (op == OP_ATOMIC_ADD || op == OP_ATOMIC_INC) && esize < 4 {
        return None;
    }
    let bytes = esize.checked_mul(nelems)?;
    let pwords = if op == OP_PUT || op == OP_ATOMIC_ADD { bytes.checked_add(7)? / 8 } else { 0 };
    let start = at + RECORD_HEADER / 8;
    let next = start.checked_add(pwords)?;
    let payload = &mem::as_bytes(body.get(start..next)?)[..bytes.min(pwords * 8)];
    Some((Record { op, esize, nelems, offset, payload }, next))
}

/// Decodes the records of a batch body; `None` at the first malformed record.
pub fn records(body: &[u64]) -> impl Iterator<Item = Option<Record<'_>>> {
    let mut at = 0usize;
    let mut bad = false;
    std::iter::from_fn(move || {
        if bad || at >= body.len() {
            return None;
        }
        let r = decode(body, at).map(|(rec, next)| {
            at = next;
            rec
        });
        bad = r.is_none();
        Some(r)
    })
}

fn elem(payload: &[u8], esize: usize, i: usize) -> u64 {
    let b = &payload[i * esize..(i + 1) * esize];
    if esize == 8 {
        u64::from_ne_bytes(b.try_into().unwrap_or_default())
    } else {
        u64::from(u32::from_ne_bytes(b.try_into().unwrap_or_default()))
    }
}

/// Applies one record whose target is `addr` in this process. GET answers are appended to
/// `reply` (padded to 8 bytes). Returns false (and does nothing) for a misaligned atomic.
pub fn apply(rec: &Record<'_>, addr: usize, reply: &mut Vec<u8>) -> bool {
    let bytes = rec.esize * rec.nelems;
    match rec.op {
        OP_PUT => mem::write_bytes(addr, &rec.payload[..bytes]),
        OP_GET => {
            reply.extend_from_slice(mem::read_bytes(addr, bytes));
            reply.resize((reply.len() + 7) & !7, 0);
        }
        OP_ATOMIC_ADD | OP_ATOMIC_INC if !mem::aligned(addr, rec.esize) || rec.esize < 4 => return false,
        OP_ATOMIC_ADD => mem::add_elems(addr, rec.esize, rec.nelems, |i| elem(rec.payload, rec.esize, i)),
        OP_ATOMIC_INC => mem::add_elems(addr, rec.esize, rec.nelems, |_| 1),
        _ => return false,
    }
    true
}

/// Scatters GET answers (each padded to 8 bytes) into the local buffers that asked for them.
pub fn scatter(reply: &[u8], gets: &[(usize, usize)]) {
    let mut at = 0;
    for &(dst, len) in gets {
        if let Some(src) = reply.get(at..at + len) {
            mem::write_bytes(dst, src);
        }
        at += (len + 7) & !7;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut batch = Batch::new(256);
        batch.push_record(OP_PUT, 4, 3, -8, &[1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0]);
        batch.push_record(OP_ATOMIC_INC, 8, 1, 64, &[]);
        batch.push_record(OP_GET, 2, 5, 128, &[]);
        batch.push_record(OP_ATOMIC_ADD, 8, 1, 0, &7u64.to_ne_bytes());
        batch.push_compact(OP_ATOMIC_INC, 8, compact_index(OP_ATOMIC_INC, 8, -16).unwrap(), 0);
        batch.push_compact(OP_ATOMIC_ADD, 4, compact_index(OP_ATOMIC_ADD, 4, 40).unwrap(), 9);
        batch.push_compact(OP_GET, 2, compact_index(OP_GET, 2, 6).unwrap(), 0);
        let b = batch.finish(reply_len(OP_GET, 2, 5));
        let (n, reply) = batch_header(b).unwrap();
        assert_eq!(n, (b.len() - HEADER_WORDS) * 8);
        assert_eq!(reply, 16);
        let recs: Vec<_> = records(&b[HEADER_WORDS..]).collect::<Option<_>>().unwrap();
        assert_eq!(recs.len(), 7);
        assert_eq!(recs[6], Record { op: OP_GET, esize: 2, nelems: 1, offset: 6, payload: &[] });
        assert_eq!(recs[4], Record { op: OP_ATOMIC_INC, esize: 8, nelems: 1, offset: -16, payload: &[] });
        assert_eq!(
            recs[5],
            Record { op: OP_ATOMIC_ADD, esize: 4, nelems: 1, offset: 40, payload: &9u32.to_ne_bytes() }
        );
        assert_eq!(compact_index(OP_ATOMIC_INC, 8, 12), None);
        assert_eq!(compact_index(OP_PUT, 8, 16), None);
        assert_eq!(inc_word(8, -2).map(|w| (w & 0xffff, compact_offset(w, 8))), Some((INC8, -16)));
        assert_eq!(inc_word(4, 1 << 40).map(|w| (w & 0xffff, compact_offset(w, 4))), Some((INC4, 1 << 42)));
        assert_eq!(inc_word(8, 1 << 47), None);
        assert_eq!(inc_word(8, -(1 << 47)).map(|w| compact_offset(w, 8)), Some(-(1 << 50)));
        let mut full = Batch::new(24);
        assert!(full.fits(8) && !full.fits(16));
        assert!(full.push_word(1) && !full.push_word(2));
        full.clear();
        assert!(full.is_empty());
        assert_eq!(
            recs[0],
            Record { op: OP_PUT, esize: 4, nelems: 3, offset: -8, payload: &[1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0] }
        );
        assert_eq!(recs[1].op, OP_ATOMIC_INC);
        assert_eq!(recs[2], Record { op: OP_GET, esize: 2, nelems: 5, offset: 128, payload: &[] });
        assert_eq!(recs[3].payload, &7u64.to_ne_bytes());
    }

    #[test]
    fn malformed_records_stop_decoding() {
        let mut batch = Batch::new(256);
        batch.push_record(OP_PUT, 8, 2, 0, &[0; 16]);
        let b = &batch.finish(0)[HEADER_WORDS..HEADER_WORDS + 3]; // payload cut short
        let r: Vec<_> = records(b).collect();
        assert_eq!(r, vec![None]);
        assert_eq!(records(&[9, 0]).collect::<Vec<_>>(), vec![None]);
        let small_atomic = [OP_ATOMIC_INC | (2 << 8) | (1 << 16), 0];
        assert_eq!(records(&small_atomic).collect::<Vec<_>>(), vec![None]);
        let add_cut = [compact_word(OP_ATOMIC_ADD, 8, 1)];
        assert_eq!(records(&add_cut).collect::<Vec<_>>(), vec![None]);
    }

    #[test]
    fn apply_each_op() {
        let mut table = [0u64; 4];
        let base = table.as_mut_ptr() as usize;
        let mut reply = Vec::new();
        let add = [5u64.to_ne_bytes(), 6u64.to_ne_bytes()].concat();
        assert!(apply(&Record { op: OP_ATOMIC_ADD, esize: 8, nelems: 2, offset: 0, payload: &add }, base, &mut reply));
        assert!(apply(
            &Record { op: OP_ATOMIC_INC, esize: 8, nelems: 1, offset: 0, payload: &[] },
            base + 8,
            &mut reply
        ));
        let put = 9u64.to_ne_bytes();
        assert!(apply(&Record { op: OP_PUT, esize: 8, nelems: 1, offset: 0, payload: &put }, base + 16, &mut reply));
        assert!(apply(&Record { op: OP_GET, esize: 4, nelems: 1, offset: 0, payload: &[] }, base + 8, &mut reply));
        assert!(!apply(
            &Record { op: OP_ATOMIC_INC, esize: 8, nelems: 1, offset: 0, payload: &[] },
            base + 4,
            &mut reply
        ));
        assert_eq!(table, [5, 7, 9, 0]);
        assert_eq!(reply.len(), 8);
        let mut out = 0u32;
        scatter(&reply, &[(&mut out as *mut u32 as usize, 4)]);
        assert_eq!(out, 7);
    }
}
