"""The Python package against the command-line tools and the independent
reference: ranks loaded in memory equal what mdl-convert writes, byte for
byte; state dicts filled in place keep their storage; ranks gathered back
are the HF checkpoint; a sync between layouts equals a direct conversion;
plans and LoRA tables are mdlc's; errors are mdl.Error with the runtime's
message.

Tiny random HF checkpoints with pairwise-distinct dimension sizes
(test/Conversion/Inputs) are written by test/Conversion/roundtrip.py.
"""
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
    with pytest.raises(mdl.Error, match="unknown parallel axis 'tq'"):
        mdl.load_rank(hf_dir, backend="mcore_te", rank=0, tq=2)
    with pytest.raises(mdl.Error, match="has no backend 'megatron'"):
        mdl.load_rank(hf_dir, backend="megatron", rank=0)
    with pytest.raises(mdl.Error, match="cannot open"):
        mdl.Model(config=os.path.join(WORK, "no-such", "config.json"))


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
        for t in plan.tensors(r):
            assert elements[t.name] <= int(np.prod(t.shape)), t.name
        # Only the sources it names are read.
        only = {s: ranks[s] for s in plan.sources(r)}
        again = plan.apply(only, r)
        assert all(torch.equal(again[n], got[n]) for n in got)


def test_sync_of_some_parameters_touches_only_them(hf):
    hf_dir, _ = hf["qwen3"]
    src = ("mcore_te", {"tp": 2})
    dst = ("vllm", {"tp": 2})
    ranks = [mdl.load_rank(hf_dir, backend=src[0], rank=r, **src[1])
             for r in range(2)]
    m = mdl.Model(config=config_of("qwen3"))
    q = [p for p in m.params if p.endswith("layers.0.attn.q")]
    assert len(q) == 1, m.params
    plan = mdl.SyncPlan(config=config_of("qwen3"), src=src, dst=dst,
                        params=q)
    full = mdl.load_rank(hf_dir, backend="vllm", rank=1, tp=2)
    stale = {k: torch.zeros_like(v) for k, v in full.items()}
    got = plan.apply(ranks, 1, out=stale)
    assert list(got) == [t.name for t in plan.tensors(1)] == \
        ["model.layers.0.self_attn.qkv_proj.weight"]
    qkv = got["model.layers.0.self_attn.qkv_proj.weight"]
    written = (qkv != 0).any(dim=1)
    assert 0 < int(written.sum()) < qkv.shape[0]
    assert torch.equal(qkv[written], full[
        "model.layers.0.self_attn.qkv_proj.weight"][written])
    untouched = [n for n in stale if n not in got]
    assert untouched and all(not stale[n].any() for n in untouched)
    with pytest.raises(mdl.Error, match="has no parameter 'nope'"):
        mdl.SyncPlan(config=config_of("qwen3"), src=src, dst=dst,
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
import sys
sys.modules["torch"] = None
import mdl, numpy
got = mdl.load_rank(%r, backend="mcore_te", rank=0, tp=2)
assert all(isinstance(a, numpy.ndarray) for a in got.values())
assert {a.dtype.name for a in got.values()} == {"uint16"}
other = mdl.load_rank(%r, backend="mcore_te", rank=1, tp=2)
back = mdl.gather_hf([got, other], backend="mcore_te", config=%r, tp=2)
for name, a in back.items():
    sys.stdout.write(name + " " + a.tobytes().hex()[:16] + "\\n")
""" % (hf_dir, hf_dir, config_of("qwen3"))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(" ") for line in done.stdout.splitlines())
    assert set(lines) == set(original)
    for name, prefix in lines.items():
        assert original[name][1].tobytes().hex()[:16] == prefix, name
