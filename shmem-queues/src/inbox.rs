//! The symmetric block of a communication queue: where each source PE's batches land on a
//! target, and where the target answers.
//!
//! ```text
//! info                    u64: this PE's main-program base minus this block's address
//! acks   [src]            u64, 64 B apart: batches from src applied here (written by the target)
//! seqs   [src][slot]      u64, 64 B apart: 1 + number of the batch now in that slot (by src)
//! req    [src][slot]      slot_bytes each: the batch (wire.rs)
//! reply  [src][slot]      slot_bytes each: GET answers of that batch
//! ```
//! Every PE allocates the same block (shmem_malloc is collective), so an offset names the same
//! place on every PE.

/// Batches in flight per (source, target) pair: some being applied while the next fill. A
/// source reads the target's ack (one remote atomic fetch, a round trip through the target's
/// progress) only when all are in flight, and then usually finds several applied: with two
/// slots it fetched once per batch, with four about once per three (histogram, 2 PEs).
pub const SLOTS: usize = 4;
/// What the request and reply areas of a block may take by default (the slot size shrinks as
/// PEs are added, within the bounds below); `SHMEM_QUEUE_BATCH_BYTES` overrides it.
const DEFAULT_AREAS_BYTES: usize = 16 << 20;
const DEFAULT_SLOT_MIN: usize = 32 << 10;
const DEFAULT_SLOT_MAX: usize = 256 << 10;
const LINE: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub npes: usize,
    pub slot_bytes: usize,
}

impl Layout {
    pub fn new(npes: usize, slot_bytes: usize) -> Self {
        Layout { npes, slot_bytes }
    }

    /// The slot size from the environment (the same on every PE: it sizes a symmetric block).
    pub fn slot_bytes_from_env(npes: usize) -> usize {
        std::env::var("SHMEM_QUEUE_BATCH_BYTES")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .map(|v| v.clamp(256, 16 << 20) & !63)
            .unwrap_or_else(|| Self::default_slot_bytes(npes))
    }

    /// The default slot size for `npes` PEs: 256 KiB up to 8 PEs (a batch of 32K increments:
    /// fewer ships, so fewer waits for the targets' progress), halved as PEs double so that the
    /// request and reply areas stay within 16 MiB, down to 32 KiB (from 64 PEs).
    pub fn default_slot_bytes(npes: usize) -> usize {
        let fit = DEFAULT_AREAS_BYTES / (2 * SLOTS * npes.max(1));
        let pow2 = if fit == 0 { 0 } else { 1 << fit.ilog2() };
        pow2.clamp(DEFAULT_SLOT_MIN, DEFAULT_SLOT_MAX)
    }

    pub fn info(&self) -> usize {
        0
    }
    pub fn ack(&self, src: usize) -> usize {
        LINE + src * LINE
    }
    pub fn seq(&self, src: usize, slot: usize) -> usize {
        LINE + self.npes * LINE + (src * SLOTS + slot) * LINE
    }
    fn areas(&self) -> usize {
        LINE + self.npes * LINE * (1 + SLOTS)
    }
    pub fn req(&self, src: usize, slot: usize) -> usize {
        self.areas() + (src * SLOTS + slot) * self.slot_bytes
    }
    pub fn reply(&self, src: usize, slot: usize) -> usize {
        self.areas() + (self.npes * SLOTS + src * SLOTS + slot) * self.slot_bytes
    }
    pub fn total(&self) -> usize {
        self.areas() + 2 * self.npes * SLOTS * self.slot_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_do_not_overlap() {
        let l = Layout::new(3, 1024);
        let mut spans = vec![(l.info(), 8)];
        for s in 0..3 {
            spans.push((l.ack(s), 8));
            for k in 0..SLOTS {
                spans.push((l.seq(s, k), 8));
                spans.push((l.req(s, k), 1024));
                spans.push((l.reply(s, k), 1024));
            }
        }
        spans.sort();
        for w in spans.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0, "{w:?}");
        }
        let last = spans.last().unwrap();
        assert_eq!(last.0 + last.1, l.total());
        assert!(spans.iter().all(|(o, _)| o % 8 == 0));
    }

    #[test]
    fn default_slot_shrinks_with_pes() {
        let sizes: Vec<_> = [1, 2, 4, 8, 16, 32, 64, 1000].iter().map(|&n| Layout::default_slot_bytes(n)).collect();
        assert_eq!(sizes, [256 << 10, 256 << 10, 256 << 10, 256 << 10, 128 << 10, 64 << 10, 32 << 10, 32 << 10]);
    }
}
