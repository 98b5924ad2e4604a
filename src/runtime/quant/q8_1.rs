//! Q8_1 (ggml type 9): blocks of 32, `{ half d; half s; i8 qs[32]; }` (36 bytes),
//! s = d * sum(qs); value = qs * d.
//!
//! polycl's activation format for Q4_0/Q8_0 weights: `kernel_quantize_q8_1`
//! writes [`quantize_row_x86`] (the CPU's own activation quantizer), not the
//! reference [`quantize_row`].

use super::{block_count, f32_to_fp16, fp16_to_f32, get_u16, put_u16};

pub const BLOCK_ELEMS: usize = 32;
pub const BLOCK_BYTES: usize = 36;

/// quantize_row_q8_1_ref: d = amax/127, id = 1/d, qs = roundf(x*id),
/// s = fp16(sum*d).
pub fn quantize_row(src: &[f32], dst: &mut [u8]) {
    let nb = block_count(src.len(), dst.len(), BLOCK_ELEMS, BLOCK_BYTES);
    for i in 0..nb {
        let x = &src[i * BLOCK_ELEMS..(i + 1) * BLOCK_ELEMS];
        let y = &mut dst[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES];
        let mut amax = 0.0f32;
        for &v in x {
            let a = v.abs();
            amax = if amax > a { amax } else { a };
        }
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        put_u16(y, 0, f32_to_fp16(d));
        let mut sum = 0i32;
        for j in 0..BLOCK_ELEMS / 2 {
            let v0 = x[j] * id;
            let v1 = x[BLOCK_ELEMS / 2 + j] * id;
            let q0 = v0.round() as i8;
            let q1 = v1.round() as i8;
            y[4 + j] = q0 as u8;
            y[4 + BLOCK_ELEMS / 2 + j] = q1 as u8;
            sum += q0 as i32 + q1 as i32;
        }
        put_u16(y, 2, f32_to_fp16(sum as f32 * d));
    }
}

/// The x86 AVX2 `quantize_row_q8_1` / `quantize_row_q8_0` of ggml-cpu (what the
/// CPU backend applies to matmul activations, and what `kernel_quantize_q8_1`
/// writes): d = amax/127, id = 127/amax, qs = round-half-even(x*id),
/// s = fp16(d*sum) with the unrounded d.
pub fn quantize_row_x86(src: &[f32], dst: &mut [u8]) {
    let nb = block_count(src.len(), dst.len(), BLOCK_ELEMS, BLOCK_BYTES);
    for i in 0..nb {
        let x = &src[i * BLOCK_ELEMS..(i + 1) * BLOCK_ELEMS];
        let y = &mut dst[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES];
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        put_u16(y, 0, f32_to_fp16(d));
        let mut sum = 0i32;
        for j in 0..BLOCK_ELEMS {
            let r = (x[j] * id).round_ties_even();
            // _mm256_cvtps_epi32: NaN / out of range -> i32::MIN; packs saturate
            let q = if r.is_nan() || r.abs() >= 2147483648.0 {
                i32::MIN
            } else {
                r as i32
            };
            sum = sum.wrapping_add(q);
            y[4 + j] = q.clamp(-128, 127) as i8 as u8;
        }
        put_u16(y, 2, f32_to_fp16(d * sum as f32));
    }
}

/// qs * d (ggml has no dequantizer for Q8_1; `s` is not needed).
pub fn dequantize_row(src: &[u8], dst: &mut [f32]) {
    let nb = block_count(dst.len(), src.len(), BLOCK_ELEMS, BLOCK_BYTES);
    for i in 0..nb {
        let x = &src[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES];
        let d = fp16_to_f32(get_u16(x, 0));
        for j in 0..BLOCK_ELEMS {
            dst[i * BLOCK_ELEMS + j] = (x[4 + j] as i8) as f32 * d;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::*;

    #[test]
    fn layout() {
        assert_eq!(BLOCK_ELEMS, 32);
        assert_eq!(BLOCK_BYTES, 36); // sizeof(block_q8_1)
    }

    #[test]
    fn round_trip_within_bound() {
        for quant in [quantize_row as fn(&[f32], &mut [u8]), quantize_row_x86] {
            for (row, q, back) in
                corner_round_trips(BLOCK_ELEMS, BLOCK_BYTES, quant, dequantize_row)
            {
                for (b, (xs, ys)) in row
                    .chunks(BLOCK_ELEMS)
                    .zip(back.chunks(BLOCK_ELEMS))
                    .enumerate()
                {
                    let amax = amax(xs);
                    for (x, y) in xs.iter().zip(ys) {
                        // 1e-12: d underflows fp16 for tiny blocks
                        assert!(
                            (x - y).abs() <= amax / 254.0 * 1.01 + amax * 6e-4 + 1e-12,
                            "{x} vs {y}"
                        );
                    }
                    // s = d * sum(qs), to fp16 precision
                    let blk = &q[b * BLOCK_BYTES..(b + 1) * BLOCK_BYTES];
                    let sum: i32 = blk[4..].iter().map(|&v| v as i8 as i32).sum();
                    let s = fp16_to_f32(get_u16(blk, 2));
                    let want = fp16_to_f32(get_u16(blk, 0)) * sum as f32;
                    assert!(
                        (s - want).abs() <= want.abs() * 2e-3 + 1e-30,
                        "s {s} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn hand_checked_block() {
        let mut b = [0u8; BLOCK_BYTES];
        put_u16(&mut b, 0, 0x4000); // d = 2
        put_u16(&mut b, 2, 0x4600); // s = 6 (ignored)
        b[4] = 3;
        b[35] = 0xFF; // -1
        let mut y = [0f32; 32];
        dequantize_row(&b, &mut y);
        assert_eq!(y[0], 6.0);
        assert_eq!(y[31], -2.0);
        assert_eq!(y[1], 0.0);
    }

    #[test]
    fn x86_rounds_half_even_and_ref_away_from_zero() {
        let mut x = [0f32; 32];
        x[0] = 127.0; // d = 1, id = 1
        x[1] = 2.5;
        x[2] = -0.5;
        x[3] = 3.5;
        let mut a = [0u8; BLOCK_BYTES];
        let mut b = [0u8; BLOCK_BYTES];
        quantize_row_x86(&x, &mut a);
        quantize_row(&x, &mut b);
        assert_eq!(&a[4..8], &[127u8, 2, 0, 4]);
        assert_eq!(&b[4..8], &[127u8, 3, (-1i8) as u8, 4]);
        assert_eq!(fp16_to_f32(get_u16(&a, 2)), 133.0);
        assert_eq!(fp16_to_f32(get_u16(&b, 2)), 133.0);
    }

    #[test]
    fn matches_ggml() {
        let Some(g) = Ggml::load() else { return };
        let f = g.row_fn("quantize_row_q8_1_ref");
        for (r, row) in ggml_rows(BLOCK_ELEMS).iter().enumerate() {
            let mut q = vec![0u8; row.len() / BLOCK_ELEMS * BLOCK_BYTES];
            quantize_row(row, &mut q);
            let mut want = vec![0u8; q.len()];
            // SAFETY: quantize_row_q8_1_ref(x, y, k) with k floats in and k/32 blocks out.
            unsafe { f(row.as_ptr(), want.as_mut_ptr().cast(), row.len() as i64) };
            assert_bytes_eq(&format!("q8_1 quantize row {r}"), &q, &want);
        }
    }

    /// The x86 variant against libggml-cpu.so's quantize_row_q8_1 (POLYCL_GGML_CPU).
    #[test]
    fn x86_matches_ggml_cpu() {
        if Ggml::load().is_none() {
            return;
        }
        let Some(g) = Ggml::load_from("POLYCL_GGML_CPU") else {
            return;
        };
        let f = g.row_fn("quantize_row_q8_1");
        for (r, row) in ggml_rows(BLOCK_ELEMS).iter().enumerate() {
            let mut q = vec![0u8; row.len() / BLOCK_ELEMS * BLOCK_BYTES];
            quantize_row_x86(row, &mut q);
            let mut want = vec![0u8; q.len()];
            // SAFETY: quantize_row_q8_1(x, y, k) of ggml-cpu, k floats in, k/32 blocks out.
            unsafe { f(row.as_ptr(), want.as_mut_ptr().cast(), row.len() as i64) };
            assert_bytes_eq(&format!("q8_1 x86 quantize row {r}"), &q, &want);
        }
    }
}
