#!/usr/bin/env python3
"""An `mdl-safetensors write` spec for the tensors `mdlc params --format=json`
lists (random contents), with planted faults: tensors left out (--drop, a
regex), added (--extra NAME, a [2] BF16 tensor), retyped (--retype
NAME=DTYPE) or reshaped (--reshape NAME=D0,D1,...).

  checkpoint_of.py PARAMS.json [--drop REGEX] [--extra NAME]...
                   [--retype NAME=DTYPE]... [--reshape NAME=DIMS]... > SPEC.json
"""
import argparse
import json
import re

ap = argparse.ArgumentParser()
ap.add_argument("params")
ap.add_argument("--drop")
ap.add_argument("--extra", action="append", default=[])
ap.add_argument("--retype", action="append", default=[])
ap.add_argument("--reshape", action="append", default=[])
args = ap.parse_args()
retype = dict(r.split("=", 1) for r in args.retype)
reshape = {k: [int(d) for d in v.split(",")]
           for k, v in (r.split("=", 1) for r in args.reshape)}
spec = {}
for i, t in enumerate(json.load(open(args.params))):
    name = t["name"]
    if args.drop and re.search(args.drop, name):
        continue
    spec[name] = {"dtype": retype.get(name, t["dtype"]),
                  "shape": reshape.get(name, t["shape"]),
                  "fill": "random:%d" % i}
for name in args.extra:
    spec[name] = {"dtype": "BF16", "shape": [2]}
print(json.dumps(spec, indent=1))
