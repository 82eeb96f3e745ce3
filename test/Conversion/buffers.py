#!/usr/bin/env python3
"""Buffers end to end: a tiny Kimi-K2 HF checkpoint that also holds each
layer's rotary inv_freq (as the release does) converts to vLLM, whose ranks
equal the reference, and back; the buffers are read past and not written,
so the checkpoint comes back without them, every other tensor byte for byte.

  buffers.py --mdlc MDLC --convert MDL_CONVERT --spec SPEC --model M
             --config CONFIG.json --work DIR
"""
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import reference  # noqa: E402
import roundtrip  # noqa: E402


def main():
    args = roundtrip.arguments().parse_args()
    hf, tensors = roundtrip.write_hf(args.mdlc, args.spec, args.config, args.work, 11)
    config = json.load(open(args.config))
    rope = config["qk_rope_head_dim"]
    buffers = [{"name": "model.layers.%d.self_attn.rotary_emb.inv_freq" % i,
                "dtype": "F32", "shape": [rope // 2]}
               for i in range(config["num_hidden_layers"])]
    roundtrip.write_checkpoint(os.path.join(hf, "model.safetensors"), tensors + buffers,
                               np.random.default_rng(11))
    print(subprocess.run([args.mdlc, "check", args.spec, "--backend", "hf", "--hf-dir", hf],
                         capture_output=True, text=True).stdout, end="")
    out, back = os.path.join(args.work, "vllm"), os.path.join(args.work, "back")
    for cmd in (["--from", "hf", "--to", "vllm", "--tp", "2", hf, out],
                ["--from", "vllm", "--to", "hf", out, back]):
        r = roundtrip.run([args.convert, "--quiet"] + cmd)
        if r.returncode:
            sys.exit("mdl-convert %s failed: %s" % (" ".join(cmd[:4]), r.stderr))
    ref = roundtrip.run([sys.executable, os.path.join(HERE, "reference.py"), hf, out,
                         "--model", args.model, "--backend", "vllm", "--tp", "2"])
    print(ref.stdout, end="")
    original = reference.load_dir(hf)
    names = {b["name"] for b in buffers}
    weights = {n: t for n, t in original.items() if n not in names}
    diff = roundtrip.same(weights, back)
    print("back in hf: %d tensors, %d buffers, %s" % (
        len(reference.load_dir(back)), len(names & set(reference.load_dir(back))),
        diff or "every other tensor byte for byte"))


if __name__ == "__main__":
    main()
