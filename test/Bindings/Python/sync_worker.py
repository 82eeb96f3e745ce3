"""One process of the sync tests (test_sync.py): joins a gloo group and
runs each scenario of a list: source processes hold what load_rank gives
(byte for byte what mdl-convert writes, test_mdl.py), destination processes
hold zeroed tensors, and every process calls mdl.sync. What each saw (its
tensors' bytes, whether their storage was kept, its report or its error)
is written to <out>/<scenario>-<process>.pkl for the test to check.
Scenarios may make one process fail on purpose (`fault`)."""
import datetime
import os
import pickle
import time
import traceback

import torch
import torch.distributed as dist

import mdl


def roles(plan):
    """The role of each process: sources first, then destinations."""
    return [("src", s) for s in range(plan.num_src_ranks)] + \
        [("dst", d) for d in range(plan.num_dst_ranks)]


def run(index, sc, out):
    fault = sc.get("fault") or {}
    mine = fault.get("process") == index
    bucket = sc["bucket_bytes"]
    if mine and fault["kind"] == "digest":
        bucket += 8
    plan = mdl.TransferPlan(config=sc["config"], src=sc["src"], dst=sc["dst"],
                            bucket_bytes=bucket, params=sc.get("params"),
                            dst_replicas=sc.get("dst_replicas", 1),
                            lora=sc.get("lora"))
    everyone = roles(plan)
    if index >= len(everyone):
        return
    role = everyone[index]
    result = {"role": role, "error": None, "report": None}
    on_bucket = None
    handed = []
    if role[0] == "src" and sc.get("lora_states"):
        # A trainer's adapters (bf16 bits by name).
        state = {n: torch.from_numpy(a.view("int16")).view(torch.bfloat16)
                 for n, a in sc["lora_states"][plan.layout_rank(role)].items()}
    elif role[0] == "src":
        state = mdl.load_rank(sc["hf"], backend=sc["src"][0],
                              rank=plan.layout_rank(role),
                              **sc["src"][1])
        if mine and fault["kind"] == "missing":
            del state[next(iter(state))]
    elif sc.get("receiver"):
        state = None

        def on_bucket(tensors):
            handed.append([(n, t.clone()) for n, t in tensors])
    else:
        # The engine's tensors: zeros (padding stays so, as mdl-convert
        # writes it), or stale weights for a partial sync.
        dst, parallel = sc["dst"]
        base = plan.layout_rank(role)
        state = {t.name: torch.full(t.shape, sc.get("fill", 0),
                                    dtype=mdl._torch_dtype(t.dtype))
                 for t in plan.model.tensors(dst, base, **parallel)}
        # The engine's transposed copy of each GDN conv1d weight [C, 1, K]:
        # [K, C], stale (sevens) until mdl.refresh recomputes it.
        for name in list(state):
            if name.endswith("linear_attn.conv1d.weight"):
                c, _, k = state[name].shape
                state[name + "_t"] = torch.full((k, c), 7,
                                                dtype=state[name].dtype)
        ptrs = {k: v.data_ptr() for k, v in state.items()}
    if mine and fault["kind"] in ("raise", "kill"):
        count = [0]

        def on_bucket(tensors):
            count[0] += 1
            if count[0] == 2:
                if fault["kind"] == "kill":
                    os._exit(9)
                raise RuntimeError("the engine refused the weights")
    original = dist.isend
    if mine and fault["kind"] == "flip":
        def isend(tensor, *args, **kwargs):
            # One byte of one bucket flipped on the wire, after the
            # checksums were taken.
            if tensor.numel() > 64 and tensor.dtype == torch.uint8 and \
                    not isend.keep:
                tensor = tensor.clone()
                tensor[tensor.numel() // 2] ^= 1
                isend.keep.append(tensor)
            return original(tensor, *args, **kwargs)
        isend.keep = []
        dist.isend = isend
    start = time.monotonic()
    try:
        report = mdl.sync(plan, state, role, timeout=sc.get("timeout", 60),
                          on_bucket=on_bucket)
        result["report"] = report._asdict()
        if role[0] == "dst" and state is not None:
            result["refresh"] = mdl.refresh(plan, state, role,
                                            report.stale)._asdict()
    except mdl.Error as e:
        result["error"] = str(e)
    except Exception:
        result["error"] = "unexpected: " + traceback.format_exc()
    finally:
        dist.isend = original
    result["seconds"] = time.monotonic() - start
    if role[0] == "dst":
        if state is not None:
            result["same_storage"] = all(
                v.data_ptr() == ptrs[k] for k, v in state.items())
            result["tensors"] = {
                k: v.contiguous().view(torch.uint8).numpy().tobytes()
                for k, v in state.items()}
        result["handed"] = [
            [(n, t.contiguous().view(torch.uint8).numpy().tobytes())
             for n, t in call] for call in handed]
    with open(os.path.join(out, f"{sc['name']}-{index}.pkl"), "wb") as f:
        pickle.dump(result, f)


def main(index, world, spec, out):
    with open(spec, "rb") as f:
        port, scenarios = pickle.load(f)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=index, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    for sc in scenarios:
        run(index, sc, out)
        if (sc.get("fault") or {}).get("kind") != "kill":
            dist.barrier()
