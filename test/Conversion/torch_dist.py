#!/usr/bin/env python3
"""Megatron's distributed checkpoints (torch_dist) end to end.

For a model of the library and a tiny config, writes a random HF
checkpoint, then the torch_dist checkpoint Megatron-Core would save of it,
written independently of MDL: its keys and global tensors built from the
independent reference (reference.py's mcore_te at tp = 1) by Megatron's
rules (layers stacked on a leading axis when all alike, else keyed by their
global index; experts an axis; GDN's in_proj and conv1d a key per part; the
MTP layer's `transformer_layer`), each tensor cut into chunks as a training
run at tp = 2 saves them (a chunk per layer and per half of a split axis),
with Transformer Engine's `_extra_state` bytes items and optimizer state
beside them. The items are torch.save'd by Debian's torch 1.13 (a
subprocess); `.metadata` is pickled against stand-ins of torch's classes
(test/Inputs/torch_dist.py). Then:

  * mdl-convert --from mcore-te on it, to hf: byte for byte the HF
    checkpoint (the dequantized one for FP8 weights);
  * to vllm at tp = 2: equal to hf -> vllm;
  * with --write, mdl-convert --to mcore-te --format torch_dist from the HF
    checkpoint: every key's global tensor equal to the independent one,
    every item loaded by torch.load on its byte range, `.metadata`
    unpickled by Python's pickle against the stand-ins, metadata.json,
    common.pt and the tracker as Megatron reads them; and back to hf byte
    for byte.

  torch_dist.py --mdlc MDLC --convert MDL_CONVERT --spec SPEC --model M
                --config CONFIG.json --work DIR [--write]
"""
import argparse
import json
import os
import pickle
import shutil
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "Inputs"))
import reference  # noqa: E402
import roundtrip  # noqa: E402

TORCH = "/usr/bin/python3"
DTYPE_NAMES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32",
               "F64": "float64", "I64": "int64", "I32": "int32"}


# -- Megatron's keys, from the per-layer tp = 1 tensors --------------------
def dist_reference(model, config, hf):
    """Megatron's torch_dist keys and global tensors: name -> array."""
    par = {"tp": 1, "pp": 1, "ep": 1, "etp": 1, "vpp": 1}
    ref = reference.Reference(model, "mcore_te", config, hf, par)
    out = ref.rank(0)
    tc = ref.text
    res = {}
    experts = {}
    for name, a in out.items():
        # TEGroupedMLP's weight<e> re-keyed as SequentialMLP's: an axis.
        head, sep, num = name.rpartition(".weight")
        if ".experts.linear_fc" in name and sep and num.isdigit():
            experts.setdefault(head + ".weight", {})[int(num)] = a
            continue
        # Mamba-2 (MambaMixer.sharded_state_dict): in_proj a key per part
        # (z, x, B, C, dt), and so the convolution's weight and bias (x, B,
        # C), keyed by their older names conv1d.weight and conv1d.bias.
        if name.endswith("mixer.in_proj.weight"):
            d_in = tc["mamba_num_heads"] * tc["mamba_head_dim"]
            GN = tc["n_groups"] * tc["ssm_state_size"]
            for part, x in zip(["z", "x", "B", "C", "dt"],
                               np.split(a, np.cumsum([d_in, d_in, GN, GN]))):
                res[name + "." + part] = x
            continue
        if name.endswith(("mixer.conv1d_weight", "mixer.conv1d_bias")):
            d_in = tc["mamba_num_heads"] * tc["mamba_head_dim"]
            GN = tc["n_groups"] * tc["ssm_state_size"]
            head, _, what = name.rpartition("conv1d_")
            key = head + "conv1d." + what
            for part, x in zip(["x", "B", "C"], np.split(a, np.cumsum([d_in, GN]))):
                res[key + "." + part] = x
            continue
        # GDN: in_proj and conv1d a key per part.
        if name.endswith("self_attention.in_proj.weight") and not ref.q38:
            Hk, Dk = tc["linear_num_key_heads"], tc["linear_key_head_dim"]
            Hv, Dv = tc["linear_num_value_heads"], tc["linear_value_head_dim"]
            cuts = np.cumsum([Hk * Dk, Hk * Dk, Hv * Dv, Hv * Dv, Hv])
            for part, x in zip(["query", "key", "value", "z", "beta", "alpha"],
                               np.split(a, cuts)):
                res[name + "." + part] = x
            continue
        if name.endswith("self_attention.conv1d.weight") and not ref.q38:
            Hk, Dk = tc["linear_num_key_heads"], tc["linear_key_head_dim"]
            cuts = np.cumsum([Hk * Dk, Hk * Dk])
            for part, x in zip(["query", "key", "value"], np.split(a, cuts)):
                res[name + "." + part] = x
            continue
        res[name.replace(".mtp_model_layer.", ".transformer_layer.")] = a
    # The vocabulary unpadded (Megatron loads it with allow_shape_mismatch).
    V = tc["vocab_size"]
    for name in list(res):
        if name.endswith(("embedding.word_embeddings.weight", "output_layer.weight")):
            res[name] = res[name][:V]
    for name, by in experts.items():
        res[name.replace(".mtp_model_layer.", ".transformer_layer.")] = \
            np.stack([by[e] for e in sorted(by)])
    # A TransformerBlock's layers: stacked when all alike; so are the
    # deepstack mergers of Megatron-Bridge's Qwen3-VL vision block
    # (Qwen3VLVisionTransformerBlock.sharded_state_dict).
    blocks = {}
    for name in res:
        parts = name.split(".")
        for i in range(len(parts) - 2):
            if parts[i] == "decoder" and parts[i + 1] in ("layers", "deepstack_merger_list") \
                    and parts[i + 2].isdigit():
                pre = ".".join(parts[:i + 2])
                blocks.setdefault(pre, {}).setdefault(int(parts[i + 2]), {})[
                    ".".join(parts[i + 3:])] = name
                break
    for pre, layers in blocks.items():
        n = len(layers)
        first = layers[0]
        alike = sorted(layers) == list(range(n)) and all(
            set(l) == set(first) and all(
                res[l[k]].shape == res[first[k]].shape and
                res[l[k]].dtype == res[first[k]].dtype for k in first)
            for l in layers.values())
        if not alike:
            continue
        for rest in first:
            res[pre + "." + rest] = np.stack([res.pop(layers[i][rest]) for i in range(n)])
    return res


# -- writing a torch_dist checkpoint as a tp = 2 run would -----------------
def chunks_of(name, shape, stacked):
    """Boxes (offsets, sizes) a tp = 2 run saves `name` in: a chunk per
    index of the stacked axes, and the first splittable other axis cut in
    two."""
    lead = min(int(stacked) + int(".experts." in name), len(shape))
    boxes = [([], [])]
    for k in range(lead):
        boxes = [(o + [i], s + [1]) for o, s in boxes for i in range(shape[k])]
    split = next((k for k in range(lead, len(shape)) if shape[k] % 2 == 0 and shape[k] > 1), None)
    for k in range(lead, len(shape)):
        if k == split:
            h = shape[k] // 2
            boxes = [(o + [j * h], s + [h]) for o, s in boxes for j in (0, 1)]
        else:
            boxes = [(o + [0], s + [shape[k]]) for o, s in boxes]
    return boxes


ITEMS = r'''
import io, json, sys
import numpy as np, torch
plan = json.load(open(sys.argv[1]))
files = {}
for it in plan:
    if it["file"] not in files:
        files[it["file"]] = open(it["path"], "wb")
    f = files[it["file"]]
    buf = io.BytesIO()
    if it["kind"] == "bytes":
        torch.save([None], buf)
    else:
        a = np.load(it["npy"])
        t = torch.from_numpy(a.view(np.int16) if it["dtype"] == "bfloat16" else a)
        if it["dtype"] == "bfloat16":
            t = t.view(torch.bfloat16)
        torch.save(t.clone(), buf)
    it["offset"] = f.tell()
    f.write(buf.getvalue())
    it["length"] = len(buf.getvalue())
for f in files.values():
    f.close()
json.dump(plan, open(sys.argv[1], "w"))
'''

METADATA = r'''
import json, sys
sys.path.insert(0, sys.argv[3])
import torch_dist as td
plan = json.load(open(sys.argv[1]))
keys = json.load(open(sys.argv[2]))
c = td.PATHS["2.x"]
sdm, storage = {}, {}
for key, k in keys.items():
    if k["kind"] == "bytes":
        sdm[key] = c["BytesStorageMetadata"]()
    else:
        sdm[key] = c["TensorStorageMetadata"](
            c["TensorProperties"](td.DTYPES[k["dtype"]]), td.Size(k["shape"]), [])
for i, it in enumerate(plan):
    idx = c["MetadataIndex"](it["key"])
    if it["kind"] != "bytes":
        sdm[it["key"]].chunks.append(c["ChunkStorageMetadata"](
            td.Size(it["offsets"]), td.Size(it["sizes"])))
        idx.offset = td.Size(it["offsets"])
    idx.index = None
    storage[idx] = c["_StorageInfo"](it["file"], it["offset"], it["length"])
td.dump(c["Metadata"](sdm, None, storage), sys.argv[4], 4)
'''


def write_torch_dist(top, tensors, work):
    """`tensors` (name -> array) as Megatron saves them under TOP: the
    tracker, release/ with .metadata, two .distcp files, metadata.json."""
    d = os.path.join(top, "release")
    os.makedirs(d)
    with open(os.path.join(top, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("release")
    with open(os.path.join(d, "metadata.json"), "w") as f:
        json.dump({"sharded_backend": "torch_dist", "sharded_backend_version": 1,
                   "common_backend": "torch", "common_backend_version": 1}, f)
    npy = os.path.join(work, "npy")
    os.makedirs(npy, exist_ok=True)
    plan, keys = [], {}
    rank = 0
    for n, (name, a) in enumerate(sorted(tensors.items())):
        after = ("." + name).split(".decoder.layers.")
        stacked = len(after) > 1 and not after[-1].split(".")[0].isdigit()
        dtype = {np.uint16: "bfloat16", np.float32: "float32", np.float16: "float16",
                 np.int64: "int64", np.int32: "int32"}[a.dtype.type]
        keys[name] = {"kind": "tensor", "dtype": dtype, "shape": list(a.shape)}
        for j, (off, size) in enumerate(chunks_of(name, a.shape, stacked)):
            box = a[tuple(slice(o, o + s) for o, s in zip(off, size))]
            path = os.path.join(npy, "%d_%d.npy" % (n, j))
            np.save(path, np.ascontiguousarray(box))
            rank = 1 - rank
            f = "__%d_0.distcp" % rank
            plan.append({"key": name, "kind": "tensor", "dtype": dtype, "npy": path,
                         "offsets": off, "sizes": size, "file": f,
                         "path": os.path.join(d, f)})
        # Transformer Engine's extra state of each linear, and the
        # optimizer's moments: read past.
        if name.endswith(".weight") and a.ndim >= 2:
            extra = name[:-len(".weight")] + "._extra_state/shard_0_1"
            keys[extra] = {"kind": "bytes"}
            plan.append({"key": extra, "kind": "bytes", "file": "__0_0.distcp",
                         "path": os.path.join(d, "__0_0.distcp")})
    moment = "optimizer.state.exp_avg." + sorted(tensors)[0]
    a = tensors[sorted(tensors)[0]].astype(np.float32) if tensors[sorted(tensors)[0]].dtype != np.uint16 \
        else np.zeros(tensors[sorted(tensors)[0]].shape, np.float32)
    path = os.path.join(npy, "moment.npy")
    np.save(path, a)
    keys[moment] = {"kind": "tensor", "dtype": "float32", "shape": list(a.shape)}
    plan.append({"key": moment, "kind": "tensor", "dtype": "float32", "npy": path,
                 "offsets": [0] * a.ndim, "sizes": list(a.shape), "file": "__1_0.distcp",
                 "path": os.path.join(d, "__1_0.distcp")})
    pf, kf = os.path.join(work, "plan.json"), os.path.join(work, "keys.json")
    json.dump(plan, open(pf, "w"))
    json.dump(keys, open(kf, "w"))
    for code, args in ((ITEMS, [pf]), (METADATA, [pf, kf, os.path.join(HERE, "..", "Inputs"),
                                                 os.path.join(d, ".metadata")])):
        r = subprocess.run([TORCH, "-c", code] + args, capture_output=True, text=True)
        if r.returncode:
            sys.exit("writing the torch_dist checkpoint failed:\n" + r.stderr)
    return d


LOAD_METADATA = r'''
import json, sys
sys.path.insert(0, sys.argv[2])
import torch_dist as td
md = td.load(sys.argv[1])
out = {"class": type(md).__module__ + "." + type(md).__name__,
       "planner_data": md.planner_data, "keys": {}}
for key, v in md.state_dict_metadata.items():
    p = v.properties
    out["keys"][key] = {
        "class": type(v).__module__ + "." + type(v).__name__,
        "properties": type(p).__module__ + "." + type(p).__name__,
        "memory_format": type(p.memory_format).__name__ + "." + p.memory_format.name,
        "dtype": p.dtype.name, "size": list(v.size), "chunks": []}
    for c in v.chunks:
        out["keys"][key]["chunks"].append([list(c.offsets), list(c.sizes)])
for i, st in md.storage_data.items():
    out["keys"][i.fqn].setdefault("items", []).append(
        [list(i.offset), type(st).__module__ + "." + type(st).__name__,
         st.relative_path, st.offset, st.length])
json.dump(out, sys.stdout)
'''

LOAD_ITEMS = r'''
import io, json, sys
import numpy as np, torch
d, plan, outdir = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3]
data = {}
for n, (key, rel, off, length) in enumerate(plan):
    if rel not in data:
        data[rel] = open(d + "/" + rel, "rb").read()
    t = torch.load(io.BytesIO(data[rel][off:off + length]))
    a = t.view(torch.int16).numpy() if t.dtype == torch.bfloat16 else t.numpy()
    np.save("%s/%d.npy" % (outdir, n), a)
common = torch.load(d + "/common.pt")
print(json.dumps({"keys": sorted(common), "checkpoint_version": common["checkpoint_version"],
                  "iteration": common["iteration"], "args": sorted(vars(common["args"]).items())}))
'''


def back_to_hf(args, src, back, expect, flags, what):
    """mdl-convert --from mcore-te SRC --to hf: byte for byte `expect`."""
    r = roundtrip.run([args.convert, "--from", "mcore-te", "--to", "hf"] + flags +
                      ["--quiet", src, back])
    if r.returncode:
        return [what + " failed: " + r.stderr.strip()]
    diff = roundtrip.same(expect, back)
    return [what + " changed the checkpoint: " + diff] if diff else []


def check_written(args, hf, expect, want, config):
    """--from hf --to mcore-te --format torch_dist, checked as Megatron and
    torch read it."""
    fails = []
    run = roundtrip.run
    out = os.path.join(args.work, "written")
    r = run([args.convert, "--model", args.model, "--from", "hf", "--to", "mcore-te",
             "--format", "torch_dist", "--quiet", hf, out])
    if r.returncode:
        return ["hf -> torch_dist failed: " + r.stderr.strip()]
    d = os.path.join(out, "release")
    if open(os.path.join(out, "latest_checkpointed_iteration.txt")).read().strip() != "release":
        fails.append("the tracker does not say release")
    if json.load(open(os.path.join(d, "metadata.json"))) != {
            "sharded_backend": "torch_dist", "sharded_backend_version": 1,
            "common_backend": "torch", "common_backend_version": 1}:
        fails.append("metadata.json holds other keys")
    # .metadata through Python's pickle, against classes at torch's paths.
    r = subprocess.run([TORCH, "-c", LOAD_METADATA, os.path.join(d, ".metadata"),
                        os.path.join(HERE, "..", "Inputs")], capture_output=True, text=True)
    if r.returncode:
        return fails + ["pickle cannot load .metadata: " + r.stderr.strip()[-500:]]
    md = json.loads(r.stdout)
    if md["class"] != "torch.distributed.checkpoint.metadata.Metadata" or md["planner_data"] is not None:
        fails.append(".metadata's root is %s" % md["class"])
    if set(md["keys"]) != set(want):
        fails.append("keys differ: only Megatron's %s, only written %s" % (
            sorted(set(want) - set(md["keys"]))[:4], sorted(set(md["keys"]) - set(want))[:4]))
        return fails
    plan = []
    for key, k in sorted(md["keys"].items()):
        a = want[key]
        if k["size"] != list(a.shape):
            fails.append("%s has size %s, not %s" % (key, k["size"], list(a.shape)))
        if (k["class"], k["properties"], k["memory_format"]) != (
                "torch.distributed.checkpoint.metadata.TensorStorageMetadata",
                "torch.distributed._shard.sharded_tensor.metadata.TensorProperties",
                "MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT"):
            fails.append("%s is described by %s" % (key, k))
        # A chunk per layer and per expert.
        stacked = not ("." + key).split(".decoder.layers.")[-1].split(".")[0].isdigit() \
            and ".decoder.layers." in "." + key
        lead = int(stacked) + int(".experts." in key)
        for off, size in k["chunks"]:
            if any(sz != 1 for sz in size[:lead]):
                fails.append("%s has a chunk %s+%s of several layers or experts" % (key, off, size))
                break
        if sum(int(np.prod(sz)) for _, sz in k["chunks"]) != a.size:
            fails.append("%s's chunks do not cover it" % key)
        for off, cls, rel, at, length in k["items"]:
            if cls != "torch.distributed.checkpoint.filesystem._StorageInfo":
                fails.append("%s's item is a %s" % (key, cls))
            size = next(sz for o, sz in k["chunks"] if o == off)
            plan.append((key, off, size, rel, at, length))
    # Every item through torch 1.13's torch.load on its byte range.
    items = os.path.join(args.work, "items")
    shutil.rmtree(items, ignore_errors=True)
    os.makedirs(items)
    pf = os.path.join(args.work, "items.json")
    json.dump([(p[0], p[3], p[4], p[5]) for p in plan], open(pf, "w"))
    r = subprocess.run([TORCH, "-c", LOAD_ITEMS, d, pf, items], capture_output=True, text=True)
    if r.returncode:
        return fails + ["torch.load failed: " + r.stderr.strip()[-500:]]
    for n, (key, off, size, rel, at, length) in enumerate(plan):
        got = np.load(os.path.join(items, "%d.npy" % n))
        box = want[key][tuple(slice(o, o + s) for o, s in zip(off, size))]
        if got.shape != box.shape or got.tobytes() != np.ascontiguousarray(box).tobytes():
            fails.append("item %s %s+%s differs from Megatron's tensor" % (key, off, size))
    common = json.loads(r.stdout)
    tc = config.get("text_config", config)
    layers = tc["num_hidden_layers"]
    if common["keys"] != ["args", "checkpoint_version", "iteration",
                          "num_floating_point_operations_so_far"] or \
            common["checkpoint_version"] != 3 or common["iteration"] != 0 or \
            ["num_layers", layers] not in common["args"] or \
            ["hidden_size", tc["hidden_size"]] not in common["args"]:
        fails.append("common.pt holds %s" % common)
    # MDL reads back the same bytes, and HF byte for byte.
    return fails + back_to_hf(args, out, os.path.join(args.work, "written_back"),
                              expect, [], "hf -> torch_dist (written) -> hf")


def main():
    ap = argparse.ArgumentParser()
    for a in ["--mdlc", "--convert", "--spec", "--model", "--config", "--work"]:
        ap.add_argument(a, required=True)
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--save-only", metavar="DIR",
                    help="write the torch_dist checkpoint a run saves into "
                         "DIR (the vocabulary padded to --pad rows), less "
                         "the keys --drop names, with --add keys added and "
                         "the last axis of --narrow keys one shorter, and stop")
    ap.add_argument("--pad", type=int, default=256)
    ap.add_argument("--drop", action="append", default=[])
    ap.add_argument("--add", action="append", default=[])
    ap.add_argument("--narrow", action="append", default=[])
    ap.add_argument("--keys-only", action="store_true",
                    help="compare the keys and global shapes of the spec's "
                         "mcore_te_dist layout (mdlc params) with Megatron's "
                         "rules, and stop")
    args = ap.parse_args()
    run = roundtrip.run
    failures = []
    hf, tensors = roundtrip.write_hf(args.mdlc, args.spec, args.config, args.work, 11)
    config = json.load(open(args.config))
    hfw = reference.load_dir(hf)
    quant = config.get("quantization_config") or {}
    block = quant["weight_block_size"][0] if quant.get("quant_method") == "fp8" else 0
    expect = hfw
    if block:
        expect = reference.fp8_views(hfw, block)[2]
    want = dist_reference(args.model, config, expect)

    if args.keys_only:
        r = run([args.mdlc, "params", args.spec, "--backend", "mcore_te_dist",
                 "--hf-config", args.config, "--format=json"])
        if r.returncode:
            sys.exit("mdlc params failed:\n" + r.stderr)
        got = {t["name"]: (tuple(t["shape"]), t["dtype"]) for t in json.loads(r.stdout)}
        NAMES = {np.uint16: "BF16", np.float32: "F32", np.float16: "F16",
                 np.int64: "I64", np.int32: "I32"}
        ref = {k: (tuple(a.shape), NAMES[a.dtype.type]) for k, a in want.items()}
        for k in sorted(set(ref) | set(got)):
            if k not in got:
                failures.append("missing from the spec: %s %s" % (k, ref[k]))
            elif k not in ref:
                failures.append("not Megatron's: %s %s" % (k, got[k]))
            elif ref[k] != got[k]:
                failures.append("%s: Megatron %s, the spec %s" % (k, ref[k], got[k]))
        stacked = sum(1 for k in ref if "decoder.layers." in k and
                      not k.split("decoder.layers.")[1].split(".")[0].isdigit())
        print("%s: %d torch_dist keys (%d stacked), %d differences" % (
            args.model, len(ref), stacked, len(failures)))
        for f in failures[:20]:
            print("FAIL: " + f)
        sys.exit(1 if failures else 0)

    # Read what a training run at tp = 2 saved: its vocabulary padded to a
    # multiple of 128 * 2.
    saved = os.path.join(args.work, "saved")
    # Megatron holds FP8 weights dequantized: its model's config describes
    # no quantization.
    config_path = args.config
    if block:
        config_path = os.path.join(args.work, "config.json")
        json.dump({k: v for k, v in config.items() if k != "quantization_config"},
                  open(config_path, "w"))
    run_tensors = dict(want)
    for name, a in want.items():
        if name.endswith(("embedding.word_embeddings.weight", "output_layer.weight")):
            rows = -(-a.shape[0] // args.pad) * args.pad
            run_tensors[name] = np.concatenate(
                [a, np.zeros((rows - a.shape[0],) + a.shape[1:], a.dtype)])
    if args.save_only:
        for k in args.drop:
            del run_tensors[k]
        for k in args.add:
            run_tensors[k] = np.zeros((3, 5), np.uint16)
        for k in args.narrow:
            run_tensors[k] = np.ascontiguousarray(run_tensors[k][..., :-1])
        write_torch_dist(args.save_only, run_tensors, args.work)
        print("saved %d keys in %s" % (len(run_tensors), args.save_only))
        return
    write_torch_dist(saved, run_tensors, args.work)
    back = os.path.join(args.work, "back")
    failures += back_to_hf(args, saved, back, expect, ["--config", config_path],
                           "torch_dist (saved) -> hf")
    # torch_dist -> vLLM equals hf -> vLLM (from the dequantized weights
    # with FP8).
    src = hf
    if block:
        src = back
    vl, direct = os.path.join(args.work, "vllm"), os.path.join(args.work, "direct")
    for cmd in ([args.convert, "--from", "mcore-te", "--to", "vllm", "--tp", "2", "--config",
                 config_path, "--quiet", saved, vl],
                [args.convert, "--model", args.model, "--from", "hf", "--to", "vllm", "--tp", "2",
                 "--quiet", src, direct]):
        r = run(cmd)
        if r.returncode:
            failures.append(" ".join(cmd[1:5]) + " failed: " + r.stderr.strip())
    if not failures:
        for rank in (0, 1):
            diff = roundtrip.same(*(reference.load_files(reference.vllm_rank_files(x, rank))
                                    for x in (vl, direct)))
            if diff:
                failures.append("torch_dist -> vllm differs from hf -> vllm on rank %d: %s" % (rank, diff))

    if args.write and not failures:
        failures += check_written(args, hf, expect, want, config)
    print("%s: torch_dist read (%d keys)%s, %d failures" % (
        args.model, len(want), ", written" if args.write else "", len(failures)))
    for f in failures[:20]:
        print("FAIL: " + f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
