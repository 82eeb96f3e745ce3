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
import hashlib
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "Conversion"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "Inputs"))
import refusals  # noqa: E402
import roundtrip  # noqa: E402

PREFIX = "mdl-convert: error: "


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
    args = roundtrip.arguments().parse_args()
    roundtrip.write_hf(args.mdlc, args.spec, args.config, args.work, 5)
    os.chdir(args.work)
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
        proc = refusals.run(name, [args.convert] + cmd, failures)
        if proc is None:
            continue
        message = refusals.refusal(name, proc, PREFIX, failures)
        for i in inputs:
            if snapshot(i) != before[i]:
                failures.append(f"{name}: changed {i}")
        if message is not None:
            print(f"{name}: {message}")
    # The same inputs, apart, convert.
    r = subprocess.run([args.convert] + to_hf + ["backend", "back"],
                       capture_output=True, text=True)
    if r.returncode:
        failures.append("backend -> hf failed: " + r.stderr)
    return refusals.summary(len(cases), "cases", failures)


if __name__ == "__main__":
    sys.exit(main())
