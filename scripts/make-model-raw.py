#!/usr/bin/env python3
"""Writes a random-weight llama GGUF of any size with the standard library only
(the GPU machine has no numpy). Weights are tiles of a pool of valid random
blocks: fine for speed measurements, where only sizes and shapes matter.

By default Q4_0 codes have mean -0.5 (codes 0..15 less 8) and Q4_K's minimums
are unmatched, so every matrix adds the same bias direction to the residual:
the residual grows past half's range within six layers (the wide preset's
purpose), and every generated token is one token (the 1B's: 5380). --centered
gives weights of mean zero, each tensor from its own place in its pool, whose
greedy tokens follow the prompt. Such a random network amplifies rounding: the
CPU backend's own tokens with flash attention on and off part within a few
tokens (the 1B's at the first), so its tokens check paths that must give the
same bits, not one backend against another.

usage: make-model-raw.py OUT --preset 7b|1b|tiny|wide --type q4_0|q8_0|q4_k|q6_k|q4_k_m [--seed N] [--layers N]
       [--centered]

q4_k_m mixes the types the way llama-quantize's Q4_K_M does, roughly: Q4_K,
with Q6_K for the output matrix and for attn_v and ffn_down of every other
layer (Q6_K rows are only 2-byte aligned, which the prompt kernels treat
apart).
"""
import argparse
import os
import random
import struct

PRESETS = {
    "7b": dict(n_embd=4096, n_layer=32, n_head=32, n_head_kv=32, n_ff=11008, n_vocab=32000),
    "1b": dict(n_embd=2048, n_layer=22, n_head=32, n_head_kv=4, n_ff=5632, n_vocab=32000),
    # The CI test models' shape, for launch counting (scripts/test-launches.sh).
    "tiny": dict(n_embd=256, n_layer=2, n_head=4, n_head_kv=2, n_ff=768, n_vocab=512),
    # The 1B's width with a small vocabulary, for CI checks of wide rows; six
    # layers grow the random residual past half's range (NaN logits when the
    # norm's Q8_1 copy lacked its factor, docs/perf.md step 21).
    "wide": dict(n_embd=2048, n_layer=6, n_head=32, n_head_kv=4, n_ff=5632, n_vocab=512),
}
# ggml type id and llama file type of each --type
# (q4_k: every weight Q4_K, labelled Q4_K_M, the llama file type closest to it)
TYPES = {"q4_0": (2, 2), "q8_0": (8, 7), "q4_k": (12, 15), "q6_k": (14, 18), "q4_k_m": (12, 15)}
Q6_K = 14
# ggml type id -> block elements, block bytes
BLOCKS = {2: (32, 18), 8: (32, 34), 12: (256, 144), 14: (256, 210)}
F32 = 0
ALIGN = 32


def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, payload):
    return s(key) + struct.pack("<I", vtype) + payload


def u32(key, v):
    return kv(key, 4, struct.pack("<I", v))


def f32(key, v):
    return kv(key, 6, struct.pack("<f", v))


def string(key, v):
    return kv(key, 8, s(v))


def array(key, etype, items, fmt=None):
    body = struct.pack("<IQ", etype, len(items))
    if etype == 8:
        body += b"".join(s(i) for i in items)
    else:
        body += struct.pack("<%d%s" % (len(items), fmt), *items)
    return kv(key, 9, body)


def block_pool(tid, rng, centered, nbytes=1 << 20):
    bb = BLOCKS[tid][1]
    out = bytearray()
    while len(out) < nbytes:
        if tid == 12 and not centered:  # Q4_K: d and dmin, then random 6-bit scales/mins and codes
            d, dmin = rng.uniform(0.0002, 0.0008), rng.uniform(0.0002, 0.0008)
            out += struct.pack("<ee", d, dmin) + rng.randbytes(bb - 4)
            continue
        if tid == 12:
            # Q4_K: d, dmin, 12 bytes of 6-bit scales and minimums, codes. Each
            # sub-block's minimum equals its scale (bytes 4-7 repeat 0-3, and each
            # of bytes 8-11 holds one nibble twice) and dmin = 7.5 d, so a weight
            # d * sc * (code - 7.5) has mean zero.
            d = rng.uniform(0.0002, 0.0008)
            low = rng.randbytes(4)
            high = bytes(n & 15 | (n & 15) << 4 for n in rng.randbytes(4))
            out += struct.pack("<ee", d, 7.5 * d) + low + low + high + rng.randbytes(bb - 16)
            continue
        if tid == Q6_K:  # codes (low and high bits), int8 scales of either sign, then d
            out += rng.randbytes(bb - 2) + struct.pack("<e", rng.uniform(0.000005, 0.00002))
            continue
        if tid == 2 and centered:  # Q4_0: codes 1..15, weights d * (code - 8) of mean zero
            codes = bytes(rng.randrange(1, 16) | rng.randrange(1, 16) << 4 for _ in range(bb - 2))
            out += struct.pack("<e", rng.uniform(0.004, 0.02)) + codes
            continue
        # Q8_0's int8 codes have mean -0.5 against a spread of 74: near enough zero
        d = rng.uniform(0.004, 0.02) if tid == 2 else rng.uniform(0.0005, 0.002)
        out += struct.pack("<e", d) + rng.randbytes(bb - 2)
    return bytes(out[: (nbytes // bb) * bb])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--preset", default="7b", choices=PRESETS)
    ap.add_argument("--type", default="q4_0", choices=TYPES)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--layers", type=int, help="n_layer instead of the preset's")
    ap.add_argument("--centered", action="store_true", help="weights of mean zero (see above)")
    a = ap.parse_args()
    p = dict(PRESETS[a.preset])
    if a.layers:
        p["n_layer"] = a.layers
    rng = random.Random(a.seed)
    tid, ftype = TYPES[a.type]
    mixed = a.type == "q4_k_m"
    # The Q6_K tensors of a q4_k_m model: the output, and of every other layer.
    t6 = lambda every_other: Q6_K if mixed and every_other else tid
    e, ff, v = p["n_embd"], p["n_ff"], p["n_vocab"]
    hd = e // p["n_head"]
    ekv = hd * p["n_head_kv"]

    tensors = [("token_embd.weight", [e, v], tid), ("output_norm.weight", [e], F32), ("output.weight", [e, v], t6(True))]
    for i in range(p["n_layer"]):
        b = "blk.%d." % i
        tensors += [
            (b + "attn_norm.weight", [e], F32),
            (b + "attn_q.weight", [e, e], tid),
            (b + "attn_k.weight", [e, ekv], tid),
            (b + "attn_v.weight", [e, ekv], t6(i % 2 == 0)),
            (b + "attn_output.weight", [e, e], tid),
            (b + "ffn_norm.weight", [e], F32),
            (b + "ffn_gate.weight", [e, ff], tid),
            (b + "ffn_up.weight", [e, ff], tid),
            (b + "ffn_down.weight", [ff, e], t6(i % 2 == 0)),
        ]

    tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % i for i in range(256)]
    tokens += ["\u2581w%d" % i for i in range(v - len(tokens))]
    types = [2, 3, 3] + [6] * 256 + [1] * (v - 259)
    scores = [0.0] * 259 + [-float(i) for i in range(v - 259)]

    kvs = [
        string("general.architecture", "llama"),
        string("general.name", "random-%s-%s" % (a.preset, a.type)),
        u32("general.alignment", ALIGN),
        u32("general.file_type", ftype),
        u32("llama.context_length", 4096),
        u32("llama.embedding_length", e),
        u32("llama.block_count", p["n_layer"]),
        u32("llama.feed_forward_length", ff),
        u32("llama.rope.dimension_count", hd),
        u32("llama.attention.head_count", p["n_head"]),
        u32("llama.attention.head_count_kv", p["n_head_kv"]),
        f32("llama.attention.layer_norm_rms_epsilon", 1e-5),
        f32("llama.rope.freq_base", 10000.0),
        u32("llama.vocab_size", v),
        string("tokenizer.ggml.model", "llama"),
        array("tokenizer.ggml.tokens", 8, tokens),
        array("tokenizer.ggml.scores", 6, scores, "f"),
        array("tokenizer.ggml.token_type", 5, types, "i"),
        u32("tokenizer.ggml.bos_token_id", 1),
        u32("tokenizer.ggml.eos_token_id", 2),
        u32("tokenizer.ggml.unknown_token_id", 0),
    ]

    def nbytes(dims, t):
        n = 1
        for d in dims:
            n *= d
        return n * 4 if t == F32 else n // BLOCKS[t][0] * BLOCKS[t][1]

    infos, offset = b"", 0
    for name, dims, t in tensors:
        infos += s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        infos += struct.pack("<IQ", t, offset)
        offset += (nbytes(dims, t) + ALIGN - 1) // ALIGN * ALIGN

    pools = {t: block_pool(t, rng, a.centered) for t in {t for _, _, t in tensors if t != F32}}
    ones = struct.pack("<f", 1.0) * e
    with open(a.out, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)))
        for x in kvs:
            f.write(x)
        f.write(infos)
        f.write(b"\0" * ((-f.tell()) % ALIGN))
        for name, dims, t in tensors:
            n = nbytes(dims, t)
            if t == F32:
                f.write(ones[:n])
            else:
                left = n
                pool = pools[t]
                if a.centered:
                    start = rng.randrange(len(pool) // BLOCKS[t][1]) * BLOCKS[t][1]
                    pool = pool[start:] + pool[:start]
                while left > 0:
                    chunk = pool[: min(left, len(pool))]
                    f.write(chunk)
                    left -= len(chunk)
            f.write(b"\0" * ((-n) % ALIGN))
    print("%s: %.2f GiB" % (a.out, os.path.getsize(a.out) / 2**30))


if __name__ == "__main__":
    main()
