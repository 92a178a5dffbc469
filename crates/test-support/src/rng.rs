//! A small deterministic generator for randomized tests that are not property tests (crash
//! timings): xorshift64*, so a failure replays with the same seed.

/// xorshift64* over a non-zero seed.
#[derive(Clone, Debug)]
pub struct SeededRng(u64);

impl SeededRng {
    /// A zero seed would stay zero forever; it is replaced by a fixed non-zero one.
    pub fn new(seed: u64) -> Self {
        Self(if seed == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            seed
        })
    }

    /// The next number of the sequence.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}
