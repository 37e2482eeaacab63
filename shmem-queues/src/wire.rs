//! The batch format: what a source PE writes into a target's inbox slot.
//!
//! A batch is a 16-byte header (`records_len`, `reply_len`, both u64) followed by records. A
//! record is two u64 words, then its payload padded to 8 bytes:
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

use crate::config::{OP_ATOMIC_ADD, OP_ATOMIC_INC, OP_GET, OP_PUT};

pub const BATCH_HEADER: usize = 16;
pub const RECORD_HEADER: usize = 16;
const MAX_NELEMS: u64 = (1 << 48) - 1;
const COMPACT: u64 = 0x80;

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

/// Appends a record to `buf` (a batch under construction). `payload` is the PUT/ADD data.
pub fn push_record(buf: &mut Vec<u8>, op: u64, esize: usize, nelems: usize, offset: i64, payload: &[u8]) {
    debug_assert!(esize < 256 && (nelems as u64) <= MAX_NELEMS);
    let w0 = op | ((esize as u64) << 8) | ((nelems as u64) << 16);
    buf.extend_from_slice(&w0.to_ne_bytes());
    buf.extend_from_slice(&offset.to_ne_bytes());
    if op == OP_PUT || op == OP_ATOMIC_ADD {
        buf.extend_from_slice(payload);
        buf.resize(pad8(buf.len()), 0);
    }
}

/// The compact index of a one-element atomic at `offset`, if it has one.
pub fn compact_index(op: u64, esize: usize, offset: i64) -> Option<i64> {
    if op != OP_ATOMIC_INC && op != OP_ATOMIC_ADD && op != OP_GET {
        return None;
    }
    // esize is 1, 2, 4 or 8: shifts, not a 64-bit division (this is on every push).
    let shift = esize.trailing_zeros();
    let idx = offset >> shift;
    (offset & (esize as i64 - 1) == 0 && (-(1 << 47)..(1 << 47)).contains(&idx)).then_some(idx)
}

/// Bytes of a compact record.
pub fn compact_len(op: u64) -> usize {
    if op == OP_ATOMIC_ADD {
        16
    } else {
        8
    }
}

/// Appends a compact record (see [`compact_index`]); `value` is the ADD operand.
#[inline]
pub fn push_compact(buf: &mut Vec<u8>, op: u64, esize: usize, idx: i64, value: u64) {
    let w0 = (op | COMPACT) | ((esize as u64) << 8) | ((idx as u64) << 16);
    buf.extend_from_slice(&w0.to_ne_bytes());
    if op == OP_ATOMIC_ADD {
        buf.extend_from_slice(&value.to_ne_bytes());
    }
}

/// Starts an empty batch (header space reserved).
pub fn start_batch(buf: &mut Vec<u8>) {
    buf.clear();
    buf.resize(BATCH_HEADER, 0);
}

/// Writes the header of a finished batch.
pub fn finish_batch(buf: &mut [u8], reply: usize) {
    let records = (buf.len() - BATCH_HEADER) as u64;
    buf[0..8].copy_from_slice(&records.to_ne_bytes());
    buf[8..16].copy_from_slice(&(reply as u64).to_ne_bytes());
}

fn word(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The (records_len, reply_len) of a batch header.
pub fn batch_header(b: &[u8]) -> Option<(usize, usize)> {
    Some((usize::try_from(word(b, 0)?).ok()?, usize::try_from(word(b, 8)?).ok()?))
}

/// Decodes the records of a batch body; `None` at the first malformed record.
pub fn records(body: &[u8]) -> impl Iterator<Item = Option<Record<'_>>> {
    let mut at = 0usize;
    let mut bad = false;
    std::iter::from_fn(move || {
        if bad || at >= body.len() {
            return None;
        }
        let r = (|| {
            let w0 = word(body, at)?;
            let esize = ((w0 >> 8) & 0xff) as usize;
            if w0 & COMPACT != 0 {
                let op = w0 & 0x7f;
                let atomic = op == OP_ATOMIC_INC || op == OP_ATOMIC_ADD;
                if !(atomic && matches!(esize, 4 | 8) || op == OP_GET && matches!(esize, 1 | 2 | 4 | 8)) {
                    return None;
                }
                let offset = ((w0 as i64) >> 16) * esize as i64;
                let len = compact_len(op);
                let payload = if op == OP_ATOMIC_ADD { body.get(at + 8..at + 8 + esize)? } else { &[] };
                body.get(at..at + len)?;
                at += len;
                return Some(Record { op, esize, nelems: 1, offset, payload });
            }
            let offset = word(body, at + 8)? as i64;
            let op = w0 & 0xff;
            let nelems = usize::try_from(w0 >> 16).ok()?;
            if op > OP_ATOMIC_INC || !matches!(esize, 1 | 2 | 4 | 8) {
                return None;
            }
            if (op == OP_ATOMIC_ADD || op == OP_ATOMIC_INC) && esize < 4 {
                return None;
            }
            let bytes = esize.checked_mul(nelems)?;
            let plen = if op == OP_PUT || op == OP_ATOMIC_ADD { bytes.checked_add(7)? & !7 } else { 0 };
            let start = at + RECORD_HEADER;
            let payload = body.get(start..start.checked_add(plen)?)?;
            at = start + plen;
            Some(Record { op, esize, nelems, offset, payload: &payload[..plen.min(bytes)] })
        })();
        bad = r.is_none();
        Some(r)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut b = Vec::new();
        start_batch(&mut b);
        push_record(&mut b, OP_PUT, 4, 3, -8, &[1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0]);
        push_record(&mut b, OP_ATOMIC_INC, 8, 1, 64, &[]);
        push_record(&mut b, OP_GET, 2, 5, 128, &[]);
        push_record(&mut b, OP_ATOMIC_ADD, 8, 1, 0, &7u64.to_ne_bytes());
        push_compact(&mut b, OP_ATOMIC_INC, 8, compact_index(OP_ATOMIC_INC, 8, -16).unwrap(), 0);
        push_compact(&mut b, OP_ATOMIC_ADD, 4, compact_index(OP_ATOMIC_ADD, 4, 40).unwrap(), 9);
        push_compact(&mut b, OP_GET, 2, compact_index(OP_GET, 2, 6).unwrap(), 0);
        finish_batch(&mut b, reply_len(OP_GET, 2, 5));
        let (n, reply) = batch_header(&b).unwrap();
        assert_eq!(n, b.len() - BATCH_HEADER);
        assert_eq!(reply, 16);
        let recs: Vec<_> = records(&b[BATCH_HEADER..]).collect::<Option<_>>().unwrap();
        assert_eq!(recs.len(), 7);
        assert_eq!(recs[6], Record { op: OP_GET, esize: 2, nelems: 1, offset: 6, payload: &[] });
        assert_eq!(recs[4], Record { op: OP_ATOMIC_INC, esize: 8, nelems: 1, offset: -16, payload: &[] });
        assert_eq!(
            recs[5],
            Record { op: OP_ATOMIC_ADD, esize: 4, nelems: 1, offset: 40, payload: &9u32.to_ne_bytes() }
        );
        assert_eq!(compact_index(OP_ATOMIC_INC, 8, 12), None);
        assert_eq!(compact_index(OP_PUT, 8, 16), None);
        assert_eq!(recs[0], Record { op: OP_PUT, esize: 4, nelems: 3, offset: -8, payload: &b[32..44] });
        assert_eq!(recs[1].op, OP_ATOMIC_INC);
        assert_eq!(recs[2], Record { op: OP_GET, esize: 2, nelems: 5, offset: 128, payload: &[] });
        assert_eq!(recs[3].payload, &7u64.to_ne_bytes());
    }

    #[test]
    fn malformed_records_stop_decoding() {
        let mut b = Vec::new();
        push_record(&mut b, OP_PUT, 8, 2, 0, &[0; 16]);
        b.truncate(24); // payload cut short
        let r: Vec<_> = records(&b).collect();
        assert_eq!(r, vec![None]);
        let bad_op = (9u64).to_ne_bytes().into_iter().chain([0; 8]).collect::<Vec<_>>();
        assert_eq!(records(&bad_op).collect::<Vec<_>>(), vec![None]);
        let small_atomic = (OP_ATOMIC_INC | (2 << 8) | (1 << 16)).to_ne_bytes().into_iter().chain([0; 8]);
        assert_eq!(records(&small_atomic.collect::<Vec<_>>()).collect::<Vec<_>>(), vec![None]);
    }
}
