//! Shared by the kernel tests that feed quantized blocks to one kernel built
//! two ways (tests/buffer_addresses.rs, tests/glu_wide.rs): pseudo-random
//! weight and activation blocks whose scales are small normal numbers.

pub const Q8_1_BLOCK: usize = 36;

/// `n` blocks of `block` bytes from a pseudo-random generator, with each
/// block's leading F16 scale (and a Q8_1 block's second, its sum) made a
/// small normal number.
pub fn blocks(seed: u64, n: usize, block: usize) -> Vec<u8> {
    let mut s = seed;
    let mut out: Vec<u8> = (0..n * block)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 56) as u8
        })
        .collect();
    for (b, chunk) in out.chunks_mut(block).enumerate() {
        // 2^-7 .. 2^-6 as F16: exponent 8, a mantissa from the block index.
        let h: u16 = (8 << 10) | ((b as u16 * 37) & 0x3ff);
        chunk[..2].copy_from_slice(&h.to_le_bytes());
        if block == Q8_1_BLOCK {
            chunk[2..4].copy_from_slice(&h.to_le_bytes());
        }
    }
    out
}
