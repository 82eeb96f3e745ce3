#!/usr/bin/env python3
"""Writes a HF-style checkpoint with the tensors `mdlc params --format=json`
lists: safetensors shards written by hand (struct + json, independently of
the runtime), and a model.safetensors.index.json mapping names to shards.

  make_checkpoint.py PARAMS.json OUT_DIR [--shards N] [--drop NAME]...
                     [--dtype NAME=DTYPE]...
"""
import argparse
import json
import os
import struct

SIZES = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "I64": 8, "I32": 4}


def write_shard(path, tensors):
    header, offset = {}, 0
    for t in tensors:
        n = SIZES[t["dtype"]]
        for d in t["shape"]:
            n *= d
        header[t["name"]] = {"dtype": t["dtype"], "shape": t["shape"],
                             "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        f.write(bytes(i % 251 for i in range(offset)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("params")
    ap.add_argument("out")
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--drop", action="append", default=[])
    ap.add_argument("--dtype", action="append", default=[])
    args = ap.parse_args()
    tensors = [t for t in json.load(open(args.params)) if t["name"] not in args.drop]
    retyped = dict(d.split("=") for d in args.dtype)
    for t in tensors:
        t["dtype"] = retyped.get(t["name"], t["dtype"])
    os.makedirs(args.out, exist_ok=True)
    weight_map = {}
    for s in range(args.shards):
        name = f"model-{s + 1:05d}-of-{args.shards:05d}.safetensors"
        part = tensors[s::args.shards]
        write_shard(os.path.join(args.out, name), part)
        weight_map.update({t["name"]: name for t in part})
    with open(os.path.join(args.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f, indent=1)


if __name__ == "__main__":
    main()
