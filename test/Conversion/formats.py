#!/usr/bin/env python3
"""The files mdl-convert writes, as the frameworks load them.

  formats.py --mdlc MDLC --convert MDL_CONVERT --models DIR --inputs DIR --work DIR

Checks, on tiny random checkpoints (roundtrip.py writes them):
  - HF output above --max-shard-size: model-0000i-of-0000N.safetensors
    shards and model.safetensors.index.json as save_pretrained writes them
    (metadata.total_size the tensors' bytes, weight_map each tensor's
    shard, keys sorted); no shard above the size but a lone larger tensor,
    each shard as full as the next tensor allows; the tensors those of the
    single-file output, byte for byte; the sharded checkpoint reads back;
  - vLLM's sharded_state layout: model-rank-{r}-part-{p}.safetensors at the
    top, parts split at --max-shard-size, every rank equal to the
    independent reference, and back to HF unchanged;
  - the source's files that are not weights reach every output, as they
    are, and no weight file does;
  - --set overrides in the output's config.json and plan.json, in force
    when it is read back without them;
  - --dtype: F32, F16 and BF16 casts of every floating weight equal
    numpy's (rounded once, to nearest even); an F32 checkpoint converts;
    the output config.json's torch_dtype.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import reference  # noqa: E402
import roundtrip  # noqa: E402

CARRIED = {
    "tokenizer.json": '{"version": "1.0"}\n',
    "tokenizer_config.json": '{"model_max_length": 4096}\n',
    "generation_config.json": '{"do_sample": true}\n',
    "chat_template.jinja": "{% for m in messages %}{{ m }}{% endfor %}\n",
    "preprocessor_config.json": '{"patch_size": 2}\n',
    "modeling_tiny.py": "# custom code\n",
    "merges.txt": "a b\n",
}
# Weights in other formats are not carried.
NOT_CARRIED = {"pytorch_model.bin": "x", "training_args.bin": "y"}


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def sizes(path):
    header = reference.load(path)
    return {n: a.nbytes for n, (_, a) in header.items()}


class Checks:
    def __init__(self, args):
        self.args = args
        self.failures = []
        self.done = 0

    def convert(self, *argv):
        r = run([self.args.convert, "--quiet"] + list(argv))
        if r.returncode:
            self.failures.append("mdl-convert %s failed: %s" % (" ".join(argv), r.stderr.strip()))
        return r.returncode == 0

    def expect(self, ok, message):
        self.done += 1
        if not ok:
            self.failures.append(message)

    def checkpoint(self, name, config, dtype=None, overrides=()):
        """A random HF checkpoint of `config` (in `dtype` if given)."""
        hf = os.path.join(self.args.work, name)
        os.makedirs(hf)
        cfg = json.load(open(config))
        if dtype:
            cfg["torch_dtype"] = dtype
        json.dump(cfg, open(os.path.join(hf, "config.json"), "w"), indent=1)
        cmd = [self.args.mdlc, "params", os.path.join(self.args.models, cfg_model(config)),
               "--hf-config", os.path.join(hf, "config.json"), "--format=json"]
        for o in overrides:
            cmd += ["--set", o]
        listing = run(cmd)
        if listing.returncode:
            sys.exit("mdlc params failed:\n" + listing.stderr)
        roundtrip.write_checkpoint(os.path.join(hf, "model.safetensors"),
                                   json.loads(listing.stdout), np.random.default_rng(3))
        return hf


def cfg_model(config):
    return os.path.basename(config).replace(".json", ".mdl")


def check_hf_shards(c, hf, max_size):
    """HF output above --max-shard-size, against the single-file output."""
    work = c.args.work
    vl, single, sharded, again = (os.path.join(work, d) for d in
                                  ("shard_vllm", "shard_single", "shard_hf", "shard_again"))
    if not (c.convert("--from", "hf", "--to", "vllm", "--tp", "2", hf, vl) and
            c.convert("--from", "vllm", "--to", "hf", vl, single) and
            c.convert("--from", "vllm", "--to", "hf", "--max-shard-size", max_size, vl, sharded)):
        return
    limit = {"KB": 1000, "MB": 1000 ** 2}[max_size[-2:]] * int(max_size[:-2])
    files = sorted(f for f in os.listdir(sharded) if f.endswith(".safetensors"))
    n = len(files)
    c.expect(n > 2 and files == ["model-%05d-of-%05d.safetensors" % (i + 1, n)
                                 for i in range(n)],
             "HF shards are named %s" % files)
    text = open(os.path.join(sharded, "model.safetensors.index.json")).read()
    index = json.loads(text)
    c.expect(list(index) == ["metadata", "weight_map"] and
             list(index["weight_map"]) == sorted(index["weight_map"]) and
             text == json.dumps(index, indent=2, sort_keys=True) + "\n",
             "the index is not as transformers writes it")
    whole = reference.load(os.path.join(single, "model.safetensors"))
    c.expect(index["metadata"]["total_size"] == sum(a.nbytes for _, a in whole.values()),
             "metadata.total_size is %s" % index["metadata"]["total_size"])
    got = {}
    for f in files:
        part = sizes(os.path.join(sharded, f))
        for name in part:
            c.expect(index["weight_map"].get(name) == f,
                     "weight_map puts %s in %s, not %s" % (name, index["weight_map"].get(name), f))
        c.expect(sum(part.values()) <= limit or len(part) == 1,
                 "%s holds %d bytes, above %d" % (f, sum(part.values()), limit))
        got.update(reference.load(os.path.join(sharded, f)))
    c.expect(set(index["weight_map"]) == set(got), "the weight_map names other tensors")
    diff = roundtrip.same(whole, got)
    c.expect(diff is None, "the shards differ from the single file: %s" % diff)
    c.expect(not os.path.exists(os.path.join(single, "model.safetensors.index.json")),
             "a single-file checkpoint has an index")
    # The sharded checkpoint reads back.
    if c.convert("--from", "hf", "--to", "vllm", "--tp", "2", sharded, again):
        for rank in (0, 1):
            diff = roundtrip.same(*(reference.load_files(reference.vllm_rank_files(d, rank))
                                    for d in (vl, again)))
            c.expect(diff is None, "vllm from the shards differs on rank %d: %s" % (rank, diff))


def check_vllm_parts(c, hf, config, max_size):
    """vLLM's sharded_state files, split at --max-shard-size."""
    out = os.path.join(c.args.work, "parts_vllm")
    back = os.path.join(c.args.work, "parts_back")
    if not c.convert("--from", "hf", "--to", "vllm", "--tp", "2", "--max-shard-size", max_size,
                     hf, out):
        return
    limit = int(max_size[:-2]) * 1000
    c.expect(not any(os.path.isdir(os.path.join(out, d)) for d in os.listdir(out)),
             "the vLLM output has directories")
    for rank in (0, 1):
        parts = reference.vllm_rank_files(out, rank)
        c.expect(len(parts) > 1, "rank %d is not split" % rank)
        for p in parts:
            s = sizes(p)
            c.expect(sum(s.values()) <= limit or len(s) == 1,
                     "%s holds %d bytes, above %d" % (p, sum(s.values()), limit))
    ref = run([sys.executable, os.path.join(HERE, "reference.py"), hf, out, "--model",
               json.load(open(os.path.join(out, "plan.json")))["model"],
               "--backend", "vllm", "--tp", "2"])
    c.expect(ref.returncode == 0, "the parts disagree with the reference:\n" + ref.stdout)
    if c.convert("--from", "vllm", "--to", "hf", out, back):
        diff = roundtrip.same(hf, back)
        c.expect(diff is None, "vllm parts -> hf changed the checkpoint: %s" % diff)


def check_carried(c, hf):
    """Non-weight files reach every output; weights in other formats do not."""
    for name, text in list(CARRIED.items()) + list(NOT_CARRIED.items()):
        open(os.path.join(hf, name), "w").write(text)
    work = c.args.work
    mc, back, vl = (os.path.join(work, d) for d in ("carry_mcore", "carry_hf", "carry_vllm"))
    if not (c.convert("--from", "hf", "--to", "mcore_te", "--tp", "2", "--pp", "2", hf, mc) and
            c.convert("--from", "mcore_te", "--to", "hf", mc, back) and
            c.convert("--from", "hf", "--to", "vllm", "--tp", "2", hf, vl)):
        return
    for out in (mc, back, vl):
        for name, text in CARRIED.items():
            path = os.path.join(out, name)
            c.expect(os.path.exists(path) and open(path).read() == text,
                     "%s was not carried to %s" % (name, out))
        for name in NOT_CARRIED:
            c.expect(not os.path.exists(os.path.join(out, name)),
                     "the weight file %s was carried to %s" % (name, out))
    for name in list(CARRIED) + list(NOT_CARRIED):
        os.remove(os.path.join(hf, name))


def check_set(c, config):
    """--set: in the output's config.json and plan.json, and in force when
    it is read back without it."""
    key = "mtp_num_hidden_layers"
    hf = c.checkpoint("set_hf", config, overrides=[key + "=0"])
    mc, back = (os.path.join(c.args.work, d) for d in ("set_mcore", "set_back"))
    # Without the override, the MTP layer's tensors are missing.
    r = run([c.args.convert, "--quiet", "--from", "hf", "--to", "mcore_te", "--tp", "2", hf,
             os.path.join(c.args.work, "set_fails")])
    c.expect(r.returncode == 1 and "mtp" in r.stderr, "the checkpoint converts without --set")
    if not (c.convert("--from", "hf", "--to", "mcore_te", "--tp", "2", "--set", key + "=0", hf, mc) and
            c.convert("--from", "mcore_te", "--to", "hf", mc, back)):
        return
    for out in (mc, back):
        cfg = json.load(open(os.path.join(out, "config.json")))
        c.expect(cfg["text_config"][key] == 0, "%s/config.json has %s %s" % (
            out, key, cfg["text_config"][key]))
        plan = json.load(open(os.path.join(out, "plan.json")))
        c.expect(plan["overrides"] == {key: "0"}, "%s/plan.json has overrides %s" % (
            out, plan["overrides"]))
    diff = roundtrip.same(hf, back)
    c.expect(diff is None, "the round trip with --set changed the checkpoint: %s" % diff)


def bf16_rne(a):
    """numpy's float32 array rounded to bf16 bits, to nearest even."""
    bits = a.view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def check_dtype(c, config):
    """--dtype casts against numpy, from an F32 checkpoint."""
    hf = c.checkpoint("dtype_f32", config, dtype="float32")
    src = reference.load(os.path.join(hf, "model.safetensors"))
    c.expect(all(d == "F32" for d, _ in src.values()), "the F32 checkpoint is not F32")
    work = c.args.work
    vl, to_bf16, to_f16, back = (os.path.join(work, d) for d in (
        "dtype_vllm", "dtype_bf16", "dtype_fp16", "dtype_back"))
    # An F32 checkpoint converts as it is.
    if c.convert("--from", "hf", "--to", "vllm", hf, vl):
        ref = run([sys.executable, os.path.join(HERE, "reference.py"), hf, vl, "--model",
                   cfg_model(config)[:-4], "--backend", "vllm"])
        c.expect(ref.returncode == 0, "the F32 vLLM rank disagrees:\n" + ref.stdout)
    if not (c.convert("--from", "hf", "--to", "vllm", "--dtype", "bf16", hf, to_bf16) and
            c.convert("--from", "hf", "--to", "vllm", "--dtype", "fp16", hf, to_f16) and
            c.convert("--from", "vllm", "--to", "hf", "--dtype", "fp32", to_bf16, back)):
        return
    f32 = reference.load_files(reference.vllm_rank_files(vl, 0))
    cases = [(to_bf16, "BF16", "bfloat16", {n: bf16_rne(a) for n, (_, a) in f32.items()}),
             (to_f16, "F16", "float16", {n: a.astype(np.float16) for n, (_, a) in f32.items()})]
    for out, name, torch, want in cases:
        got = reference.load_files(reference.vllm_rank_files(out, 0))
        for tensor, w in want.items():
            gd, g = got[tensor]
            c.expect(gd == name and g.tobytes() == w.tobytes(),
                     "--dtype %s: %s is %s, not numpy's cast" % (torch, tensor, gd))
        cfg = json.load(open(os.path.join(out, "config.json")))
        c.expect(cfg.get("torch_dtype") == torch,
                 "--dtype %s: torch_dtype is %s" % (torch, cfg.get("torch_dtype")))
    # bf16 back to fp32: the bf16 values exactly.
    got = reference.load(os.path.join(back, "model.safetensors"))
    for tensor, (_, a) in src.items():
        w = (bf16_rne(a).astype(np.uint32) << 16).view(np.float32)
        gd, g = got[tensor]
        c.expect(gd == "F32" and g.tobytes() == w.tobytes(),
                 "--dtype fp32: %s is not the bf16 value" % tensor)
    c.expect(json.load(open(os.path.join(back, "config.json")))["torch_dtype"] == "float32",
             "--dtype fp32: torch_dtype")


def main():
    ap = argparse.ArgumentParser()
    for flag in ("mdlc", "convert", "models", "inputs", "work"):
        ap.add_argument("--" + flag, required=True)
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    c = Checks(args)
    qwen3 = os.path.join(args.inputs, "qwen3.json")
    hf = c.checkpoint("hf", qwen3)
    check_hf_shards(c, hf, "20KB")
    check_vllm_parts(c, hf, qwen3, "10KB")
    check_carried(c, hf)
    check_set(c, os.path.join(args.inputs, "qwen3_5.json"))
    check_dtype(c, qwen3)
    print("formats: %d checks, %d failures" % (c.done, len(c.failures)))
    for f in c.failures[:20]:
        print("FAIL: " + f)
    sys.exit(1 if c.failures else 0)


if __name__ == "__main__":
    main()
