#!/usr/bin/env python3
"""End to end: a tiny random HF checkpoint through mdl-convert and back.

For a model of the library and a config whose dimension sizes are pairwise
distinct, writes a random HF checkpoint (by hand, with struct and json),
converts it to each backend over a grid of parallel configurations, checks
every rank against the independent reference (reference.py), converts back
to HF and requires every tensor to be byte for byte the original. Also
converts one backend to another and compares with the direct conversion.

An FP8 checkpoint (quantization_config with weight_block_size) keeps its
scales where the backend does (vLLM: byte for byte again); Megatron holds
the weights dequantized, so from there HF gets the dequantized checkpoint
(bf16, no scales, no quantization_config), compared with numpy's.

  roundtrip.py --mdlc MDLC --convert MDL_CONVERT --spec SPEC --model M
               --config CONFIG.json --work DIR [--storage per_expert|packed]
               [--reference SCRIPT]
"""
import argparse
import itertools
import json
import re
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import reference  # noqa: E402

def random_values(dtype, n, rng, narrowed=False):
    """Values in [1, 4): value transforms (stored = w - 1) are exact on
    them in every float type, so round trips can be byte for byte. A
    `narrowed` F32 tensor is one a checkpoint stores wider than the model
    holds it (DeepSeek-V3.2's f32 norms of a bf16 model): its values are
    bf16 values, which the round trip through bf16 keeps."""
    if dtype in ("I64", "I32"):
        return rng.integers(-2**31, 2**31, n).astype(
            np.int64 if dtype == "I64" else np.int32).tobytes()
    if dtype == "F8_E4M3":
        # Any E4M3 value but NaN (S.1111.111).
        b = rng.integers(0, 256, n).astype(np.uint8)
        return np.where((b & 0x7F) == 0x7F, b ^ 1, b).astype(np.uint8).tobytes()
    v = rng.uniform(1.0, 4.0, n)
    if narrowed and dtype == "F32":
        bits = v.astype(np.float32).view(np.uint32)
        return (bits & np.uint32(0xFFFF0000)).astype(np.uint32).tobytes()
    if dtype == "BF16":
        bits = v.astype(np.float32).view(np.uint32)
        return (bits >> 16).astype(np.uint16).tobytes()
    return v.astype({"F16": np.float16, "F32": np.float32, "F64": np.float64}[dtype]).tobytes()


def write_checkpoint(path, tensors, rng, narrowed=None):
    values = {}
    items = []
    # Originals first, so that duplicates (copy_of) hold the same bytes.
    for t in sorted(tensors, key=lambda t: "copy_of" in t):
        n = int(np.prod(t["shape"])) if t["shape"] else 1
        data = values[t["copy_of"]] if "copy_of" in t else random_values(
            t["dtype"], n, rng, bool(narrowed and re.search(narrowed, t["name"])))
        values[t["name"]] = data
        items.append((t["name"], t["dtype"], t["shape"], data))
    write_safetensors(path, items)


def write_safetensors(path, items):
    """A safetensors file of (name, dtype, shape, bytes) in this order."""
    header, blobs, offset = {}, [], 0
    for name, dtype, shape, data in items:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def write_hf(mdlc, spec, config, work, seed, options=(), narrowed=None):
    """A tiny random HF checkpoint of the spec's tensors for `config` in
    WORK/hf (emptied first); returns its directory and the tensors."""
    shutil.rmtree(work, ignore_errors=True)
    hf = os.path.join(work, "hf")
    os.makedirs(hf)
    shutil.copy(config, os.path.join(hf, "config.json"))
    listing = run([mdlc, "params", spec, "--hf-config", config, "--format=json"] +
                  list(options))
    if listing.returncode:
        sys.exit("mdlc params failed:\n" + listing.stderr)
    tensors = json.loads(listing.stdout)
    write_checkpoint(os.path.join(hf, "model.safetensors"), tensors,
                     np.random.default_rng(seed), narrowed)
    return hf, tensors


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def same(a, b):
    """Tensors of two HF checkpoints (directories or loaded), byte for byte."""
    x = a if isinstance(a, dict) else reference.load_dir(a)
    y = b if isinstance(b, dict) else reference.load_dir(b)
    if set(x) != set(y):
        return "names differ: %s" % sorted(set(x) ^ set(y))[:5]
    for name in x:
        if x[name][0] != y[name][0] or x[name][1].tobytes() != y[name][1].tobytes():
            return "tensor %s differs" % name
    return None


def backend_meshes(convert):
    """Each backend's mesh axes, as `mdl-convert --list` gives them: what a
    backend splits over is data of its spec, not of its name."""
    out = subprocess.run([convert, "--list"], capture_output=True, text=True, check=True)
    return {cols[1]: set(cols[4].split(",")) - {"-"}
            for cols in (line.split("\t") for line in out.stdout.splitlines())}


def grid_points(meshes, backend, grid):
    """The (tp, pp, ep, etp) points of `grid` on the backend's mesh axes
    (tp always), each once."""
    return sorted({(tp, pp if "pp" in meshes[backend] else 1,
                    ep if "ep" in meshes[backend] else 1,
                    etp if "etp" in meshes[backend] else 1)
                   for tp, pp, ep, etp in grid})


def fresh_dirs(work, *names):
    """WORK/name for each name, removed if present."""
    paths = [os.path.join(work, n) for n in names]
    for p in paths:
        shutil.rmtree(p, ignore_errors=True)
    return paths


def arguments():
    """The command line of the conversion drivers: the tools, a spec, its
    model and a config, and the work directory (emptied by write_hf)."""
    ap = argparse.ArgumentParser()
    for a in ("mdlc", "convert", "spec", "model", "config", "work"):
        ap.add_argument("--" + a, required=True)
    return ap


def main():
    ap = arguments()
    ap.add_argument("--storage", default="per_expert")
    ap.add_argument("--backends", default="mcore_te,mcore_local,vllm")
    ap.add_argument("--convert-flags", default="",
                    help="options added to every mdl-convert run")
    ap.add_argument("--reference", default="reference.py",
                    help="the reference script, in this directory")
    ap.add_argument("--narrowed", default=None,
                    help="a regex of the F32 tensors the model holds in bf16: "
                         "their random values are bf16 values")
    ap.add_argument("--b2b-source-tp", default="2",
                    help="Megatron's tp in the backend to backend step "
                    "(vLLM's is 2)")
    ap.add_argument("--choice", action="append", default=[],
                    help="NAME=VALUE: a choice of the HF checkpoint written "
                    "(text_nesting=flat)")
    args = ap.parse_args()
    convert = [args.convert] + args.convert_flags.split()

    hf, tensors = write_hf(args.mdlc, args.spec, args.config, args.work, 7,
                           ["--choice", "expert_storage=" + args.storage] +
                           [a for c in args.choice for a in ("--choice", c)],
                           args.narrowed)
    moe = any(".experts." in t["name"] for t in tensors)
    quant = json.load(open(args.config)).get("quantization_config") or {}
    block = quant["weight_block_size"][0] if quant.get("quant_method") == "fp8" else 0
    # What HF gets back from a backend that keeps no block scales.
    dequantized = reference.fp8_views(reference.load_dir(hf), block)[2] if block else None

    grid = list(itertools.product([1, 2, 4], [1, 2], [1, 2, 4] if moe else [1],
                                  [1, 2] if moe else [1]))
    failures, converted, invalid = [], 0, 0
    meshes = backend_meshes(args.convert)
    for backend in args.backends.split(","):
        for tp, pp, ep, etp in grid_points(meshes, backend, grid):
            where = "%s tp=%d pp=%d ep=%d etp=%d" % (backend, tp, pp, ep, etp)
            out, back = fresh_dirs(args.work, "out", "back")
            # The model is the one whose spec serves the config.
            r = run(convert + ["--from", "hf", "--to", backend,
                     "--tp", str(tp), "--pp", str(pp), "--ep", str(ep), "--etp", str(etp),
                     "--quiet", hf, out])
            if r.returncode:
                if "is not a valid configuration" in r.stderr and not os.path.exists(out):
                    invalid += 1
                    continue
                failures.append("%s: hf -> backend failed: %s" % (where, r.stderr.strip()))
                continue
            converted += 1
            ref = run([sys.executable, os.path.join(HERE, args.reference), hf, out,
                       "--model", args.model, "--backend", backend, "--tp", str(tp),
                       "--pp", str(pp), "--ep", str(ep), "--etp", str(etp)])
            if ref.returncode:
                failures.append("%s: the reference disagrees:\n%s" % (where, ref.stdout + ref.stderr))
            r = run(convert + ["--model", args.model, "--from", backend, "--to", "hf",
                     "--quiet", out, back])
            if r.returncode:
                failures.append("%s: backend -> hf failed: %s" % (where, r.stderr.strip()))
                continue
            dequantizing = block and backend.startswith("mcore")
            diff = same(dequantized if dequantizing else hf, back)
            if diff:
                failures.append("%s: the round trip changed the checkpoint: %s" % (where, diff))
            if dequantizing and "quantization_config" in json.load(
                    open(os.path.join(back, "config.json"))):
                failures.append("%s: the dequantized checkpoint's config keeps "
                                "quantization_config" % where)

    # Backend to backend (online weight sync): Megatron tp=2 (or as asked)
    # to vLLM tp=2 equals HF to vLLM directly.
    # With FP8 weights, Megatron's are dequantized: the direct conversion
    # starts from the dequantized HF checkpoint.
    mc, vl, direct, deq = (os.path.join(args.work, d) for d in (
        "b2b_mcore", "b2b_vllm", "b2b_direct", "b2b_dequantized"))
    steps = [["--from", "hf", "--to", "mcore_te", "--tp", args.b2b_source_tp,
              hf, mc],
             ["--from", "mcore_te", "--to", "vllm", "--tp", "2", mc, vl]]
    if block:
        steps += [["--from", "mcore_te", "--to", "hf", mc, deq],
                  ["--from", "hf", "--to", "vllm", "--tp", "2", deq, direct]]
    else:
        steps += [["--from", "hf", "--to", "vllm", "--tp", "2", hf, direct]]
    for s in steps:
        r = run(convert + ["--model", args.model, "--quiet"] + s)
        if r.returncode:
            failures.append("backend to backend: %s failed: %s" % (" ".join(s[:4]), r.stderr.strip()))
    if not failures:
        for rank in (0, 1):
            diff = same(*(reference.load_files(reference.vllm_rank_files(d, rank))
                          for d in (vl, direct)))
            if diff:
                failures.append("mcore_te -> vllm differs from hf -> vllm on rank %d: %s" % (rank, diff))

    print("%s (%s experts): %d conversions round-tripped and matched the reference, "
          "%d configurations invalid, %d failures" % (
              args.model, args.storage, converted, invalid, len(failures)))
    for f in failures[:20]:
        print("FAIL: " + f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
