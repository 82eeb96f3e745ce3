#!/usr/bin/env python3
"""An independent reference for what each rank holds of a GPT-OSS model.

Written from the frameworks' loading rules, with numpy, not from the spec:
- HF (transformers' GptOss): experts packed and transposed, gate_up_proj
  [E, H, 2F] with gate in the even columns and up in the odd ones (and so
  gate_up_proj_bias [E, 2F]), down_proj [E, F, H], down_proj_bias [E, H];
  self_attn.sinks [N]; q/k/v/o with biases; mlp.router.{weight,bias}.
- Megatron (Megatron-Bridge's gpt_oss bridge): each expert's fc1 is
  [gate; up] with the interleave undone (gate_up[::2], gate_up[1::2] of the
  transposed weight), fc2 is down_proj[e] transposed, [H, F]; biases follow;
  sinks are core_attention.softmax_offset; linear_qkv per query group
  [q, k, v]. Expert-tensor parallelism splits F of each of gate and up;
  fc2's bias and linear_proj's bias are whole on every rank. TEGroupedMLP
  names experts linear_fc1.weight{i}; without Transformer Engine
  (SequentialMLP) local_experts.{i}.linear_fc1.weight.
- vLLM (gpt_oss.py, _load_weights_other): w13 is gate_up_proj[:, :, 2s:2e]
  permuted to [E, 2F/tp, H] (the interleave kept), w13_bias likewise, w2 is
  down_proj[:, s:e, :] permuted to [E, H, F/tp], w2_bias whole on rank 0
  and zeros elsewhere; sinks narrowed to the rank's heads; qkv_proj [q
  heads of the rank; its kv heads, replicated when tp > kv heads];
  embed_tokens is model.embedding.
- MXFP4 (the releases; transformers' integrations/mxfp4.py,
  convert_moe_packed_tensors): gate_up_proj_blocks [E, 2F, H/32, 16] U8 and
  gate_up_proj_scales [E, 2F, H/32] U8, down_proj_blocks [E, H, F/32, 16]
  and down_proj_scales; each byte two E2M1 codes, the low nibble the even
  element of the row, times 2^(scale - 127); the rows [E, out, in] are then
  transposed to transformers' BF16 [E, in, out]. A checkpoint in this form
  is dequantized so (in bf16, exact here) before the rules above apply.
  `--nibbles high` reads the high nibble first: a broken reference.

  gpt_oss_reference.py HF_DIR OUT_DIR --backend B --tp N --pp N --ep N --etp N
                       [--nibbles low|high]
"""
import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from reference import (chunk, f32_to_bf16, load_dir, load_files,  # noqa: E402
                       load_rank, megatron_dirs, pad_rows, rank_files,
                       vllm_file_ranks, vllm_processes, vllm_rank_files)

# The E2M1 code points: sign bit, two exponent bits, one mantissa bit.
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                 -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], np.float32)


def mxfp4_dequantize(blocks, scales, nibbles="low"):
    """[E, rows, G, 16] codes and [E, rows, G] exponents to the bf16 bits of
    the [E, G * 32, rows] weight."""
    lo, hi = blocks & 0x0F, blocks >> 4
    first, second = (lo, hi) if nibbles == "low" else (hi, lo)
    v = np.empty(blocks.shape[:-1] + (32,), np.float32)
    v[..., 0::2] = E2M1[first]
    v[..., 1::2] = E2M1[second]
    v = np.ldexp(v, scales.astype(np.int32)[..., None] - 127)
    v = v.reshape(blocks.shape[0], blocks.shape[1], -1)
    return f32_to_bf16(np.ascontiguousarray(v.transpose(0, 2, 1)))


def dequantized(hf, nibbles="low"):
    """The BF16 checkpoint of an MXFP4 one (itself when it is not)."""
    out = {}
    for name, value in hf.items():
        if name.endswith("_scales"):
            continue
        if name.endswith("_blocks"):
            base = name[:-len("_blocks")]
            out[base] = ("BF16", mxfp4_dequantize(value[1], hf[base + "_scales"][1], nibbles))
        else:
            out[name] = value
    return out


class GptOss:
    def __init__(self, backend, config, hf, par):
        self.backend, self.c, self.hf, self.par = backend, config, hf, par
        self.mcore = backend.startswith("mcore")

    def w(self, name):
        return self.hf[name][1]

    def vocab(self, a, t):
        tp = self.par["tp"]
        return chunk(pad_rows(a, 128 * tp if self.mcore else 64), 0, tp, t)

    def rank(self, t, p, e):
        c, par = self.c, self.par
        L, H = c["num_hidden_layers"], c["hidden_size"]
        N, G, D = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        E, F = c["num_local_experts"], c["intermediate_size"]
        P = N // G
        tp = par["tp"]
        out = {}
        pp = par["pp"] if self.mcore else 1
        layers = range(p * L // pp, (p + 1) * L // pp)
        if p == 0:
            out["embedding.word_embeddings.weight" if self.mcore else "model.embedding.weight"] = \
                self.vocab(self.w("model.embed_tokens.weight"), t)
        for local, i in enumerate(layers):
            hf = "model.layers.%d." % i
            w = lambda n: self.w(hf + n)
            qkv = {}
            for s in ("weight", "bias"):
                q = w("self_attn.q_proj." + s).reshape(G, P * D, -1)
                k = w("self_attn.k_proj." + s).reshape(G, D, -1)
                v = w("self_attn.v_proj." + s).reshape(G, D, -1)
                if self.mcore:
                    x = chunk(np.concatenate([q, k, v], axis=1), 0, tp, t)
                else:
                    qr = chunk(q.reshape(N, D, -1), 0, tp, t)
                    kvr = t * G // tp if tp > G else t
                    kvn = 1 if tp > G else G // tp
                    x = np.concatenate([qr.reshape(-1, qr.shape[-1]),
                                        k[kvr * kvn:(kvr + 1) * kvn].reshape(-1, k.shape[-1]),
                                        v[kvr * kvn:(kvr + 1) * kvn].reshape(-1, v.shape[-1])])
                qkv[s] = x.reshape(-1, H) if s == "weight" else x.reshape(-1)
            o, ob = w("self_attn.o_proj.weight"), w("self_attn.o_proj.bias")
            sinks = chunk(w("self_attn.sinks"), 0, tp, t)
            gu, gub = w("mlp.experts.gate_up_proj"), w("mlp.experts.gate_up_proj_bias")
            dn, dnb = w("mlp.experts.down_proj"), w("mlp.experts.down_proj_bias")
            if self.mcore:
                pre = "decoder.layers.%d." % (local if pp > 1 else i)
                te = self.backend == "mcore_te"
                out[pre + ("self_attention.linear_qkv.layer_norm_weight" if te
                           else "input_layernorm.weight")] = w("input_layernorm.weight")
                out[pre + "pre_mlp_layernorm.weight"] = w("post_attention_layernorm.weight")
                attn_names = ("self_attention.linear_qkv.", "self_attention.linear_proj.",
                         "self_attention.core_attention.softmax_offset")
                ep, etp = par["ep"], par["etp"]
                et = t % etp
                for li, g in enumerate(range(e * E // ep, (e + 1) * E // ep)):
                    wt = gu[g].T  # [2F, H], rows gate0, up0, gate1, ...
                    fc1 = np.concatenate([chunk(wt[0::2], 0, etp, et), chunk(wt[1::2], 0, etp, et)])
                    fc1b = np.concatenate([chunk(gub[g][0::2], 0, etp, et),
                                           chunk(gub[g][1::2], 0, etp, et)])
                    fc2 = chunk(dn[g].T, 1, etp, et)  # [H, F]
                    if te:
                        names = ["mlp.experts.linear_fc%d.%s%d" % (n, s, li)
                                 for n in (1, 2) for s in ("weight", "bias")]
                    else:
                        names = ["mlp.experts.local_experts.%d.linear_fc%d.%s" % (li, n, s)
                                 for n in (1, 2) for s in ("weight", "bias")]
                    for n, a_ in zip(names, (fc1, fc1b, fc2, dnb[g])):
                        out[pre + n] = a_
            else:
                pre = "model.layers.%d." % i
                out[pre + "input_layernorm.weight"] = w("input_layernorm.weight")
                out[pre + "post_attention_layernorm.weight"] = w("post_attention_layernorm.weight")
                attn_names = ("attn.qkv_proj.", "attn.o_proj.", "attn.sinks")
                # Expert parallelism: the process's whole experts, each
                # with its down bias; else F split over the tensor ranks
                # and the down bias on rank 0 alone.
                ep = par["ep"]
                lo, hi = e * E // ep, (e + 1) * E // ep
                s, f = (0, F) if ep > 1 else (t * F // tp, (t + 1) * F // tp)
                ex = pre + "mlp.experts."
                out[ex + "w13_weight"] = gu[lo:hi, :, 2 * s:2 * f].transpose(0, 2, 1)
                out[ex + "w13_bias"] = gub[lo:hi, 2 * s:2 * f]
                out[ex + "w2_weight"] = dn[lo:hi, s:f, :].transpose(0, 2, 1)
                out[ex + "w2_bias"] = dnb[lo:hi] if t == 0 or ep > 1 else np.zeros_like(dnb)
            qkv_name, proj_name, sinks_name = attn_names
            out[pre + qkv_name + "weight"] = qkv["weight"]
            out[pre + qkv_name + "bias"] = qkv["bias"]
            out[pre + proj_name + "weight"] = chunk(o, 1, tp, t)
            out[pre + proj_name + "bias"] = ob
            out[pre + sinks_name] = sinks
            out[pre + "mlp.router.weight"] = w("mlp.router.weight")
            out[pre + "mlp.router.bias"] = w("mlp.router.bias")
        if p == pp - 1:
            out["decoder.final_layernorm.weight" if self.mcore else "model.norm.weight"] = \
                self.w("model.norm.weight")
            if not self.c.get("tie_word_embeddings", False):
                out["output_layer.weight" if self.mcore else "lm_head.weight"] = \
                    self.vocab(self.w("lm_head.weight"), t)
        return {k: np.ascontiguousarray(v) for k, v in out.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("hf")
    ap.add_argument("out")
    ap.add_argument("--backend", required=True)
    ap.add_argument("--model", default="gpt_oss")  # roundtrip.py passes it
    for axis in ["tp", "pp", "ep", "etp"]:
        ap.add_argument("--" + axis, type=int, default=1)
    ap.add_argument("--nibbles", choices=["low", "high"], default="low",
                    help="which nibble of an MXFP4 byte is the first value")
    args = ap.parse_args()
    par = {a: getattr(args, a) for a in ["tp", "pp", "ep", "etp"]}
    config = json.load(open(os.path.join(args.hf, "config.json")))
    ref = GptOss(args.backend, config, dequantized(load_dir(args.hf), args.nibbles), par)
    failures = checked = 0
    if ref.mcore:
        expected = megatron_dirs(par)
        root, rank_file = rank_files(args.out)
        dirs = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
        if dirs != sorted(expected.values()):
            print("rank directories differ: expected %s, found %s" % (sorted(expected.values()), dirs))
            failures += 1
        ranks = [(k, os.path.join(root, d, rank_file)) for k, d in sorted(expected.items())]
    else:
        processes = vllm_processes(par)
        if vllm_file_ranks(args.out) != [g for g, _, _ in processes]:
            print("vLLM rank files differ: expected %s, found %s" % (
                [g for g, _, _ in processes], vllm_file_ranks(args.out)))
            failures += 1
        ranks = [((t, 0, e), g) for g, t, e in processes]
    for (t, p, e), path in ranks:
        got = (load_rank(path) if isinstance(path, str)
               else load_files(vllm_rank_files(args.out, path)))
        want = ref.rank(t, p, e)
        if set(got) != set(want):
            print("rank tp=%d pp=%d ep=%d: names differ: only in the reference %s; only in the output %s"
                  % (t, p, e, sorted(set(want) - set(got))[:5], sorted(set(got) - set(want))[:5]))
            failures += 1
            continue
        for name, a in want.items():
            b = got[name][1]
            if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
                print("rank tp=%d pp=%d ep=%d: tensor %s differs: reference %s %s, output %s %s"
                      % (t, p, e, name, a.dtype, a.shape, b.dtype, b.shape))
                failures += 1
            checked += 1
    print("gpt_oss on %s %s: %d ranks, %d tensors, %s" % (
        args.backend, " ".join("%s=%d" % kv for kv in par.items()), len(ranks), checked,
        "all equal" if not failures else "%d differences" % failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
