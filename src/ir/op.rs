/// The closed set of operations polycl plans. Optional operands are flagged in
/// the op so `Node::inputs` stays dense.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// A graph input or weight (no inputs).
    Parameter,
    /// Same memory as its input, seen with its own shape and strides.
    View,
    /// Element-wise copy with type conversion into the output layout (CPY/CONT/DUP).
    Copy,
    Binary(BinaryOp),
    Scale {
        scale: f32,
        bias: f32,
    },
    Unary(UnaryOp),
    /// inputs: [a] (both halves in a) or [a, b].
    Glu {
        kind: GluKind,
        swapped: bool,
    },
    RmsNorm {
        eps: f32,
    },
    Norm {
        eps: f32,
    },
    /// inputs: [weights, activations].
    MulMat,
    /// A MulMat whose weights the host marks as the normalized Sylvester
    /// Hadamard matrix (ggml's GGML_HINT_SRC0_IS_HADAMARD, llama's rotation of
    /// quantized KV caches): inputs [matrix, activations]; each activation row
    /// goes through the fast Walsh-Hadamard transform, as the CPU backend's
    /// `ggml_compute_forward_fwht`, and the matrix is never read.
    Hadamard,
    /// inputs: [x, positions] or [x, positions, freq_factors].
    Rope(RopeParams),
    /// inputs: [x] or [x, mask].
    SoftMax {
        scale: f32,
        max_bias: f32,
        has_mask: bool,
    },
    /// inputs: [table, row ids].
    GetRows,
    /// The neutral cache write: inputs [destination, new rows, row indices];
    /// output is the destination with the rows replaced. Passes decide who owns
    /// the destination; `lower_set_rows_stateless` turns what is left into ScatterRows.
    SetRows,
    /// An explicit scatter into the destination's memory (stateless form).
    ScatterRows,
    /// inputs: [q, k, v] or [q, k, v, mask].
    FlashAttn {
        scale: f32,
        max_bias: f32,
        softcap: f32,
        has_mask: bool,
        /// 0, or the width n of llama's rotation of the output by the n x n
        /// Hadamard matrix, fused in (passes/fuse/fa_rotation.rs): outputs
        /// [attention (left unwritten where the fast kernels take it),
        /// attention rotated].
        rotation: i32,
    },
    SumRows,
    Concat {
        dim: i32,
    },
    /// Bytes known at conversion (weights of the C decoder path, initial values of
    /// state variables); the output type says how to read them.
    Constant {
        data: std::sync::Arc<[u8]>,
    },
    /// The current value of a state variable, or its input (the initial value)
    /// before the first Assign / after a reset. inputs: [initial value].
    ReadValue {
        variable: String,
    },
    /// Commits its input as the variable's next value; a sink (kept without being a
    /// result). Its output aliases the input.
    Assign {
        variable: String,
    },
    /// inputs: [data, indices (1-D I32/I64)]: data with dim `axis` re-indexed.
    Gather {
        axis: i32,
    },
    /// Largest `k` values per row (descending, ties by lower index), k = output ne0.
    /// inputs: [data] or [data, k (an I32 graph input, for a dynamic k)];
    /// outputs: [values, indices (I32)].
    TopK {
        has_k_input: bool,
    },
    /// A view whose layout follows from a rule, so it can be derived once dynamic
    /// dims are known (the C decoder path; the ggml path uses `View`).
    ViewAs(ViewRule),
    // Fused ops, made by `passes::fuse` on plans for devices that run the fast
    // kernels. Each writes every output of the nodes it replaced (one port
    // each, listed per variant), so the host can still read any of them;
    // MulMatAddNorm alone leaves two unwritten, which nothing reads as
    // floats (or a MulMatNormed writes one of them, in its own port).
    /// [Add ->] RmsNorm -> Mul(weight row). inputs: [x, w] or [a, b, w];
    /// outputs: [normed * w, normed] or [normed * w, normed, a + b].
    FusedRmsNorm {
        eps: f32,
        has_add: bool,
    },
    /// Matmuls of one activation by `n` weights of one type.
    /// inputs: [w_0 .. w_{n-1}, x]; outputs: [w_0 x .. w_{n-1} x].
    MulMatGroup,
    /// glu(gate x, up x). inputs: [w_gate, w_up, x]; outputs: [glu, gate x, up x].
    MulMatGlu {
        kind: GluKind,
    },
    /// Rope of Q and K plus the K and V cache writes of one attention layer.
    /// inputs: [q, k, positions, k_cache, k_rows, v, v_cache, v_rows] (+ freq
    /// factors); outputs: [rope(q), rope(k), k_cache updated, v_cache updated].
    RopeStore(RopeParams),
    /// A MulMatGroup of Q, K and V projections plus the RopeStore that reads
    /// them. inputs: [w_0, w_1, w_2, positions, k_cache, k_rows, v_cache,
    /// v_rows, (freq factors,) x]; outputs: [w_0 x, w_1 x, w_2 x, rope(q),
    /// rope(k), k_cache updated, v_cache updated].
    MulMatGroupRope(GroupRope),
    /// Rope of Q and K, llama's Hadamard rotations of Q, K (and V) and the K
    /// and V cache writes of one attention layer (quantized KV caches).
    /// inputs: [q, k, positions, k_cache, k_rows, v, v_cache, v_rows] (+ freq
    /// factors), v the rotation's input (or the V rows where V is not
    /// rotated); outputs: [rope(q), rot(q), rope(k), rot(k), k_cache
    /// updated, (rot(v),) v_cache updated], all written but those `dead`.
    RopeRotStore(RopeRot),
    /// A decode matmul, the residual add after it and the FusedRmsNorm of
    /// the sum. inputs: [w, res, norm weight, x]; outputs: [w x, normed *
    /// weight, normed, w x + res]. normed * weight exists only as its Q8_1
    /// copy without 1/rms, which the fused matmuls reading it apply, and
    /// normed not at all (passes/fuse/matmul_norm.rs says when).
    MulMatAddNorm {
        eps: f32,
    },
    /// A decode matmul of a MulMatAddNorm's normed * weight (its only
    /// reader, through that Q8_1 copy) that also writes the row itself for
    /// the host: llama's output norm, which the host may read, and the lm
    /// head. inputs: [w, sum, norm weight, x] (x: the MulMatAddNorm's
    /// weighted norm, sum: its w x + res); outputs: [w x, normed * weight]
    /// (the latter in x's memory, which the MulMatAddNorm leaves unwritten).
    MulMatNormed,
}

/// Which matrix of a MulMatGroupRope is Q, K and V, and the rope.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GroupRope {
    pub rope: RopeParams,
    /// Matrix index (0..3) of Q, K, V.
    pub roles: [u8; 3],
}

/// The rope and the rotation widths of a RopeRotStore.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeRot {
    pub rope: RopeParams,
    /// Rows of the rotation of Q and K (a power of two dividing a head row).
    pub qk_width: i32,
    /// Rows of V's rotation; 1 where V is not rotated.
    pub v_width: i32,
    /// Outputs left unwritten (passes/fuse/rope_rot_store.rs DEAD_*): only
    /// the fused members read them.
    pub dead: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ViewRule {
    /// Same elements, contiguous layout (RESHAPE; the source must be contiguous).
    Reshape,
    /// `ne[axes[i]] = src.ne[i]`, strides likewise (PERMUTE, TRANSPOSE).
    Permute([i32; 4]),
    /// The source's strides, starting `offset` bytes in (VIEW).
    Offset(u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnaryOp {
    Silu,
    Gelu,
    GeluQuick,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GluKind {
    Swiglu,
    Geglu,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeMode {
    Normal,
    Neox,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeParams {
    pub mode: RopeMode,
    pub n_dims: i32,
    pub n_ctx_orig: i32,
    pub freq_base: f32,
    pub freq_scale: f32,
    pub ext_factor: f32,
    pub attn_factor: f32,
    pub beta_fast: f32,
    pub beta_slow: f32,
    pub has_freq_factors: bool,
}

impl Op {
    /// A stable name for counts and dumps.
    pub fn kind(&self) -> &'static str {
        match self {
            Op::Parameter => "Parameter",
            Op::View => "View",
            Op::Copy => "Copy",
            Op::Binary(BinaryOp::Add) => "Add",
            Op::Binary(BinaryOp::Sub) => "Sub",
            Op::Binary(BinaryOp::Mul) => "Mul",
            Op::Binary(BinaryOp::Div) => "Div",
            Op::Scale { .. } => "Scale",
            Op::Unary(UnaryOp::Silu) => "Silu",
            Op::Unary(UnaryOp::Gelu) => "Gelu",
            Op::Unary(UnaryOp::GeluQuick) => "GeluQuick",
            Op::Glu {
                kind: GluKind::Swiglu,
                ..
            } => "Swiglu",
            Op::Glu {
                kind: GluKind::Geglu,
                ..
            } => "Geglu",
            Op::RmsNorm { .. } => "RmsNorm",
            Op::Norm { .. } => "Norm",
            Op::MulMat => "MulMat",
            Op::Hadamard => "Hadamard",
            Op::Rope(_) => "Rope",
            Op::SoftMax { .. } => "SoftMax",
            Op::GetRows => "GetRows",
            Op::SetRows => "SetRows",
            Op::ScatterRows => "ScatterRows",
            Op::FlashAttn { .. } => "FlashAttn",
            Op::SumRows => "SumRows",
            Op::Concat { .. } => "Concat",
            Op::Constant { .. } => "Constant",
            Op::ReadValue { .. } => "ReadValue",
            Op::Assign { .. } => "Assign",
            Op::Gather { .. } => "Gather",
            Op::TopK { .. } => "TopK",
            Op::ViewAs(ViewRule::Reshape) => "Reshape",
            Op::ViewAs(ViewRule::Permute(_)) => "Permute",
            Op::ViewAs(ViewRule::Offset(_)) => "ViewAt",
            Op::FusedRmsNorm { has_add: false, .. } => "FusedRmsNorm",
            Op::FusedRmsNorm { has_add: true, .. } => "FusedAddRmsNorm",
            Op::MulMatGroup => "MulMatGroup",
            Op::MulMatGlu { .. } => "MulMatGlu",
            Op::RopeStore(_) => "RopeStore",
            Op::MulMatGroupRope(_) => "MulMatGroupRope",
            Op::RopeRotStore(_) => "RopeRotStore",
            Op::MulMatAddNorm { .. } => "MulMatAddRmsNorm",
            Op::MulMatNormed => "MulMatNormed",
        }
    }

    /// Allowed input counts.
    pub fn arity(&self) -> std::ops::RangeInclusive<usize> {
        match self {
            Op::Parameter | Op::Constant { .. } => 0..=0,
            Op::ReadValue { .. } | Op::Assign { .. } | Op::ViewAs(_) => 1..=1,
            Op::Gather { .. } => 2..=2,
            Op::TopK { has_k_input } => {
                let n = 1 + *has_k_input as usize;
                n..=n
            }
            Op::View | Op::Copy | Op::Scale { .. } | Op::Unary(_) => 1..=1,
            Op::RmsNorm { .. } | Op::Norm { .. } | Op::SumRows => 1..=1,
            Op::Glu { .. } => 1..=2,
            Op::Binary(_) | Op::MulMat | Op::Hadamard | Op::GetRows | Op::Concat { .. } => 2..=2,
            Op::Rope(p) => {
                let n = 2 + p.has_freq_factors as usize;
                n..=n
            }
            Op::SoftMax { has_mask, .. } => {
                let n = 1 + *has_mask as usize;
                n..=n
            }
            Op::SetRows | Op::ScatterRows => 3..=3,
            Op::FlashAttn { has_mask, .. } => {
                let n = 3 + *has_mask as usize;
                n..=n
            }
            Op::FusedRmsNorm { has_add, .. } => {
                let n = 2 + *has_add as usize;
                n..=n
            }
            Op::MulMatGroup => 2..=usize::MAX,
            Op::MulMatGlu { .. } => 3..=3,
            Op::RopeStore(p) => {
                let n = 8 + p.has_freq_factors as usize;
                n..=n
            }
            Op::MulMatGroupRope(p) => {
                let n = 9 + p.rope.has_freq_factors as usize;
                n..=n
            }
            Op::RopeRotStore(p) => {
                let n = 8 + p.rope.has_freq_factors as usize;
                n..=n
            }
            Op::MulMatAddNorm { .. } | Op::MulMatNormed => 4..=4,
        }
    }

    /// Ops that produce no new data (their output aliases an input).
    pub fn is_view(&self) -> bool {
        matches!(self, Op::Parameter | Op::View | Op::ViewAs(_))
    }

    /// Nodes kept for their effect, not their output (the graph's sinks).
    pub fn is_sink(&self) -> bool {
        matches!(self, Op::Assign { .. })
    }

    /// The inputs an op writes into without reading them: the destinations
    /// of its cache writes, and the memory of an output it writes in place
    /// of an input's (`plan/rerun.rs` tells them from inputs it reads).
    pub fn destinations(&self) -> &'static [usize] {
        match self {
            Op::SetRows | Op::ScatterRows => &[0],
            Op::RopeStore(_) | Op::RopeRotStore(_) => &[3, 6],
            Op::MulMatGroupRope(_) => &[4, 6],
            Op::MulMatNormed => &[3],
            _ => &[],
        }
    }
}
