#!/usr/bin/env python3
"""Makes the binary seeds of the fuzzing corpora, and test/Fuzz/rank-dir,
from a tiny qwen3 (test/Conversion/Inputs/qwen3.json) with random weights.

  make_seeds.py MDLC MDL_CONVERT

Writes corpus/safetensors/hf (the HF checkpoint), rank-dir (a checkpoint
on mcore_te at tp=2 without rank 1's file), corpus/rank/rank1 (that file),
corpus/plan/* (its plan.json), corpus/torch/rank1 (rank 1 in Megatron's
torch format), corpus/adapter/peft (HF-PEFT adapters),
corpus/index/index (an index of the HF checkpoint) and
corpus/inventory/qwen3 (its inventory, as mdlc params prints it).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "Conversion"))
import adapters  # noqa: E402
import roundtrip  # noqa: E402

mdlc, convert = sys.argv[1], sys.argv[2]
spec = os.path.join(HERE, "..", "..", "models", "qwen3.mdl")
config = os.path.join(HERE, "..", "Conversion", "Inputs", "qwen3.json")
corpus = os.path.join(HERE, "corpus")
for name in ("safetensors", "torch", "rank", "plan", "adapter", "index",
             "inventory"):
    os.makedirs(os.path.join(corpus, name), exist_ok=True)
params = json.loads(subprocess.run(
    [mdlc, "params", spec, "--hf-config", config, "--format=json"],
    check=True, capture_output=True, text=True).stdout)
work = tempfile.mkdtemp()
os.chdir(work)
os.makedirs("hf")
shutil.copy(config, "hf/config.json")
roundtrip.write_checkpoint("hf/model.safetensors", params,
                           np.random.default_rng(1))
subprocess.run([convert, "--model", "qwen3", "--quiet", "--from", "hf", "--to",
                "mcore_te", "--tp", "2", "--format", "safetensors", "hf",
                "backend"], check=True)
# Megatron's own format: rank 1's torch file seeds the torch reader.
subprocess.run([convert, "--model", "qwen3", "--quiet", "--from", "hf", "--to",
                "mcore_te", "--tp", "2", "hf", "torch"], check=True)
shutil.copy("torch/release/mp_rank_01/model_optim_rng.pt",
            os.path.join(corpus, "torch", "rank1"))
rank_dir = os.path.join(HERE, "rank-dir")
shutil.rmtree(rank_dir, ignore_errors=True)
shutil.copytree("backend", rank_dir)
shutil.move(os.path.join(rank_dir, "mp_rank_01", "model.safetensors"),
            os.path.join(corpus, "rank", "rank1"))
os.rmdir(os.path.join(rank_dir, "mp_rank_01"))
plan = json.load(open("backend/plan.json"))
plan["source"] = "hf"
json.dump(plan, open(os.path.join(rank_dir, "plan.json"), "w"), indent=2)
json.dump(plan, open(os.path.join(corpus, "plan", "tp2"), "w"), indent=2)
plan["configuration"].update(tp=1, pp=2)
json.dump(plan, open(os.path.join(corpus, "plan", "pp2"), "w"), indent=2)
shutil.copy("hf/model.safetensors", os.path.join(corpus, "safetensors", "hf"))
json.dump({"metadata": {"total_size": 1},
           "weight_map": {p["name"]: "model.safetensors" for p in params}},
          open(os.path.join(corpus, "index", "index"), "w"), indent=1)
with open(os.path.join(corpus, "inventory", "qwen3"), "w") as f:
    f.write(subprocess.run([mdlc, "params", spec, "--hf-config", config],
                           check=True, capture_output=True,
                           text=True).stdout)
rng = np.random.default_rng(2)
peft = {}
for t in params:
    module, _, leaf = t["name"].rpartition(".")
    if leaf == "weight" and len(t["shape"]) == 2 and \
            module.rsplit(".", 1)[-1] in adapters.TARGETS:
        out_f, in_f = t["shape"]
        peft[module] = (adapters.bf16(rng.uniform(1, 4, (2, in_f))),
                        adapters.bf16(rng.uniform(1, 4, (out_f, 2))))
adapters.write_adapters(os.path.join(corpus, "adapter", "peft"), peft)
shutil.rmtree(work)
