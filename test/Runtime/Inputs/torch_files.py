#!/usr/bin/env python3
"""Torch checkpoints for the reader's tests, written into DIR.

Files torch.save writes (a training-style Megatron rank file with args,
optimizer and RNG states, TE extra state, virtual stages), and files built
by hand with pickle and zipfile where torch would refuse to write them: a
tensor larger than its storage, a storage missing from the archive or
shorter than its numel, a non-contiguous view, a `model` that is a call
of os.system (whose marker file must never appear).

  torch_files.py DIR
"""
import argparse
import collections
import io
import os
import pickle
import random
import sys
import zipfile

import numpy as np
import torch


class Storage:
    """Pickled as a persistent id, as torch.save pickles storages."""
    def __init__(self, cls, key, numel):
        self.pid = ("storage", cls, key, "cpu", numel)


class Tensor:
    """Pickled as torch._utils._rebuild_tensor_v2(...)."""
    def __init__(self, storage, offset, size, stride):
        self.args = (storage, offset, size, stride, False, collections.OrderedDict())

    def __reduce__(self):
        return (torch._utils._rebuild_tensor_v2, self.args)


class Call:
    """Pickled as a call of `fn` with `args`: what a loader must not run."""
    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return (self.fn, self.args)


def write_zip(path, obj, storages, drop=()):
    """A torch zip of `obj` (pickle protocol 2) and `storages` (key ->
    bytes), leaving out the entries in `drop`."""
    buf = io.BytesIO()
    p = pickle.Pickler(buf, protocol=2)
    p.persistent_id = lambda o: o.pid if isinstance(o, Storage) else None
    p.dump(obj)
    name = os.path.splitext(os.path.basename(path))[0]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr(name + "/data.pkl", buf.getvalue())
        for key, data in storages.items():
            if key not in drop:
                z.writestr(name + "/data/" + key, data)
        z.writestr(name + "/version", "3\n")


def training_style(sd, vpp=False):
    """A rank file as Megatron's save_checkpoint writes it."""
    ckpt = {
        "args": __import__("argparse").Namespace(tensor_model_parallel_size=1, lr=3e-4,
                                                 data_path=["a", "b"]),
        "checkpoint_version": 3.0,
        "iteration": 100,
        "optimizer": {"state": {0: {"exp_avg": torch.ones(3), "step": 5}},
                      "param_groups": [{"lr": 3e-4, "params": [0]}]},
        "opt_param_scheduler": {"num_steps": 100, "decay_style": "cosine"},
        "rng_state": [{"random_rng_state": random.getstate(),
                       "np_rng_state": np.random.get_state(),
                       "torch_rng_state": torch.get_rng_state(),
                       "rng_tracker_states": {"model-parallel-rng": torch.get_rng_state()}}],
        "num_floating_point_operations_so_far": 12345678901234567890,
    }
    extra = collections.OrderedDict()
    for k, (name, t) in enumerate(sd.items()):
        extra[name] = t
        if k == 0:
            extra[name.rsplit(".", 1)[0] + "._extra_state"] = io.BytesIO(b"fp8 meta")
        if k == 1:
            extra[name.rsplit(".", 1)[0] + "._extra_state"] = torch.zeros(0, dtype=torch.uint8)
    if vpp:
        ckpt["model0"] = extra
        ckpt["model1"] = collections.OrderedDict(
            (n, t.clone()) for n, t in list(sd.items())[:1])
    else:
        ckpt["model"] = extra
    return ckpt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    d = ap.parse_args().dir
    os.makedirs(d, exist_ok=True)
    sd = collections.OrderedDict()
    sd["layer.weight"] = torch.arange(12, dtype=torch.float32).reshape(3, 4).to(torch.bfloat16)
    sd["layer.bias"] = torch.arange(3, dtype=torch.float32) + 0.5
    # A tensor at an offset in a storage shared with another one.
    base = torch.arange(10, dtype=torch.int64)
    sd["shared.a"] = base[2:6]
    sd["shared.b"] = base[6:10].view(2, 2)
    torch.save(training_style(sd), os.path.join(d, "training.pt"))
    torch.save(training_style(sd, vpp=True), os.path.join(d, "vpp.pt"))
    # The bytes each tensor must read as.
    for name, t in sd.items():
        raw = t.contiguous().view(torch.int16) if t.dtype == torch.bfloat16 else t.contiguous()
        with open(os.path.join(d, name + ".bin"), "wb") as f:
            f.write(raw.numpy().tobytes())

    marker = os.path.join(d, "marker")
    f32 = torch.FloatStorage
    four = np.arange(4, dtype=np.float32).tobytes()
    ok = Tensor(Storage(f32, "0", 4), 0, (4,), (1,))
    cases = {
        # Code a loader would run: never called.
        "system-model": ({"model": Call(os.system, "touch " + marker)}, {}),
        "eval-model": ({"model": Call(eval, "open(%r, 'w')" % marker)}, {}),
        "system-args": ({"args": Call(os.system, "touch " + marker),
                         "model": collections.OrderedDict(w=ok)}, {"0": four}),
        "not-a-dict": ([1, 2], {}),
        "no-model": ({"args": 1}, {}),
        "model-list": ({"model": [ok]}, {"0": four}),
        "model-entry-int": ({"model": collections.OrderedDict(w=3)}, {}),
        "missing-storage": ({"model": collections.OrderedDict(w=ok)}, {"0": four}),
        "short-storage": ({"model": collections.OrderedDict(w=ok)}, {"0": four[:12]}),
        "tensor-past-storage": ({"model": collections.OrderedDict(
            w=Tensor(Storage(f32, "0", 4), 2, (2, 2), (2, 1)))}, {"0": four}),
        "transposed": ({"model": collections.OrderedDict(
            w=Tensor(Storage(f32, "0", 4), 0, (2, 2), (1, 2)))}, {"0": four}),
        "odd-storage-class": ({"model": collections.OrderedDict(
            w=Tensor(Storage(torch.QInt8Storage, "0", 4), 0, (4,), (1,)))}, {"0": four}),
    }
    for name, (obj, storages) in cases.items():
        write_zip(os.path.join(d, name + ".pt"), obj, storages,
                  drop=("0",) if name == "missing-storage" else ())
    # Truncated: half of a good file.
    data = open(os.path.join(d, "training.pt"), "rb").read()
    open(os.path.join(d, "truncated.pt"), "wb").write(data[:len(data) // 2])
    # A pickle cut short inside the archive.
    with zipfile.ZipFile(os.path.join(d, "cut-pickle.pt"), "w") as z:
        z.writestr("cut-pickle/data.pkl", pickle.dumps({"model": {}}, protocol=2)[:-3])
        z.writestr("cut-pickle/version", "3\n")
    # A compressed entry (torch never writes one).
    with zipfile.ZipFile(os.path.join(d, "deflated.pt"), "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("deflated/data.pkl", pickle.dumps({"model": {}}, protocol=2))


if __name__ == "__main__":
    main()
