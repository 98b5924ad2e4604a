//! Q8_0 (ggml type 8): blocks of 32, `{ half d; i8 qs[32]; }` (34 bytes);
//! value = qs * d.

use super::{block_count, f32_to_fp16, fp16_to_f32, get_u16, put_u16};

pub const BLOCK_ELEMS: usize = 32;
pub const BLOCK_BYTES: usize = 34;

/// quantize_row_q8_0_ref: d = amax/127, id = 1/d, qs = roundf(x*id) (half away
/// from zero). (The CPU's activation quantizer differs: see `q8_1::quantize_row_x86`.)
pub fn quantize_row(src: &[f32], dst: &mut [u8]) {
    let nb = block_count(src.len(), dst.len(), BLOCK_ELEMS, BLOCK_BYTES);
    for i in 0..nb {
        let x = &src[i * BLOCK_ELEMS..(i + 1) * BLOCK_ELEMS];
        let y = &mut dst[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES];
        let mut amax = 0.0f32;
        for &v in x {
            let a = v.abs();
            amax = if amax > a { amax } else { a }; // MAX(amax, fabsf(v))
        }
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        put_u16(y, 0, f32_to_fp16(d));
        for j in 0..BLOCK_ELEMS {
            y[2 + j] = (x[j] * id).round() as i8 as u8;
        }
    }
}

/// dequantize_row_q8_0.
pub fn dequantize_row(src: &[u8], dst: &mut [f32]) {
    let nb = block_count(dst.len(), src.len(), BLOCK_ELEMS, BLOCK_BYTES);
    for i in 0..nb {
        let x = &src[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES];
        let d = fp16_to_f32(get_u16(x, 0));
        for j in 0..BLOCK_ELEMS {
            dst[i * BLOCK_ELEMS + j] = (x[2 + j] as i8) as f32 * d;
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
        assert_eq!(BLOCK_BYTES, 34); // sizeof(block_q8_0)
    }

    #[test]
    fn round_trip_within_bound() {
        for (row, _, back) in
            corner_round_trips(BLOCK_ELEMS, BLOCK_BYTES, quantize_row, dequantize_row)
        {
            for (xs, ys) in row.chunks(BLOCK_ELEMS).zip(back.chunks(BLOCK_ELEMS)) {
                let amax = amax(xs);
                for (x, y) in xs.iter().zip(ys) {
                    // half a step of amax/127, plus the fp16 rounding of d (2^-11 relative);
                    // 1e-12 covers d underflowing fp16 for tiny blocks
                    assert!(
                        (x - y).abs() <= amax / 254.0 * 1.01 + amax * 6e-4 + 1e-12,
                        "{x} vs {y}"
                    );
                }
            }
        }
    }

    #[test]
    fn hand_checked_block() {
        let mut b = [0u8; BLOCK_BYTES];
        put_u16(&mut b, 0, 0x3400); // d = 0.25
        b[2] = 0x80; // -128
        b[3] = 0x7F; // 127
        b[4] = 0x01;
        b[33] = 0xFE; // -2
        let mut y = [0f32; 32];
        dequantize_row(&b, &mut y);
        assert_eq!(y[0], -32.0);
        assert_eq!(y[1], 31.75);
        assert_eq!(y[2], 0.25);
        assert_eq!(y[31], -0.5);
        assert_eq!(y[5], 0.0);
    }

    #[test]
    fn quantize_rounds_half_away_from_zero() {
        // amax 127 -> d = 1, id = 1: 0.5 -> 1, -2.5 -> -3 (roundf), 1.5 -> 2
        let mut x = [0f32; 32];
        x[0] = 127.0;
        x[1] = 0.5;
        x[2] = -2.5;
        x[3] = 1.5;
        let mut q = [0u8; BLOCK_BYTES];
        quantize_row(&x, &mut q);
        assert_eq!(get_u16(&q, 0), 0x3C00);
        assert_eq!(&q[2..6], &[127u8, 1, (-3i8) as u8, 2]);
    }

    #[test]
    fn matches_ggml() {
        let Some(g) = Ggml::load() else { return };
        for (r, row) in ggml_rows(BLOCK_ELEMS).iter().enumerate() {
            let mut q = vec![0u8; row.len() / BLOCK_ELEMS * BLOCK_BYTES];
            quantize_row(row, &mut q);
            let want = g.quantize_chunk(8, row, row.len(), q.len());
            assert_bytes_eq(&format!("q8_0 quantize row {r}"), &q, &want);
            let mut back = vec![0f32; row.len()];
            dequantize_row(&q, &mut back);
            assert_bits_eq(
                &format!("q8_0 dequantize row {r}"),
                &back,
                &g.to_float(8, &q, row.len()),
            );
        }
    }
}
