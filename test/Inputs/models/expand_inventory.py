#!/usr/bin/env python3
"""Expands a compressed weight inventory into one line per tensor.

The inventories under test/Inputs/models/ were transcribed from model
reports as patterns: `{a..b}` is every index from a to b, and a named set
such as `{GDN}` is defined on the command line as a Python expression over
integers (`--set 'GDN=[i for i in range(40) if i % 4 != 3]'`). Output lines
are `name<TAB>[d0,d1,...]<TAB>DTYPE` sorted by name, as `mdlc params` prints.
"""
import argparse
import itertools
import re
import sys

DTYPES = {"bf16": "BF16", "fp32": "F32", "f32": "F32", "fp16": "F16",
          "f16": "F16", "fp8": "F8_E4M3", "f8_e4m3": "F8_E4M3", "i64": "I64"}


def expand(pattern, sets):
    parts = re.split(r"(\{[^}]*\})", pattern)
    choices = []
    for part in parts:
        if part.startswith("{"):
            inner = part[1:-1]
            m = re.fullmatch(r"(\d+)\.\.(\d+)", inner)
            if m:
                choices.append([str(i) for i in range(int(m[1]), int(m[2]) + 1)])
            elif inner in sets:
                choices.append([str(i) for i in sets[inner]])
            else:
                sys.exit(f"expand_inventory: no set named '{inner}' (use --set)")
        else:
            choices.append([part])
    return ["".join(c) for c in itertools.product(*choices)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("inventory")
    ap.add_argument("--set", action="append", default=[])
    args = ap.parse_args()
    sets = {}
    for s in args.set:
        name, expr = s.split("=", 1)
        sets[name] = list(eval(expr))
    out = {}
    for line in open(args.inventory):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.rstrip("\n").split("\t")
        pattern, shape, dtype = fields[0], fields[1], fields[2]
        for name in expand(pattern, sets):
            out[name] = (shape.replace(" ", ""), DTYPES.get(dtype.lower(), dtype))
    for name in sorted(out):
        print(f"{name}\t{out[name][0]}\t{out[name][1]}")


if __name__ == "__main__":
    main()
