//! Helpers for the tests of this crate's users (the `test-hooks` feature: the multi-process
//! tests and the provider's unit tests enable it; builds of the provider and the tools do not).

/// A seeded xorshift generator: the random choices of the kill storm, the soak and the hostile
/// peers, repeatable from their seed. The seed must not be 0.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform enough below `n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}
