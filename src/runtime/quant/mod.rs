//! Block formats: one file per format, each with a CPU reference codec that
//! reproduces ggml's `quantize_row_*_ref` / `dequantize_row_*` (ggml-quants.c of
//! the pinned host) bit for bit, and the table the planner reads.
//!
//! Layouts follow `ggml-common.h`. Blocks are only 2-byte aligned inside a
//! tensor, so the codecs (and the kernels in `kernels/quant.cl`) read fields
//! byte-wise. All values are little-endian.
//!
//! Activation formats: for a matmul against Q4_0/Q8_0 weights the CPU quantizes
//! the activations to Q8_0 with `quantize_row_q8_0` of its x86 build; polycl
//! stores the same `d` and `qs` as Q8_1 blocks (plus `s = d*sum(qs)`), see
//! [`q8_1::quantize_row_x86`]. For Q4_K/Q6_K the activations are Q8_K
//! ([`q8_k::quantize_row`], which the x86 build uses as is). For F16 weights
//! they are F16 (round to nearest even).

pub mod q4_0;
pub mod q4_k;
pub mod q6_k;
pub mod q8_0;
pub mod q8_1;
pub mod q8_k;

/// ggml type ids (`enum ggml_type`, ggml.h) of the formats in this module.
pub mod type_id {
    pub const F32: u32 = 0;
    pub const F16: u32 = 1;
    pub const Q4_0: u32 = 2;
    pub const Q8_0: u32 = 8;
    pub const Q8_1: u32 = 9;
    pub const Q4_K: u32 = 12;
    pub const Q6_K: u32 = 14;
    pub const Q8_K: u32 = 15;
}

/// One element format as polycl's kernels see it.
#[derive(Debug, Clone, Copy)]
pub struct BlockFormat {
    /// ggml's type name (`ggml_type_name`).
    pub name: &'static str,
    /// `enum ggml_type` value.
    pub type_id: u32,
    /// Elements per block (`ggml_blck_size`; 1 for F32/F16).
    pub block_elems: usize,
    /// Bytes per block (`ggml_type_size`).
    pub block_bytes: usize,
    /// Format the activations are converted to for a MUL_MAT against weights of
    /// this format (polycl's conversion kernel output): F32 for F32, F16 for F16,
    /// Q8_1 for Q4_0/Q8_0, Q8_K for Q4_K/Q6_K; `None` for the activation-only
    /// formats Q8_1 and Q8_K.
    pub vec_dot_type: Option<u32>,
    /// The ggml reference quantizer of a row (`src.len()` a multiple of `block_elems`).
    pub quantize_row: fn(&[f32], &mut [u8]),
    /// ggml's dequantizer of a row.
    pub dequantize_row: fn(&[u8], &mut [f32]),
}

impl BlockFormat {
    /// Bytes of a row of `n` elements (`ggml_row_size`); `n` must be a multiple of `block_elems`.
    pub fn row_bytes(&self, n: usize) -> usize {
        debug_assert_eq!(n % self.block_elems, 0);
        n / self.block_elems * self.block_bytes
    }
}

static FORMATS: [BlockFormat; 8] = [
    BlockFormat {
        name: "f32",
        type_id: type_id::F32,
        block_elems: 1,
        block_bytes: 4,
        vec_dot_type: Some(type_id::F32),
        quantize_row: f32_quantize_row,
        dequantize_row: f32_dequantize_row,
    },
    BlockFormat {
        name: "f16",
        type_id: type_id::F16,
        block_elems: 1,
        block_bytes: 2,
        vec_dot_type: Some(type_id::F16),
        quantize_row: f16_quantize_row,
        dequantize_row: f16_dequantize_row,
    },
    BlockFormat {
        name: "q4_0",
        type_id: type_id::Q4_0,
        block_elems: q4_0::BLOCK_ELEMS,
        block_bytes: q4_0::BLOCK_BYTES,
        vec_dot_type: Some(type_id::Q8_1),
        quantize_row: q4_0::quantize_row,
        dequantize_row: q4_0::dequantize_row,
    },
    BlockFormat {
        name: "q8_0",
        type_id: type_id::Q8_0,
        block_elems: q8_0::BLOCK_ELEMS,
        block_bytes: q8_0::BLOCK_BYTES,
        vec_dot_type: Some(type_id::Q8_1),
        quantize_row: q8_0::quantize_row,
        dequantize_row: q8_0::dequantize_row,
    },
    BlockFormat {
        name: "q8_1",
        type_id: type_id::Q8_1,
        block_elems: q8_1::BLOCK_ELEMS,
        block_bytes: q8_1::BLOCK_BYTES,
        vec_dot_type: None,
        quantize_row: q8_1::quantize_row,
        dequantize_row: q8_1::dequantize_row,
    },
    BlockFormat {
        name: "q4_K",
        type_id: type_id::Q4_K,
        block_elems: q4_k::BLOCK_ELEMS,
        block_bytes: q4_k::BLOCK_BYTES,
        vec_dot_type: Some(type_id::Q8_K),
        quantize_row: q4_k::quantize_row,
        dequantize_row: q4_k::dequantize_row,
    },
    BlockFormat {
        name: "q6_K",
        type_id: type_id::Q6_K,
        block_elems: q6_k::BLOCK_ELEMS,
        block_bytes: q6_k::BLOCK_BYTES,
        vec_dot_type: Some(type_id::Q8_K),
        quantize_row: q6_k::quantize_row,
        dequantize_row: q6_k::dequantize_row,
    },
    BlockFormat {
        name: "q8_K",
        type_id: type_id::Q8_K,
        block_elems: q8_k::BLOCK_ELEMS,
        block_bytes: q8_k::BLOCK_BYTES,
        vec_dot_type: None,
        quantize_row: q8_k::quantize_row,
        dequantize_row: q8_k::dequantize_row,
    },
];

/// The format of `ggml_type_id`, or `None` when polycl has no codec for it.
pub fn format(ggml_type_id: u32) -> Option<&'static BlockFormat> {
    FORMATS.iter().find(|f| f.type_id == ggml_type_id)
}

/// Every format in the table.
pub fn formats() -> &'static [BlockFormat] {
    &FORMATS
}

fn f32_quantize_row(src: &[f32], dst: &mut [u8]) {
    assert!(dst.len() >= src.len() * 4, "f32 row: destination too small");
    for (x, d) in src.iter().zip(dst.chunks_exact_mut(4)) {
        d.copy_from_slice(&x.to_le_bytes());
    }
}

fn f32_dequantize_row(src: &[u8], dst: &mut [f32]) {
    assert!(src.len() >= dst.len() * 4, "f32 row: source too small");
    for (s, y) in src.chunks_exact(4).zip(dst.iter_mut()) {
        *y = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
    }
}

fn f16_quantize_row(src: &[f32], dst: &mut [u8]) {
    assert!(dst.len() >= src.len() * 2, "f16 row: destination too small");
    for (x, d) in src.iter().zip(dst.chunks_exact_mut(2)) {
        d.copy_from_slice(&f32_to_fp16(*x).to_le_bytes());
    }
}

fn f16_dequantize_row(src: &[u8], dst: &mut [f32]) {
    assert!(src.len() >= dst.len() * 2, "f16 row: source too small");
    for (s, y) in src.chunks_exact(2).zip(dst.iter_mut()) {
        *y = fp16_to_f32(u16::from_le_bytes([s[0], s[1]]));
    }
}

// ---------------------------------------------------------------------------
// Helpers shared by the codecs
// ---------------------------------------------------------------------------

/// GGML_FP32_TO_FP16: IEEE half, round to nearest even.
#[inline]
pub(crate) fn f32_to_fp16(x: f32) -> u16 {
    half::f16::from_f32(x).to_bits()
}

/// GGML_FP16_TO_FP32.
#[inline]
pub(crate) fn fp16_to_f32(h: u16) -> f32 {
    half::f16::from_bits(h).to_f32()
}

#[inline]
pub(crate) fn get_u16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

#[inline]
pub(crate) fn put_u16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

/// ggml-quants.c `nearest_int`: round half to even through the 1.5*2^23 trick
/// (valid for |x| <= 4194303, as ggml asserts).
#[inline]
pub(crate) fn nearest_int(fval: f32) -> i32 {
    debug_assert!(fval.abs() <= 4194303.0);
    let val = fval + 12582912.0f32;
    (val.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// Checks that `src`/`dst` hold whole blocks and returns the block count.
#[inline]
pub(crate) fn block_count(
    n_elems: usize,
    n_bytes: usize,
    block_elems: usize,
    block_bytes: usize,
) -> usize {
    assert_eq!(
        n_elems % block_elems,
        0,
        "row length {n_elems} is not a multiple of {block_elems}"
    );
    let nb = n_elems / block_elems;
    assert!(
        n_bytes >= nb * block_bytes,
        "{n_bytes} bytes cannot hold {nb} blocks of {block_bytes}"
    );
    nb
}

// ---------------------------------------------------------------------------
// Test support: a deterministic generator and the real ggml, when available
// ---------------------------------------------------------------------------
#[cfg(test)]
pub(crate) mod testutil {
    /// Deterministic pseudo-normal values (xorshift, sum of uniforms).
    pub fn values(n: usize, seed: u64, amp: f32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut u = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) & 0xFF_FFFF) as f32 / 8_388_608.0 - 1.0
        };
        (0..n)
            .map(|_| (u() + u() + u() + u()) * 0.866 * amp)
            .collect()
    }

    /// Rows exercising the codecs' corner cases: random data of several
    /// scales, a zero block, constants, exact ties, a single outlier, tiny values.
    pub fn corner_rows(block: usize) -> Vec<Vec<f32>> {
        let n = block * 4;
        let mut rows = vec![values(n, 1, 1.0), values(n, 2, 1000.0), values(n, 3, 1e-3)];
        let mut z = values(n, 4, 1.0);
        z[..block].iter_mut().for_each(|x| *x = 0.0);
        rows.push(z);
        rows.push(vec![0.75; n]);
        rows.push((0..n).map(|i| (i % 17) as f32 * 0.5 - 4.0).collect());
        let mut o = vec![0.01f32; n];
        o[block / 2] = -50.0;
        o[block + 3] = 50.0;
        rows.push(o);
        rows.push(values(n, 5, 1e-20));
        rows.push(
            (0..n)
                .map(|i| if i % 2 == 0 { 1.0 } else { -1.0 })
                .collect(),
        );
        rows
    }

    /// Each of `corner_rows` quantized and dequantized again: (row, its
    /// quantized bytes, the values read back).
    pub fn corner_round_trips(
        block_elems: usize,
        block_bytes: usize,
        quantize: fn(&[f32], &mut [u8]),
        dequantize: fn(&[u8], &mut [f32]),
    ) -> Vec<(Vec<f32>, Vec<u8>, Vec<f32>)> {
        corner_rows(block_elems)
            .into_iter()
            .map(|row| {
                let mut q = vec![0u8; row.len() / block_elems * block_bytes];
                quantize(&row, &mut q);
                let mut back = vec![0f32; row.len()];
                dequantize(&q, &mut back);
                (row, q, back)
            })
            .collect()
    }

    /// The largest magnitude in `xs`.
    pub fn amax(xs: &[f32]) -> f32 {
        xs.iter().fold(0f32, |m, v| m.max(v.abs()))
    }

    /// Rows for the comparisons with the real ggml: the corner cases plus many
    /// random rows whose sub-blocks have different scales and offsets, so that
    /// rare rounding-order differences would show.
    pub fn ggml_rows(block: usize) -> Vec<Vec<f32>> {
        let mut rows = corner_rows(block);
        for r in 0..300u64 {
            let n = block * 4;
            let v = values(n, 100 + r, 1.0);
            let s = values(n / 16 + 1, 7000 + r, 1.0);
            rows.push(
                v.iter()
                    .enumerate()
                    .map(|(i, x)| {
                        let k = s[i / 16];
                        x * (1.0 + 3.0 * k.abs()) * 10f32.powi((r % 7) as i32 - 3)
                            + k * (r % 3) as f32
                    })
                    .collect(),
            );
        }
        rows
    }

    /// libggml-base.so of the pinned host, loaded from `POLYCL_GGML_BASE`.
    pub struct Ggml {
        handle: *mut libc::c_void,
    }

    #[repr(C)]
    struct TypeTraits {
        type_name: *const libc::c_char,
        blck_size: i64,
        blck_size_interleave: i64,
        type_size: usize,
        is_quantized: bool,
        to_float: Option<unsafe extern "C" fn(*const libc::c_void, *mut f32, i64)>,
        from_float_ref: Option<unsafe extern "C" fn(*const f32, *mut libc::c_void, i64)>,
    }

    type QuantizeChunk = unsafe extern "C" fn(
        u32,
        *const f32,
        *mut libc::c_void,
        i64,
        i64,
        i64,
        *const f32,
    ) -> usize;
    type GetTypeTraits = unsafe extern "C" fn(u32) -> *const TypeTraits;
    pub type RowFn = unsafe extern "C" fn(*const f32, *mut libc::c_void, i64);
    pub type ToFloatFn = unsafe extern "C" fn(*const libc::c_void, *mut f32, i64);

    impl Ggml {
        /// The library named by `var`, or `None` (with a note) when unset.
        pub fn load_from(var: &str) -> Option<Ggml> {
            let path = match std::env::var(var) {
                Ok(p) if !p.is_empty() => p,
                _ => {
                    eprintln!("note: {var} is not set; skipping the comparison with the real ggml");
                    return None;
                }
            };
            let c = std::ffi::CString::new(path.clone()).unwrap();
            // SAFETY: dlopen with a valid NUL-terminated path; the handle is checked.
            let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
            assert!(!handle.is_null(), "dlopen({path}) failed");
            Some(Ggml { handle })
        }

        pub fn load() -> Option<Ggml> {
            Self::load_from("POLYCL_GGML_BASE")
        }

        /// The address of symbol `name`.
        pub fn sym(&self, name: &str) -> *mut libc::c_void {
            let c = std::ffi::CString::new(name).unwrap();
            // SAFETY: handle is a live dlopen handle, name is NUL-terminated.
            let p = unsafe { libc::dlsym(self.handle, c.as_ptr()) };
            assert!(!p.is_null(), "symbol {name} not found");
            p
        }

        /// A row function (`quantize_row_*`-shaped) by name.
        pub fn row_fn(&self, name: &str) -> RowFn {
            // SAFETY: the symbol is a C function with this signature (ggml-quants.h).
            unsafe { std::mem::transmute::<*mut libc::c_void, RowFn>(self.sym(name)) }
        }

        /// A dequantizer (`dequantize_row_*`-shaped) by name.
        pub fn to_float_fn(&self, name: &str) -> ToFloatFn {
            // SAFETY: the symbol is a C function with this signature (ggml-quants.h).
            unsafe { std::mem::transmute::<*mut libc::c_void, ToFloatFn>(self.sym(name)) }
        }

        /// ggml_quantize_chunk(type, src, dst, 0, nrows, n_per_row, NULL).
        pub fn quantize_chunk(
            &self,
            type_id: u32,
            src: &[f32],
            n_per_row: usize,
            row_bytes: usize,
        ) -> Vec<u8> {
            let nrows = src.len() / n_per_row;
            let mut dst = vec![0u8; nrows * row_bytes];
            // SAFETY: signature from ggml.h; src holds nrows*n_per_row floats and
            // dst nrows*row_bytes bytes.
            let written = unsafe {
                let f: QuantizeChunk = std::mem::transmute(self.sym("ggml_quantize_chunk"));
                f(
                    type_id,
                    src.as_ptr(),
                    dst.as_mut_ptr().cast(),
                    0,
                    nrows as i64,
                    n_per_row as i64,
                    std::ptr::null(),
                )
            };
            assert_eq!(written, dst.len());
            dst
        }

        /// ggml_get_type_traits(type)->to_float over `n` elements.
        pub fn to_float(&self, type_id: u32, src: &[u8], n: usize) -> Vec<f32> {
            let mut out = vec![0f32; n];
            // SAFETY: signature from ggml.h; the traits table is static in ggml.
            unsafe {
                let f: GetTypeTraits = std::mem::transmute(self.sym("ggml_get_type_traits"));
                let t = &*f(type_id);
                let to_float = t.to_float.expect("type has no to_float");
                to_float(src.as_ptr().cast(), out.as_mut_ptr(), n as i64);
            }
            out
        }
    }

    /// Bitwise comparison of two float slices, with the first difference in the message.
    pub fn assert_bits_eq(what: &str, got: &[f32], want: &[f32]) {
        assert_eq!(got.len(), want.len(), "{what}: lengths");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "{what}: element {i}: {g} != {w}");
        }
    }

    pub fn assert_bytes_eq(what: &str, got: &[u8], want: &[u8]) {
        assert_eq!(got.len(), want.len(), "{what}: lengths");
        if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
            panic!(
                "{what}: first difference at byte {i}: {} != {}",
                got[i], want[i]
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_matches_ggml() {
        let want: [(u32, &str, usize, usize); 8] = [
            (0, "f32", 1, 4),
            (1, "f16", 1, 2),
            (2, "q4_0", 32, 18),
            (8, "q8_0", 32, 34),
            (9, "q8_1", 32, 36),
            (12, "q4_K", 256, 144),
            (14, "q6_K", 256, 210),
            (15, "q8_K", 256, 292),
        ];
        for (id, name, be, bb) in want {
            let f = format(id).unwrap();
            assert_eq!(
                (f.name, f.type_id, f.block_elems, f.block_bytes),
                (name, id, be, bb)
            );
        }
        assert!(format(3).is_none());
        assert_eq!(
            format(type_id::Q4_0).unwrap().vec_dot_type,
            Some(type_id::Q8_1)
        );
        assert_eq!(
            format(type_id::Q6_K).unwrap().vec_dot_type,
            Some(type_id::Q8_K)
        );
        assert_eq!(format(type_id::Q4_K).unwrap().row_bytes(4096), 16 * 144);
    }

    #[test]
    fn nearest_int_is_round_half_even() {
        assert_eq!(nearest_int(0.5), 0);
        assert_eq!(nearest_int(1.5), 2);
        assert_eq!(nearest_int(2.5), 2);
        assert_eq!(nearest_int(-0.5), 0);
        assert_eq!(nearest_int(-1.5), -2);
        assert_eq!(nearest_int(-2.4), -2);
        assert_eq!(nearest_int(126.7), 127);
    }

    #[test]
    fn f16_round_trip() {
        let f = format(type_id::F16).unwrap();
        let src = [
            1.0f32,
            -2.5,
            65504.0,
            1.0 + 1.0 / 4096.0,
            1.0 + 3.0 / 4096.0,
        ];
        let mut b = vec![0u8; 10];
        (f.quantize_row)(&src, &mut b);
        let mut back = [0f32; 5];
        (f.dequantize_row)(&b, &mut back);
        // 1 + 2^-12 is a tie between 1 and 1 + 2^-10: even mantissa (1.0); 1 + 3*2^-12 rounds up
        assert_eq!(back, [1.0, -2.5, 65504.0, 1.0, 1.0 + 1.0 / 1024.0]);
    }
}
