//! Q6_K (ggml type 14): super-blocks of 256 = 16 sub-blocks of 16,
//! `{ u8 ql[128]; u8 qh[64]; i8 scales[16]; half d; }` (210 bytes).
//! Element e = 128*n + 32*k + l (n < 2, k < 4, l < 32): low 4 bits from
//! ql[64n + l + 32*(k & 1)] (low nibble for k < 2, high nibble otherwise),
//! high 2 bits from bits 2k..2k+1 of qh[32n + l]; scale index e / 16;
//! value = (d * scale) * (q - 32).

use super::{block_count, f32_to_fp16, fp16_to_f32, get_u16, nearest_int, put_u16};

pub const BLOCK_ELEMS: usize = 256;
pub const BLOCK_BYTES: usize = 210;

const GROUP_MAX_EPS: f32 = 1e-15;

/// make_qx_quants(n, nmax, x, L, rmse_type = 1, qw = NULL) of ggml-quants.c.
fn make_qx_quants_rmse1(nmax: i32, x: &[f32], l_out: &mut [i8]) -> f32 {
    let n = x.len();
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in x {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l_out[..n].fill(0);
        return 0.0;
    }
    let mut iscale = (-nmax) as f32 / max;
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * x[i]).clamp(-nmax, nmax - 1);
        l_out[i] = (l + nmax) as i8;
        let w = x[i] * x[i];
        let lf = l as f32;
        sumlx += w * x[i] * lf;
        suml2 += w * lf * lf;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9i32..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmax as f32 + 0.1f32 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for &xi in x {
            let l = nearest_int(iscale * xi).clamp(-nmax, nmax - 1);
            let w = xi * xi;
            let lf = l as f32;
            sumlx += w * xi * lf;
            suml2 += w * lf * lf;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for i in 0..n {
                let l = nearest_int(iscale * x[i]);
                l_out[i] = (nmax + l.clamp(-nmax, nmax - 1)) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// quantize_row_q6_K_ref.
pub fn quantize_row(src: &[f32], dst: &mut [u8]) {
    let nb = block_count(src.len(), dst.len(), BLOCK_ELEMS, BLOCK_BYTES);
    let mut l = [0i8; BLOCK_ELEMS];
    let mut scales = [0f32; 16];
    for i in 0..nb {
        let x = &src[i * BLOCK_ELEMS..(i + 1) * BLOCK_ELEMS];
        let y = &mut dst[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES];
        let mut max_scale = 0.0f32;
        let mut max_abs_scale = 0.0f32;
        for ib in 0..16 {
            let scale =
                make_qx_quants_rmse1(32, &x[16 * ib..16 * ib + 16], &mut l[16 * ib..16 * ib + 16]);
            scales[ib] = scale;
            let abs_scale = scale.abs();
            if abs_scale > max_abs_scale {
                max_abs_scale = abs_scale;
                max_scale = scale;
            }
        }
        if max_abs_scale < GROUP_MAX_EPS {
            y.fill(0);
            put_u16(y, 208, f32_to_fp16(0.0));
            continue;
        }
        let iscale = -128.0f32 / max_scale;
        put_u16(y, 208, f32_to_fp16(1.0 / iscale));
        for ib in 0..16 {
            // int8_t = MIN(127, nearest_int(...)) (the conversion wraps)
            y[192 + ib] = nearest_int(iscale * scales[ib]).min(127) as i8 as u8;
        }
        let dy = fp16_to_f32(get_u16(y, 208));
        for j in 0..16 {
            let d = dy * (y[192 + j] as i8) as f32;
            if d == 0.0 {
                continue;
            }
            for ii in 0..16 {
                let q = nearest_int(x[16 * j + ii] / d).clamp(-32, 31);
                l[16 * j + ii] = (q + 32) as i8;
            }
        }
        for (h, j) in (0..BLOCK_ELEMS).step_by(128).enumerate() {
            for ll in 0..32 {
                let q1 = (l[j + ll] as u8) & 0xF;
                let q2 = (l[j + ll + 32] as u8) & 0xF;
                let q3 = (l[j + ll + 64] as u8) & 0xF;
                let q4 = (l[j + ll + 96] as u8) & 0xF;
                y[64 * h + ll] = q1 | (q3 << 4);
                y[64 * h + ll + 32] = q2 | (q4 << 4);
                y[128 + 32 * h + ll] = ((l[j + ll] as u8) >> 4)
                    | (((l[j + ll + 32] as u8) >> 4) << 2)
                    | (((l[j + ll + 64] as u8) >> 4) << 4)
                    | (((l[j + ll + 96] as u8) >> 4) << 6);
            }
        }
    }
}

/// dequantize_row_q6_K.
pub fn dequantize_row(src: &[u8], dst: &mut [f32]) {
    let nb = block_count(dst.len(), src.len(), BLOCK_ELEMS, BLOCK_BYTES);
    for i in 0..nb {
        let x = &src[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES];
        let y = &mut dst[i * BLOCK_ELEMS..(i + 1) * BLOCK_ELEMS];
        let d = fp16_to_f32(get_u16(x, 208));
        for h in 0..2 {
            let ql = &x[64 * h..];
            let qh = &x[128 + 32 * h..];
            let sc = &x[192 + 8 * h..];
            for l in 0..32 {
                let is = l / 16;
                let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
                let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                let o = 128 * h;
                y[o + l] = d * (sc[is] as i8) as f32 * q1 as f32;
                y[o + l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
                y[o + l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
                y[o + l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
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
        assert_eq!(BLOCK_BYTES, 210); // sizeof(block_q6_K) = 128 + 64 + 16 + 2
    }

    #[test]
    fn round_trip_within_bound() {
        for (r, (row, _, back)) in
            corner_round_trips(BLOCK_ELEMS, BLOCK_BYTES, quantize_row, dequantize_row)
                .iter()
                .enumerate()
        {
            for (k, (xs, ys)) in row.chunks(16).zip(back.chunks(16)).enumerate() {
                // 64 levels per sub-block, 8-bit scales relative to the super-block's largest
                let sb = &row[k / 16 * BLOCK_ELEMS..(k / 16 + 1) * BLOCK_ELEMS];
                let super_amax = amax(sb);
                let amax = amax(xs);
                let err = xs
                    .iter()
                    .zip(ys)
                    .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
                assert!(
                    err <= amax / 31.0 * 1.1 + super_amax * 0.005 + 1e-12,
                    "row {r}: err {err}, amax {amax}"
                );
            }
        }
    }

    #[test]
    fn hand_checked_block() {
        let mut b = [0u8; BLOCK_BYTES];
        put_u16(&mut b, 208, 0x3800); // d = 0.5
        b[192] = 2; // scale of elements 0..15
        b[192 + 15] = (-3i8) as u8; // scale of elements 240..255
        b[0] = 0x05; // element 0: low 4 bits 5
        b[128] = 0x02; // element 0: high 2 bits 2 -> q = 37
        b[127] = 0xA0; // element 255: low 4 bits 10 (high nibble of ql[127])
        b[128 + 63] = 0xC0; // element 255: high 2 bits 3 -> q = 58
        let mut y = [0f32; 256];
        dequantize_row(&b, &mut y);
        assert_eq!(y[0], 5.0); // 0.5*2*(37-32)
        assert_eq!(y[1], -32.0); // 0.5*2*(0-32)
        assert_eq!(y[255], -39.0); // 0.5*(-3)*(58-32)
        assert_eq!(y[254], 48.0); // 0.5*(-3)*(0-32)
        assert_eq!(y[100], 0.0); // scale 0
    }

    #[test]
    fn matches_ggml() {
        let Some(g) = Ggml::load() else { return };
        for (r, row) in ggml_rows(BLOCK_ELEMS).iter().enumerate() {
            let mut q = vec![0u8; row.len() / BLOCK_ELEMS * BLOCK_BYTES];
            quantize_row(row, &mut q);
            let want = g.quantize_chunk(14, row, row.len(), q.len());
            assert_bytes_eq(&format!("q6_K quantize row {r}"), &q, &want);
            let mut back = vec![0f32; row.len()];
            dequantize_row(&q, &mut back);
            assert_bits_eq(
                &format!("q6_K dequantize row {r}"),
                &back,
                &g.to_float(14, &q, row.len()),
            );
        }
    }
}
