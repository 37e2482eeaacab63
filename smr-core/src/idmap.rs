//! Hash maps keyed by ids this process hands out (message ids, operation ids, slots, keys).
//!
//! The standard hasher (SipHash) resists keys chosen to collide, and costs about 140
//! instructions per lookup: several lookups per message made it a tenth of a small read's
//! cost. Ids we allocate ourselves (or that the application chose, like memory keys) cannot be
//! chosen by a peer to collide, so a multiplicative hash is enough. Maps whose keys a peer
//! controls keep SipHash.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` with the id hasher.
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// Multiplicative (Fx-style) hashing of integer keys: the multiplier is odd, so consecutive ids
/// land in distinct buckets, and its high bits mix into the control byte hashbrown takes.
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl IdHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(n.into());
    }

    fn write_u32(&mut self, n: u32) {
        self.add(n.into());
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_ids_spread_over_buckets() {
        let hash = |k: u64| {
            let mut h = IdHasher::default();
            h.write_u64(k);
            h.finish()
        };
        let buckets: std::collections::HashSet<u64> = (0..1024u64).map(|k| hash(k) & 1023).collect();
        assert_eq!(buckets.len(), 1024, "consecutive ids collide in the low bits");
        let tops: std::collections::HashSet<u64> = (0..1024u64).map(|k| hash(k) >> 57).collect();
        assert!(tops.len() > 100, "the control byte barely varies: {} values", tops.len());
    }

    #[test]
    fn map_works_with_tuples_and_integers() {
        let mut m: IdMap<(u32, u64), u64> = IdMap::default();
        for i in 0..10_000u64 {
            m.insert((i as u32 % 7, i), i * 3);
        }
        assert!((0..10_000u64).all(|i| m[&(i as u32 % 7, i)] == i * 3));
    }
}
