//! Q4_0 (ggml type 2): blocks of 32, `{ half d; u8 qs[16]; }` (18 bytes).
//! Element j is the low nibble of qs[j], element j+16 the high nibble;
//! value = (code - 8) * d.

use super::{block_count, f32_to_fp16, fp16_to_f32, get_u16, put_u16};

pub const BLOCK_ELEMS: usize = 32;
pub const BLOCK_BYTES: usize = 18;

/// quantize_row_q4_0_ref: d = max / -8 where max is the value of largest
/// magnitude, code = min(15, (int8)(x/d + 8.5)).
pub fn quantize_row(src: &[f32], dst: &mut [u8]) {
    let nb = block_count(src.len(), dst.len(), BLOCK_ELEMS, BLOCK_BYTES);
    for i in 0..nb {
        let x = &src[i * BLOCK_ELEMS..(i + 1) * BLOCK_ELEMS];
        let y = &mut dst[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES];
        let mut amax = 0.0f32;
        let mut max = 0.0f32;
        for &v in x {
            if amax < v.abs() {
                amax = v.abs();
                max = v;
            }
        }
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        put_u16(y, 0, f32_to_fp16(d));
        for j in 0..BLOCK_ELEMS / 2 {
            let x0 = x[j] * id;
            let x1 = x[BLOCK_ELEMS / 2 + j] * id;
            // C: (int8_t)(x + 8.5f) truncates toward zero; MIN(15, ...) into a uint8_t
            let xi0 = ((x0 + 8.5) as i8).min(15) as u8;
            let xi1 = ((x1 + 8.5) as i8).min(15) as u8;
            y[2 + j] = xi0 | (xi1 << 4);
        }
    }
}

/// dequantize_row_q4_0.
pub fn dequantize_row(src: &[u8], dst: &mut [f32]) {
    let nb = block_count(dst.len(), src.len(), BLOCK_ELEMS, BLOCK_BYTES);
    for i in 0..nb {
        let x = &src[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES];
        let y = &mut dst[i * BLOCK_ELEMS..(i + 1) * BLOCK_ELEMS];
        let d = fp16_to_f32(get_u16(x, 0));
        for j in 0..BLOCK_ELEMS / 2 {
            let x0 = (x[2 + j] & 0x0F) as i32 - 8;
            let x1 = (x[2 + j] >> 4) as i32 - 8;
            y[j] = x0 as f32 * d;
            y[j + BLOCK_ELEMS / 2] = x1 as f32 * d;
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
        assert_eq!(BLOCK_BYTES, 18); // sizeof(block_q4_0)
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
                let d = fp16_to_f32(get_u16(&q, b * BLOCK_BYTES)).abs();
                let amax = amax(xs);
                for (x, y) in xs.iter().zip(ys) {
                    // half a step, or a full step for values of the opposite sign
                    // at the far end (code 15 is +7d, not +8d), plus fp16 rounding of d
                    // (1e-12: d underflows fp16 for tiny blocks)
                    assert!(
                        (x - y).abs() <= d * 1.001 + amax * 1e-3 + 1e-12,
                        "{x} vs {y} (d {d})"
                    );
                }
            }
        }
    }

    #[test]
    fn hand_checked_block() {
        let mut b = [0u8; BLOCK_BYTES];
        put_u16(&mut b, 0, 0x3800); // d = 0.5
        b[2] = 0x1F; // element 0: low nibble, code 15; element 16: high nibble, code 1
        b[3] = 0x80; // element 1: code 0, element 17: code 8
        b[17] = 0x7A; // element 15: code 10, element 31: code 7
        let mut y = [0f32; 32];
        dequantize_row(&b, &mut y);
        assert_eq!(y[0], 3.5); // (15 - 8) * 0.5
        assert_eq!(y[16], -3.5); // (1 - 8) * 0.5
        assert_eq!(y[1], -4.0); // (0 - 8) * 0.5
        assert_eq!(y[17], 0.0); // (8 - 8) * 0.5
        assert_eq!(y[15], 1.0); // (10 - 8) * 0.5
        assert_eq!(y[31], -0.5); // (7 - 8) * 0.5
        assert_eq!(y[2], -4.0); // zero byte: code 0
    }

    #[test]
    fn quantize_known_block() {
        // max-magnitude value -4 -> d = 0.5, every multiple of 0.5 in [-4, 3.5] is exact
        let x: Vec<f32> = (0..32).map(|i| (i % 16) as f32 * 0.5 - 4.0).collect();
        let mut q = [0u8; BLOCK_BYTES];
        quantize_row(&x, &mut q);
        assert_eq!(get_u16(&q, 0), 0x3800);
        let mut y = [0f32; 32];
        dequantize_row(&q, &mut y);
        assert_eq!(&y[..], &x[..]);
    }

    #[test]
    fn matches_ggml() {
        let Some(g) = Ggml::load() else { return };
        for (r, row) in ggml_rows(BLOCK_ELEMS).iter().enumerate() {
            let mut q = vec![0u8; row.len() / BLOCK_ELEMS * BLOCK_BYTES];
            quantize_row(row, &mut q);
            let want = g.quantize_chunk(2, row, row.len(), q.len());
            assert_bytes_eq(&format!("q4_0 quantize row {r}"), &q, &want);
            let mut back = vec![0f32; row.len()];
            dequantize_row(&q, &mut back);
            assert_bits_eq(
                &format!("q4_0 dequantize row {r}"),
                &back,
                &g.to_float(2, &q, row.len()),
            );
        }
    }
}
