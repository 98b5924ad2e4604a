#!/usr/bin/env python3
"""Writes a small random-weight llama-architecture GGUF (F16 matrices, F32 norms).

    python3 scripts/make-model.py [--seed N] OUTPUT.gguf

Shape: n_embd 256, n_head 4 (head_dim 64), n_head_kv 2, n_layer 2, n_ff 768, context 1024,
rope base 10000, rms eps 1e-5; SPM ("llama") vocabulary of 512 tokens with scores and types:
<unk> <s> </s>, the 256 byte tokens <0x00>..<0xFF>, "▁", the letters, then "▁"-prefixed English
words with all their prefixes (SPM merges pairs, so every prefix of a word must be a piece to
reach the word); anything else falls back to byte tokens. Every matrix row has a length that is
a multiple of 256 so the K-quants (Q4_K, Q6_K) apply.

Weights are random but structured so that greedy decoding is robust to small numeric differences
between backends while still depending on attention, RoPE, the masks and the FFN:
  * tokens are "symbols": 256 random orthonormal directions, each with two signs, scaled by a
    per-token gain; embeddings have entries of about unit size, so hidden states are O(1);
  * attention heads read a random set of 64 symbols (attn_v) and write what they attend to as
    other symbols (attn_output); attn_q/attn_k are Gaussian and give peaked, content- and
    position-dependent attention;
  * the FFN is a key-value memory: a neuron fires when its key symbol is in the residual
    (ffn_gate = ffn_up = key direction) and writes its value symbol (ffn_down);
  * the output matrix maps symbols to word-piece tokens (byte and control tokens get none), plus
    a random part: the logits have a few clear peaks (about 25) above a Gaussian crowd (std
    about 3), instead of a crowd at the top.
Every structured matrix also gets 10% Gaussian noise, so kernels see generic data.
The default seed, 111, was the best of seeds 1..300 for the greedy test on llama.cpp's CPU
backend: in all 8 cases of scripts/test-greedy.sh (F16, Q8_0, Q4_0, Q4_K_M, flash attention
off/on; 40 prompt tokens, 32 generated) every step's top-1 logit beats the second by at least
0.28 (peaks are about 25), the 32 tokens are varied (no loop), F16 and Q8_0 give the same
tokens, and removing attention (--copy-gain 0) or the FFN (--ffn-gain 0) changes the first
generated token. Changing this file changes the models folder (models.sh keys it by hash).
"""

import argparse
import sys

import numpy as np

try:
    import gguf
except ImportError:  # pragma: no cover - message for people running it by hand
    sys.exit("make-model.py: the gguf module is missing; run scripts/deps.sh (or pip install "
             "<llama.cpp>/gguf-py)")

N_EMBD = 256
N_HEAD = 4
N_HEAD_KV = 2
N_LAYER = 2
N_FF = 768
N_CTX = 1024
ROPE_BASE = 10000.0
RMS_EPS = 1e-5
N_VOCAB = 512
HEAD_DIM = N_EMBD // N_HEAD

# Common English words, most frequent first; pieces are added in this order until the
# vocabulary is full.
WORDS = """
the of and to a in is it you that he was for on are with as I his they be at one have this from
or had by hot word but what some we can out other were all there when up use your how said an
each she which do their time if will way about many then them write would like so these her long
make thing see him two has look more day could go come did number sound no most people my over
know water than call first who may down side been now find any new work part take get place made
live where after back little only round man year came show every good me give our under name very
through just form sentence great think say help low line differ turn cause much mean before move
right boy old too same tell does set three want air well also play small end put home read hand
port large spell add even land here must big high such follow act why ask men change went light
kind off need house picture try us again animal point mother world near build self earth father
""".split()

CHARS = "abcdefghijklmnopqrstuvwxyz"


def build_vocab():
    tokens = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    scores = [0.0, 0.0, 0.0]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        types.append(gguf.TokenType.BYTE)
        scores.append(0.0)
    pieces = []
    seen = set()

    def add(p):
        if p not in seen:
            seen.add(p)
            pieces.append(p)

    add("\u2581")
    for c in CHARS:
        add(c)
    budget = N_VOCAB - len(tokens)
    for w in WORDS:
        full = "\u2581" + w
        new = [full[:k] for k in range(2, len(full) + 1) if full[:k] not in seen]
        if len(pieces) + len(new) > budget:
            continue
        for p in new:
            add(p)
    # Fill what is left with two-letter pieces so the vocabulary has exactly N_VOCAB tokens.
    for a in CHARS:
        for b in CHARS:
            if len(pieces) >= budget:
                break
            add(a + b)
    assert len(pieces) == budget, (len(pieces), budget)
    for i, p in enumerate(pieces):
        tokens.append(p)
        types.append(gguf.TokenType.NORMAL)
        # SPM merges the highest-scoring pair first; longer pieces score higher, and among
        # equal lengths the more frequent (earlier) word wins.
        scores.append(float(len(p)) - i / len(pieces))
    return tokens, scores, [int(t) for t in types]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("output", help="path of the GGUF file to write")
    ap.add_argument("--seed", type=int, default=111, help="RNG seed (default 111, see above)")
    ap.add_argument("--norm-spread", type=float, default=0.3,
                    help="log-normal spread of the per-token gains")
    ap.add_argument("--copy-gain", type=float, default=1.5,
                    help="scale of attn_output (0 removes attention)")
    ap.add_argument("--qk-sharp", type=float, default=4.0,
                    help="standard deviation of the attention scores")
    ap.add_argument("--ffn-key", type=float, default=0.25,
                    help="scale of ffn_gate and ffn_up")
    ap.add_argument("--ffn-gain", type=float, default=0.15,
                    help="scale of ffn_down (0 removes the FFN)")
    ap.add_argument("--logit-scale", type=float, default=3.0,
                    help="scale of the output matrix")
    ap.add_argument("--out-noise", type=float, default=0.5,
                    help="random part of the output matrix")
    ap.add_argument("--noise", type=float, default=0.1,
                    help="relative Gaussian noise added to the structured matrices")
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)

    def normal(shape, std):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def norm_weight():
        return (1.0 + 0.05 * rng.standard_normal(N_EMBD)).astype(np.float32)

    def f16(a):
        return a.astype(np.float16)

    def noisy(a, rel):
        return (a + rel * a.std() * rng.standard_normal(a.shape)).astype(np.float32)

    tokens, scores, types = build_vocab()

    w = gguf.GGUFWriter(args.output, "llama")
    w.add_name(f"polycl-test-llama-seed{args.seed}")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_vocab_size(N_VOCAB)
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_rope_freq_base(ROPE_BASE)
    w.add_layer_norm_rms_eps(RMS_EPS)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    # numpy shape (rows, cols) becomes ggml ne = [cols, rows]: cols is the row length.
    n = N_EMBD
    n_kv = N_HEAD_KV * HEAD_DIM
    # Token "symbols": 256 orthonormal directions with two signs give the 512 token
    # directions, so distinct symbols in the residual do not leak into each other's logits.
    basis = np.linalg.qr(rng.standard_normal((n, n)))[0].T          # rows orthonormal
    sym = rng.permutation(N_VOCAB)                                  # token -> symbol
    idx, sign = sym // 2, np.where(sym % 2 == 0, 1.0, -1.0)
    unit = basis[idx] * sign[:, None]                               # token directions
    gain = np.exp(args.norm_spread * rng.standard_normal(N_VOCAB))  # per-token strength
    embd = unit * (gain[:, None] * n ** 0.5)                        # rms ~ 1 per element
    w.add_tensor("token_embd.weight", f16(noisy(embd, args.noise)))

    # q.k / sqrt(head_dim) has a standard deviation of about qk_sharp: peaked attention
    # whose pattern depends on content and position (RoPE).
    qk_std = (args.qk_sharp / n) ** 0.5
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", norm_weight())
        w.add_tensor(p + "attn_q.weight", f16(normal((N_EMBD, n), qk_std)))
        w.add_tensor(p + "attn_k.weight", f16(normal((n_kv, n), qk_std)))
        # Each KV head reads 64 symbols; each query head writes what it attended to as other
        # symbols (a random symbol map per head), scaled by copy_gain.
        wv = np.zeros((n_kv, n))
        wo = np.zeros((n, N_EMBD))
        for g in range(N_HEAD_KV):
            ks = rng.choice(n, HEAD_DIM, replace=False)
            wv[g * HEAD_DIM:(g + 1) * HEAD_DIM] = basis[ks]
        for h in range(N_HEAD):
            dst = rng.choice(n, HEAD_DIM, replace=False)
            sgn = rng.choice([-1.0, 1.0], HEAD_DIM)
            wo[:, h * HEAD_DIM:(h + 1) * HEAD_DIM] = \
                args.copy_gain * rng.uniform(0.6, 1.4) * (basis[dst] * sgn[:, None]).T
        w.add_tensor(p + "attn_v.weight", f16(noisy(wv, args.noise)))
        w.add_tensor(p + "attn_output.weight", f16(noisy(wo, args.noise)))
        # FFN as a key-value memory: neuron k fires when token key[k]'s direction is in the
        # residual and writes token val[k]'s direction.
        w.add_tensor(p + "ffn_norm.weight", norm_weight())
        key = rng.integers(0, N_VOCAB, N_FF)
        val = rng.integers(0, N_VOCAB, N_FF)
        gate = args.ffn_key * unit[key]
        w.add_tensor(p + "ffn_gate.weight", f16(noisy(gate, args.noise)))
        w.add_tensor(p + "ffn_up.weight", f16(noisy(gate, args.noise)))
        down = args.ffn_gain * (unit[val] * n ** 0.5).T             # [n, n_ff]
        w.add_tensor(p + "ffn_down.weight", f16(noisy(down, args.noise)))
    w.add_tensor("output_norm.weight", norm_weight())
    # Output rows: token directions (a fixed random map from symbols to tokens) plus a random
    # part, so each symbol present in the final residual lifts one logit above the crowd.
    # Byte and control tokens get only the random part, so generated text is made of words.
    perm = rng.permutation(N_VOCAB)
    readable = (np.array(types) == int(gguf.TokenType.NORMAL))[:, None]
    out = args.logit_scale * (unit[perm] * readable + args.out_noise * normal((N_VOCAB, n), n ** -0.5))
    w.add_tensor("output.weight", f16(out))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
