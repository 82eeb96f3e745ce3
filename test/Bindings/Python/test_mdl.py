"""The Python package against the command-line tools and the independent
reference: ranks loaded in memory equal what mdl-convert writes, byte for
byte; state dicts filled in place keep their storage; ranks gathered back
are the HF checkpoint; a sync between layouts equals a direct conversion;
plans and LoRA tables are mdlc's; errors are mdl.Error with the runtime's
message.

Tiny random HF checkpoints with pairwise-distinct dimension sizes
(test/Conversion/Inputs) are written by test/Conversion/roundtrip.py.
"""
import hashlib
import itertools
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

import mdl

HERE = os.path.dirname(os.path.abspath(__file__))
CONVERSION = os.path.join(HERE, "..", "..", "Conversion")
MODELS = os.path.join(HERE, "..", "..", "..", "models")
sys.path.insert(0, CONVERSION)
import reference  # noqa: E402
import roundtrip  # noqa: E402

WORK = os.environ.get("MDL_TEST_WORK", "/tmp/mdl-python-test")
MDLC = shutil.which("mdlc")
CONVERT = shutil.which("mdl-convert")

# Models of each kind: dense, experts, hybrid linear attention (with
# vLLM's derived conv1d cache) and hybrid with experts.
CHECKPOINT_MODELS = ["qwen3", "qwen3_moe", "qwen3_5", "qwen3_5_moe"]


def config_of(model):
    return os.path.join(CONVERSION, "Inputs", model + ".json")


@pytest.fixture(scope="session")
def hf():
    """model -> (HF directory, its tensors as reference.load reads them)."""
    out = {}
    for i, model in enumerate(CHECKPOINT_MODELS):
        d, _ = roundtrip.write_hf(MDLC, os.path.join(MODELS, model + ".mdl"),
                                  config_of(model), os.path.join(WORK, model),
                                  seed=100 + i)
        out[model] = (d, reference.load_dir(d))
    return out


def meshes():
    return roundtrip.backend_meshes(CONVERT)


def grid(model, backend):
    """tp 1,2,4 x pp 1,2 (x ep 1,2 with experts) where the backend has the
    axis."""
    mesh = meshes()[backend]
    experts = "moe" in model
    axes = {"tp": [1, 2, 4] if "tp" in mesh else [1],
            "pp": [1, 2] if "pp" in mesh else [1],
            "ep": [1, 2] if "ep" in mesh and experts else [1]}
    return [dict(zip(axes, v)) for v in itertools.product(*axes.values())]


def flags(parallel):
    return [a for k, v in parallel.items() for a in ("--" + k, str(v))]


def as_bytes(t):
    if isinstance(t, torch.Tensor):
        return t.contiguous().view(torch.uint8).numpy().tobytes() \
            if t.dtype != torch.bool else t.numpy().tobytes()
    return np.ascontiguousarray(t).tobytes()


def convert_rank(hf_dir, backend, parallel, rank, out):
    """The tensors mdl-convert writes for one rank (reference.load)."""
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run([CONVERT, "--quiet", "--from", "hf", "--to", backend,
                    "--format", "safetensors", "--rank", str(rank)] +
                   flags(parallel) + [hf_dir, out], check=True)
    files = [os.path.join(r, f) for r, _, fs in os.walk(out) for f in fs
             if f.endswith(".safetensors")]
    return reference.load_files(sorted(files))


BACKENDS = ["mcore_te", "mcore_local", "vllm"]


@pytest.mark.parametrize("model", CHECKPOINT_MODELS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_load_rank_equals_mdl_convert(hf, model, backend, tmp_path):
    hf_dir, _ = hf[model]
    checked = 0
    for parallel in grid(model, backend):
        # vLLM's expert parallelism spans tp x dp: ep a multiple of tp.
        if not mdl.Model(checkpoint=hf_dir).is_valid(backend, **parallel):
            continue
        for rank in range(mdl.Model.num_ranks(**parallel)):
            got = mdl.load_rank(hf_dir, backend=backend, rank=rank, **parallel)
            want = convert_rank(hf_dir, backend, parallel, rank,
                                str(tmp_path / "out"))
            assert list(got) == [t.name for t in mdl.Model(
                checkpoint=hf_dir).tensors(backend, rank, **parallel)]
            assert set(got) == set(want), (parallel, rank)
            for name, t in got.items():
                dtype, a = want[name]
                assert list(t.shape) == list(a.shape), name
                assert as_bytes(t) == a.tobytes(), (parallel, rank, name)
            checked += 1
    assert checked >= 7


def test_bf16_is_torch_bfloat16(hf):
    got = mdl.load_rank(hf["qwen3"][0], backend="mcore_te", rank=0)
    assert {t.dtype for t in got.values()} == {torch.bfloat16}


def test_out_fills_megatron_state_dict_in_place(hf, tmp_path):
    """A state dict as torch.load gives it (with Transformer Engine's
    _extra_state entries), zeroed, is filled in place."""
    hf_dir, _ = hf["qwen3_moe"]
    parallel = {"tp": 2, "pp": 2, "ep": 2}
    out = str(tmp_path / "native")
    subprocess.run([CONVERT, "--quiet", "--from", "hf", "--to", "mcore_te"] +
                   flags(parallel) + [hf_dir, out], check=True)
    root, _ = reference.rank_files(out)
    rank = 7  # tp 1, ep 1, pp 1: a rank Megatron saves
    path = os.path.join(root, "mp_rank_01_001_001", "model_optim_rng.pt")
    saved = torch.load(path, weights_only=True)["model"]
    state = {k: (torch.zeros_like(v) if isinstance(v, torch.Tensor) else v)
             for k, v in saved.items()}
    state["decoder.layers.0._extra_state"] = None
    ptrs = {k: v.data_ptr() for k, v in state.items()
            if isinstance(v, torch.Tensor)}
    got = mdl.load_rank(hf_dir, backend="mcore_te", rank=rank, out=state,
                        **parallel)
    assert set(got) == set(ptrs)
    for name, t in got.items():
        assert t is state[name] and t.data_ptr() == ptrs[name], name
        assert torch.equal(t, saved[name]), name


def test_out_errors_name_the_tensor(hf):
    hf_dir, _ = hf["qwen3"]
    good = mdl.load_rank(hf_dir, backend="mcore_te", rank=0, tp=2)
    name = "decoder.layers.0.self_attention.linear_qkv.weight"
    wrong = dict(good)
    wrong[name] = torch.empty(3, 5, dtype=torch.bfloat16)
    with pytest.raises(mdl.Error, match=r"tensor '%s' is \[3,5\] BF16, "
                       r"but rank 0 of qwen3 on mcore_te holds it as" % name):
        mdl.load_rank(hf_dir, backend="mcore_te", rank=0, tp=2, out=wrong)
    missing = dict(good)
    del missing[name]
    with pytest.raises(mdl.Error, match="out has no tensor '%s'" % name):
        mdl.load_rank(hf_dir, backend="mcore_te", rank=0, tp=2, out=missing)
    strided = dict(good)
    strided[name] = torch.empty(good[name].shape[::-1],
                                dtype=torch.bfloat16).t()
    with pytest.raises(mdl.Error, match="is not contiguous"):
        mdl.load_rank(hf_dir, backend="mcore_te", rank=0, tp=2, out=strided)


def test_bad_configurations_raise(hf):
    hf_dir, _ = hf["qwen3"]
    with pytest.raises(mdl.Error, match="backend vllm has no pp axis"):
        mdl.load_rank(hf_dir, backend="vllm", rank=0, pp=2)
    with pytest.raises(mdl.Error, match="rank 4 does not exist: tp=2 pp=2"):
        mdl.load_rank(hf_dir, backend="mcore_te", rank=4, tp=2, pp=2)
    with pytest.raises(mdl.Error, match="tp takes an integer, not '2'"):
        mdl.load_rank(hf_dir, backend="mcore_te", rank=0, tp="2")
    with pytest.raises(mdl.Error, match="the LoRA rank r takes an integer"):
        mdl.Model(config=config_of("qwen3")).lora("mcore_te", r=0)
    with pytest.raises(mdl.Error, match="unknown parallel axis 'tq'"):
        mdl.load_rank(hf_dir, backend="mcore_te", rank=0, tq=2)
    with pytest.raises(mdl.Error, match="has no backend 'megatron'"):
        mdl.load_rank(hf_dir, backend="megatron", rank=0)
    with pytest.raises(mdl.Error, match="cannot open"):
        mdl.Model(config=os.path.join(WORK, "no-such", "config.json"))
    with pytest.raises(mdl.Error, match="sp takes True or False"):
        mdl.load_rank(hf_dir, backend="mcore_te", rank=0, tp=2, sp="yes")
    with pytest.raises(mdl.Error, match="no model named 'qwen9'"):
        mdl.Model(config=config_of("qwen3"), name="qwen9")


def test_bad_tensors_and_outputs_raise(hf, tmp_path):
    hf_dir, _ = hf["qwen3"]
    good = mdl.load_rank(hf_dir, backend="mcore_te", rank=0, tp=2)
    name = next(iter(good))
    with pytest.raises(mdl.Error, match="'%s' is a list, not a torch tensor"
                       % name):
        mdl.load_rank(hf_dir, backend="mcore_te", rank=0, tp=2,
                      out=dict(good, **{name: [1, 2]}))
    frozen = good[name].view(torch.int16).numpy().view(np.uint16)
    frozen.flags.writeable = False
    with pytest.raises(mdl.Error, match="array '%s' is read-only" % name):
        mdl.load_rank(hf_dir, backend="mcore_te", rank=0, tp=2,
                      out=dict(good, **{name: frozen}))
    with pytest.raises(mdl.Error, match="max_shard_size takes a size"):
        mdl.save_hf([mdl.load_rank(hf_dir, backend="hf")],
                    str(tmp_path / "x"), config=config_of("qwen3"),
                    max_shard_size="lots")


def test_missing_source_tensor_raises(hf):
    hf_dir, _ = hf["qwen3"]
    ranks = [mdl.load_rank(hf_dir, backend="mcore_te", rank=r, tp=2)
             for r in range(2)]
    del ranks[1]["decoder.final_layernorm.weight"]
    with pytest.raises(mdl.Error, match="the checkpoint of rank 1 has no "
                       "tensor 'decoder.final_layernorm.weight'"):
        mdl.gather_hf(ranks, backend="mcore_te", config=config_of("qwen3"),
                      tp=2)
    with pytest.raises(mdl.Error, match="no state dict is given for rank 1"):
        mdl.gather_hf(ranks[:1], backend="mcore_te",
                      config=config_of("qwen3"), tp=2)


@pytest.mark.parametrize("model,backend,parallel", [
    ("qwen3", "mcore_te", {"tp": 2, "pp": 2}),
    ("qwen3_moe", "mcore_local", {"tp": 2, "ep": 2}),
    ("qwen3_5", "vllm", {"tp": 2}),
    ("qwen3_5_moe", "mcore_te", {"tp": 2, "pp": 2, "ep": 2}),
])
def test_gather_hf_round_trips(hf, model, backend, parallel):
    hf_dir, original = hf[model]
    ranks = [mdl.load_rank(hf_dir, backend=backend, rank=r, **parallel)
             for r in range(mdl.Model.num_ranks(**parallel))]
    back = mdl.gather_hf(ranks, backend=backend, config=config_of(model),
                         **parallel)
    assert set(back) == set(original)
    for name, t in back.items():
        assert as_bytes(t) == original[name][1].tobytes(), name


def test_save_hf_equals_mdl_convert(hf, tmp_path):
    hf_dir, _ = hf["qwen3_moe"]
    parallel = {"tp": 2, "ep": 2}
    ranks = [mdl.load_rank(hf_dir, backend="mcore_te", rank=r, **parallel)
             for r in range(4)]
    native = str(tmp_path / "native")
    subprocess.run([CONVERT, "--quiet", "--from", "hf", "--to", "mcore_te"] +
                   flags(parallel) + [hf_dir, native], check=True)
    for size in ("5GB", "20KB"):
        by_tool, by_python = str(tmp_path / ("tool" + size)), str(
            tmp_path / ("py" + size))
        subprocess.run([CONVERT, "--quiet", "--from", "mcore_te", "--to", "hf",
                        "--max-shard-size", size, native, by_tool], check=True)
        mdl.save_hf(ranks, by_python, config=config_of("qwen3_moe"),
                    backend="mcore_te", max_shard_size=size, **parallel)
        written = sorted(f for f in os.listdir(by_python))
        assert written == sorted(f for f in os.listdir(by_tool)
                                 if f != "plan.json"), size
        assert len(written) > (2 if size == "20KB" else 1)
        for f in written:
            with open(os.path.join(by_tool, f), "rb") as a, \
                    open(os.path.join(by_python, f), "rb") as b:
                assert a.read() == b.read(), (size, f)


def test_save_hf_config_keeps_overrides(hf, tmp_path):
    """With set=, the written config says it, as mdl-convert's does."""
    hf_dir, _ = hf["qwen3_5"]
    drop = {"mtp_num_hidden_layers": 0}
    ranks = [mdl.load_rank(hf_dir, backend="mcore_te", rank=r, tp=2, set=drop)
             for r in range(2)]
    by_python = str(tmp_path / "py")
    mdl.save_hf(ranks, by_python, config=config_of("qwen3_5"),
                backend="mcore_te", tp=2, set=drop)
    native, by_tool = str(tmp_path / "native"), str(tmp_path / "tool")
    subprocess.run([CONVERT, "--quiet", "--from", "hf", "--to", "mcore_te",
                    "--tp", "2", "--set", "mtp_num_hidden_layers=0", hf_dir,
                    native], check=True)
    subprocess.run([CONVERT, "--quiet", "--from", "mcore_te", "--to", "hf",
                    native, by_tool], check=True)
    for f in ("config.json", "model.safetensors"):
        with open(os.path.join(by_tool, f), "rb") as a, \
                open(os.path.join(by_python, f), "rb") as b:
            assert a.read() == b.read(), f
    with open(os.path.join(by_python, "config.json")) as f:
        assert '"mtp_num_hidden_layers": 0' in f.read()


def test_sync_megatron_to_vllm_equals_direct_conversion(hf, tmp_path):
    hf_dir, _ = hf["qwen3_5"]
    src = ("mcore_te", {"tp": 2, "pp": 2})
    dst = ("vllm", {"tp": 4})
    ranks = [mdl.load_rank(hf_dir, backend=src[0], rank=r, **src[1])
             for r in range(4)]
    plan = mdl.SyncPlan(config=config_of("qwen3_5"), src=src, dst=dst)
    assert plan.num_ranks == 4
    assert [d["name"] for d in plan.derived] and all(
        d["recompute"] for d in plan.derived)
    for r in range(plan.num_ranks):
        got = plan.apply(ranks, r)
        want = convert_rank(hf_dir, "vllm", dst[1], r, str(tmp_path / "v"))
        assert set(got) == set(want)
        for name, t in got.items():
            assert as_bytes(t) == want[name][1].tobytes(), (r, name)
        # The copies cover every element of every tensor that holds
        # weights, each once.
        copies = plan.copies(r)
        assert plan.sources(r) == sorted({c.source_rank for c in copies})
        elements = {}
        for c in copies:
            n = int(np.prod([hi - lo for lo, hi in c.box.values()]))
            elements[c.target] = elements.get(c.target, 0) + n
        assert [t.name for t in plan.tensors(r)] == list(got)
        held = {t["name"]: sum(int(np.prod([hi - lo for lo, hi in
                                             sl["box"].values()]))
                               for sl in t["slices"])
                for t in plan.model.plan(dst[0], rank=r, **dst[1])[
                    "ranks"][0]["tensors"]}
        assert elements == held
        # Only the sources it names are read.
        only = {s: ranks[s] for s in plan.sources(r)}
        again = plan.apply(only, r)
        assert all(torch.equal(again[n], got[n]) for n in got)


def test_sync_of_some_parameters_touches_only_them(hf):
    hf_dir, _ = hf["qwen3_5"]
    src = ("mcore_te", {"tp": 2})
    dst = ("vllm", {"tp": 2})
    ranks = [mdl.load_rank(hf_dir, backend=src[0], rank=r, **src[1])
             for r in range(2)]
    m = mdl.Model(config=config_of("qwen3_5"))
    params = ["layers.0.mlp.up", "layers.3.attn.q"]
    assert set(params) <= set(m.params), m.params
    plan = mdl.SyncPlan(config=config_of("qwen3_5"), src=src, dst=dst,
                        params=params)
    assert {c.param for c in plan.copies(1)} == set(params)
    full = mdl.load_rank(hf_dir, backend="vllm", rank=1, tp=2)
    # Stale weights are 7 everywhere: what the update does not write stays.
    stale = {k: torch.full_like(v, 7) for k, v in full.items()}
    only = {s: ranks[s] for s in plan.sources(1)}
    assert len(only) == 1
    got = plan.apply(only, 1, out=stale)
    assert list(got) == [t.name for t in plan.tensors(1)]
    assert len(got) == 2
    written = 0
    for name, t in got.items():
        fresh = t != 7
        written += int(fresh.sum())
        assert 0 < int(fresh.sum()) < t.numel(), name
        assert torch.equal(t[fresh], full[name][fresh]), name
    assert written == sum(int(np.prod([hi - lo for lo, hi in c.box.values()]))
                          for c in plan.copies(1))
    assert all(bool((stale[n] == 7).all()) for n in stale if n not in got)
    assert plan.derived == []
    with pytest.raises(mdl.Error, match="has no parameter 'nope'"):
        mdl.SyncPlan(config=config_of("qwen3_5"), src=src, dst=dst,
                     params=["nope"])


def mdlc_json(*args):
    done = subprocess.run([MDLC] + list(args), capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout)


def test_plan_and_lora_are_mdlc_s():
    config = config_of("qwen3_moe")
    m = mdl.Model(config=config)
    spec = os.path.join(MODELS, "qwen3_moe.mdl")
    for backend, parallel in [("mcore_te", {"tp": 2, "pp": 2, "ep": 2}),
                              ("vllm", {"tp": 2})]:
        assert m.plan(backend, **parallel) == mdlc_json(
            "plan", spec, "--hf-config", config, "--backend", backend,
            "--format=json", *flags(parallel))
        assert m.lora(backend, rank=1, r=8, **parallel) == mdlc_json(
            "lora", spec, "--hf-config", config, "--backend", backend,
            "--rank", "1", "--lora-rank", "8", "--format=json", *flags(parallel))
    assert m.validate("vllm", pp=2) == ["backend vllm has no pp axis"]


def test_models_and_version():
    listed = subprocess.run([CONVERT, "--list"], capture_output=True,
                            text=True, check=True).stdout.splitlines()
    assert mdl.models() == sorted({line.split("\t")[0] for line in listed})
    version = subprocess.run([CONVERT, "--version"], capture_output=True,
                             text=True, check=True).stdout.split()[2]
    assert mdl.__version__ == version.rstrip(",")
    m = mdl.Model(config=config_of("qwen3_5_moe"))
    assert m.name == "qwen3_5_moe"
    assert m.backends[0] == "hf" and "vllm" in m.backends


def test_numpy_without_torch(hf):
    """With torch hidden, the same calls give numpy arrays (bf16 as its
    uint16 bits)."""
    hf_dir, original = hf["qwen3"]
    code = """
import hashlib, sys
sys.modules["torch"] = None
import mdl, numpy
got = mdl.load_rank(%r, backend="mcore_te", rank=0, tp=2)
assert all(isinstance(a, numpy.ndarray) for a in got.values())
assert {a.dtype.name for a in got.values()} == {"uint16"}
other = mdl.load_rank(%r, backend="mcore_te", rank=1, tp=2)
back = mdl.gather_hf([got, other], backend="mcore_te", config=%r, tp=2)
for name, a in back.items():
    sys.stdout.write(name + " " + hashlib.sha256(a.tobytes()).hexdigest() + "\\n")
""" % (hf_dir, hf_dir, config_of("qwen3"))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(" ") for line in done.stdout.splitlines())
    assert set(lines) == set(original)
    for name, digest in lines.items():
        assert hashlib.sha256(original[name][1].tobytes()).hexdigest() == \
            digest, name


def test_torch_dist_source(hf, tmp_path):
    """A Megatron-Core distributed checkpoint (mdl-convert --format
    torch_dist) as the source of load_rank and SyncPlan: vLLM's ranks equal
    those loaded from the HF checkpoint, byte for byte."""
    hf_dir, _ = hf["qwen3_moe"]
    dist = str(tmp_path / "dist")
    subprocess.run([CONVERT, "--quiet", "--from", "hf", "--to", "mcore-te",
                    "--format", "torch_dist", hf_dir, dist], check=True)
    plan = mdl.SyncPlan(config=os.path.join(hf_dir, "config.json"), src=dist,
                        dst=("vllm", {"tp": 2}))
    assert plan.sources(0) == [0]
    for r in (0, 1):
        want = mdl.load_rank(hf_dir, "vllm", rank=r, tp=2)
        for got in (mdl.load_rank(dist, "vllm", rank=r, tp=2),
                    mdl.load_rank(os.path.join(dist, "release"), "vllm", rank=r,
                                  tp=2, config=os.path.join(hf_dir, "config.json")),
                    plan.apply(None, r)):
            assert sorted(got) == sorted(want)
            for name in want:
                assert as_bytes(got[name]) == as_bytes(want[name]), name
    with pytest.raises(mdl.Error, match="is not a distributed checkpoint"):
        mdl.SyncPlan(config=os.path.join(hf_dir, "config.json"), src=hf_dir,
                     dst=("vllm", {"tp": 2}))
