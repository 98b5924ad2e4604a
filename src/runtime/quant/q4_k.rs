//! Q4_K (ggml type 12): super-blocks of 256 = 8 sub-blocks of 32,
//! `{ half d; half dmin; u8 scales[12]; u8 qs[128]; }` (144 bytes).
//! Sub-block j has a 6-bit scale sc and min m packed in `scales`
//! (`get_scale_min_k4`); element 32*j + l is nibble (j & 1) of
//! qs[32*(j/2) + l]; value = (d*sc)*q - (dmin*m).

use super::{block_count, f32_to_fp16, fp16_to_f32, get_u16, nearest_int, put_u16};

pub const BLOCK_ELEMS: usize = 256;
pub const BLOCK_BYTES: usize = 144;

/// get_scale_min_k4: the 6-bit scale and min of sub-block j from the 12 packed bytes.
pub fn scale_min(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// make_qkx2_quants of ggml-quants.c (same float operation order).
#[allow(clippy::too_many_arguments)]
fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l_out: &mut [u8],
    the_min: &mut f32,
    laux: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> f32 {
    let n = x.len();
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l_out[..n].fill(0);
        *the_min = -min;
        return 0.0;
    }
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min));
        l_out[i] = l.clamp(0, nmax) as u8;
        let mut diff = scale * l_out[i] as f32 + min - x[i];
        diff = if use_mad { diff.abs() } else { diff * diff };
        best_error += weights[i] * diff;
    }
    if nstep < 1 {
        *the_min = -min;
        return scale;
    }
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = l as u8;
            let w = weights[i];
            let lf = l as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let mut diff = this_scale * laux[i] as f32 + this_min - x[i];
                diff = if use_mad { diff.abs() } else { diff * diff };
                cur_error += weights[i] * diff;
            }
            if cur_error < best_error {
                l_out[..n].copy_from_slice(&laux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    scale
}

/// quantize_row_q4_K_ref.
pub fn quantize_row(src: &[f32], dst: &mut [u8]) {
    let nb = block_count(src.len(), dst.len(), BLOCK_ELEMS, BLOCK_BYTES);
    let mut l = [0u8; BLOCK_ELEMS];
    let mut laux = [0u8; 32];
    let mut weights = [0f32; 32];
    let mut mins = [0f32; 8];
    let mut scales = [0f32; 8];
    for i in 0..nb {
        let x = &src[i * BLOCK_ELEMS..(i + 1) * BLOCK_ELEMS];
        let y = &mut dst[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES];
        let mut max_scale = 0.0f32;
        let mut max_min = 0.0f32;
        for j in 0..8 {
            let xs = &x[32 * j..32 * j + 32];
            let mut sum_x2 = 0.0f32;
            for v in xs {
                sum_x2 += v * v;
            }
            let av_x = (sum_x2 / 32.0).sqrt();
            for (w, v) in weights.iter_mut().zip(xs) {
                *w = av_x + v.abs();
            }
            scales[j] = make_qkx2_quants(
                15,
                xs,
                &weights,
                &mut l[32 * j..32 * j + 32],
                &mut mins[j],
                &mut laux,
                -1.0,
                0.1,
                20,
                false,
            );
            if scales[j] > max_scale {
                max_scale = scales[j];
            }
            if mins[j] > max_min {
                max_min = mins[j];
            }
        }
        let inv_scale = if max_scale > 0.0 {
            63.0 / max_scale
        } else {
            0.0
        };
        let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
        let sc = &mut y[4..16];
        for j in 0..8 {
            // uint8_t ls = nearest_int(...) (wraps), then MIN(63, ls)
            let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
            let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
            if j < 4 {
                sc[j] = ls;
                sc[j + 4] = lm;
            } else {
                sc[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
                sc[j - 4] |= (ls >> 4) << 6;
                sc[j] |= (lm >> 4) << 6;
            }
        }
        put_u16(y, 0, f32_to_fp16(max_scale / 63.0));
        put_u16(y, 2, f32_to_fp16(max_min / 63.0));
        let d_all = fp16_to_f32(get_u16(y, 0));
        let dmin_all = fp16_to_f32(get_u16(y, 2));
        for j in 0..8 {
            let (s, m) = scale_min(j, &y[4..16]);
            let d = d_all * s as f32;
            if d == 0.0 {
                continue;
            }
            let dm = dmin_all * m as f32;
            for ii in 0..32 {
                let q = nearest_int((x[32 * j + ii] + dm) / d);
                l[32 * j + ii] = q.clamp(0, 15) as u8;
            }
        }
        let q = &mut y[16..];
        for (c, j) in (0..BLOCK_ELEMS).step_by(64).enumerate() {
            for ll in 0..32 {
                q[32 * c + ll] = l[j + ll] | (l[j + ll + 32] << 4);
            }
        }
    }
}

/// dequantize_row_q4_K.
pub fn dequantize_row(src: &[u8], dst: &mut [f32]) {
    let nb = block_count(dst.len(), src.len(), BLOCK_ELEMS, BLOCK_BYTES);
    for i in 0..nb {
        let x = &src[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES];
        let y = &mut dst[i * BLOCK_ELEMS..(i + 1) * BLOCK_ELEMS];
        let d = fp16_to_f32(get_u16(x, 0));
        let min = fp16_to_f32(get_u16(x, 2));
        let scales = &x[4..16];
        let q = &x[16..];
        for c in 0..4 {
            let (sc, m) = scale_min(2 * c, scales);
            let d1 = d * sc as f32;
            let m1 = min * m as f32;
            let (sc, m) = scale_min(2 * c + 1, scales);
            let d2 = d * sc as f32;
            let m2 = min * m as f32;
            for l in 0..32 {
                y[64 * c + l] = d1 * (q[32 * c + l] & 0xF) as f32 - m1;
            }
            for l in 0..32 {
                y[64 * c + 32 + l] = d2 * (q[32 * c + l] >> 4) as f32 - m2;
            }
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
        assert_eq!(BLOCK_BYTES, 144); // sizeof(block_q4_K) = 2*2 + 12 + 128
    }

    #[test]
    fn round_trip_within_bound() {
        for (r, (row, _, back)) in
            corner_round_trips(BLOCK_ELEMS, BLOCK_BYTES, quantize_row, dequantize_row)
                .iter()
                .enumerate()
        {
            for (k, (xs, ys)) in row.chunks(32).zip(back.chunks(32)).enumerate() {
                // 16 levels over each sub-block's range (with 0 included); the 6-bit
                // scales and mins are relative to the super-block's largest, so a
                // sub-block far smaller than its neighbours may collapse to its min
                let sb = &row[k / 8 * BLOCK_ELEMS..(k / 8 + 1) * BLOCK_ELEMS];
                let super_amax = amax(sb);
                let lo = xs.iter().fold(0f32, |m, v| m.min(*v));
                let hi = xs.iter().fold(0f32, |m, v| m.max(*v));
                let err = xs
                    .iter()
                    .zip(ys)
                    .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
                assert!(
                    err <= (hi - lo) / 15.0 * 1.2 + super_amax * 0.02 + 1e-12,
                    "row {r}: err {err}, range {lo}..{hi}"
                );
            }
        }
    }

    #[test]
    fn hand_checked_block() {
        let mut b = [0u8; BLOCK_BYTES];
        put_u16(&mut b, 0, 0x3C00); // d = 1
        put_u16(&mut b, 2, 0x3800); // dmin = 0.5
                                    // sub-block 0: sc 2, m 3
        b[4] = 2;
        b[4 + 4] = 3;
        // sub-block 5: sc 37 = 0b10_0101, m 20 = 0b01_0100
        b[4 + 9] = 0x5 | (0x4 << 4); // low 4 bits of sc5 and m5
        b[4 + 1] |= 2 << 6; // high 2 bits of sc5
        b[4 + 5] |= 1 << 6; // high 2 bits of m5
        assert_eq!(scale_min(5, &b[4..16]), (37, 20));
        assert_eq!(scale_min(1, &b[4..16]), (0, 0));
        b[16] = 0x07; // element 0 (sub-block 0, low nibble): 7
        b[16 + 64] = 0x90; // element 128 (sub-block 4): 0, element 160 (sub-block 5): 9
        b[16 + 31] = 0xF0; // element 31: 0, element 63 (sub-block 1): 15
        let mut y = [0f32; 256];
        dequantize_row(&b, &mut y);
        assert_eq!(y[0], 12.5); // 1*2*7 - 0.5*3
        assert_eq!(y[1], -1.5); // 1*2*0 - 0.5*3
        assert_eq!(y[160], 323.0); // 1*37*9 - 0.5*20
        assert_eq!(y[161], -10.0);
        assert_eq!(y[128], 0.0);
        assert_eq!(y[63], 0.0); // sc = m = 0
    }

    #[test]
    fn matches_ggml() {
        let Some(g) = Ggml::load() else { return };
        for (r, row) in ggml_rows(BLOCK_ELEMS).iter().enumerate() {
            let mut q = vec![0u8; row.len() / BLOCK_ELEMS * BLOCK_BYTES];
            quantize_row(row, &mut q);
            let want = g.quantize_chunk(12, row, row.len(), q.len());
            assert_bytes_eq(&format!("q4_K quantize row {r}"), &q, &want);
            let mut back = vec![0f32; row.len()];
            dequantize_row(&q, &mut back);
            assert_bits_eq(
                &format!("q4_K dequantize row {r}"),
                &back,
                &g.to_float(12, &q, row.len()),
            );
        }
    }
}
