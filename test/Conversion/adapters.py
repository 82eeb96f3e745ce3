#!/usr/bin/env python3
"""LoRA adapters end to end: HF-PEFT adapters through mdl-convert --adapters
to every backend and back, checked against numpy.

Writes random HF-PEFT adapters (lora_A [r, in], lora_B [out, r], bf16, with
the `base_model.model.` prefix) on every attention and MLP projection of a
tiny model, converts them to each backend over tp 1,2,4 (and pp 1,2 for
Megatron), and checks every rank:
  - the merged delta B A of each of its modules equals the slice of the HF
    deltas that the independent weight reference (reference.py) puts in that
    module's weight: gated query interleaves, per-group QKV and [gate_r;
    up_r] placements all show up here;
  - lora_A is the HF modules' lora_A stacked along the rank, in the order
    of the fused module's parts (q, k, v; gate, up), whole for a column-
    parallel module and split by columns for a row-parallel one;
  - no adapted weight of the rank is left without its adapter.
Each output's adapter_config.json must give every module of every rank its
rank (r, or its rank_pattern entry) and the source's scale lora_alpha / r
(through alpha_pattern for fused modules). vLLM loads HF-PEFT adapters
itself: for it the adapters stay as they are, byte for byte. Megatron-
Bridge's factor names (--adapter-names adapter.linear_in,adapter.linear_out)
are checked on one configuration.
Then converts each backend's adapters back to HF-PEFT and requires every
module's adapter to be the original, byte for byte (a fused adapter records
its HF modules' rank blocks in its metadata); without those blocks (an
adapter trained on the fused module), each HF module gets all of lora_A and
the same delta. Deltas are compared exactly in float64, where products and
sums of bf16 values in [1, 4) are exact.

  adapters.py --mdlc MDLC --convert MDL_CONVERT --spec SPEC --model M
              --config CONFIG.json --work DIR [--rank-size R]
              [--targets a,b,...] [--backends a,b] [--choice NAME=VALUE]

--targets names the HF modules to adapt (default: the attention and MLP
projections); --choice is passed to mdl-convert: `lora=off` converts for
vLLM's module set without LoRA, which the reference follows too (by
default, adapters are for the modules vLLM builds with LoRA enabled).
"""
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

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
           "down_proj")
ROW_PARALLEL = ("o_proj", "down_proj", "out_proj")
PREFIX = "base_model.model."


def bf16(a):
    return (a.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def f64(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def delta(adapter):
    a, b = adapter
    return f64(b) @ f64(a)


def load_adapters(path, names=("lora_A", "lora_B")):
    out = {}
    for name, (_, a) in reference.load(path).items():
        name = name[len(PREFIX):] if name.startswith(PREFIX) else name
        factor = [i for i, f in enumerate(names) if name.endswith("." + f + ".weight")]
        assert len(factor) == 1, name
        module = name[:-len(".%s.weight" % names[factor[0]])]
        out.setdefault(module, [None, None])[factor[0]] = a
    return {m: tuple(f) for m, f in out.items()}


def pattern(patterns, module, default):
    """PEFT's rank_pattern/alpha_pattern lookup: a key that is the module's
    name or ends it after a dot."""
    for key, value in patterns.items():
        if module == key or module.endswith("." + key):
            return value
    return default


def check_config(out, got, scale):
    """Failures of adapter_config.json against one rank's adapters."""
    config = json.load(open(os.path.join(out, "adapter_config.json")))
    failures = []
    for module, (a, _) in got.items():
        r = pattern(config.get("rank_pattern", {}), module, config["r"])
        alpha = pattern(config.get("alpha_pattern", {}), module, config["lora_alpha"])
        if r != a.shape[0] or alpha / r != scale:
            failures.append("adapter_config.json gives %s r %s and alpha %s; it has rank %d, "
                            "the source's scale is %s" % (module, r, alpha, a.shape[0], scale))
    return failures[:3]


def write_adapters(path, adapters):
    tensors, data = [], {}
    for module, (a, b) in sorted(adapters.items()):
        for factor, x in (("A", a), ("B", b)):
            name = "%s%s.lora_%s.weight" % (PREFIX, module, factor)
            tensors.append({"name": name, "dtype": "BF16", "shape": list(x.shape)})
            data[name] = x.tobytes()
    header, offset = {}, 0
    for t in tensors:
        n = len(data[t["name"]])
        header[t["name"]] = {"dtype": "BF16", "shape": t["shape"],
                             "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        for t in tensors:
            f.write(data[t["name"]])


def rank_dir(t, p, e, par):
    """Megatron's mp_rank_TT[_PPP][_EEE]."""
    return ("mp_rank_%02d" % t + ("_%03d" % p if par["pp"] > 1 else "") +
            ("_%03d" % e if par["ep"] > 1 else ""))


def check_rank(ref, tags, r, got, adapters, names, par):
    """Failures of one rank's adapters against the reference."""
    failures = []
    want_delta = ref.rank(r)
    want_tags = tags.rank(r)
    # The weights of the rank that hold some adapted HF module.
    adapted = {n[:-len(".weight")] for n, a in want_tags.items()
               if n.endswith(".weight") and a.dtype == np.float64 and a.any()}
    missing = adapted - set(got)
    if missing:
        failures.append("rank %d: no adapter for %s" % (r, sorted(missing)[:3]))
    for module, adapter in got.items():
        name = module + ".weight"
        if name not in want_delta:
            failures.append("rank %d: adapter of %s, which the rank does not hold" % (r, module))
            continue
        if not np.array_equal(delta(adapter), want_delta[name]):
            failures.append("rank %d: the delta of %s differs from the reference" % (r, module))
            continue
        # lora_A: the sources' A stacked along the rank.
        flat = want_tags[name].ravel()
        _, first = np.unique(flat, return_index=True)
        sources = [names[int(flat[i]) - 1] for i in sorted(first) if flat[i] > 0]
        a = np.concatenate([adapters[s][0] for s in sources], axis=0)
        if sources[0].rsplit(".", 1)[1] in ROW_PARALLEL:
            a = reference.chunk(a, 1, par["tp"], ref.coords(r)[0])
        if not np.array_equal(adapter[0], a):
            failures.append("rank %d: lora_A of %s is not that of %s stacked" % (r, module, sources))
    return failures


def trained_fused(args, out, adapters):
    """Adapters trained on the fused modules carry no rank blocks: each HF
    module then gets all of lora_A and its rows of lora_B, the same delta."""
    failures = []
    plain = os.path.join(args.work, "plain")
    back = os.path.join(args.work, "plain_back")
    shutil.rmtree(plain, ignore_errors=True)
    shutil.rmtree(back, ignore_errors=True)
    shutil.copytree(out, plain)
    for d in os.listdir(plain):
        path = os.path.join(plain, d, "adapter_model.safetensors")
        if os.path.exists(path):
            write_adapters(path, load_adapters(path))  # without metadata
    r = subprocess.run([args.convert, "--model", args.model, "--from", "mcore_te", "--to", "hf",
                        "--adapters", "--quiet", plain, back], capture_output=True, text=True)
    if r.returncode:
        return ["fused adapters without blocks -> hf failed: " + r.stderr.strip()]
    returned = load_adapters(os.path.join(back, "adapter_model.safetensors"))
    for module, ad in adapters.items():
        got = returned.get(module)
        if got is None or not np.array_equal(delta(got), delta(ad)):
            failures.append("fused adapters without blocks: the delta of %s differs" % module)
    if not any(got[0].shape[0] > ad[0].shape[0]
               for module, ad in adapters.items() for got in [returned[module]]):
        failures.append("fused adapters without blocks: no HF module got the fused lora_A")
    return failures


def bridge_names(args, peft, out, adapters):
    """Megatron-Bridge's factor names: the same tensors, named
    adapter.linear_in and adapter.linear_out, and back to HF unchanged."""
    names = ("adapter.linear_in", "adapter.linear_out")
    bridge = os.path.join(args.work, "bridge")
    back = os.path.join(args.work, "bridge_back")
    shutil.rmtree(bridge, ignore_errors=True)
    shutil.rmtree(back, ignore_errors=True)
    r = subprocess.run([args.convert, "--model", args.model, "--from", "hf", "--to", "mcore_te",
                        "--tp", "2", "--adapters", "--adapter-names", ",".join(names),
                        "--config", args.config, "--quiet", peft, bridge],
                       capture_output=True, text=True)
    if r.returncode:
        return ["bridge names: hf -> mcore_te failed: " + r.stderr.strip()]
    failures = []
    for d in sorted(os.listdir(out)):
        path = os.path.join(out, d, "adapter_model.safetensors")
        if os.path.exists(path):
            want = load_adapters(path)
            got = load_adapters(os.path.join(bridge, d, "adapter_model.safetensors"), names)
            if set(got) != set(want) or any(x.tobytes() != y.tobytes() for m in want
                                            for x, y in zip(got[m], want[m])):
                failures.append("bridge names: %s differs from the lora_A/lora_B output" % d)
    r = subprocess.run([args.convert, "--model", args.model, "--from", "mcore_te", "--to", "hf",
                        "--adapters", "--quiet", bridge, back], capture_output=True, text=True)
    if r.returncode:
        return failures + ["bridge names: mcore_te -> hf failed: " + r.stderr.strip()]
    returned = load_adapters(os.path.join(back, "adapter_model.safetensors"))
    if set(returned) != set(adapters) or any(x.tobytes() != y.tobytes() for m in adapters
                                             for x, y in zip(returned[m], adapters[m])):
        failures.append("bridge names: the adapters changed on the way back")
    return failures


def main():
    ap = roundtrip.arguments()
    ap.add_argument("--rank-size", type=int, default=3)
    ap.add_argument("--backends", default="mcore_te,mcore_local,vllm")
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--choice", action="append", default=[])
    args = ap.parse_args()
    targets = tuple(args.targets.split(","))
    choices = []
    for c in args.choice:
        choices += ["--choice", c]

    shutil.rmtree(args.work, ignore_errors=True)
    peft = os.path.join(args.work, "peft")
    os.makedirs(peft)
    listing = subprocess.run([args.mdlc, "params", args.spec, "--hf-config", args.config,
                              "--format=json"], capture_output=True, text=True)
    if listing.returncode:
        sys.exit("mdlc params failed:\n" + listing.stderr)
    params = json.loads(listing.stdout)
    config = json.load(open(args.config))

    # Adapters on every projection of the language model (not the vision
    # tower, which PEFT configurations for text usually leave alone).
    rng = np.random.default_rng(11)
    rsz = args.rank_size
    adapters = {}
    for t in params:
        module, _, leaf = t["name"].rpartition(".")
        if (leaf != "weight" or len(t["shape"]) != 2 or "visual" in module
                or module.rsplit(".", 1)[-1] not in targets):
            continue
        out_f, in_f = t["shape"]
        adapters[module] = (bf16(rng.uniform(1, 4, (rsz, in_f))),
                            bf16(rng.uniform(1, 4, (out_f, rsz))))
    write_adapters(os.path.join(peft, "adapter_model.safetensors"), adapters)
    scale = 2
    json.dump({"peft_type": "LORA", "r": rsz, "lora_alpha": scale * rsz,
               "target_modules": list(targets)},
              open(os.path.join(peft, "adapter_config.json"), "w"))

    # HF tensors: zero, but each adapted module's weight is its delta.
    sizes = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32,
             "F64": np.float64, "I64": np.int64, "I32": np.int32, "F8_E4M3": np.uint8}
    hf = {t["name"]: (t["dtype"], np.zeros(t["shape"], sizes[t["dtype"]])) for t in params}
    for module, ad in adapters.items():
        hf[module + ".weight"] = ("F64", delta(ad))

    # The same, with each adapted weight filled with its module's tag: in a
    # backend module, the tags in order of first appearance name the HF
    # modules it draws from, in the order of its parts.
    names = sorted(adapters)
    tagged = dict(hf)
    for i, module in enumerate(names):
        tagged[module + ".weight"] = ("F64", np.full(hf[module + ".weight"][1].shape, i + 1.0))

    failures, converted = [], 0
    meshes = roundtrip.backend_meshes(args.convert)
    for backend in args.backends.split(","):
        points = [(tp, pp) for tp in (1, 2, 4)
                  for pp in ((1, 2) if "pp" in meshes[backend] else (1,))]
        for tp, pp in points:
            where = "%s tp=%d pp=%d" % (backend, tp, pp)
            par = {"tp": tp, "pp": pp, "ep": 1, "etp": 1, "vpp": 1,
                   "lora": backend == "vllm" and "lora=off" not in args.choice}
            out = os.path.join(args.work, "out")
            back = os.path.join(args.work, "back")
            shutil.rmtree(out, ignore_errors=True)
            shutil.rmtree(back, ignore_errors=True)
            r = subprocess.run([args.convert, "--model", args.model, "--from", "hf", "--to", backend,
                                "--tp", str(tp), "--pp", str(pp), "--adapters",
                                "--config", args.config, "--quiet"] + choices + [peft, out],
                               capture_output=True, text=True)
            if r.returncode:
                if "is not a valid configuration" in r.stderr and not os.path.exists(out):
                    continue
                failures.append("%s: hf -> backend failed: %s" % (where, r.stderr.strip()))
                continue
            converted += 1
            if backend == "vllm":
                # vLLM's LoRA manager reads HF-PEFT adapters.
                kept = load_adapters(os.path.join(out, "adapter_model.safetensors"))
                if set(kept) != set(adapters) or any(
                        x.tobytes() != y.tobytes() for m in adapters
                        for x, y in zip(kept[m], adapters[m])):
                    failures.append("%s: the HF-PEFT adapters were not kept" % where)
                failures += ["%s: %s" % (where, f) for f in check_config(out, kept, scale)]
                continue
            ref = reference.Reference(args.model, backend, config, hf, par)
            tags = reference.Reference(args.model, backend, config, tagged, par)
            ranks = tp * pp if ref.mcore else tp
            for rank in range(ranks):
                t, p, e = ref.coords(rank)
                got = load_adapters(os.path.join(out, rank_dir(t, p, e, par),
                                                 "adapter_model.safetensors"))
                failures += ["%s: %s" % (where, f) for f in
                             check_rank(ref, tags, rank, got, adapters, names, par)]
                failures += ["%s: %s" % (where, f) for f in check_config(out, got, scale)]
            r = subprocess.run([args.convert, "--model", args.model, "--from", backend, "--to", "hf",
                                "--adapters", "--quiet", out, back], capture_output=True, text=True)
            if r.returncode:
                failures.append("%s: backend -> hf failed: %s" % (where, r.stderr.strip()))
                continue
            returned = load_adapters(os.path.join(back, "adapter_model.safetensors"))
            if set(returned) != set(adapters):
                failures.append("%s: the modules came back as %s" % (
                    where, sorted(set(returned) ^ set(adapters))[:3]))
                continue
            for module, ad in adapters.items():
                # Each HF module gets its own rank block back: byte for byte.
                if any(x.tobytes() != y.tobytes() for x, y in zip(returned[module], ad)):
                    failures.append("%s: the adapter of %s changed on the way back" % (where, module))
            if (backend, tp, pp) == ("mcore_te", 2, 1):
                failures += ["%s: %s" % (where, f) for f in trained_fused(args, out, adapters)]
                failures += ["%s: %s" % (where, f) for f in bridge_names(args, peft, out, adapters)]

    print("%s: adapters on %d modules, %d conversions matched the reference and came back, "
          "%d failures" % (args.model, len(adapters), converted, len(failures)))
    for f in failures[:20]:
        print("FAIL: " + f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
