"""Transfer plans and mdl.sync against mdl-convert and the layouts' plans.

Plans: the bytes each destination rank receives are exactly the bytes of
the boxes its tensors hold (from Model.plan, the document mdlc plan
prints); buckets are never larger than asked, tile their bytes with their
segments, and give each process at most one bucket per round; a plan
applied by an interpreter of its tables written here (numpy, one process)
gives every destination tensor the bytes mdl-convert writes.

Syncs: real processes (torch.multiprocessing spawn) over gloo, trainer
ranks holding what mdl-convert writes for them and engine ranks holding
garbage; after mdl.sync every engine tensor equals, byte for byte, what
mdl-convert writes for that rank, in the same storage. Failures (a missing
tensor, a flipped byte, a failing and a killed process) fail every
process with one message.
"""
import fnmatch
import json
import os
import pickle
import re
import shutil
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import mdl

HERE = os.path.dirname(os.path.abspath(__file__))
CONVERSION = os.path.join(HERE, "..", "..", "Conversion")
MODELS = os.path.join(HERE, "..", "..", "..", "models")
sys.path.insert(0, CONVERSION)
sys.path.insert(0, HERE)
import reference  # noqa: E402
import roundtrip  # noqa: E402
import sync_worker  # noqa: E402
from test_mdl import convert_rank  # noqa: E402

WORK = os.environ.get("MDL_TEST_WORK", "/tmp/mdl-python-test")
MDLC = shutil.which("mdlc")
CONVERT = shutil.which("mdl-convert")

SIZES = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "I64": 8, "I32": 4,
         "U8": 1, "F8_E4M3": 1, "F8_E5M2": 1}
INTS = {1: "int8", 2: "int16", 4: "int32", 8: "int64"}


def config_of(model):
    return os.path.join(CONVERSION, "Inputs", model + ".json")


def deepseek_config():
    """DeepSeek-V3's tiny config in bf16 (a trainer and an engine that both
    hold bf16 weights; FP8 rollout needs quantization, which a sync does
    not do), with two MTP layers."""
    with open(config_of("deepseek_v3")) as f:
        c = json.load(f)
    del c["quantization_config"]
    c["num_nextn_predict_layers"] = 2
    path = os.path.join(WORK, "deepseek_v3-bf16.json")
    os.makedirs(WORK, exist_ok=True)
    with open(path, "w") as f:
        json.dump(c, f)
    return path


CONFIGS = {m: config_of(m) for m in
           ["qwen3", "qwen3_moe", "qwen3_5", "qwen3_5_moe", "nemotron_h"]}


@pytest.fixture(scope="session")
def hf():
    """model -> HF directory of a random checkpoint."""
    CONFIGS["deepseek_v3"] = deepseek_config()
    out = {}
    for i, (model, config) in enumerate(sorted(CONFIGS.items())):
        d, _ = roundtrip.write_hf(MDLC, os.path.join(MODELS, model + ".mdl"),
                                  config, os.path.join(WORK, "sync-" + model),
                                  seed=300 + i)
        out[model] = d
    return out


def converted(hf_dir, backend, parallel, rank, out):
    """What mdl-convert writes for one rank: name -> bytes."""
    return {n: a.tobytes() for n, (_, a) in
            convert_rank(hf_dir, backend, parallel, rank, out).items()}


def slice_bytes(model, backend, parallel, rank, params=None):
    """Per tensor of a rank, the bytes of the parameter boxes it holds (the
    slices of Model.plan), restricted to parameters matching `params`."""
    doc = model.plan(backend, rank=rank, **parallel)
    out = {}
    for t in doc["ranks"][0]["tensors"]:
        n = 0
        for sl in t["slices"]:
            if params and not any(fnmatch.fnmatch(sl["param"], p)
                                  for p in params):
                continue
            n += int(np.prod([hi - lo for lo, hi in sl["box"].values()]))
        if not n:
            continue
        # A family ({E 0..3}: one tensor per index) shares its boxes out.
        names = [t["name"]]
        for atom, (lo, hi) in t.get("families", {}).items():
            names = [re.sub(r"\{%s [0-9]+\.\.[0-9]+\}" % atom, str(i), x)
                     for x in names for i in range(hi - lo)]
        for x in names:
            out[x] = n * SIZES[t["dtype"]] // len(names)
    return out


# Plans on their own.

PLANS = [
    ("qwen3", ("mcore_te", {"tp": 2, "pp": 2}), ("vllm", {"tp": 2})),
    ("qwen3_5", ("mcore_te", {"tp": 2, "pp": 2}), ("vllm", {"tp": 4})),
    ("qwen3_5_moe", ("mcore_te", {"tp": 2, "ep": 2}), ("vllm", {"tp": 2})),
    ("qwen3_moe", ("mcore_local", {"tp": 2, "ep": 2, "etp": 2}),
     ("mcore_te", {"tp": 4, "pp": 2, "ep": 2})),
    ("deepseek_v3", ("mcore_te", {"tp": 2, "pp": 2, "ep": 2}),
     ("vllm", {"tp": 2})),
    ("qwen3_5", ("vllm", {"tp": 2}), ("hf", {})),
    # vLLM with expert parallelism (tp 2 x dp 2): whole experts.
    ("qwen3_moe", ("mcore_te", {"tp": 2, "ep": 2, "etp": 1}),
     ("vllm", {"tp": 2, "ep": 4})),
    # Nemotron-H: vLLM holds A = -exp(A_log) in f32, computed when packing;
    # and back, log(-A).
    ("nemotron_h", ("mcore_te", {"tp": 2}), ("vllm", {"tp": 2})),
    ("nemotron_h", ("vllm", {"tp": 2}), ("mcore_te", {"tp": 1})),
]


@pytest.mark.parametrize("model,src,dst", PLANS)
def test_plan_bytes_are_the_boxes(hf, model, src, dst):
    plan = mdl.TransferPlan(config=CONFIGS[model], src=src, dst=dst,
                            bucket_bytes=4096)
    m = plan.model
    links = plan.links()
    for r in range(plan.num_dst_ranks):
        want = slice_bytes(m, dst[0], dst[1], plan.layout_rank(("dst", r)))
        assert plan.bytes_in(r) == sum(want.values()), r
        assert {t.name for t in plan.tensors(("dst", r))} == set(want)
        assert sum(n for s, d, n in links if d == r) == plan.bytes_in(r)
    assert sum(plan.bytes_out(s) for s in range(plan.num_src_ranks)) == \
        sum(plan.bytes_in(r) for r in range(plan.num_dst_ranks))


@pytest.mark.parametrize("model,src,dst", PLANS[:3])
def test_buckets_tile_and_rounds_share(hf, model, src, dst):
    cap = 3000
    plan = mdl.TransferPlan(config=CONFIGS[model], src=src, dst=dst,
                            bucket_bytes=cap)
    seg, buckets = plan.segments, plan.buckets
    split = False
    rounds = set()
    for b, row in enumerate(buckets.tolist()):
        s, d, nbytes, first, count, rnd = row[:6]
        assert 0 < nbytes <= cap
        rows = seg[first:first + count]
        assert (rows[:, 5] == b).all()
        # The segments tile the bucket's bytes in order.
        at = 0
        for r in rows.tolist():
            dtype = plan.tensors(("dst", r[2]))[r[3]].dtype
            assert r[10] == at and at % SIZES[dtype] == 0
            at += r[11] * SIZES[dtype]
        assert at == nbytes
        assert (s, "src", rnd) not in rounds and (d, "dst", rnd) not in rounds
        rounds |= {(s, "src", rnd), (d, "dst", rnd)}
        split |= any(t.name for t in plan.tensors(("dst", d))
                     if np.prod(t.shape) * SIZES[t.dtype] > cap)
    assert split  # some tensor is larger than a bucket
    # Staging: two buffers of a process's largest bucket that does not go
    # from or into a tensor itself (one is filled while one is sent).
    rows = buckets.tolist()
    for side, rank_col, direct_col, n in (
            ("src", 0, 6, plan.num_src_ranks),
            ("dst", 1, 7, plan.num_dst_ranks)):
        for r in range(n):
            staged = [row[2] for row in rows
                      if row[rank_col] == r and not row[direct_col]]
            want = max(staged) * min(len(staged), 2) if staged else 0
            assert plan.peak_staging((side, r)) == want <= 2 * cap
    # Rounds never decrease along the schedule.
    assert (np.diff(buckets[:, 5]) >= 0).all()


def test_digest_is_the_plan(hf):
    args = dict(config=CONFIGS["qwen3"], src=("mcore_te", {"tp": 2}),
                dst=("vllm", {"tp": 2}))
    a, b = mdl.TransferPlan(**args), mdl.TransferPlan(**args)
    assert a.digest == b.digest and len(a.digest) == 16
    assert mdl.TransferPlan(bucket_bytes=1 << 20, **args).digest != a.digest
    assert mdl.TransferPlan(dst_replicas=2, **args).digest != a.digest
    assert mdl.TransferPlan(params=["layers.0.*"], **args).digest != a.digest


def interpret(plan, states, rank, out):
    """Moves the bytes of destination rank `rank` from the source states as
    the plan's tables say, with numpy, into `out` (name -> bytearray)."""
    tensors = {s: plan.tensors(("src", s)) for s in range(plan.num_src_ranks)}
    dst = plan.tensors(("dst", rank))
    buf = {}
    for row in plan.buckets.tolist():
        if row[1] != rank:
            continue
        first, count = row[3], row[4]
        for k, s in enumerate(plan.segments[first:first + count].tolist()):
            src_t = tensors[s[0]][s[1]]
            dst_t = dst[s[3]]
            dims = plan.dims[s[6]:s[6] + s[7]].tolist()
            shape = [x[0] for x in dims]
            a = states[s[0]][src_t.name]
            flat = a.reshape(-1).view(
                getattr(torch, INTS[a.element_size()])).numpy()
            view = np.lib.stride_tricks.as_strided(
                flat[s[8]:], shape,
                [x[1] * flat.itemsize for x in dims], writeable=False)
            shift = plan.shifts[first + k]
            transform = plan.transforms[first + k]
            ints = INTS[SIZES[dst_t.dtype]]
            if src_t.dtype != dst_t.dtype or shift or transform:
                # A zero-centred norm's +1 (or -1), a cast, or vLLM's
                # A = -exp(A_log) (1) and back (2): the value in float64
                # (numpy's exp and log), rounded once to the destination's.
                values = torch.from_numpy(np.array(view)).view(
                    mdl._torch_dtype(src_t.dtype)).double().numpy()
                if transform == 1:
                    values = -np.exp(values + shift)
                elif transform == 2:
                    values = np.log(-values) + shift
                else:
                    values = values + shift
                view = torch.from_numpy(values).to(
                    mdl._torch_dtype(dst_t.dtype)).view(
                    getattr(torch, ints)).numpy()
            target = np.frombuffer(out.setdefault(
                dst_t.name, bytearray(int(np.prod(dst_t.shape)) *
                                      SIZES[dst_t.dtype])), dtype=ints)
            place = np.lib.stride_tricks.as_strided(
                target[s[9]:], shape, [x[2] * target.itemsize for x in dims])
            place[...] = view
    return out


@pytest.mark.parametrize("model,src,dst",
                         [PLANS[0], PLANS[2], PLANS[4], PLANS[6], PLANS[7],
                          PLANS[8]])
def test_plan_interpreted_equals_mdl_convert(hf, model, src, dst, tmp_path):
    plan = mdl.TransferPlan(config=CONFIGS[model], src=src, dst=dst,
                            bucket_bytes=5000)
    states = [mdl.load_rank(hf[model], backend=src[0],
                            rank=plan.layout_rank(("src", s)), **src[1])
              for s in range(plan.num_src_ranks)]
    for r in range(plan.num_dst_ranks):
        want = converted(hf[model], dst[0], dst[1],
                         plan.layout_rank(("dst", r)), str(tmp_path / "c"))
        got = interpret(plan, states, r, {})
        assert set(got) == set(want), r
        for name, data in got.items():
            # Padding (vocabulary rows past the end) is not moved: it keeps
            # the zeros it started with, which mdl-convert writes there.
            assert bytes(data) == want[name], (r, name)


def test_plan_errors(hf):
    with pytest.raises(mdl.Error, match="no parameter matching 'layers.99"):
        mdl.TransferPlan(config=CONFIGS["qwen3"], src=("mcore_te", {}),
                         dst=("vllm", {}), params=["layers.99.*"])
    with pytest.raises(mdl.Error, match="backend vllm has no pp axis"):
        mdl.TransferPlan(config=CONFIGS["qwen3"], src=("mcore_te", {}),
                         dst=("vllm", {"pp": 2}))
    with pytest.raises(mdl.Error, match="a bucket must hold at least 8"):
        mdl.TransferPlan(config=CONFIGS["qwen3"], src=("mcore_te", {}),
                         dst=("vllm", {}), bucket_bytes=4)
    with pytest.raises(mdl.Error, match="replicas take a number from 1"):
        mdl.TransferPlan(config=CONFIGS["qwen3"], src=("mcore_te", {}),
                         dst=("vllm", {}), dst_replicas=0)
    # DeepSeek-V3 in FP8 on vLLM from Megatron's dequantized bf16: a
    # quantization, which a sync does not do: Megatron holds no scales,
    # and its weights are not FP8.
    with pytest.raises(mdl.Error, match="no rank of deepseek_v3 on mcore_te "
                       "at tp=1 pp=1 ep=1 etp=1 holds layers.0.attn.q_a.scale, "
                       "which tensor 'model.layers.0.self_attn.fused_qkv_a_"
                       "proj.weight_scale_inv' of rank 0 of vllm"):
        mdl.TransferPlan(config=config_of("deepseek_v3"),
                         src=("mcore_te", {}), dst=("vllm", {}))
    with pytest.raises(mdl.Error, match="tensor 'model.layers.0.self_attn."
                       "fused_qkv_a_proj.weight' is F8_E4M3 but its source "
                       "'decoder.layers.0.self_attention.linear_q_down_proj."
                       "weight' is BF16: a sync converts between 16-, 32- "
                       "and 64-bit floats only"):
        mdl.TransferPlan(config=config_of("deepseek_v3"), params=[
                         "layers.0.attn.q_a"], src=("mcore_te", {}),
                         dst=("vllm", {}))
    with pytest.raises(mdl.Error, match="holds FP8 block-quantized weights "
                       "dequantized, which a sync cannot make"):
        mdl.TransferPlan(config=config_of("deepseek_v3"),
                         src=("vllm", {}), dst=("mcore_te", {}))
    # GPT-OSS's MXFP4 experts: HF keeps blocks and scales, Megatron the
    # weights dequantized; a sync does neither conversion.
    mxfp4 = os.path.join(CONVERSION, "Inputs", "gpt_oss_mxfp4.json")
    with pytest.raises(mdl.Error, match="tensor 'decoder.layers.0.mlp.experts."
                       "linear_fc1.weight0' of mcore_te holds MXFP4 weights "
                       "dequantized, which a sync cannot make from the MXFP4 "
                       "blocks and scales of hf"):
        mdl.TransferPlan(config=mxfp4, src=("hf", {}), dst=("mcore_te", {}))
    with pytest.raises(mdl.Error, match="tensor 'model.layers.0.mlp.experts."
                       "(gate_up|down)_proj_(blocks|scales)' of hf holds MXFP4 "
                       "blocks and scales, which a sync cannot make from the "
                       "dequantized weights of mcore_te"):
        mdl.TransferPlan(config=mxfp4, src=("mcore_te", {}), dst=("hf", {}))


def test_partial_plan_is_in_proportion(hf):
    args = dict(config=CONFIGS["qwen3_5"], src=("mcore_te", {"tp": 2}),
                dst=("vllm", {"tp": 2}))
    full = mdl.TransferPlan(**args)
    some = mdl.TransferPlan(params=["layers.0.mlp.*"], **args)
    m = full.model
    for r in range(2):
        want = slice_bytes(m, "vllm", {"tp": 2}, r, ["layers.0.mlp.*"])
        assert some.bytes_in(r) == sum(want.values()) > 0
        assert some.bytes_in(r) < full.bytes_in(r) / 10
    assert set(some.param_paths) == {"layers.0.mlp.gate", "layers.0.mlp.up",
                                     "layers.0.mlp.down"}


# Syncs between processes.

def run_world(tmp_path, scenarios, world):
    """Runs sync_worker.main in `world` spawned processes over gloo; each
    scenario's results are in tmp_path/<name>-<process>.pkl."""
    spec = tmp_path / "scenarios.pkl"
    with socket.socket() as sock:  # a free port for the group's store
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with open(spec, "wb") as f:
        pickle.dump((port, scenarios), f)
    ctx = torch.multiprocessing.start_processes(
        sync_worker.main, args=(world, str(spec), str(tmp_path)),
        nprocs=world, join=False, start_method="spawn")
    deadline = time.monotonic() + 600
    for p in ctx.processes:
        p.join(max(1, deadline - time.monotonic()))
    codes = [p.exitcode for p in ctx.processes]
    for p in ctx.processes:
        if p.exitcode is None:
            p.kill()
    return codes


def results(tmp_path, name, world):
    out = {}
    for p in range(world):
        path = tmp_path / f"{name}-{p}.pkl"
        if path.exists():
            with open(path, "rb") as f:
                out[p] = pickle.load(f)
    return out


SYNCS = {
    # Megatron tp 2 pp 2 (4 processes) to vLLM tp 2 (2 processes): GDN,
    # gated attention, MTP, tied embeddings.
    "qwen3_5": ("qwen3_5", ("mcore_te", {"tp": 2, "pp": 2}),
                ("vllm", {"tp": 2}), {}),
    # Experts under ep 2 etp 1.
    "qwen3_5_moe": ("qwen3_5_moe", ("mcore_te", {"tp": 2, "ep": 2, "etp": 1}),
                    ("vllm", {"tp": 2}), {}),
    # MLA with two MTP layers.
    "deepseek_v3": ("deepseek_v3", ("mcore_te", {"tp": 2, "pp": 2}),
                    ("vllm", {"tp": 2}), {}),
    # Two engine replicas.
    "replicas": ("qwen3", ("mcore_te", {"tp": 2}), ("vllm", {"tp": 2}),
                 {"dst_replicas": 2}),
    # Megatron tp 2 ep 2 etp 1 (its 2 processes) to vLLM tp 2 x dp 2 with
    # expert parallelism (4 processes, whole experts).
    "vllm_ep": ("qwen3_5_moe", ("mcore_te", {"tp": 2, "ep": 2, "etp": 1}),
                ("vllm", {"tp": 2, "ep": 4}), {}),
    # Nemotron-H's A = -exp(A_log), computed by the senders.
    "nemotron_h": ("nemotron_h", ("mcore_te", {"tp": 2}), ("vllm", {"tp": 2}),
                   {}),
}


@pytest.fixture(scope="module")
def synced(hf, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("syncs")
    scenarios = []
    for name, (model, src, dst, extra) in SYNCS.items():
        scenarios.append(dict(name=name, hf=hf[model], config=CONFIGS[model],
                              src=src, dst=dst, bucket_bytes=6000, **extra))
    codes = run_world(tmp, scenarios, 6)
    return tmp, codes


@pytest.mark.parametrize("name", list(SYNCS))
def test_sync_equals_mdl_convert(hf, synced, name):
    tmp, codes = synced
    assert codes == [0] * 6, codes
    model, src, dst, extra = SYNCS[name]
    res = results(tmp, name, 6)
    plan = mdl.TransferPlan(config=CONFIGS[model], src=src, dst=dst,
                            bucket_bytes=6000, **extra)
    for p, r in res.items():
        if r["role"][0] != "dst":
            continue
        rank = r["role"][1]
        base = plan.layout_rank(("dst", rank))
        assert r["error"] is None, r["error"]
        want = converted(hf[model], dst[0], dst[1], base,
                         str(tmp / f"conv-{name}"))
        assert r["same_storage"], (name, p)
        shapes = {t.name: t.shape for t in plan.tensors(("dst", rank))}
        caches = {n: r["tensors"].pop(n) for n in list(r["tensors"])
                  if n.endswith("conv1d.weight_t")}
        assert set(r["tensors"]) == set(shapes)
        for t, data in r["tensors"].items():
            # Padding (vocabulary rows past the end) is not written: it
            # keeps the zeros it held, as mdl-convert writes it.
            assert data == want[t], (name, rank, t)
        expect = slice_bytes(plan.model, dst[0], dst[1], base)
        assert r["report"]["bytes_received"] == plan.bytes_in(rank) == \
            sum(expect.values()), (name, rank)
        assert r["report"]["verified"] is True
        # vLLM keeps a transposed copy of each GDN conv1d weight: stale
        # once the weight is written, per layer.
        conv = sorted(n + "_t" for n in r["report"]["written"]
                      if n.endswith("linear_attn.conv1d.weight"))
        assert sorted(d["name"] for d in r["report"]["stale"]) == conv
        assert bool(conv) == model.startswith("qwen3_5"), (name, conv)
        # mdl.refresh recomputed each in place: the weight [C, 1, K]
        # transposed to [K, C], in the process's own storage.
        assert sorted(r["refresh"]["refreshed"]) == conv == sorted(caches)
        assert r["refresh"]["left"] == []
        for n in conv:
            c, _, k = shapes[n[:-2]]
            w = np.frombuffer(want[n[:-2]], np.uint16).reshape(c, k)
            assert caches[n] == w.T.tobytes(), (name, rank, n)
    senders = [r for r in res.values() if r["role"][0] == "src"]
    assert sum(r["report"]["bytes_sent"] for r in senders) == \
        sum(plan.bytes_in(d) for d in range(plan.num_dst_ranks))


def received(tmp_path, sc, count):
    """Runs scenario `sc` in 6 processes; for each of its `count`
    receivers (on_bucket), its result and the tensors handed over, each
    once and whole: [(result, {name: bytes})]."""
    codes = run_world(tmp_path, [sc], 6)
    assert codes == [0] * 6, codes
    res = results(tmp_path, sc["name"], 6)
    receivers = [r for r in res.values() if r["role"][0] == "dst"]
    assert len(receivers) == count
    out = []
    for r in receivers:
        assert r["error"] is None, r["error"]
        got = {}
        for call in r["handed"]:
            assert call  # never called with nothing
            for name, data in call:
                assert name not in got, name  # once, whole
                got[name] = data
        out.append((r, got))
    return out


def test_sync_to_hf_receivers(hf, tmp_path):
    """Two receivers of whole HF tensors, through on_bucket: each gets
    every tensor of the checkpoint once, whole, in buckets."""
    src = ("mcore_te", {"tp": 2, "pp": 2})
    sc = dict(name="hf", hf=hf["qwen3_5"], config=CONFIGS["qwen3_5"],
              src=src, dst=("hf", {}), bucket_bytes=5000, dst_replicas=2,
              receiver=True)
    original = {n: a.tobytes() for n, (_, a) in
                reference.load_dir(hf["qwen3_5"]).items()}
    for r, got in received(tmp_path, sc, 2):
        assert len(r["handed"]) > 1
        assert got == original


def test_partial_sync_touches_only_its_parameters(hf, tmp_path):
    model, src, dst = "qwen3_5", ("mcore_te", {"tp": 2}), ("vllm", {"tp": 2})
    params = ["layers.0.mlp.*", "layers.3.attn.q"]
    sc = dict(name="partial", hf=hf[model], config=CONFIGS[model], src=src,
              dst=dst, bucket_bytes=1 << 20, params=params, fill=7)
    codes = run_world(tmp_path, [sc], 4)
    assert codes == [0] * 4, codes
    res = results(tmp_path, "partial", 4)
    plan = mdl.TransferPlan(config=CONFIGS[model], src=src, dst=dst,
                            params=params)
    for r in res.values():
        if r["role"][0] != "dst":
            continue
        rank = r["role"][1]
        assert r["error"] is None, r["error"]
        want = converted(hf[model], dst[0], dst[1],
                         plan.layout_rank(("dst", rank)),
                         str(tmp_path / "conv"))
        touched = {t.name for t in plan.tensors(("dst", rank))}
        assert touched and r["report"]["written"] == [
            t.name for t in plan.tensors(("dst", rank))]
        dtypes = {t.name: t.dtype for t in
                  plan.model.tensors(dst[0], rank, **dst[1])}
        # The conv1d caches: no conv1d weight is synced, none is stale.
        dtypes.update({n + "_t": dtypes[n] for n in list(dtypes)
                       if n.endswith("conv1d.weight")})
        fresh = 0
        partly = False
        for name, data in r["tensors"].items():
            ints = "<i%d" % SIZES[dtypes[name]]
            seven = torch.full((1,), 7, dtype=mdl._torch_dtype(
                dtypes[name])).view(torch.uint8).numpy()
            a = np.frombuffer(data, dtype=ints)
            stale = a == seven.view(ints)[0]
            if name not in touched:
                assert stale.all(), name
                continue
            w = np.frombuffer(want[name], dtype=ints)
            assert not stale.all(), name
            partly |= bool(stale.any())  # q beside k, v and the gate
            assert (a[~stale] == w[~stale]).all(), name
            fresh += int((~stale).sum()) * SIZES[dtypes[name]]
        assert partly
        assert fresh == r["report"]["bytes_received"] == plan.bytes_in(rank)
        assert r["report"]["stale"] == []


def test_refresh_in_one_process(hf):
    """mdl.refresh on its own: every vLLM rank's GDN conv1d caches are
    the transposes of its conv1d weights (numpy's), filled in place; names
    may be given as strings; only a destination refreshes."""
    model = "qwen3_5"
    plan = mdl.TransferPlan(config=CONFIGS[model], src=("mcore_te", {"tp": 2}),
                            dst=("vllm", {"tp": 4}))
    derived = plan.model.derived("vllm")
    assert derived and all(d["computed"] for d in derived)
    for rank in range(plan.num_dst_ranks):
        state = mdl.load_rank(hf[model], backend="vllm", rank=rank, tp=4)
        weights = sorted(n for n in state
                         if n.endswith("linear_attn.conv1d.weight"))
        for n in weights:
            c, _, k = state[n].shape
            state[n + "_t"] = torch.zeros((k, c), dtype=state[n].dtype)
        ptrs = {n: t.data_ptr() for n, t in state.items()}
        done = mdl.refresh(plan, state, ("dst", rank),
                           stale=[weights[0] + "_t", "no.such.cache"])
        assert done.refreshed == [weights[0] + "_t"]
        assert done.left == ["no.such.cache"]
        done = mdl.refresh(plan, state, ("dst", rank))
        assert sorted(done.refreshed) == [n + "_t" for n in weights]
        assert done.left == []
        for n in weights:
            w = state[n].view(torch.int16).numpy()
            assert (state[n + "_t"].view(torch.int16).numpy() ==
                    w.reshape(w.shape[0], -1).T).all(), (rank, n)
        assert ptrs == {n: t.data_ptr() for n, t in state.items()}
    with pytest.raises(mdl.Error, match="no destination rank"):
        mdl.refresh(plan, state, ("src", 0))


# LoRA adapters only.

LORA_R = 3
PEFT = "base_model.model."
LORA_SRC = ("mcore_te", {"tp": 2, "pp": 2})


def bf16_bits(rng, shape):
    a = rng.uniform(-2, 2, shape).astype(np.float32)
    return (a.view(np.uint32) >> 16).astype(np.uint16)


def write_safetensors(path, tensors):
    """name -> uint16 array (bf16 bits), as a safetensors file."""
    header, offset = {}, 0
    for name, a in sorted(tensors.items()):
        header[name] = {"dtype": "BF16", "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        for name in sorted(tensors):
            f.write(tensors[name].tobytes())


def lora_trainer(model_name, src, r, work):
    """A trainer's adapters after training LoRA on its own modules (fused
    qkv, [gate; up], GDN's in_proj): per source layout rank, name -> bf16
    bits of the shapes its LoRA table (Model.lora, i.e. mdlc lora) gives,
    a factor that tensor-parallel peers share (A of a column-parallel
    module, B of a row-parallel one) alike on each; and the PEFT adapters
    mdl-convert --adapters makes of them (name -> bytes), the reference."""
    m = mdl.Model(config=CONFIGS[model_name])
    backend, par = src
    tp = par.get("tp", 1)
    ranks = {}
    for lr in range(mdl.Model.num_ranks(**par)):
        state = {}
        for t in m.lora(backend, rank=lr, r=r, **par)["targets"]:
            for factor in ("lora_A", "lora_B"):
                shared = (factor == "lora_A") == (t["sharded"] == "B") or \
                    t["sharded"] == "none"
                key = "%s.%s/%d" % (t["module"], factor,
                                    lr // tp if shared else lr)
                rng = np.random.default_rng(
                    int.from_bytes(key.encode(), "little") % (1 << 63))
                state["%s.%s.weight" % (t["module"], factor)] = \
                    bf16_bits(rng, t[factor])
        ranks[lr] = state
    # mdl-convert's directory of Megatron adapters: made from HF-PEFT
    # adapters of HF's LoRA table, then each rank's file replaced by the
    # trainer's (no rank blocks: trained on the fused modules).
    peft = os.path.join(work, "peft")
    os.makedirs(peft, exist_ok=True)
    rng = np.random.default_rng(5)
    adapters = {}
    for t in m.lora("hf", r=r)["targets"]:
        for factor in ("lora_A", "lora_B"):
            adapters["%s%s.%s.weight" % (PEFT, t["module"], factor)] = \
                bf16_bits(rng, t[factor])
    write_safetensors(os.path.join(peft, "adapter_model.safetensors"),
                      adapters)
    config = {"peft_type": "LORA", "r": r, "lora_alpha": 2 * r,
              "target_modules": sorted({t["module"].rsplit(".", 1)[-1] for t
                                        in m.lora("hf", r=r)["targets"]})}
    with open(os.path.join(peft, "adapter_config.json"), "w") as f:
        json.dump(config, f)
    trained = os.path.join(work, "trained")
    flags = sum((["--" + k, str(v)] for k, v in par.items()), [])
    subprocess.run([CONVERT, "--quiet", "--adapters", "--from", "hf",
                    "--to", backend, "--config", CONFIGS[model_name]] +
                   flags + [peft, trained], check=True)
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(trained)
                   for f in fs if f == "adapter_model.safetensors")
    assert len(files) == len(ranks)
    for path in files:
        # mp_rank_TT_PPP: layout rank PPP * tp + TT.
        t, p = re.search(r"mp_rank_(\d+)_(\d+)", path).groups()
        lr = int(p) * tp + int(t)
        assert set(reference.load(path)) == set(ranks[lr]), path
        write_safetensors(path, ranks[lr])
    with open(os.path.join(trained, "adapter_config.json"), "w") as f:
        json.dump(config, f)
    back = os.path.join(work, "back")
    subprocess.run([CONVERT, "--quiet", "--adapters", "--from", backend,
                    "--to", "hf", trained, back], check=True)
    want = {n: a.tobytes() for n, (_, a) in reference.load(
        os.path.join(back, "adapter_model.safetensors")).items()}
    return ranks, want


def lora_plan(params=None, dst=("hf", {}), **extra):
    return mdl.TransferPlan(
        config=CONFIGS["qwen3_5"], src=LORA_SRC, dst=dst, bucket_bytes=4000,
        params=params,
        lora=dict(r=LORA_R, dst_prefix=PEFT, **extra))


@pytest.fixture(scope="module")
def lora_ranks(tmp_path_factory):
    return lora_trainer("qwen3_5", LORA_SRC, LORA_R,
                        str(tmp_path_factory.mktemp("lora")))


def torch_state(state):
    return {n: torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
            for n, a in state.items()}


def test_lora_plan_equals_mdl_convert(lora_ranks):
    """Megatron tp 2 pp 2's adapters, trained on its fused modules, to HF-
    PEFT's modules: the plan's tables, interpreted with numpy, give what
    mdl-convert --adapters writes (each HF module the fused lora_A and its
    rows of lora_B), byte for byte; every source tensor is one of the
    rank's LoRA table with its shape; the receiver gets exactly the
    adapters' bytes."""
    ranks, want = lora_ranks
    plan = lora_plan()
    states = [torch_state(ranks[plan.layout_rank(("src", s))])
              for s in range(plan.num_src_ranks)]
    for s in range(plan.num_src_ranks):
        table = ranks[plan.layout_rank(("src", s))]
        for t in plan.tensors(("src", s)):
            assert list(t.shape) == list(table[t.name].shape), t.name
    got = interpret(plan, states, 0, {})
    assert set(got) == set(want)
    for name, data in got.items():
        assert bytes(data) == want[name], name
    assert plan.bytes_in(0) == sum(len(d) for d in want.values())
    # Bytes a rank sends: each shared factor once (by one of its peers).
    assert sum(plan.bytes_out(s) for s in range(plan.num_src_ranks)) == \
        plan.bytes_in(0)
    assert all(p.endswith((".lora_A", ".lora_B")) for p in plan.param_paths)


def test_lora_plan_partial_and_errors():
    whole = lora_plan()
    part = lora_plan(params=["layers.0.*"])
    names = {t.name for t in part.tensors(("dst", 0))}
    assert names and all(n.startswith(PEFT + "model.language_model.layers.0.")
                         for n in names), sorted(names)[:3]
    assert 0 < part.bytes_in(0) < whole.bytes_in(0) / 3
    # Megatron's names (Megatron-Bridge's) on the source side.
    bridge = lora_plan(src_names=("adapter.linear_in", "adapter.linear_out"))
    assert all(".adapter.linear_" in t.name
               for t in bridge.tensors(("src", 0)))
    assert bridge.bytes_in(0) == whole.bytes_in(0)
    # A fused module's A cannot be made from separate modules' As.
    with pytest.raises(mdl.Error, match="some would be written twice"):
        mdl.TransferPlan(config=CONFIGS["qwen3_5"], src=("hf", {}),
                         dst=("mcore_te", {"tp": 2}), lora=dict(r=2))
    with pytest.raises(mdl.Error, match="a LoRA rank r is a positive"):
        mdl.TransferPlan(config=CONFIGS["qwen3"], src=("mcore_te", {}),
                         dst=("hf", {}), lora=dict(r=0))
    with pytest.raises(mdl.Error, match="lora takes a dict with 'r'"):
        mdl.TransferPlan(config=CONFIGS["qwen3"], src=("mcore_te", {}),
                         dst=("hf", {}), lora=dict(rank=2))
    with pytest.raises(mdl.Error, match="a LoRA rank is a number from 1 to "
                       "65536, not 131072"):
        mdl.TransferPlan(config=CONFIGS["qwen3"], src=("mcore_te", {}),
                         dst=("hf", {}), lora=dict(r=1 << 17))
    with pytest.raises(mdl.Error, match="LoRA factor names are"):
        mdl.TransferPlan(config=CONFIGS["qwen3"], src=("mcore_te", {}),
                         dst=("hf", {}), lora=dict(r=2, names="lora_A"))
    with pytest.raises(mdl.Error, match="unknown dtype 'bf17'"):
        mdl.TransferPlan(config=CONFIGS["qwen3"], src=("mcore_te", {}),
                         dst=("hf", {}), lora=dict(r=2, dtype="bf17"))


def test_lora_sync_to_peft_receivers(lora_ranks, tmp_path):
    """The same over gloo: four trainer processes (tp 2 pp 2) and two
    receivers (engine replicas) of whole HF-PEFT tensors through on_bucket,
    as vLLM's add_lora or SGLang's load_lora_adapter take them."""
    ranks, want = lora_ranks
    sc = dict(name="lora", config=CONFIGS["qwen3_5"], src=LORA_SRC,
              dst=("hf", {}), bucket_bytes=4000, dst_replicas=2,
              receiver=True, lora=dict(r=LORA_R, dst_prefix=PEFT),
              lora_states=ranks)
    for r, got in received(tmp_path, sc, 2):
        assert got == want
        assert r["report"]["bytes_received"] == sum(map(len, want.values()))
        assert r["report"]["verified"] is True


def test_checksums_sum_bucket_words():
    """A segment's checksum is the wrapping int64 sum of the bucket's
    8-byte words it touches (computed here with numpy), whatever the
    alignment of the bytes in memory; a flipped byte changes exactly the
    checksums of the segments whose words hold it."""
    from mdl.sync import _Segment, _Sync
    rng = np.random.default_rng(7)
    nbytes = 8 * 37 + 5  # a partial last word
    raw = rng.integers(0, 256, nbytes, dtype=np.uint8)
    # Segments of 2-byte elements that share words at their edges.
    cuts = [0, 6, 30, 102, 190, 250, nbytes - 1, nbytes]
    segs = [_Segment(tensor=0, offset=0, shape=(), strides=(), at=a,
                     nbytes=b - a, wire="BF16", shift=0, transform=0, param=0,
                     peer_tensor=0) for a, b in zip(cuts, cuts[1:])]
    words = np.concatenate([raw, np.zeros(3, np.uint8)]).view(np.uint64)

    def reference(data):
        w = np.concatenate([data, np.zeros(3, np.uint8)]).view(np.uint64)
        return [int(w[a // 8:(a + n + 7) // 8].sum(dtype=np.uint64)
                    .astype(np.int64))
                for a, n in ((g.at, g.nbytes) for g in segs)]

    assert len(words) == 38
    want = reference(raw)
    for shift in range(8):  # the bucket's bytes at every alignment
        store = torch.zeros(nbytes + shift, dtype=torch.uint8)
        data = store[shift:]
        data.copy_(torch.from_numpy(raw))
        got = [int(x) for x in _Sync.checksums(data, segs)]
        assert got == want, shift
    flipped = raw.copy()
    flipped[101] ^= 0x10  # in word 12, which segments 2 and 3 share
    got = [int(x) for x in _Sync.checksums(torch.from_numpy(flipped), segs)]
    changed = [i for i, (a, b) in enumerate(zip(got, want)) if a != b]
    assert changed == [2, 3]
    assert got == reference(flipped)


FAULTS = [
    # A source process lacks a tensor: every process fails before any
    # byte moves.
    ("missing", 1, r"mdl.sync failed on src 1 \(process 1\): the state has "
     r"no tensor '[^']+' \(\[[0-9, ]+\] BF16\), which the plan reads"),
    # One process built another plan.
    ("digest", 3, r"mdl.sync failed: src 0 \(process 0\) holds plan "
     r"[0-9a-f]{16} but dst 1 \(process 3\) holds plan [0-9a-f]{16}: "
     r"every process must build the same plan \(model, config, layouts, "
     r"bucket_bytes, params, replicas\)"),
    # A byte flipped on the wire.
    ("flip", 0, r"mdl.sync failed on dst [01] \(process [23]\): tensor "
     r"'[^']+' \([a-z0-9_.]+\) from src 0 \(process 0\) arrived "
     r"corrupted: checksum -?[0-9]+ here, -?[0-9]+ sent"),
    # The engine's callback fails on one process.
    ("raise", 3, r"mdl.sync failed on dst 1 \(process 3\): on_bucket "
     r"raised RuntimeError: the engine refused the weights \(with tensor "
     r"'[^']+'\)"),
    # A process dies halfway.
    ("kill", 3, r"mdl.sync failed on src [01] \(process [01]\): sending to "
     r"dst 1 \(process 3\) failed \(tensor '[^']+'.*\): .*"),
]


@pytest.fixture(scope="module")
def faults(hf, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("faults")
    scenarios = [dict(name=kind, hf=hf["qwen3"], config=CONFIGS["qwen3"],
                      src=("mcore_te", {"tp": 2}), dst=("vllm", {"tp": 2}),
                      bucket_bytes=2000, timeout=20,
                      fault={"kind": kind, "process": p})
                 for kind, p, _ in FAULTS]
    codes = run_world(tmp, scenarios, 4)
    return tmp, codes


@pytest.mark.parametrize("kind,process,message", FAULTS)
def test_failures_reach_every_process(faults, kind, process, message):
    tmp, codes = faults
    assert codes == [0, 0, 0, 9], codes
    res = results(tmp, kind, 4)
    alive = [p for p in range(4) if not (kind == "kill" and p == process)]
    assert sorted(res) == alive
    messages = set()
    for p in alive:
        r = res[p]
        assert r["error"] is not None, (kind, p)
        assert r["seconds"] < 20 + 5, (kind, p, r["seconds"])
        messages.add(r["error"].split("; this process")[0])
        if kind in ("missing", "digest") and r["role"][0] == "dst":
            # Nothing moved.
            assert set(r["tensors"].values()) <= {bytes(len(v))
                                                  for v in
                                                  r["tensors"].values()}
        if r["role"][0] == "dst" and "; this process" in r["error"]:
            assert r["error"].split("; this process")[1].startswith(
                f" (dst {r['role'][1]} (process {p})) had written ")
    assert len(messages) == 1, messages
    assert fullmatch(message, messages.pop())


def fullmatch(pattern, text):
    import re
    return re.fullmatch(pattern, text, re.S) is not None or \
        pytest.fail(f"{text!r} does not match {pattern!r}")
