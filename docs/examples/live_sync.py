"""Live weight sync between processes: four Megatron ranks (mcore-te, tp 2,
pp 2) send their weights to two vLLM ranks (tp 2) over gloo, each engine
rank receiving only its own bytes into its own tensors, as an RL framework
does after a training step."""
import datetime
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import mdl

TRAINER, ENGINE = ("mcore-te", {"tp": 2, "pp": 2}), ("vllm", {"tp": 2})


def process(index, world, port, hf):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=index, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    model = mdl.Model(checkpoint=hf)
    # Every process builds the same plan (sync checks its digest).
    plan = mdl.TransferPlan(config=model.config, src=TRAINER, dst=ENGINE,
                            bucket_bytes=1 << 16)
    if index < plan.num_src_ranks:  # a trainer: its live parameters
        role = ("src", index)
        state = model.load_rank(TRAINER[0], rank=plan.layout_rank(role),
                                **TRAINER[1])
    else:                           # an engine: its own tensors, in place
        role = ("dst", index - plan.num_src_ranks)
        state = {t.name: torch.zeros(t.shape, dtype=mdl._torch_dtype(t.dtype))
                 for t in model.tensors(ENGINE[0], plan.layout_rank(role),
                                        **ENGINE[1])}
        # The engine's cache of each GDN conv1d weight [C, 1, K]: [K, C].
        for n in [n for n in state if n.endswith("conv1d.weight")]:
            state[n + "_t"] = state[n].flatten(1).t().contiguous()
    report = mdl.sync(plan, state, role, timeout=30)
    if role[0] == "dst":  # rebuild the caches the new weights made stale
        done = mdl.refresh(plan, state, role, report.stale)
    if role == ("dst", 0):
        # The same rank converted in memory from all the trainer's ranks.
        ranks = [model.load_rank(TRAINER[0], rank=r, **TRAINER[1])
                 for r in range(mdl.Model.num_ranks(**TRAINER[1]))]
        want = mdl.SyncPlan(config=model.config, src=TRAINER,
                            dst=ENGINE).apply(ranks, 0)
        same = all(torch.equal(state[n].view(torch.uint8),
                               want[n].view(torch.uint8)) for n in want)
        print(f"plan {len(plan.links())} links, vLLM rank 0 receives "
              f"{plan.bytes_in(0)} bytes")
        print(f"dst 0: {report.bytes_received} bytes in {report.buckets} "
              f"buckets, verified {report.verified}, equal to a conversion: "
              f"{same}")
        bits = lambda t: t.contiguous().view(torch.int16)  # NaN == NaN
        fresh = all(torch.equal(bits(state[n + "_t"]),
                                bits(state[n].flatten(1).t()))
                    for n in state if n.endswith("conv1d.weight"))
        print(f"refreshed {len(done.refreshed)} of {len(report.stale)} stale "
              f"caches, each the transposed weight: {fresh}")
    dist.destroy_process_group()


if __name__ == "__main__":
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(process, args=(6, port, sys.argv[1]), nprocs=6,
                       start_method="spawn")
