#!/usr/bin/env python3
"""GPT-OSS's MXFP4 release form through mdl-convert.

Writes a tiny MXFP4 GPT-OSS checkpoint by hand (numpy and struct, names and
shapes from the release's loaders, not from the spec): BF16 attention,
router, norms, embedding and head; each layer's experts as
gate_up_proj_blocks [E, 2F, H/32, 16] U8 (random codes), gate_up_proj_scales
[E, 2F, H/32] U8 (random exponents near 127), down_proj_blocks
[E, H, F/32, 16] and down_proj_scales [E, H, F/32], with BF16 biases. Then:
- mdlc check finds it the spec's, tensor for tensor;
- hf -> each backend over a grid: every rank equal to gpt_oss_reference.py,
  which dequantizes the experts as transformers does (the backends keep no
  MXFP4 and hold them in bf16);
- each backend -> hf gives the BF16 checkpoint the reference dequantizes,
  byte for byte, without quantization_config.
With --nibbles high the reference reads the nibbles the wrong way round and
must disagree everywhere.

  mxfp4_gpt_oss.py --mdlc MDLC --convert MDL_CONVERT --spec SPEC --model M
                   --config CONFIG.json --work DIR [--nibbles low|high]
"""
import json
import os
import shutil
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpt_oss_reference  # noqa: E402
import reference  # noqa: E402
from roundtrip import (arguments, backend_meshes, fresh_dirs,  # noqa: E402
                       grid_points, run, same, write_safetensors)


def release_tensors(c):
    """name -> (dtype, shape) of a GPT-OSS MXFP4 checkpoint of config `c`."""
    H, V, L = c["hidden_size"], c["vocab_size"], c["num_hidden_layers"]
    N, G, D = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    E, F = c["num_local_experts"], c["intermediate_size"]
    t = {"model.embed_tokens.weight": ("BF16", [V, H]),
         "model.norm.weight": ("BF16", [H]),
         "lm_head.weight": ("BF16", [V, H])}
    for i in range(L):
        p = "model.layers.%d." % i
        t[p + "input_layernorm.weight"] = ("BF16", [H])
        t[p + "post_attention_layernorm.weight"] = ("BF16", [H])
        for name, rows in (("q", N * D), ("k", G * D), ("v", G * D)):
            t[p + "self_attn.%s_proj.weight" % name] = ("BF16", [rows, H])
            t[p + "self_attn.%s_proj.bias" % name] = ("BF16", [rows])
        t[p + "self_attn.o_proj.weight"] = ("BF16", [H, N * D])
        t[p + "self_attn.o_proj.bias"] = ("BF16", [H])
        t[p + "self_attn.sinks"] = ("BF16", [N])
        t[p + "mlp.router.weight"] = ("BF16", [E, H])
        t[p + "mlp.router.bias"] = ("BF16", [E])
        x = p + "mlp.experts."
        t[x + "gate_up_proj_blocks"] = ("U8", [E, 2 * F, H // 32, 16])
        t[x + "gate_up_proj_scales"] = ("U8", [E, 2 * F, H // 32])
        t[x + "gate_up_proj_bias"] = ("BF16", [E, 2 * F])
        t[x + "down_proj_blocks"] = ("U8", [E, H, F // 32, 16])
        t[x + "down_proj_scales"] = ("U8", [E, H, F // 32])
        t[x + "down_proj_bias"] = ("BF16", [E, H])
    return t


def values(name, dtype, shape, rng):
    n = int(np.prod(shape))
    if name.endswith("_scales"):
        # Exponents around 127 (scales 2^-9 .. 2^8): every product exact.
        return rng.integers(118, 136, n).astype(np.uint8).tobytes()
    if dtype == "U8":
        return rng.integers(0, 256, n).astype(np.uint8).tobytes()
    bits = rng.uniform(1.0, 4.0, n).astype(np.float32).view(np.uint32)
    return (bits >> 16).astype(np.uint16).tobytes()


def write(path, tensors, rng):
    write_safetensors(path, [(name, dtype, shape, values(name, dtype, shape, rng))
                             for name, (dtype, shape) in sorted(tensors.items())])


def main():
    ap = arguments()
    ap.add_argument("--nibbles", default="low")
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    hf = os.path.join(args.work, "hf")
    os.makedirs(hf)
    shutil.copy(args.config, os.path.join(hf, "config.json"))
    config = json.load(open(args.config))
    write(os.path.join(hf, "model.safetensors"), release_tensors(config),
          np.random.default_rng(11))
    bf16 = gpt_oss_reference.dequantized(reference.load_dir(hf), args.nibbles)
    failures, converted, invalid, matched = [], 0, 0, 0

    # The spec's HF layout is the checkpoint written here, name for name.
    r = run([args.mdlc, "check", args.spec, "--hf-config", args.config,
             "--hf-dir", hf, "--backend", "hf"])
    if r.returncode:
        failures.append("mdlc check --hf-dir: " + (r.stdout + r.stderr).strip())

    meshes = backend_meshes(args.convert)
    grid = [(1, 1, 1, 1), (2, 1, 1, 1), (4, 2, 1, 1), (2, 1, 2, 2),
            (4, 1, 4, 2), (1, 2, 2, 1)]
    for backend in ("mcore_te", "mcore_local", "vllm"):
        for tp, pp, ep, etp in grid_points(meshes, backend, grid):
            where = "%s tp=%d pp=%d ep=%d etp=%d" % (backend, tp, pp, ep, etp)
            out, back = fresh_dirs(args.work, "out", "back")
            par = ["--tp", str(tp), "--pp", str(pp), "--ep", str(ep), "--etp", str(etp)]
            r = run([args.convert, "--from", "hf", "--to", backend, "--quiet"] +
                    par + [hf, out])
            if r.returncode:
                if "is not a valid configuration" in r.stderr:
                    invalid += 1
                    continue
                failures.append("%s: hf -> backend failed: %s" % (where, r.stderr.strip()))
                continue
            converted += 1
            ref = run([sys.executable, os.path.join(HERE, "gpt_oss_reference.py"), hf, out,
                       "--backend", backend, "--nibbles", args.nibbles] + par)
            if ref.returncode:
                failures.append("%s: the reference disagrees:\n%s" % (where, ref.stdout + ref.stderr))
            else:
                matched += 1
            r = run([args.convert, "--model", args.model, "--from", backend, "--to", "hf",
                     "--quiet", out, back])
            if r.returncode:
                failures.append("%s: backend -> hf failed: %s" % (where, r.stderr.strip()))
                continue
            diff = same(bf16, back)
            if diff:
                failures.append("%s: HF from the backend is not the dequantized checkpoint: %s"
                                % (where, diff))
            if "quantization_config" in json.load(open(os.path.join(back, "config.json"))):
                failures.append("%s: the dequantized checkpoint's config keeps "
                                "quantization_config" % where)

    print("gpt_oss MXFP4: %d conversions, %d matched the reference, "
          "%d configurations invalid, %d failures" % (
              converted, matched, invalid, len(failures)))
    for f in failures[:8]:
        print("FAIL: " + f.splitlines()[0])
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
