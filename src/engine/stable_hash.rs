//! The one hash whose values outlive the process (agent identities and knowledge keys in
//! ConfigMaps, the applied-Task fingerprint): 64-bit FNV-1a, the same values the `fnv`
//! crate gave. Never change its output: stored keys would stop matching.

use std::hash::Hasher;

const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// 64-bit FNV-1a of `bytes`.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hasher = StableHasher::default();
    hasher.write(bytes);
    hasher.finish()
}

/// A [`Hasher`] computing 64-bit FNV-1a: stable across processes and releases (unlike the
/// standard library's, which is randomly seeded, and `rustc-hash`'s, which may change).
#[derive(Clone, Copy, Debug)]
pub(crate) struct StableHasher(u64);

impl Default for StableHasher {
    fn default() -> Self {
        Self(OFFSET_BASIS)
    }
}

impl Hasher for StableHasher {
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(PRIME);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use std::hash::Hash;

    use super::*;

    #[test]
    fn fnv1a_gives_the_published_test_vectors() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn hashing_in_pieces_gives_the_hash_of_the_whole() {
        let mut hasher = StableHasher::default();
        hasher.write(b"foo");
        hasher.write(b"bar");
        assert_eq!(hasher.finish(), fnv1a(b"foobar"));
    }

    #[test]
    fn a_hashed_str_is_its_bytes_and_a_terminator() {
        let mut hasher = StableHasher::default();
        "a".hash(&mut hasher);
        assert_eq!(hasher.finish(), fnv1a(b"a\xff"));
    }
}
