//! Deterministic randomness and hashing, written out so that their output is fixed by their
//! definitions (never by a Rust release, a platform or a `Hasher`'s seed): a seed, or a key,
//! fully determines every value drawn from it. Every crate that needs a generator or a stable
//! hash uses these: the emulator's failures, the simulator's tiers and faults, retry jitter,
//! the DynamoDB store's fingerprints and the property tests.

/// SplitMix64 (Steele, Lea and Flood, 2014): small, fast, and fully determined by its seed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator whose first value depends on `seed` alone.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(self.0)
    }

    /// Uniform in `[0, 1)`, from the top 53 bits.
    pub fn unit(&mut self) -> f64 {
        unit_of(self.next_u64())
    }

    /// Uniform in `[0, n)` (by the remainder; `n` of 0 counts as 1).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Uniform in `lo..=hi` (by the remainder), for `lo <= hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}

/// SplitMix64's finaliser: every input bit affects every output bit.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `[0, 1)` from the top 53 bits of `bits`.
pub fn unit_of(bits: u64) -> f64 {
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

/// FNV-1a, 64-bit (Fowler, Noll and Vo): a tiny, public-domain hash whose output is fixed by its
/// definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Self::new()
    }
}

impl Fnv1a {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    /// The hash of nothing.
    pub fn new() -> Self {
        Self(Self::OFFSET_BASIS)
    }

    /// Adds `bytes`.
    pub fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(Self::PRIME);
        }
    }

    /// The hash so far.
    pub fn finish(&self) -> u64 {
        self.0
    }

    /// The hash of `bytes`.
    pub fn of(bytes: &[u8]) -> u64 {
        let mut hash = Self::new();
        hash.write(bytes);
        hash.finish()
    }
}

/// For `Hash` types: a fingerprint fixed by FNV-1a and by how the types feed their bytes (the
/// standard library's, for strings and integers).
impl std::hash::Hasher for Fnv1a {
    fn write(&mut self, bytes: &[u8]) {
        Fnv1a::write(self, bytes);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Published FNV-1a 64 test vectors, so a refactor cannot silently change every jitter.
    #[test]
    fn fnv1a_matches_the_published_vectors() {
        for (input, expected) in [
            ("", 0xcbf2_9ce4_8422_2325_u64),
            ("a", 0xaf63_dc4c_8601_ec8c),
            ("foobar", 0x8594_4171_f739_67e8),
        ] {
            assert_eq!(Fnv1a::of(input.as_bytes()), expected, "{input:?}");
        }
    }

    /// SplitMix64's published reference output for seed 1234567 (the first five values).
    #[test]
    fn splitmix64_matches_the_reference_output() {
        let mut rng = SplitMix64::new(1_234_567);
        let expected = [
            6_457_827_717_110_365_317_u64,
            3_203_168_211_198_807_973,
            9_817_491_932_198_370_423,
            4_593_380_528_125_082_431,
            16_408_922_859_458_223_821,
        ];
        for want in expected {
            assert_eq!(rng.next_u64(), want);
        }
    }

    #[test]
    fn unit_values_stay_in_the_half_open_interval() {
        assert_eq!(unit_of(0), 0.0);
        assert!(unit_of(u64::MAX) < 1.0);
        let mut rng = SplitMix64::new(7);
        assert!((0..1000).all(|_| (0.0..1.0).contains(&rng.unit())));
        assert!((0..1000).all(|_| rng.below(3) < 3 && (5..=9).contains(&rng.range(5, 9))));
        assert_eq!(rng.below(0), 0);
    }
}
