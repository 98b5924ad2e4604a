//! Typed readers of `op_params` (`int32_t[16]`; floats are bit-cast into slots),
//! one per op layout of the pinned ggml (`ggml.c` constructors).

use crate::error::{Error, Result};

/// The raw 64 bytes of a node's op_params.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct OpParams(pub [i32; 16]);

impl OpParams {
    /// From the C decoder interface: at most 64 bytes, a multiple of 4.
    pub fn from_bytes(bytes: &[u8]) -> Result<OpParams> {
        if bytes.len() > 64 || !bytes.len().is_multiple_of(4) {
            return Err(Error::InvalidGraph(format!(
                "op_params of {} bytes: expected a multiple of 4 up to 64",
                bytes.len()
            )));
        }
        let mut p = [0i32; 16];
        for (i, c) in bytes.chunks_exact(4).enumerate() {
            p[i] = i32::from_ne_bytes([c[0], c[1], c[2], c[3]]);
        }
        Ok(OpParams(p))
    }
    pub fn i32(&self, i: usize) -> i32 {
        self.0[i]
    }
    pub fn f32(&self, i: usize) -> f32 {
        f32::from_bits(self.0[i] as u32)
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NormParams {
    pub eps: f32,
}
pub fn norm(p: &OpParams) -> NormParams {
    NormParams { eps: p.f32(0) }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScaleParams {
    pub scale: f32,
    pub bias: f32,
}
pub fn scale(p: &OpParams) -> ScaleParams {
    ScaleParams {
        scale: p.f32(0),
        bias: p.f32(1),
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SoftMaxParams {
    pub scale: f32,
    pub max_bias: f32,
}
pub fn soft_max(p: &OpParams) -> SoftMaxParams {
    SoftMaxParams {
        scale: p.f32(0),
        max_bias: p.f32(1),
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeParams {
    pub n_dims: i32,
    pub mode: i32,
    pub n_ctx_orig: i32,
    pub freq_base: f32,
    pub freq_scale: f32,
    pub ext_factor: f32,
    pub attn_factor: f32,
    pub beta_fast: f32,
    pub beta_slow: f32,
    pub sections: [i32; 4],
    pub n_offs: i32,
}
pub fn rope(p: &OpParams) -> RopeParams {
    RopeParams {
        n_dims: p.i32(1),
        mode: p.i32(2),
        n_ctx_orig: p.i32(4),
        freq_base: p.f32(5),
        freq_scale: p.f32(6),
        ext_factor: p.f32(7),
        attn_factor: p.f32(8),
        beta_fast: p.f32(9),
        beta_slow: p.f32(10),
        sections: [p.i32(11), p.i32(12), p.i32(13), p.i32(14)],
        n_offs: p.i32(15),
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FlashAttnParams {
    pub scale: f32,
    pub max_bias: f32,
    pub logit_softcap: f32,
    pub prec: i32,
    pub n_kv_max: i32,
}
pub fn flash_attn_ext(p: &OpParams) -> FlashAttnParams {
    FlashAttnParams {
        scale: p.f32(0),
        max_bias: p.f32(1),
        logit_softcap: p.f32(2),
        prec: p.i32(3),
        n_kv_max: p.i32(4),
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GluParams {
    pub op: i32,
    pub swapped: bool,
    pub alpha: f32,
    pub limit: f32,
}
pub fn glu(p: &OpParams) -> GluParams {
    GluParams {
        op: p.i32(0),
        swapped: p.i32(1) != 0,
        alpha: p.f32(2),
        limit: p.f32(3),
    }
}

pub fn unary_op(p: &OpParams) -> i32 {
    p.i32(0)
}

pub fn concat_dim(p: &OpParams) -> i32 {
    p.i32(0)
}

/// VIEW stores its byte offset as a size_t in slots 0..1.
pub fn view_offset(p: &OpParams) -> u64 {
    (p.0[0] as u32 as u64) | ((p.0[1] as u32 as u64) << 32)
}

pub fn permute_axes(p: &OpParams) -> [i32; 4] {
    [p.i32(0), p.i32(1), p.i32(2), p.i32(3)]
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MulMatParams {
    pub prec: i32,
    pub hint: i32,
}
pub fn mul_mat(p: &OpParams) -> MulMatParams {
    MulMatParams {
        prec: p.i32(0),
        hint: p.i32(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(slots: &[(usize, u32)]) -> OpParams {
        let mut p = [0i32; 16];
        for &(i, v) in slots {
            p[i] = v as i32;
        }
        OpParams(p)
    }

    #[test]
    fn rope_reads_the_ggml_slots() {
        let p = params(&[
            (1, 128),
            (2, 2),
            (4, 4096),
            (5, 10000f32.to_bits()),
            (6, 0.5f32.to_bits()),
            (7, 1f32.to_bits()),
            (8, 1.25f32.to_bits()),
            (9, 32f32.to_bits()),
            (10, 1f32.to_bits()),
            (15, 7),
        ]);
        let r = rope(&p);
        assert_eq!((r.n_dims, r.mode, r.n_ctx_orig), (128, 2, 4096));
        assert_eq!(
            (r.freq_base, r.freq_scale, r.ext_factor),
            (10000.0, 0.5, 1.0)
        );
        assert_eq!(
            (r.attn_factor, r.beta_fast, r.beta_slow, r.n_offs),
            (1.25, 32.0, 1.0, 7)
        );
    }

    #[test]
    fn scalar_layouts() {
        let p = params(&[
            (0, 0.125f32.to_bits()),
            (1, 8f32.to_bits()),
            (2, 30f32.to_bits()),
            (3, 10),
            (4, 5),
        ]);
        assert_eq!(
            soft_max(&p),
            SoftMaxParams {
                scale: 0.125,
                max_bias: 8.0
            }
        );
        let fa = flash_attn_ext(&p);
        assert_eq!(
            (
                fa.scale,
                fa.max_bias,
                fa.logit_softcap,
                fa.prec,
                fa.n_kv_max
            ),
            (0.125, 8.0, 30.0, 10, 5)
        );
        assert_eq!(norm(&p).eps, 0.125);
        assert_eq!(
            scale(&p),
            ScaleParams {
                scale: 0.125,
                bias: 8.0
            }
        );
        let g = glu(&params(&[(0, 2), (1, 1)]));
        assert_eq!((g.op, g.swapped), (2, true));
        assert_eq!(view_offset(&params(&[(0, 0x10), (1, 0x2)])), 0x2_0000_0010);
        assert_eq!(
            permute_axes(&params(&[(0, 0), (1, 2), (2, 1), (3, 3)])),
            [0, 2, 1, 3]
        );
    }

    #[test]
    fn from_bytes_rejects_bad_sizes() {
        assert!(OpParams::from_bytes(&[0u8; 68]).is_err());
        assert!(OpParams::from_bytes(&[0u8; 6]).is_err());
        let p = OpParams::from_bytes(&1.5f32.to_ne_bytes()).unwrap();
        assert_eq!(p.f32(0), 1.5);
    }
}
