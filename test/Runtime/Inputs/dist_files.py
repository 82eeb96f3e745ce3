#!/usr/bin/env python3
"""Distributed checkpoints for the reader's tests, made from the PyTorch 2.11
fixtures (test/Inputs/torch-dist) in OUT:

  same metadata, other writers' forms:
    v113/       the classes at torch 1.13's paths, pickle protocol 2
    shard/      TensorProperties at torch.distributed._shard's path, protocol 3
    mcore/      Megatron-Core 0.15's MCoreMetadata with mcore_data and save
                plans of classes the reader does not know, protocol 5
  broken, each a copy of tp2 with one thing wrong:
    truncated   __1_0.distcp cut short
    past-end    an item's range past the end of its file
    system      .metadata's root is a call of os.system
    system-size a key's size is a call of os.system
    overlap     two chunks of a key overlap
    gap         a key lacks one of its chunks
    unplaced    a chunk has no storage_data entry
    transformed an item stored through a transform (compression)
    wrong-item  a chunk's entry points at another key's item
    escape      an item in ../ of the directory
    complex     a dtype the reader does not know
    garbage     .metadata is not a pickle
    not-metadata .metadata is a pickled list

  dist_files.py FIXTURES OUT
"""
import copy
import os
import pickle
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "Inputs"))
import torch_dist as td  # noqa: E402

src, out = sys.argv[1], sys.argv[2]
tp2 = os.path.join(src, "tp2", "iter_0000010")
os.makedirs(out, exist_ok=True)


def make(name, base=tp2):
    d = os.path.join(out, name)
    shutil.copytree(base, d)
    return d


md = td.load(os.path.join(tp2, ".metadata"))

td.dump(td.convert(md, "1.13"), os.path.join(make("v113"), ".metadata"), 2)
td.dump(td.convert(md, "shard"), os.path.join(make("shard"), ".metadata"), 3)
m = td.convert(md, "2.x", root=td.MCoreMetadata)
m.mcore_data = {k: {"nd_reformulated_orig_global_shape": None}
                for k in m.state_dict_metadata}
m.all_local_plans = [td.MCoreSavePlan([td.WriteItem(i, 1, None)
                                       for i in m.storage_data], None, None,
                                      True)]
td.dump(m, os.path.join(make("mcore"), ".metadata"), 5)


def broken(name, change):
    d = make(name)
    m = copy.deepcopy(md)
    change(m, d)
    td.dump(m, os.path.join(d, ".metadata"))


def key_of(m, fqn, offset=None):
    for i in m.storage_data:
        if i.fqn == fqn and (offset is None or tuple(i.offset) == offset):
            return i
    raise KeyError(fqn)


def truncate(m, d):
    path = os.path.join(d, "__1_0.distcp")
    data = open(path, "rb").read()
    open(path, "wb").write(data[:len(data) // 2])


broken("truncated", truncate)
qkv = "decoder.layers.self_attention.linear_qkv.weight"
broken("past-end", lambda m, d: setattr(
    m.storage_data[key_of(m, qkv, (0, 32, 0))], "offset", 40000))


class System:
    """Pickled as a call of os.system: what a reader must never run."""
    def __reduce__(self):
        return (os.system, ("touch " + os.path.join(out, "marker"),))


d = make("system")
with open(os.path.join(d, ".metadata"), "wb") as f:
    pickle.dump(System(), f)
broken("system-size", lambda m, d: setattr(
    m.state_dict_metadata[qkv], "size", System()))
broken("overlap", lambda m, d: setattr(
    m.state_dict_metadata[qkv].chunks[1], "offsets", td.Size((0, 30, 0))))
broken("gap", lambda m, d: m.state_dict_metadata[qkv].chunks.pop())
broken("unplaced", lambda m, d: m.storage_data.pop(key_of(m, qkv, (0, 32, 0))))
broken("transformed", lambda m, d: setattr(
    m.storage_data[key_of(m, qkv, (0, 0, 0))], "transform_descriptors",
    ["zstd"]))


def wrong_item(m, d):
    m.storage_data[key_of(m, qkv, (0, 0, 0))] = m.storage_data[
        key_of(m, "embedding.word_embeddings.weight", (0, 0))]


broken("wrong-item", wrong_item)
broken("escape", lambda m, d: setattr(
    m.storage_data[key_of(m, qkv, (0, 0, 0))], "relative_path",
    "../__0_0.distcp"))
broken("complex", lambda m, d: setattr(
    m.state_dict_metadata[qkv].properties, "dtype", td.DTYPES["complex64"]))
d = make("garbage")
open(os.path.join(d, ".metadata"), "wb").write(b"\x80\x04not a pickle")
d = make("not-metadata")
with open(os.path.join(d, ".metadata"), "wb") as f:
    pickle.dump([1, 2, 3], f)
