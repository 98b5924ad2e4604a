//! Q8_K (ggml type 15): blocks of 256, `{ float d; i8 qs[256]; i16 bsums[16]; }`
//! (292 bytes), bsums[j] = sum of qs[16j..16j+16]; value = d * qs.
//! The activation format for Q4_K/Q6_K weights (`kernel_quantize_q8_k`).

use super::{block_count, nearest_int};

pub const BLOCK_ELEMS: usize = 256;
pub const BLOCK_BYTES: usize = 292;

/// quantize_row_q8_K_ref (the x86 build uses it as is): iscale = -127/max with
/// max the value of largest magnitude, qs = min(127, nearest_int(iscale*x)),
/// d = 1/iscale. An all-zero block gets d = 0 and zero bsums (ggml leaves its
/// bsums unset).
pub fn quantize_row(src: &[f32], dst: &mut [u8]) {
    let nb = block_count(src.len(), dst.len(), BLOCK_ELEMS, BLOCK_BYTES);
    for i in 0..nb {
        let x = &src[i * BLOCK_ELEMS..(i + 1) * BLOCK_ELEMS];
        let y = &mut dst[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES];
        let mut max = 0.0f32;
        let mut amax = 0.0f32;
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            y.fill(0);
            continue;
        }
        let iscale = -127.0f32 / max;
        for j in 0..BLOCK_ELEMS {
            let v = nearest_int(iscale * x[j]);
            y[4 + j] = v.min(127) as i8 as u8;
        }
        for j in 0..BLOCK_ELEMS / 16 {
            let sum: i32 = y[4 + 16 * j..4 + 16 * j + 16]
                .iter()
                .map(|&q| q as i8 as i32)
                .sum();
            y[260 + 2 * j..262 + 2 * j].copy_from_slice(&(sum as i16).to_le_bytes());
        }
        y[0..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
    }
}

/// dequantize_row_q8_K: d * qs.
pub fn dequantize_row(src: &[u8], dst: &mut [f32]) {
    let nb = block_count(dst.len(), src.len(), BLOCK_ELEMS, BLOCK_BYTES);
    for i in 0..nb {
        let x = &src[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES];
        let d = f32::from_le_bytes([x[0], x[1], x[2], x[3]]);
        for j in 0..BLOCK_ELEMS {
            dst[i * BLOCK_ELEMS + j] = d * (x[4 + j] as i8) as f32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::*;

    #[test]
    fn layout() {
        assert_eq!(BLOCK_ELEMS, 256);
        assert_eq!(BLOCK_BYTES, 292); // sizeof(block_q8_K)
    }

    #[test]
    fn round_trip_within_bound() {
        for (row, q, back) in
            corner_round_trips(BLOCK_ELEMS, BLOCK_BYTES, quantize_row, dequantize_row)
        {
            for (b, (xs, ys)) in row
                .chunks(BLOCK_ELEMS)
                .zip(back.chunks(BLOCK_ELEMS))
                .enumerate()
            {
                let amax = amax(xs);
                for (x, y) in xs.iter().zip(ys) {
                    assert!((x - y).abs() <= amax / 254.0 * 1.001, "{x} vs {y}");
                }
                let blk = &q[b * BLOCK_BYTES..(b + 1) * BLOCK_BYTES];
                for j in 0..16 {
                    let s: i32 = blk[4 + 16 * j..20 + 16 * j]
                        .iter()
                        .map(|&v| v as i8 as i32)
                        .sum();
                    assert_eq!(
                        i16::from_le_bytes([blk[260 + 2 * j], blk[261 + 2 * j]]) as i32,
                        s
                    );
                }
            }
        }
    }

    #[test]
    fn hand_checked_block() {
        let mut b = [0u8; BLOCK_BYTES];
        b[0..4].copy_from_slice(&0.5f32.to_le_bytes());
        b[4 + 5] = (-7i8) as u8;
        b[4 + 255] = 127;
        let mut y = [0f32; 256];
        dequantize_row(&b, &mut y);
        assert_eq!(y[5], -3.5);
        assert_eq!(y[255], 63.5);
        assert_eq!(y[0], 0.0);
    }

    #[test]
    fn quantize_known_block() {
        // max = -127 -> iscale = 1, d = 1; 2.5 -> 2 and 3.5 -> 4 (half to even)
        let mut x = [0f32; 256];
        x[0] = -127.0;
        x[1] = 2.5;
        x[2] = 3.5;
        x[17] = 100.0;
        let mut q = [0u8; BLOCK_BYTES];
        quantize_row(&x, &mut q);
        assert_eq!(f32::from_le_bytes([q[0], q[1], q[2], q[3]]), 1.0);
        assert_eq!(&q[4..7], &[(-127i8) as u8, 2, 4]);
        assert_eq!(i16::from_le_bytes([q[260], q[261]]), -121);
        assert_eq!(i16::from_le_bytes([q[262], q[263]]), 100);
    }

    #[test]
    fn matches_ggml() {
        let Some(g) = Ggml::load() else { return };
        let quant = g.row_fn("quantize_row_q8_K_ref");
        let deq = g.to_float_fn("dequantize_row_q8_K");
        for (r, row) in ggml_rows(BLOCK_ELEMS).iter().enumerate() {
            let mut q = vec![0u8; row.len() / BLOCK_ELEMS * BLOCK_BYTES];
            quantize_row(row, &mut q);
            let mut want = vec![0u8; q.len()];
            // SAFETY: quantize_row_q8_K_ref(x, y, k): k floats in, k/256 blocks out.
            unsafe { quant(row.as_ptr(), want.as_mut_ptr().cast(), row.len() as i64) };
            assert_bytes_eq(&format!("q8_K quantize row {r}"), &q, &want);
            let mut back = vec![0f32; row.len()];
            dequantize_row(&q, &mut back);
            let mut wantf = vec![0f32; row.len()];
            // SAFETY: dequantize_row_q8_K(x, y, k): k/256 blocks in, k floats out.
            unsafe { deq(q.as_ptr().cast(), wantf.as_mut_ptr(), row.len() as i64) };
            assert_bits_eq(&format!("q8_K dequantize row {r}"), &back, &wantf);
        }
    }
}
