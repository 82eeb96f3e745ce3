#!/usr/bin/env python3
"""An independent reference for what each rank of a backend holds.

Written directly from the layout facts (docs/research/layout-facts.md, the
frameworks' weight loaders), with numpy slicing and concatenation: nothing
here reads the compiler's IR or plans. Given an HF checkpoint, its config
and a parallel configuration, it builds every tensor of a rank of
mcore_te, mcore_local or vllm for the models of the library, and compares
them byte for byte with the files mdl-convert wrote: Megatron's torch
layout (read with pickle and zipfile, no torch) or per-rank safetensors, in
the rank directories Megatron's ranks load.

  reference.py HF_DIR OUT_DIR --model M --backend B --tp N --pp N --ep N --etp N
"""
import argparse
import collections
import io
import json
import os
import pickle
import re
import struct
import sys
import zipfile

import numpy as np

NP = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32,
      "F64": np.float64, "I64": np.int64, "I32": np.int32,
      "F8_E4M3": np.uint8, "U8": np.uint8}


# -- FP8 block scales (DeepSeek-V3) ------------------------------------------
# An E4M3 weight W [R, C] comes with W_scale_inv [ceil(R/B), ceil(C/B)], F32:
# the real weight is e4m3(W) * scale of its B x B block (DeepSeek's
# weight_dequant, Megatron-Bridge's dequantize_fp8_blockwise: the product in
# f32, then rounded to bf16).

def e4m3_to_f32(bits):
    """E4M3 (fn: no infinities, S.1111.111 is NaN) to float32."""
    b = bits.astype(np.int64)
    sign = np.where(b & 0x80, -1.0, 1.0)
    exp = (b >> 3) & 0xF
    man = b & 0x7
    normal = (1.0 + man / 8.0) * np.exp2(exp - 7.0)
    subnormal = (man / 8.0) * np.exp2(-6.0)
    v = sign * np.where(exp == 0, subnormal, normal)
    v = np.where((exp == 0xF) & (man == 0x7), np.nan, v)
    return v.astype(np.float32)


def f32_to_bf16(x):
    """Round to nearest even, as torch's .to(torch.bfloat16)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = np.isnan(x)
    return np.where(nan, (u >> 16) | 0x40, rounded).astype(np.uint16)


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def upsample(scale, shape, block):
    """Each element of a weight of `shape` gets its block's scale."""
    s = np.repeat(np.repeat(scale, block, axis=-2), block, axis=-1)
    return np.ascontiguousarray(s[..., :shape[-2], :shape[-1]])


def downsample(a, block, name):
    """The scale of each block of `a`, which must be constant per block:
    a backend tensor's slices of weights must fall on block boundaries."""
    s = np.ascontiguousarray(a[..., ::block, ::block])
    if not np.array_equal(upsample(s, a.shape, block), a):
        raise SystemExit("reference: %s is not split on %d-blocks" % (name, block))
    return s


def fp8_views(hf, block):
    """(the checkpoint without its scales, each FP8 weight replaced by its
    upsampled scales, each FP8 weight dequantized to bf16)."""
    weights, scales, dequantized = {}, {}, {}
    for name, (dtype, a) in hf.items():
        if name.endswith("_scale_inv"):
            continue
        weights[name] = (dtype, a)
        scales[name] = (dtype, a)
        dequantized[name] = (dtype, a)
        s = hf.get(name + "_scale_inv")
        if s is not None:
            up = upsample(s[1], a.shape, block)
            scales[name] = ("F32", up)
            dequantized[name] = ("BF16", f32_to_bf16(e4m3_to_f32(a) * up))
    return weights, scales, dequantized


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        a = np.frombuffer(data[8 + n + b:8 + n + e], dtype=NP[t["dtype"]])
        out[name] = (t["dtype"], a.reshape(t["shape"]))
    return out


STORAGES = {"BFloat16Storage": "BF16", "HalfStorage": "F16", "FloatStorage": "F32",
            "DoubleStorage": "F64", "LongStorage": "I64", "IntStorage": "I32"}


def _rebuild_tensor(storage, offset, size, stride, *rest):
    dtype, a = storage
    return dtype, np.lib.stride_tricks.as_strided(
        a[offset:], tuple(size), [s * a.itemsize for s in stride]).copy()


class _TorchUnpickler(pickle.Unpickler):
    """torch.save's pickle, read with the standard library: only ordered
    dicts, _rebuild_tensor_v2 and storages (as torch's weights-only mode),
    storages read from the zip (whose CRCs zipfile checks)."""
    def __init__(self, zf, prefix):
        super().__init__(io.BytesIO(zf.read(prefix + "data.pkl")))
        self.zf, self.prefix = zf, prefix

    def find_class(self, module, name):
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor
        if module == "torch" and name in STORAGES:
            return name
        raise pickle.UnpicklingError("global %s.%s" % (module, name))

    def persistent_load(self, pid):
        kind, cls, key, location, numel = pid
        dtype = STORAGES[cls]
        data = self.zf.read(self.prefix + "data/" + key)
        return dtype, np.frombuffer(data, dtype=NP[dtype])[:numel]


def load_torch(path):
    """A Megatron rank file's state dicts ("model", or "model0", "model1",
    ... prefixed), without torch."""
    with zipfile.ZipFile(path) as zf:
        pkl = [n for n in zf.namelist() if n.endswith("/data.pkl")][0]
        ckpt = _TorchUnpickler(zf, pkl[:-len("data.pkl")]).load()
    out = {}
    for key, sd in ckpt.items():
        if key != "model" and not (key.startswith("model") and key[5:].isdigit()):
            continue
        for name, t in sd.items():
            if not name.endswith("._extra_state"):
                out[(key + "." if key != "model" else "") + name] = t
    return out


def megatron_dirs(par):
    """The (tp, pp, ep) rank directories a Megatron run loads, as
    get_checkpoint_name names them: rank g of a stage reads tensor rank
    g % tp and expert rank (g // etp) % ep, over every data-parallel size."""
    tp, pp, ep, etp = par["tp"], par["pp"], par["ep"], par["etp"]
    pairs = {(g % tp, (g // etp) % ep) for g in range(tp * ep * etp)}
    out = {}
    for p in range(pp):
        for t, e in sorted(pairs):
            out[(t, p, e)] = ("mp_rank_%02d" % t + ("_%03d" % p if pp > 1 else "") +
                              ("_%03d" % e if ep > 1 else ""))
    return out


def rank_files(out):
    """The directory holding the rank directories and the rank file name:
    Megatron's torch layout (tracker, release/ or iter_*/,
    model_optim_rng.pt) or per-rank model.safetensors at the top."""
    tracker = os.path.join(out, "latest_checkpointed_iteration.txt")
    if os.path.exists(tracker):
        it = open(tracker).read().strip()
        root = os.path.join(out, "release" if it == "release" else "iter_%07d" % int(it))
        return root, "model_optim_rng.pt"
    return out, "model.safetensors"


def load_rank(path):
    return load_torch(path) if path.endswith(".pt") else load(path)


def load_dir(d):
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            out.update(load(os.path.join(d, f)))
    return out


def vllm_processes(par):
    """vLLM's processes as (file rank, tensor rank, expert rank). With
    expert parallelism (enable_expert_parallel) the engine runs tp x dp
    processes, ep = tp * dp of them; process g = dp_rank * tp + tp_rank is
    expert rank g (FusedMoE flattens tp across dp) and its files are named
    by g. Without it, the tensor ranks."""
    tp, ep = par["tp"], par["ep"]
    if ep == 1:
        return [(t, t, 0) for t in range(tp)]
    return [(g, g % tp, g) for g in range(ep)]


def vllm_file_ranks(d):
    """The ranks vLLM's sharded_state files in `d` are named by."""
    return sorted({int(m.group(1)) for f in os.listdir(d)
                   for m in [re.fullmatch(r"model-rank-(\d+)-part-\d+\.safetensors", f)] if m})


def vllm_rank_files(d, rank):
    """vLLM's sharded_state files of a rank:
    model-rank-{rank}-part-{part}.safetensors, parts from 0, in order."""
    parts = {}
    for f in os.listdir(d):
        m = re.fullmatch(r"model-rank-%d-part-(\d+)\.safetensors" % rank, f)
        if m:
            parts[int(m.group(1))] = os.path.join(d, f)
    assert sorted(parts) == list(range(len(parts))), "parts of rank %d: %s" % (rank, sorted(parts))
    return [parts[p] for p in sorted(parts)]


def load_files(paths):
    out = {}
    for p in paths:
        part = load(p)
        assert not set(part) & set(out), "a tensor in two parts"
        out.update(part)
    return out


def chunk(a, axis, n, r):
    """Rank r's even chunk of axis `axis` split n ways."""
    assert a.shape[axis] % n == 0, (a.shape, axis, n)
    return np.split(a, n, axis=axis)[r]


def pad_rows(a, multiple):
    rows = -(-a.shape[0] // multiple) * multiple
    out = np.zeros((rows,) + a.shape[1:], dtype=a.dtype)
    out[:a.shape[0]] = a
    return out


class Reference:
    def __init__(self, model, backend, config, hf, par):
        self.model, self.backend, self.hf, self.par = model, backend, hf, par
        self.config = config
        self.text = config.get("text_config", config)
        # Qwen's vision tower, or Gemma 3's SigLIP tower and projector
        # (Gemma3ForConditionalGeneration builds them from vision_config).
        self.vision = config.get("vision_config")
        self.siglip = model == "gemma3"
        # transformers' configs tie by default (PretrainedConfig); Gemma 3's
        # releases rely on it, the others say.
        self.tied = config.get("tie_word_embeddings",
                               self.text.get("tie_word_embeddings", model == "gemma3"))
        self.out = {}
        self.moe = ("num_experts" in self.text or "n_routed_experts" in self.text
                    or "num_local_experts" in self.text)
        # GLM-4.5's layout: DeepSeek-V3, Kimi-K2 (DeepSeek-V3's tensors
        # under another config) and GLM-5 (DeepSeek-V3.2's) share it. The
        # MTP copies of the embedding and head are never read here: vLLM's
        # MTP head is loaded from lm_head (for GLM-5, whose MTP layer stores
        # none, vLLM PR #34385 points it at lm_head).
        self.glm = model.startswith("glm4") or model in ("deepseek_v3", "kimi_k2", "deepseek_v32", "glm5")
        # DeepSeek-V3.2's sparse-attention indexer beside MLA.
        self.indexer = "index_n_heads" in self.text
        self.fp8 = (config.get("quantization_config") or {}).get("quant_method") == "fp8"
        # Qwen3.8: hyper-connections, no norms, mcore-bridge's layouts.
        self.q38 = model == "qwen3_8"
        self.mcore = backend.startswith("mcore")

    def w(self, name):
        return self.hf[name][1]

    # -- ranks and stages -------------------------------------------------
    def coords(self, rank):
        p = self.par
        tp_rank = rank % p["tp"]
        rest = rank // p["tp"]
        return tp_rank, rest // p["ep"], rest % p["ep"]  # tp, pp, ep

    def stages(self):
        L = self.text["num_hidden_layers"]
        n = self.par["pp"] * self.par["vpp"]
        assert L % n == 0
        return [list(range(v * L // n, (v + 1) * L // n)) for v in range(n)]

    def put(self, name, array, chunk_index=None):
        if self.par["vpp"] > 1 and chunk_index is not None:
            name = "model%d.%s" % (chunk_index, name)
        assert name not in self.out, name
        # DeepSeek-V3.2's release stores its norms in f32; Megatron's and
        # vLLM's norm weights are parameters in the model's dtype (bf16),
        # which loading casts to.
        if self.glm and "norm" in name and array.dtype == np.float32:
            array = f32_to_bf16(array)
        self.out[name] = np.ascontiguousarray(array)

    # -- building blocks, by the frameworks' rules -------------------------
    def col(self, a, tp_rank, tp=None):
        return chunk(a, 0, tp or self.par["tp"], tp_rank)

    def row(self, a, tp_rank, tp=None):
        return chunk(a, 1, tp or self.par["tp"], tp_rank)

    def vocab(self, a, tp_rank):
        tp = self.par["tp"]
        multiple = 128 * tp if self.mcore else 64
        padded = pad_rows(a, multiple)
        return chunk(padded, 0, tp, tp_rank)

    def attention(self, pre, t, gated):
        """q/k/v/o of GQA attention; Megatron packs per query group
        [q (P heads), gate (P heads, when gated), k, v]; vLLM packs a
        rank's query heads (each [q_h; gate_h] as HF), then its kv heads."""
        tc = self.text
        N, G = tc["num_attention_heads"], tc["num_key_value_heads"]
        H = tc["hidden_size"]
        D = tc.get("head_dim", H // N)
        P = N // G
        tp = self.par["tp"]
        o = self.w(pre + "o_proj.weight")
        out = []
        # The weight, then (when there is one) the bias: a bias is a weight
        # with one column.
        for suffix, cols in (("weight", H), ("bias", 1)):
            if pre + "q_proj." + suffix not in self.hf:
                continue
            q = self.w(pre + "q_proj." + suffix).reshape(-1, cols)
            k = self.w(pre + "k_proj." + suffix).reshape(G, D, cols)
            v = self.w(pre + "v_proj." + suffix).reshape(G, D, cols)
            if self.mcore and self.q38:
                # mcore-bridge keeps HF's per-head [q_h; gate_h] in a group.
                qkv = np.concatenate([q.reshape(G, P * 2 * D, cols), k, v], axis=1)
                qkv = chunk(qkv, 0, tp, t).reshape(-1, cols)
            elif self.mcore:
                qh = q.reshape(G, P, 2 if gated else 1, D, cols)
                parts = [qh[:, :, 0].reshape(G, P * D, cols)]
                if gated:
                    parts.append(qh[:, :, 1].reshape(G, P * D, cols))
                parts += [k, v]
                qkv = np.concatenate(parts, axis=1)  # [G, rows of a group, cols]
                qkv = chunk(qkv, 0, tp, t).reshape(-1, cols)
            else:
                # vLLM: query heads split over tp; kv heads replicated when
                # tp > G.
                qr = chunk(q.reshape(N, -1, cols), 0, tp, t).reshape(-1, cols)
                kv_rank = t * G // tp if tp > G else t
                kvn = 1 if tp > G else G // tp
                kr = k[kv_rank * kvn:(kv_rank + 1) * kvn].reshape(-1, cols)
                vr = v[kv_rank * kvn:(kv_rank + 1) * kvn].reshape(-1, cols)
                qkv = np.concatenate([qr, kr, vr])
            out.append(qkv if suffix == "weight" else qkv.reshape(-1))
        return out[0], self.row(o, t), (out[1] if len(out) > 1 else None)

    def full_norms(self, qn, kn, t):
        tc = self.text
        G = tc["num_key_value_heads"]
        tp = self.par["tp"]
        qr = chunk(qn, 0, tp, t)
        if tp > G:
            assert not self.mcore, "Megatron splits whole query groups"
            kr = chunk(kn, 0, G, t * G // tp)
        else:
            kr = chunk(kn, 0, tp, t)
        return qr, kr

    def mla(self, pre, t):
        """Megatron: linear_q_down_proj (q_a), linear_q_up_proj (q_b, with
        the q_a norm fused under TE), linear_kv_down_proj (kv_a),
        linear_kv_up_proj (kv_b, with the kv_a norm), linear_proj; the
        down-projections replicated, up-projections split by heads. vLLM
        stacks [q_a; kv_a] into fused_qkv_a_proj."""
        w = lambda n: self.w(pre + n + ".weight")
        res = {}
        c = lambda x: self.col(x, t)
        if self.backend == "vllm":
            res["fused_qkv_a_proj.weight"] = np.concatenate([w("q_a_proj"), w("kv_a_proj_with_mqa")])
            res["q_a_layernorm.weight"] = w("q_a_layernorm")
            res["q_b_proj.weight"] = c(w("q_b_proj"))
            res["kv_a_layernorm.weight"] = w("kv_a_layernorm")
            res["kv_b_proj.weight"] = c(w("kv_b_proj"))
            res["o_proj.weight"] = self.row(w("o_proj"), t)
            if self.indexer:
                # deepseek_v2.py's Indexer: replicated wq_b; wk and
                # weights_proj fused as one unquantized wk_weights_proj (an
                # FP8 wk is dequantized into it on load, which the spec does
                # not describe: with FP8, the layout before the fusion,
                # wk with its scale and weights_proj apart); k_norm.
                res["indexer.wq_b.weight"] = w("indexer.wq_b")
                if self.fp8:
                    res["indexer.wk.weight"] = w("indexer.wk")
                    res["indexer.weights_proj.weight"] = w("indexer.weights_proj")
                else:
                    res["indexer.wk_weights_proj.weight"] = np.concatenate(
                        [w("indexer.wk"), w("indexer.weights_proj")])
                res["indexer.k_norm.weight"] = w("indexer.k_norm")
                res["indexer.k_norm.bias"] = self.w(pre + "indexer.k_norm.bias")
            return res
        # Under Transformer Engine the latent norms are fused into the
        # up-projections, except with DSA (mbridge's deepseek_v32: the
        # indexer reads the normalized query latent, so the norms are
        # q_layernorm and kv_layernorm).
        te = self.backend == "mcore_te" and not self.indexer
        if self.indexer:
            # Megatron's DSAttention: core_attention.indexer, its linears
            # "duplicated" (whole on every rank).
            idx = "core_attention.indexer."
            for n in ("wq_b", "wk", "weights_proj"):
                res[idx + "linear_" + n + ".weight"] = w("indexer." + n)
            res[idx + "k_norm.weight"] = w("indexer.k_norm")
            res[idx + "k_norm.bias"] = self.w(pre + "indexer.k_norm.bias")
        res["linear_q_down_proj.weight"] = w("q_a_proj")
        res["linear_q_up_proj.layer_norm_weight" if te else "q_layernorm.weight"] = w("q_a_layernorm")
        res["linear_q_up_proj.weight"] = c(w("q_b_proj"))
        res["linear_kv_down_proj.weight"] = w("kv_a_proj_with_mqa")
        res["linear_kv_up_proj.layer_norm_weight" if te else "kv_layernorm.weight"] = w("kv_a_layernorm")
        res["linear_kv_up_proj.weight"] = c(w("kv_b_proj"))
        res["linear_proj.weight"] = self.row(w("o_proj"), t)
        return res

    def gated_mlp(self, gate, up, down, t, tp=None):
        """[gate_r; up_r] and down's columns."""
        fc1 = np.concatenate([self.col(gate, t, tp), self.col(up, t, tp)])
        return fc1, self.row(down, t, tp)

    def gdn(self, pre, t):
        """Megatron: in_proj rank = [Q_r, K_r, V_r, Z_r, b_r, a_r]; vLLM:
        in_proj_qkvz = [q_r; k_r; v_r; z_r], in_proj_ba = [b_r; a_r]; conv1d
        rows [q_r; k_r; v_r]; A_log, dt_bias split; out_norm stores w - 1 in
        Megatron."""
        tc = self.text
        Hk, Dk = tc["linear_num_key_heads"], tc["linear_key_head_dim"]
        Hv, Dv = tc["linear_num_value_heads"], tc["linear_value_head_dim"]
        H = tc["hidden_size"]
        R = Hv // Hk
        interleaved = pre + "in_proj_qkvz.weight" in self.hf
        if interleaved:
            # Qwen3-Next: per key head [q, k, v (R heads), z (R heads)] and
            # [b (R), a (R)].
            g = self.w(pre + "in_proj_qkvz.weight").reshape(Hk, -1, H)
            q, k, v, z = (x.reshape(-1, H) for x in np.split(
                g, [Dk, 2 * Dk, 2 * Dk + R * Dv], axis=1))
            ba = self.w(pre + "in_proj_ba.weight").reshape(Hk, 2 * R, H)
            b, a = (x.reshape(-1, H) for x in np.split(ba, [R], axis=1))
        else:
            qkv = self.w(pre + "in_proj_qkv.weight")
            q, k, v = np.split(qkv, [Hk * Dk, 2 * Hk * Dk])
            z = self.w(pre + "in_proj_z.weight")
            b, a = self.w(pre + "in_proj_b.weight"), self.w(pre + "in_proj_a.weight")
        conv = self.w(pre + "conv1d.weight")
        cq, ck, cv = np.split(conv, [Hk * Dk, 2 * Hk * Dk])
        c = lambda x: self.col(x, t)
        res = {}
        if self.mcore and self.q38:
            # mcore-bridge: per key-head group [q_g, k_g, v_g, z_g, b_g, a_g],
            # whole groups per rank; conv1d per group [q_g, k_g, v_g]; out_norm
            # plain.
            grp = lambda x: x.reshape(Hk, -1, x.shape[-1])
            res["in_proj.weight"] = c(np.concatenate(
                [grp(q), grp(k), grp(v), grp(z), grp(b), grp(a)], axis=1)).reshape(-1, H)
            res["out_norm.weight"] = self.w(pre + "norm.weight")
        elif self.mcore:
            res["in_proj.weight"] = np.concatenate([c(q), c(k), c(v), c(z),
                                                    c(b), c(a)])
            res["out_norm.weight"] = (self.w(pre + "norm.weight") -
                                      np.float32(1)).astype(np.float32)
        elif interleaved:  # whole key-head groups of HF's fused layout
            res["in_proj_qkvz.weight"] = c(self.w(pre + "in_proj_qkvz.weight"))
            res["in_proj_ba.weight"] = c(self.w(pre + "in_proj_ba.weight"))
            res["norm.weight"] = self.w(pre + "norm.weight")
        elif self.par.get("lora"):
            # vLLM with LoRA enabled (qwen3_5.py: create_in_proj_qkvz =
            # lora_config is None): in_proj_qkv [q_r; k_r; v_r] and in_proj_z.
            res["in_proj_qkv.weight"] = np.concatenate([c(q), c(k), c(v)])
            res["in_proj_z.weight"] = c(z)
            res["in_proj_ba.weight"] = np.concatenate([c(b), c(a)])
            res["norm.weight"] = self.w(pre + "norm.weight")
        else:
            res["in_proj_qkvz.weight"] = np.concatenate([c(q), c(k), c(v), c(z)])
            res["in_proj_ba.weight"] = np.concatenate([c(b), c(a)])
            res["norm.weight"] = self.w(pre + "norm.weight")
        if self.mcore and self.q38:
            K = conv.shape[-1]
            g3 = lambda x: x.reshape(Hk, -1, 1, K)
            res["conv1d.weight"] = c(np.concatenate([g3(cq), g3(ck), g3(cv)], axis=1)).reshape(-1, 1, K)
        else:
            res["conv1d.weight"] = np.concatenate([c(cq), c(ck), c(cv)])
        res["A_log"] = c(self.w(pre + "A_log"))
        res["dt_bias"] = c(self.w(pre + "dt_bias"))
        res["out_proj.weight"] = self.row(self.w(pre + "out_proj.weight"), t)
        return res

    def experts(self, pre, t, ep_rank, per_expert_prefix):
        """Routed experts: the EP rank's experts, each F split over etp
        (etp rank = tp rank % etp)."""
        tc = self.text
        E = tc.get("num_experts") or tc.get("num_local_experts") or tc["n_routed_experts"]
        H = tc["hidden_size"]
        ep, etp = self.par["ep"], self.par["etp"]
        if self.backend == "vllm":
            # FusedMoE splits F over the tensor ranks, or with expert
            # parallelism holds whole experts.
            ep, etp = (ep, 1) if ep > 1 else (1, self.par["tp"])
        et = t % etp
        local = range(ep_rank * E // ep, (ep_rank + 1) * E // ep)
        if per_expert_prefix + "0.w1.weight" in self.hf:
            # Mixtral's and MiniMax-M2's names: w1 gate, w3 up, w2 down.
            gate = [self.w(per_expert_prefix + "%d.w1.weight" % e) for e in range(E)]
            up = [self.w(per_expert_prefix + "%d.w3.weight" % e) for e in range(E)]
            down = [self.w(per_expert_prefix + "%d.w2.weight" % e) for e in range(E)]
        elif per_expert_prefix + "0.gate_proj.weight" in self.hf:
            gate = [self.w(per_expert_prefix + "%d.gate_proj.weight" % e) for e in range(E)]
            up = [self.w(per_expert_prefix + "%d.up_proj.weight" % e) for e in range(E)]
            down = [self.w(per_expert_prefix + "%d.down_proj.weight" % e) for e in range(E)]
        else:  # packed: gate_up [E, 2F, H] gate rows first; down [E, H, F]
            gu = self.w(per_expert_prefix + "gate_up_proj")
            dn = self.w(per_expert_prefix + "down_proj")
            if self.model == "qwen3_vl_moe":
                # transformers' Qwen3VLMoeTextExperts multiply by them (bmm):
                # in x out, gate_up [E, H, 2F] with gate's columns first,
                # down [E, F, H] (Megatron-Bridge: transpose_on_export).
                gu, dn = gu.transpose(0, 2, 1), dn.transpose(0, 2, 1)
            F = gu.shape[1] // 2
            gate = [gu[e, :F] for e in range(E)]
            up = [gu[e, F:] for e in range(E)]
            down = [dn[e] for e in range(E)]
        fc1 = {e: self.gated_mlp(gate[e], up[e], down[e], et, etp) for e in local}
        res = {}
        if self.backend == "mcore_te":
            for i, e in enumerate(local):
                res["experts.linear_fc1.weight%d" % i] = fc1[e][0]
                res["experts.linear_fc2.weight%d" % i] = fc1[e][1]
        elif self.backend == "mcore_local":
            # GroupedMLP: weight1's memory is [E, H, 2F_r] (each expert's
            # fc1 transposed, columns [gate_r | up_r]), declared [H, E*2F_r];
            # weight2 is [E*F_r, H] (each expert's fc2 transposed).
            w1 = np.stack([fc1[e][0].T for e in local])
            res["experts.weight1"] = w1.reshape(H, -1)
            res["experts.weight2"] = np.concatenate([fc1[e][1].T for e in local])
        else:
            res["experts.w13_weight"] = np.stack([fc1[e][0] for e in local])
            res["experts.w2_weight"] = np.stack([fc1[e][1] for e in local])
        return res

    def hyper_connection(self, hfpre, out, ci, inject=True):
        """Replicated everywhere, under the checkpoint's names."""
        for n in ["hc_norm.weight", "input_mix_weight_down.weight",
                  "input_mix_weight_up.weight"] + (["block_inject_weight.weight"] if inject else []):
            self.put(out + n, self.w(hfpre + n), ci)

    def ple(self, hfpre, out, t, ci):
        """Replicated projections, norms, conv and hash buffers; the n-gram
        table's shards joined into one table whose rows tp splits. vLLM
        stacks [key_proj; value_proj] into kv_proj."""
        if self.backend == "vllm":
            self.put(out + "kv_proj.weight", np.concatenate(
                [self.w(hfpre + "key_proj.weight"), self.w(hfpre + "value_proj.weight")]), ci)
        else:
            for n in ["key_proj.weight", "value_proj.weight"]:
                self.put(out + n, self.w(hfpre + n), ci)
        for n in ["norm_key.weight", "norm_query.weight", "norm_conv.weight", "conv1d.weight",
                  "ple_embedding.layer_multipliers", "ple_embedding.ngram_heads_offsets",
                  "ple_embedding.ngram_heads_vocab_sizes"]:
            self.put(out + n, self.w(hfpre + n), ci)
        shards, p = [], 0
        while hfpre + "ple_embedding.ngram_embedding.shard_%d.weight" % p in self.hf:
            shards.append(self.w(hfpre + "ple_embedding.ngram_embedding.shard_%d.weight" % p))
            p += 1
        self.put(out + "ple_embedding.ngram_embedding.weight", self.col(np.concatenate(shards), t), ci)

    # -- a decoder layer -----------------------------------------------------
    def layer(self, hfpre, out, t, ep_rank, gated, kind, sparse, ci):
        mc = self.mcore
        put = lambda n, a: self.put(out + n, a, ci)
        attn = "self_attention." if mc else ("self_attn." if kind == "full_attention" else "linear_attn.")
        if self.q38:
            for h in ("attn_hyper_connection.", "mlp_hyper_connection."):
                self.hyper_connection(hfpre + h, out + h, ci)
            if kind == "full_attention":
                idx = (attn if mc else "self_attn.") + "indexer."
                for n in ["index_qk_proj.weight", "q_layernorm.weight", "k_layernorm.weight"]:
                    put(idx + n, self.w(hfpre + "self_attn.indexer." + n))
            if hfpre + "ple.key_proj.weight" in self.hf:
                self.ple(hfpre + "ple.", out + "ple.", t, ci)
        norms = not self.q38
        ln_in = self.w(hfpre + "input_layernorm.weight") if norms else None
        # ln_post is the norm before the MLP. Gemma's sandwich norms: HF's
        # post_attention_layernorm normalizes the attention's output and
        # pre_feedforward_layernorm comes before the MLP,
        # post_feedforward_layernorm after it.
        sandwich = norms and hfpre + "pre_feedforward_layernorm.weight" in self.hf
        ln_post = self.w(hfpre + ("pre_feedforward_layernorm.weight" if sandwich
                                  else "post_attention_layernorm.weight")) if norms else None
        if sandwich:
            post_attn = self.w(hfpre + "post_attention_layernorm.weight")
            post_mlp = self.w(hfpre + "post_feedforward_layernorm.weight")
            # Megatron-Bridge's Gemma 3 (TERowParallelLinearLayerNorm) keeps
            # the output norms in the linears before them; MindSpeed's layer
            # with post norms (its Gemma 2 spec) names them apart; vLLM keeps
            # HF's names.
            names = {"mcore_te": ("self_attention.linear_proj.post_layernorm.weight",
                                  "mlp.linear_fc2.post_layernorm.weight"),
                     "mcore_local": ("post_attn_norm.weight", "post_mlp_layernorm.weight"),
                     "vllm": ("post_attention_layernorm.weight",
                              "post_feedforward_layernorm.weight")}[self.backend]
            put(names[0], post_attn)
            put(names[1], post_mlp)
            if not mc:
                put("pre_feedforward_layernorm.weight", ln_post)
        if kind == "mla":
            attn = "self_attention." if mc else "self_attn."
            for n, a in self.mla(hfpre + "self_attn.", t).items():
                put(attn + n, a)
        elif kind == "full_attention":
            qkv, proj, bias = self.attention(hfpre + "self_attn.", t, gated)
            qk_norms = hfpre + "self_attn.q_norm.weight" in self.hf
            # The same four tensors, named by Megatron or by vLLM.
            qkv_name, proj_name, q_name, k_name = (
                ("linear_qkv", "linear_proj", "q_layernorm", "k_layernorm") if mc
                else ("qkv_proj", "o_proj", "q_norm", "k_norm"))
            put(attn + qkv_name + ".weight", qkv)
            put(attn + proj_name + ".weight", proj)
            if bias is not None:
                put(attn + qkv_name + ".bias", bias)
            # A row-parallel linear's bias is added once, after the
            # reduction: every rank holds all of it (Megatron's and vLLM's
            # RowParallelLinear).
            if hfpre + "self_attn.o_proj.bias" in self.hf:
                put(attn + proj_name + ".bias", self.w(hfpre + "self_attn.o_proj.bias"))
            if qk_norms:
                qn = self.w(hfpre + "self_attn.q_norm.weight")
                kn = self.w(hfpre + "self_attn.k_norm.weight")
                if qn.shape[0] != kn.shape[0] or self.text.get("qk_norm_type") == "per_layer":
                    # MiniMax-M2's norms over all heads, [N * D] and
                    # [G * D]: each rank holds those of its heads (Megatron-
                    # Bridge's FullDimQNorm/FullDimKNorm, vLLM's
                    # MiniMaxText01RMSNormTP, whose k_norm follows the
                    # replicated kv heads when tp > G).
                    qn, kn = self.full_norms(qn, kn, t)
                put(attn + q_name + ".weight", qn)
                put(attn + k_name + ".weight", kn)
        else:
            for n, a in self.gdn(hfpre + "linear_attn.", t).items():
                put(attn + n, a)
        fused = self.backend == "mcore_te"
        if not norms:
            pass
        elif mc and fused and kind != "mla":
            put(attn + ("linear_qkv" if kind == "full_attention" else "in_proj") +
                ".layer_norm_weight", ln_in)
        elif mc:
            put("input_layernorm.weight", ln_in)
        else:
            put("input_layernorm.weight", ln_in)
            if not sandwich:
                put("post_attention_layernorm.weight", ln_post)
        mlp = hfpre + "mlp."
        if not sparse:
            fc1, fc2 = self.gated_mlp(self.w(mlp + "gate_proj.weight"),
                                      self.w(mlp + "up_proj.weight"),
                                      self.w(mlp + "down_proj.weight"), t)
            if mc:
                put("mlp.linear_fc1.weight", fc1)
                put("mlp.linear_fc2.weight", fc2)
                if fused:
                    put("mlp.linear_fc1.layer_norm_weight", ln_post)
                else:
                    put("pre_mlp_layernorm.weight", ln_post)
            else:
                put("mlp.gate_up_proj.weight", fc1)
                put("mlp.down_proj.weight", fc2)
            return
        bias = mlp + "gate.e_score_correction_bias"
        # Mixtral's and MiniMax-M2's block_sparse_moe (vLLM keeps the name;
        # the score correction sits beside the router).
        sparse_moe = hfpre + "block_sparse_moe.gate.weight" in self.hf
        vmlp = "mlp."
        if sparse_moe:
            mlp = hfpre + "block_sparse_moe."
            bias = mlp + "e_score_correction_bias"
            vmlp = "block_sparse_moe."
        if mc:
            if norms:
                put("pre_mlp_layernorm.weight", ln_post)
            put("mlp.router.weight", self.w(mlp + "gate.weight"))
            if bias in self.hf:
                put("mlp.router.expert_bias", self.w(bias))
        else:
            router = self.w(mlp + "gate.weight")
            if self.model == "minimax_m2":
                # vLLM's MiniMax-M2 router is a ReplicatedLinear in f32.
                router = bf16_to_f32(router)
            put(vmlp + "gate.weight", router)
            if bias in self.hf:
                put(vmlp + ("e_score_correction_bias" if sparse_moe
                            else "gate.e_score_correction_bias"), self.w(bias))
        for n, a in self.experts(mlp, t, ep_rank, mlp + "experts.").items():
            put(("mlp." if mc else vmlp) + n, a)
        shared = "shared_experts" if mlp + "shared_experts.gate_proj.weight" in self.hf else "shared_expert"
        if mlp + shared + ".gate_proj.weight" in self.hf:
            s = mlp + shared + "."
            fc1, fc2 = self.gated_mlp(self.w(s + "gate_proj.weight"),
                                      self.w(s + "up_proj.weight"),
                                      self.w(s + "down_proj.weight"), t)
            gate = mlp + "shared_expert_gate.weight"
            if mc:
                put("mlp.shared_experts.linear_fc1.weight", fc1)
                put("mlp.shared_experts.linear_fc2.weight", fc2)
                if gate in self.hf:
                    put("mlp.shared_experts.gate_weight", self.w(gate))
            else:
                put("mlp." + shared + ".gate_up_proj.weight", fc1)
                put("mlp." + shared + ".down_proj.weight", fc2)
                if gate in self.hf:
                    put("mlp.shared_expert_gate.weight", self.w(gate))

    # -- the vision tower ---------------------------------------------------
    def vision_tower(self, t, ci):
        vc = self.vision
        Nh, D = vc["num_heads"], vc["hidden_size"]
        Dh = D // Nh
        mc = self.mcore
        # Qwen-VL checkpoints saved before transformers 4.52 (and tools that
        # keep that naming) hold the tower at visual.; vLLM's mapper reads
        # both.
        pre = "model.visual." if "model.visual.patch_embed.proj.weight" in self.hf else "visual."
        out = "vision_model." if mc else "visual."
        put = lambda n, a: self.put(out + n, a, ci)
        for n in ["patch_embed.proj.weight", "patch_embed.proj.bias", "pos_embed.weight"]:
            put(n, self.w(pre + n))
        for i in range(vc["depth"]):
            b = pre + "blocks.%d." % i
            o = "decoder.layers.%d." % i if mc else "blocks.%d." % i
            qkv = self.w(b + "attn.qkv.weight").reshape(3, Nh, Dh, D)
            qkvb = self.w(b + "attn.qkv.bias").reshape(3, Nh, Dh)
            if mc:  # per head [q_h; k_h; v_h], heads split over tp
                w = chunk(qkv.transpose(1, 0, 2, 3), 0, self.par["tp"], t).reshape(-1, D)
                bb = chunk(qkvb.transpose(1, 0, 2), 0, self.par["tp"], t).reshape(-1)
                names = ("self_attention.linear_qkv.", "self_attention.linear_proj.",
                         "mlp.linear_fc1.", "mlp.linear_fc2.")
            else:  # [q_r; k_r; v_r]
                w = chunk(qkv, 1, self.par["tp"], t).reshape(-1, D)
                bb = chunk(qkvb, 1, self.par["tp"], t).reshape(-1)
                names = ("attn.qkv.", "attn.proj.", "mlp.linear_fc1.", "mlp.linear_fc2.")
            put(o + names[0] + "weight", w)
            put(o + names[0] + "bias", bb)
            put(o + names[1] + "weight", self.row(self.w(b + "attn.proj.weight"), t))
            put(o + names[1] + "bias", self.w(b + "attn.proj.bias"))
            put(o + names[2] + "weight", self.col(self.w(b + "mlp.linear_fc1.weight"), t))
            put(o + names[2] + "bias", self.col(self.w(b + "mlp.linear_fc1.bias"), t))
            put(o + names[3] + "weight", self.row(self.w(b + "mlp.linear_fc2.weight"), t))
            put(o + names[3] + "bias", self.w(b + "mlp.linear_fc2.bias"))
            norms = {"mcore_te": ("self_attention.linear_qkv.layer_norm_", "mlp.linear_fc1.layer_norm_"),
                     "mcore_local": ("input_layernorm.", "pre_mlp_layernorm."),
                     "vllm": ("norm1.", "norm2.")}[self.backend]
            for hfn, n in (("norm1.", norms[0]), ("norm2.", norms[1])):
                put(o + n + "weight", self.w(b + hfn + "weight"))
                put(o + n + "bias", self.w(b + hfn + "bias"))
        # Qwen3-VL's deepstack mergers (transformers' Qwen3VLVisionPatchMerger
        # with the norm after the shuffle, over M*M*D): Megatron-Bridge keeps
        # them in the vision decoder and names the norm patch_norm; vLLM's
        # are column- then row-parallel like the final merger.
        for k in range(len(vc.get("deepstack_visual_indexes") or [])):
            h = pre + "deepstack_merger_list.%d." % k
            o = ("decoder." if mc else "") + "deepstack_merger_list.%d." % k
            nn = "patch_norm." if mc else "norm."
            put(o + nn + "weight", self.w(h + "norm.weight"))
            put(o + nn + "bias", self.w(h + "norm.bias"))
            put(o + "linear_fc1.weight", self.col(self.w(h + "linear_fc1.weight"), t))
            put(o + "linear_fc1.bias", self.col(self.w(h + "linear_fc1.bias"), t))
            put(o + "linear_fc2.weight", self.row(self.w(h + "linear_fc2.weight"), t))
            put(o + "linear_fc2.bias", self.w(h + "linear_fc2.bias"))
        mn = "merger.patch_norm." if mc else "merger.norm."
        put(mn + "weight", self.w(pre + "merger.norm.weight"))
        put(mn + "bias", self.w(pre + "merger.norm.bias"))
        put("merger.linear_fc1.weight", self.col(self.w(pre + "merger.linear_fc1.weight"), t))
        put("merger.linear_fc1.bias", self.col(self.w(pre + "merger.linear_fc1.bias"), t))
        put("merger.linear_fc2.weight", self.row(self.w(pre + "merger.linear_fc2.weight"), t))
        put("merger.linear_fc2.bias", self.w(pre + "merger.linear_fc2.bias"))

    # Gemma 3's SigLIP tower and projector. HF: transformers' SiglipVisionModel
    # (q/k/v/out_proj, layer_norm1/2, mlp.fc1/fc2, all with biases) under
    # vision_tower.vision_model., the projector's mm_soft_emb_norm and its
    # in x out mm_input_projection_weight; saves by transformers 4.52+ put
    # both under model.
    def siglip_tower(self, t, ci):
        vc = self.vision
        D = vc["hidden_size"]
        Nh = vc["num_attention_heads"]
        Dh = D // Nh
        new = "model.vision_tower.vision_model.embeddings.patch_embedding.weight" in self.hf
        pre = ("model." if new else "") + "vision_tower.vision_model."
        proj = ("model." if new else "") + "multi_modal_projector."
        names = [n[len(pre):] for n in self.hf if n.startswith(pre)]
        # transformers' SiglipVisionTransformer without its pooling head.
        layer = ["layer_norm1", "layer_norm2", "mlp.fc1", "mlp.fc2"] + [
            "self_attn.%s_proj" % x for x in ("q", "k", "v", "out")]
        expect = ["embeddings.patch_embedding.weight", "embeddings.patch_embedding.bias",
                  "embeddings.position_embedding.weight", "post_layernorm.weight",
                  "post_layernorm.bias"] + [
            "encoder.layers.%d.%s.%s" % (i, m, wb) for i in range(vc["num_hidden_layers"])
            for m in layer for wb in ("weight", "bias")]
        assert sorted(names) == sorted(expect), sorted(set(names) ^ set(expect))[:5]
        if self.mcore:
            # Megatron-Bridge's Gemma3VLBridge: ReplicatedMapping of
            # vision_tower.** to HF's vision_tower.vision_model.** (its model
            # holds transformers' tower without the vision_model wrapper);
            # the projector's proj a ColumnParallelLinear loaded from the
            # transposed HF parameter (permute_dims=(1, 0)), the norm renamed
            # mm_soft_embed_norm.
            for n in names:
                self.put("vision_tower." + n, self.w(pre + n), ci)
            self.put("multi_modal_projector.mm_soft_embed_norm.weight",
                     self.w(proj + "mm_soft_emb_norm.weight"), ci)
            self.put("multi_modal_projector.proj.weight",
                     self.col(self.w(proj + "mm_input_projection_weight").T, t), ci)
            return
        # vLLM's siglip.py: q/k/v_proj stacked into a QKVParallelLinear
        # (each rank's heads of q, then k, then v), out_proj and fc2
        # RowParallelLinear (bias whole), fc1 ColumnParallelLinear; the
        # embeddings and norms whole; gemma3_mm's projector parameters whole.
        out = "vision_tower.vision_model."
        tp = self.par["tp"]
        for n in names:
            w = self.w(pre + n)
            if ".self_attn.k_proj." in n or ".self_attn.v_proj." in n:
                continue
            if ".self_attn.q_proj." in n:
                parts = [self.w(pre + n.replace("q_proj", x)) for x in ("q_proj", "k_proj", "v_proj")]
                shards = [chunk(a.reshape((Nh, Dh) + a.shape[1:]), 0, tp, t).reshape((-1,) + a.shape[1:])
                          for a in parts]
                self.put(out + n.replace("q_proj", "qkv_proj"), np.concatenate(shards, 0), ci)
            elif n.endswith("self_attn.out_proj.weight") or n.endswith("mlp.fc2.weight"):
                self.put(out + n, self.row(w, t), ci)
            elif ".mlp.fc1." in n:
                self.put(out + n, self.col(w, t), ci)
            else:
                self.put(out + n, w, ci)
        for n in ("mm_soft_emb_norm.weight", "mm_input_projection_weight"):
            self.put("multi_modal_projector." + n, self.w(proj + n), ci)

    # -- Nemotron-H ------------------------------------------------------------
    def mamba(self, pre, t):
        """Megatron-Bridge's MambaInProjMapping and MambaConv1dMapping: a
        rank's in_proj is [z_r | x_r | B_r | C_r | dt_r], its conv1d
        [x_r | B_r | C_r] (weight and bias), its slice of each part of HF's
        [z | x | B | C | dt] and [x | B | C]; A_log, D, dt_bias and the gated
        norm column-parallel, out_proj row-parallel. vLLM's
        mamba_v2_sharded_weight_loader cuts in_proj and conv1d the same way
        when tp divides n_groups; with n_groups 1 (MambaMixer2 allows no
        other undivided count) every rank gets the whole group of B and C
        (duplicate_groups) beside its slice of the heads. Its other weights
        go through sharded_weight_loader(0), and it holds A = -exp(A_log) in
        f32 (the composed loader of MambaMixer2), renamed A."""
        tc = self.text
        Nh, Hd = tc["mamba_num_heads"], tc["mamba_head_dim"]
        GN = tc["n_groups"] * tc["ssm_state_size"]
        d_in = Nh * Hd
        c = lambda x: self.col(x, t)
        duplicated = not self.mcore and tc["n_groups"] == 1
        groups = (lambda x: x) if duplicated else c
        w = lambda n: self.w(pre + n)

        # Each part cut its own way: in_proj [z | x | B | C | dt], conv1d's
        # channels [x | B | C].
        part = lambda cuts, a, sizes: np.concatenate(
            [f(x) for f, x in zip(cuts, np.split(a, np.cumsum(sizes)))])
        res = {"in_proj.weight": part([c, c, groups, groups, c],
                                      w("in_proj.weight"),
                                      [d_in, d_in, GN, GN])}
        conv = part([c, groups, groups], w("conv1d.weight"), [d_in, GN])
        bias = part([c, groups, groups], w("conv1d.bias"), [d_in, GN])
        if self.mcore:
            res["conv1d_weight"], res["conv1d_bias"] = conv, bias
            res["A_log"] = c(w("A_log"))
        else:
            res["conv1d.weight"], res["conv1d.bias"] = conv, bias
            a_log = w("A_log")
            if a_log.dtype == np.uint16:  # bf16 bits
                a_log = bf16_to_f32(a_log)
            # -exp in f32, correctly rounded (torch's f32 exp is within an
            # ulp of it).
            res["A"] = (-np.exp(c(a_log).astype(np.float64))).astype(np.float32)
        res["D"] = c(w("D"))
        res["dt_bias"] = c(w("dt_bias"))
        res["norm.weight"] = c(w("norm.weight"))
        res["out_proj.weight"] = self.row(w("out_proj.weight"), t)
        return res

    def nemotron_h(self, t, p):
        """Nemotron-H: HF backbone.layers.{i}.{norm, mixer}, the mixer's
        kind from hybrid_override_pattern. Megatron (Megatron-Bridge's
        NemotronHBridge, HybridModel): Mamba mixers under mixer., attention
        under self_attention. (linear_qkv per query group), MLPs under mlp.
        (linear_fc1 = up alone); under Transformer Engine the layer's norm
        is fused into in_proj, linear_qkv or linear_fc1, else it is
        norm, input_layernorm or pre_mlp_layernorm; decoder.final_norm.
        vLLM (nemotron_h.py): backbone -> model, embeddings ->
        embed_tokens, every mixer under mixer. with q/k/v stacked into
        qkv_proj."""
        tc = self.text
        L, pattern = tc["num_hidden_layers"], tc["hybrid_override_pattern"]
        mc, te = self.mcore, self.backend == "mcore_te"
        stages = self.stages() if mc else [list(range(L))]
        pp = self.par["pp"] if mc else 1
        if p == 0:
            self.put("embedding.word_embeddings.weight" if mc else "model.embed_tokens.weight",
                     self.vocab(self.w("backbone.embeddings.weight"), t))
        for local, i in enumerate(stages[p]):
            hf = "backbone.layers.%d." % i
            out = ("decoder.layers.%d." % (local if pp > 1 else i) if mc
                   else "model.layers.%d." % i)
            norm = self.w(hf + "norm.weight")
            kind = pattern[i]
            if kind == "M":
                for n, a in self.mamba(hf + "mixer.", t).items():
                    self.put(out + "mixer." + n, a)
                if mc:
                    self.put(out + ("mixer.in_proj.layer_norm_weight" if te else "norm.weight"), norm)
            elif kind == "*":
                qkv, proj, _ = self.attention(hf + "mixer.", t, False)
                if mc:
                    self.put(out + "self_attention.linear_qkv.weight", qkv)
                    self.put(out + "self_attention.linear_proj.weight", proj)
                    self.put(out + ("self_attention.linear_qkv.layer_norm_weight" if te
                                    else "input_layernorm.weight"), norm)
                else:
                    self.put(out + "mixer.qkv_proj.weight", qkv)
                    self.put(out + "mixer.o_proj.weight", proj)
            else:
                assert kind == "-", kind
                up = self.col(self.w(hf + "mixer.up_proj.weight"), t)
                down = self.row(self.w(hf + "mixer.down_proj.weight"), t)
                if mc:
                    self.put(out + "mlp.linear_fc1.weight", up)
                    self.put(out + "mlp.linear_fc2.weight", down)
                    self.put(out + ("mlp.linear_fc1.layer_norm_weight" if te
                                    else "pre_mlp_layernorm.weight"), norm)
                else:
                    self.put(out + "mixer.up_proj.weight", up)
                    self.put(out + "mixer.down_proj.weight", down)
            if not mc:
                self.put(out + "norm.weight", norm)
        if p == pp - 1:
            self.put("decoder.final_norm.weight" if mc else "model.norm_f.weight",
                     self.w("backbone.norm_f.weight"))
            self.put("output_layer.weight" if mc else "lm_head.weight",
                     self.vocab(self.w("lm_head.weight"), t))
        return self.out

    # -- a rank --------------------------------------------------------------
    def rank(self, rank):
        self.out = {}
        tc = self.text
        t, p, e = self.coords(rank)
        if self.model == "nemotron_h":
            return self.nemotron_h(t, p)
        L = tc["num_hidden_layers"]
        q35 = self.model.startswith("qwen3_5") or self.model == "qwen3_next" or self.q38
        # A multimodal architecture (...ForConditionalGeneration) nests the
        # text model, vision tower or not; without architectures, a vision
        # config says so. Qwen3.8's checkpoints are the VL wrapper's
        # (prefixes), without a vision tower in the spec.
        archs = self.config.get("architectures") or []
        vl = (archs[0].endswith("ForConditionalGeneration") if archs
              else self.vision is not None) or self.q38
        hftext = "model.language_model." if vl else "model."
        # Multimodal checkpoints saved before transformers 4.52 (Gemma 3's
        # releases) nest the text model as language_model.model.
        if "language_model.model.embed_tokens.weight" in self.hf:
            hftext = "language_model.model."
        # Qwen-VL checkpoints in the older naming (model.*, visual.*).
        if vl and "model.embed_tokens.weight" in self.hf:
            hftext = "model."
        if self.mcore:
            text = "language_model." if vl else ""
        else:
            text = "language_model.model." if vl else "model."
        top = ("language_model." if vl else "") if not self.mcore else text
        kinds = tc.get("layer_types") or (
            ["full_attention"] * L if not q35 else
            ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(L)])
        # A sliding-window layer holds a full-attention layer's tensors.
        kinds = ["full_attention" if k == "sliding_attention" else k for k in kinds]
        if self.glm and tc.get("kv_lora_rank"):
            kinds = ["mla"] * L
        mlp_only = tc.get("mlp_only_layers", [])
        if self.glm:
            mlp_only = list(range(tc.get("first_k_dense_replace", 0)))
        stages = self.stages() if self.mcore else [list(range(L))]
        pp, vpp = (self.par["pp"], self.par["vpp"]) if self.mcore else (1, 1)
        last_stage = pp * vpp - 1
        for ci in range(vpp):
            v = ci * pp + p
            cidx = ci if vpp > 1 else None
            first, last = v == 0, v == last_stage
            if first:
                emb = self.vocab(self.w(hftext + "embed_tokens.weight"), t)
                self.put(text + ("embedding.word_embeddings.weight" if self.mcore else "embed_tokens.weight"), emb, cidx)
                if self.vision is not None and self.siglip:
                    self.siglip_tower(t, cidx)
                elif self.vision is not None:
                    self.vision_tower(t, cidx)
            for local, i in enumerate(stages[v]):
                n = local if self.mcore and pp * vpp > 1 else i
                out = text + ("decoder.layers.%d." % n if self.mcore else "layers.%d." % n)
                sparse = self.moe and i not in mlp_only
                self.layer(hftext + "layers.%d." % i, out, t, e, q35,
                           kinds[i], sparse, cidx)
            if last and self.q38:  # no final norm: the last mixer
                self.hyper_connection(hftext + "hyper_connection_mixer.",
                                      text + ("decoder." if self.mcore else "") + "hyper_connection_mixer.",
                                      cidx, inject=False)
            elif last:
                self.put(text + ("decoder.final_layernorm.weight" if self.mcore else "norm.weight"),
                         self.w(hftext + "norm.weight"), cidx)
            if last:
                if self.mcore:
                    if not self.tied:
                        self.put(text + "output_layer.weight", self.vocab(self.w("lm_head.weight"), t), cidx)
                    elif not first:  # a stage other than the first keeps a copy
                        self.put(text + "output_layer.weight",
                                 self.vocab(self.w(hftext + "embed_tokens.weight"), t), cidx)
                elif not self.tied:
                    self.put(top + "lm_head.weight", self.vocab(self.w("lm_head.weight"), t), cidx)
                mtp = tc.get("mtp_num_hidden_layers", 0) if q35 else 0
                if self.glm:
                    mtp = tc.get("num_nextn_predict_layers", 0)
                if mtp and self.mcore and not first:
                    # MTP embeds the next tokens: a copy of the embedding.
                    self.put(text + "embedding.word_embeddings.weight",
                             self.vocab(self.w(hftext + "embed_tokens.weight"), t), cidx)
                for k in range(mtp if self.glm else 0):
                    # GLM stores MTP layer k as decoder layer L + k.
                    hf = "model.layers.%d." % (L + k)
                    o = "mtp.layers.%d." % k if self.mcore else hf
                    self.put(o + "enorm.weight", self.w(hf + "enorm.weight"), cidx)
                    self.put(o + "hnorm.weight", self.w(hf + "hnorm.weight"), cidx)
                    # Megatron's eh_proj is column-parallel, vLLM's a plain
                    # nn.Linear (whole on every rank).
                    eh = self.w(hf + "eh_proj.weight")
                    self.put(o + "eh_proj.weight", self.col(eh, t) if self.mcore else eh, cidx)
                    self.put(o + ("final_layernorm.weight" if self.mcore else "shared_head.norm.weight"),
                             self.w(hf + "shared_head.norm.weight"), cidx)
                    if not self.mcore:
                        # vLLM's MTP ParallelLMHead: the head, split as lm_head.
                        head = "lm_head.weight" if not self.tied else hftext + "embed_tokens.weight"
                        self.put(o + "shared_head.head.weight", self.vocab(self.w(head), t), cidx)
                    self.layer(hf, o + ("mtp_model_layer." if self.mcore else "mtp_block."), t, e,
                               False, kinds[0], True, cidx)
                for k in range(mtp if self.q38 else 0):
                    # Qwen3.8: separate projections of the embedding and the
                    # 4-stream state, and a mixer of its own.
                    hf = "mtp."
                    if self.mcore:
                        o = text + "mtp.layers.%d." % k
                        for n, m in (("enorm", "pre_fc_norm_embedding"), ("hnorm", "pre_fc_norm_hidden")):
                            self.put(o + n + ".weight", self.w(hf + m + ".weight"), cidx)
                        for n, m in (("e_proj", "fc_embedding"), ("h_proj", "fc_hidden")):
                            self.put(o + n + ".weight", self.col(self.w(hf + m + ".weight"), t), cidx)
                        if k == 0:
                            self.hyper_connection(hf + "hyper_connection_mixer.",
                                                  o + "hyper_connection_mixer.", cidx, inject=False)
                        self.layer(hf + "layers.%d." % k, o + "transformer_layer.", t, e, True,
                                   "full_attention", True, cidx)
                    else:
                        if k == 0:
                            for n in ["pre_fc_norm_embedding.weight", "pre_fc_norm_hidden.weight"]:
                                self.put("model." + n, self.w(hf + n), cidx)
                            for n in ["fc_embedding.weight", "fc_hidden.weight"]:
                                self.put("model." + n, self.col(self.w(hf + n), t), cidx)
                            self.hyper_connection(hf + "hyper_connection_mixer.",
                                                  "model.hyper_connection_mixer.", cidx, inject=False)
                        self.layer(hf + "layers.%d." % k, "model.layers.%d." % (L + k), t, e, True,
                                   "full_attention", True, cidx)
                for k in range(0 if self.glm or self.q38 else mtp):
                    hf = "mtp."
                    if self.mcore:
                        o = text + "mtp.layers.%d." % k
                        self.put(o + "enorm.weight", self.w(hf + "pre_fc_norm_embedding.weight"), cidx)
                        self.put(o + "hnorm.weight", self.w(hf + "pre_fc_norm_hidden.weight"), cidx)
                        self.put(o + "eh_proj.weight", self.col(self.w(hf + "fc.weight"), t), cidx)
                        self.put(o + "final_layernorm.weight", self.w(hf + "norm.weight"), cidx)
                        self.layer(hf + "layers.%d." % k, o + "mtp_model_layer.", t, e, True,
                                   "full_attention", self.moe, cidx)
                    else:
                        if k == 0:
                            for n in ["pre_fc_norm_embedding.weight", "pre_fc_norm_hidden.weight", "norm.weight"]:
                                self.put("mtp." + n, self.w(hf + n), cidx)
                            self.put("mtp.fc.weight", self.col(self.w(hf + "fc.weight"), t), cidx)
                        self.layer(hf + "layers.%d." % k, "mtp.layers.%d." % k, t, e, True,
                                   "full_attention", self.moe, cidx)
        return self.out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("hf")
    ap.add_argument("out")
    ap.add_argument("--model", required=True)
    ap.add_argument("--backend", required=True)
    for axis in ["tp", "pp", "ep", "etp", "vpp"]:
        ap.add_argument("--" + axis, type=int, default=1)
    args = ap.parse_args()
    par = {a: getattr(args, a) for a in ["tp", "pp", "ep", "etp", "vpp"]}
    config = json.load(open(os.path.join(args.hf, "config.json")))
    hf = load_dir(args.hf)
    backend = args.backend.replace("-", "_")
    quant = config.get("quantization_config") or {}
    block = quant["weight_block_size"][0] if quant.get("quant_method") == "fp8" else 0
    scale_ref = None
    if block:
        weights, scales, dequantized = fp8_views(hf, block)
        if backend.startswith("mcore"):
            # Megatron holds the weights dequantized.
            hf = dequantized
        else:
            # vLLM keeps the scales: they follow the weights block for block.
            hf = weights
            scale_ref = Reference(args.model, backend, config, scales, par)
    ref = Reference(args.model, backend, config, hf, par)
    plan = json.load(open(os.path.join(args.out, "plan.json")))
    ranks = par["tp"] * par["pp"] * par["ep"]
    # Megatron: its rank directories (those of the ranks that save);
    # vLLM: sharded_state files at the top, one set per process.
    expected = megatron_dirs(par) if ref.mcore else {}
    failures = 0
    checked = 0
    if not ref.mcore:
        processes = vllm_processes(par)
        files = {g: (t, e) for g, t, e in processes}
        if vllm_file_ranks(args.out) != sorted(files):
            print("vLLM rank files differ: expected ranks %s, found %s" % (
                sorted(files), vllm_file_ranks(args.out)))
            failures += 1
    if ref.mcore:
        root, rank_file = rank_files(args.out)
        dirs = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
        if dirs != sorted(expected.values()):
            print("rank directories differ: expected %s, found %s" % (
                sorted(expected.values()), dirs))
            failures += 1
    for r in range(ranks):
        t, p, e = ref.coords(r)
        if ref.mcore:
            if (t, p, e) not in expected:
                continue
            d = expected[(t, p, e)]
            got = load_rank(os.path.join(root, d, rank_file))
        else:
            g = [g for g, (ft, fe) in files.items() if (ft, fe) == (t, e)]
            if not g:
                continue
            d = "model-rank-%d-part-*" % g[0]
            got = load_files(vllm_rank_files(args.out, g[0]))
        want = ref.rank(r)
        if scale_ref:
            upsampled = scale_ref.rank(r)
            for name in [n for n, a in want.items() if a.dtype == np.uint8]:
                want[name + "_scale_inv"] = downsample(upsampled[name], block, name)
        if set(got) != set(want):
            print("rank %d (%s): names differ: only in the reference %s; only in the output %s" %
                  (r, d, sorted(set(want) - set(got))[:5], sorted(set(got) - set(want))[:5]))
            failures += 1
            continue
        for name, a in want.items():
            dtype, b = got[name]
            if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
                print("rank %d (%s): tensor %s differs: reference %s %s, output %s %s" %
                      (r, d, name, a.dtype, a.shape, b.dtype, b.shape))
                failures += 1
            checked += 1
    assert plan["model"] == args.model
    print("%s on %s %s: %d ranks, %d tensors, %s" % (
        args.model, args.backend, " ".join("%s=%d" % kv for kv in par.items()),
        ranks, checked, "all equal" if not failures else "%d differences" % failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
