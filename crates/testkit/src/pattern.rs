//! Deterministic test bytes and a checksum to compare them by: bytes that differ per
//! position and per seed, so a dropped, doubled or reordered chunk shows.

/// `len` bytes of a xorshift sequence seeded by `seed` (each seed its own sequence).
pub fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// FNV-1a over `bytes`.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_differ_and_the_checksum_sees_a_swap() {
        let a = bytes(64, 1);
        assert_eq!(a, bytes(64, 1));
        assert_ne!(a, bytes(64, 2));
        let mut swapped = a.clone();
        swapped.swap(3, 40);
        assert_ne!(fnv1a(&a), fnv1a(&swapped));
    }
}
