//! SplitMix64: a small deterministic generator for randomised tests, so that a failure
//! reproduces from its seed.

#[derive(Clone)]
pub(crate) struct Rng(pub u64);

impl Rng {
    #[allow(clippy::should_implement_trait)]
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..bound` (0 when `bound` is 0).
    pub(crate) fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound.max(1)
    }

    /// A count or an index in `0..bound` (0 when `bound` is 0).
    pub(crate) fn below_usize(&mut self, bound: usize) -> usize {
        self.below(bound as u64) as usize
    }

    pub(crate) fn bytes(&mut self, length: usize) -> Vec<u8> {
        (0..length).map(|_| self.next() as u8).collect()
    }
}
