#!/usr/bin/env python3
"""Runs mdl-convert where it must refuse before anything is written, and
checks that it does: an output directory that is, holds or lies in an input
(symbolic links resolved), rank directories swapped, and a config whose
sizes are absurd. Each case must end with exit 1 and one message, within
a time limit, and leave every input as it was.

  unsafe_conversions.py --mdlc MDLC --convert MDL_CONVERT --spec SPEC
                        --model M --config CONFIG.json --work DIR

Prints `CASE: MESSAGE` (the first line of the message, paths relative to
DIR) per case, then a summary.
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "Conversion"))
import roundtrip  # noqa: E402

PREFIX = "mdl-convert: error: "
CRASH = ["AddressSanitizer", "runtime error:", "Assertion", "terminate",
         "Segmentation", "Stack dump"]


def snapshot(path):
    """Every file under `path` (links not followed) with a hash of it."""
    out = {}
    for root, dirs, files in os.walk(path):
        for name in sorted(dirs + files):
            p = os.path.join(root, name)
            if os.path.isfile(p) and not os.path.islink(p):
                with open(p, "rb") as f:
                    out[os.path.relpath(p, path)] = hashlib.sha256(
                        f.read()).hexdigest()
            else:
                out[os.path.relpath(p, path)] = "dir" if os.path.isdir(p) else "link"
    return out


def main():
    ap = argparse.ArgumentParser()
    for a in ("mdlc", "convert", "spec", "model", "config", "work"):
        ap.add_argument("--" + a, required=True)
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    os.chdir(args.work)
    listing = subprocess.run([args.mdlc, "params", args.spec, "--hf-config",
                              args.config, "--format=json"],
                             capture_output=True, text=True)
    if listing.returncode:
        sys.exit("mdlc params failed:\n" + listing.stderr)
    rng = np.random.default_rng(5)
    os.makedirs("hf")
    shutil.copy(args.config, "hf/config.json")
    roundtrip.write_checkpoint("hf/model.safetensors",
                               json.loads(listing.stdout), rng)
    base = ["--model", args.model, "--quiet"]
    to_backend = base + ["--from", "hf", "--to", "mcore_te", "--tp", "2"]
    to_hf = base + ["--from", "mcore_te", "--to", "hf"]
    # Megatron's own layout (torch files under release/) and per-rank
    # safetensors: both record the rank each file holds.
    for out, extra in (("backend", []), ("backend-st", ["--format", "safetensors"])):
        r = subprocess.run([args.convert] + to_backend + extra + ["hf", out],
                           capture_output=True, text=True)
        if r.returncode:
            sys.exit("hf -> mcore_te failed:\n" + r.stderr)

    def rank_dirs(top):
        return sorted(e for e in os.listdir(top) if e.startswith("mp_rank"))

    if rank_dirs("backend/release") != rank_dirs("backend-st") or \
            len(rank_dirs("backend-st")) != 2:
        sys.exit(f"expected two ranks, got {rank_dirs('backend-st')}")

    cases = []  # (name, arguments, inputs that must stay as they were)
    cases.append(("rank-out-is-in", base + ["--rank", "0", "--from",
                  "mcore_te", "--to", "hf", "backend", "backend"], ["backend"]))
    cases.append(("hf-out-is-in", to_backend + ["hf", "hf"], ["hf"]))
    cases.append(("hf-out-is-in-spelled-otherwise",
                  to_backend + ["hf", "./hf/../hf/"], ["hf"]))
    os.symlink("hf", "link-to-hf")
    cases.append(("out-links-to-in", to_backend + ["hf", "link-to-hf"], ["hf"]))
    cases.append(("out-inside-in", to_backend + ["hf", "hf/out"], ["hf"]))
    os.makedirs("outer")
    shutil.copytree("hf", "outer/hf")
    cases.append(("out-holds-in", to_backend + ["outer/hf", "outer"],
                  ["outer"]))
    os.makedirs("configs")
    shutil.copy(args.config, "configs/config.json")
    cases.append(("out-holds-config", to_backend + [
        "--config", "configs/config.json", "hf", "configs"], ["configs", "hf"]))

    # Two rank directories swapped: the same names and shapes, another rank.
    for name, top, ranks_in in (("swapped-ranks", "backend", "release"),
                                ("swapped-safetensors-ranks", "backend-st", "")):
        copy = name + "-in"
        shutil.copytree(top, copy)
        where = os.path.join(copy, ranks_in)
        first, second = (os.path.join(where, d) for d in rank_dirs(where))
        os.rename(first, where + "/tmp")
        os.rename(second, first)
        os.rename(where + "/tmp", second)
        cases.append((name, to_hf + [copy, name + "-out"], [copy]))

    failures = []
    for name, cmd, inputs in cases:
        before = {i: snapshot(i) for i in inputs}
        try:
            proc = subprocess.run([args.convert] + cmd, capture_output=True,
                                  text=True, errors="replace", timeout=120)
        except subprocess.TimeoutExpired:
            failures.append(f"{name}: timed out")
            continue
        lines = proc.stderr.splitlines()
        if proc.returncode != 1:
            failures.append(f"{name}: exit {proc.returncode}")
        if any(c in proc.stderr for c in CRASH):
            failures.append(f"{name}: crashed")
        for i in inputs:
            if snapshot(i) != before[i]:
                failures.append(f"{name}: changed {i}")
        if not lines or not lines[0].startswith(PREFIX):
            failures.append(f"{name}: printed {proc.stderr!r}")
            continue
        print(f"{name}: {lines[0][len(PREFIX):]}")
    # The same inputs, apart, convert.
    r = subprocess.run([args.convert] + to_hf + ["backend", "back"],
                       capture_output=True, text=True)
    if r.returncode:
        failures.append("backend -> hf failed: " + r.stderr)
    print(f"{len(cases)} cases, {len(failures)} failures")
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
