"""Rank 0 of Megatron (mcore-te, tp 2, pp 2) loaded from an HF checkpoint
into torch tensors, then the Megatron ranks synced to vLLM's layout (tp 4)
in memory, as an RL framework does after a training step."""
import sys

import mdl

hf = sys.argv[1]
megatron = {"tp": 2, "pp": 2}
model = mdl.Model(checkpoint=hf)  # the spec that serves its config.json
rank0 = model.load_rank("mcore-te", rank=0, **megatron)
print(model.name, "rank 0:", len(rank0), "tensors")
for name in list(rank0)[:2]:
    print(" ", name, tuple(rank0[name].shape), rank0[name].dtype)

# In a training job each process holds its own rank; here all four.
ranks = [model.load_rank("mcore-te", rank=r, **megatron) for r in range(4)]

plan = mdl.SyncPlan(config=model.config, src=("mcore-te", megatron),
                    dst=("vllm", {"tp": 4}))
copy = plan.copies(1)[0]
print("vLLM rank 1 reads Megatron ranks", plan.sources(1), "in",
      len(plan.copies(1)), "copies, e.g.")
print(" ", copy.target, "<-", copy.source, "of rank", copy.source_rank,
      copy.box)
vllm1 = plan.apply(ranks, 1)  # new tensors; out= fills existing ones
plan.apply(ranks, 1, out=vllm1)
print("vLLM rank 1:", len(vllm1), "tensors; to recompute after an update:",
      len(plan.derived), "x", plan.derived[0]["name"].split(".")[-2])
