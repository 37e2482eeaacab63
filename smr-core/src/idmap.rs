//! Hash maps keyed by ids this process hands out (message ids, operation ids, slots, keys), and
//! by ids a peer chose (a sender's message ids).
//!
//! The standard hasher (SipHash) resists keys chosen to collide, and costs about 140
//! instructions per lookup: several lookups per message made it a tenth of a small read's
//! cost. Ids we allocate ourselves (or that the application chose, like memory keys) cannot be
//! chosen by a peer to collide, so a multiplicative hash is enough (`IdMap`). Ids a peer
//! chooses could be made to collide under it (ids that differ only in their high bits share
//! its low bits, which pick the bucket), so their maps fold a 128-bit product with a seed that
//! is random per process (`PeerIdMap`): every bit of the key reaches the low bits, and a peer
//! does not know which ids collide. That is the folded multiply of foldhash and aHash: a few
//! instructions per word where SipHash takes about 140 a lookup, three lookups per SAR message.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::OnceLock;

/// `Hasher` for a one-word hasher whose `add` takes the key a word at a time: integers as one
/// word each, bytes in words of eight (the last padded with zeros).
macro_rules! word_hasher {
    ($hasher:ty) => {
        impl Hasher for $hasher {
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
    };
}

/// A `HashMap` with the id hasher.
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// A `HashMap` keyed by ids a peer chose, with the seeded folding hasher.
pub type PeerIdMap<K, V> = HashMap<K, V, PeerIdState>;

/// Builds `PeerIdHasher`s seeded with this process's random seed.
#[derive(Clone, Copy)]
pub struct PeerIdState {
    seed: u64,
}

impl Default for PeerIdState {
    fn default() -> Self {
        static SEED: OnceLock<u64> = OnceLock::new();
        // std's RandomState draws its keys from the operating system's randomness once per
        // process; a hash of a constant under them is a random word.
        PeerIdState { seed: *SEED.get_or_init(|| std::collections::hash_map::RandomState::new().hash_one(0u64)) }
    }
}

impl BuildHasher for PeerIdState {
    type Hasher = PeerIdHasher;

    fn build_hasher(&self) -> PeerIdHasher {
        PeerIdHasher(self.seed)
    }
}

/// Folded-multiply hashing of integer keys under a secret seed (`PeerIdMap`).
#[derive(Clone, Copy)]
pub struct PeerIdHasher(u64);

/// An odd constant with well-spread bits (the fractional part of pi), as in foldhash.
const FOLD: u64 = 0x243f_6a88_85a3_08d3;

impl PeerIdHasher {
    fn add(&mut self, word: u64) {
        let product = u128::from(self.0 ^ word) * u128::from(FOLD);
        self.0 = (product as u64) ^ ((product >> 64) as u64);
    }
}

word_hasher!(PeerIdHasher);

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

word_hasher!(IdHasher);

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
    fn ids_that_differ_only_in_their_high_bits_spread_over_buckets_under_the_peer_hasher() {
        // Under the id hasher such ids share their low bits: a peer choosing them would put
        // every one into the same bucket.
        let ids = |k: u64| k << 40;
        let id_hash = |k: u64| {
            let mut h = IdHasher::default();
            h.write_u64(ids(k));
            h.finish()
        };
        let id_buckets: std::collections::HashSet<u64> = (0..1024u64).map(|k| id_hash(k) & 1023).collect();
        assert_eq!(id_buckets.len(), 1, "the weakness this hasher exists for");
        let state = PeerIdState::default();
        let buckets: std::collections::HashSet<u64> = (0..1024u64).map(|k| state.hash_one(ids(k)) & 1023).collect();
        assert!(buckets.len() > 500, "only {} buckets of 1024", buckets.len());
        let consecutive: std::collections::HashSet<u64> = (0..1024u64).map(|k| state.hash_one(k) & 1023).collect();
        assert!(consecutive.len() > 500, "consecutive ids: only {} buckets", consecutive.len());
        let mut m: PeerIdMap<(u32, u64), u64> = PeerIdMap::default();
        for i in 0..10_000u64 {
            m.insert((i as u32 % 7, ids(i)), i);
        }
        assert!((0..10_000u64).all(|i| m[&(i as u32 % 7, ids(i))] == i));
    }

    /// A key of two words (a peer's index and an id of its) spreads as well as one: the second
    /// word's bits are not lost under the first's.
    #[test]
    fn keys_of_two_words_spread_over_buckets() {
        let buckets: std::collections::HashSet<u64> = (0..4u32)
            .flat_map(|peer| (0..256u64).map(move |id| (peer, id)))
            .map(|key| BuildHasherDefault::<IdHasher>::default().hash_one(key) & 1023)
            .collect();
        assert!(buckets.len() > 600, "1,024 keys in only {} buckets of 1,024", buckets.len());
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
