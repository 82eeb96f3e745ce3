#!/usr/bin/env python3
"""Runs mdl-convert on bad inputs: each must end with exit 1, one clear
message, nothing on stdout, no crash, and no output directory left behind.

  bad_inputs.py --mdlc MDLC --convert MDL_CONVERT --spec SPEC --model M
                --config CONFIG.json --work DIR

Every broken safetensors file of the corpus (Runtime/Inputs/
malformed_safetensors.py) is placed as IN/model.safetensors next to a valid
config.json; then come a wrong model name, checkpoints whose tensors
disagree with the spec, a bad parallel configuration, bad or missing
config.json, and backend sources without plan.json or missing a rank.
Prints `CASE: MESSAGE` (the first line of the message; paths are relative
to DIR) per case, then a summary.
"""
import os
import shutil
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "..", "..", "Runtime", "Inputs"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "Inputs"))
import malformed_safetensors  # noqa: E402
import refusals  # noqa: E402
import roundtrip  # noqa: E402

PREFIX = "mdl-convert: error: "


def main():
    args = roundtrip.arguments().parse_args()
    # The valid checkpoint the other cases break or stand beside.
    good, tensors = roundtrip.write_hf(args.mdlc, args.spec, args.config,
                                       args.work, 3)
    os.chdir(args.work)
    good = os.path.relpath(good)
    rng = np.random.default_rng(4)

    def source(case, config=True):
        """A directory for `case` with the valid config.json in it."""
        os.makedirs(case)
        if config:
            shutil.copy(args.config, os.path.join(case, "config.json"))
        return case

    def checkpoint(case, tensors):
        d = source(case)
        roundtrip.write_checkpoint(os.path.join(d, "model.safetensors"),
                                   tensors, rng)
        return d

    cases = []  # (name, input directory, extra arguments)
    to_backend = ["--from", "hf", "--to", "mcore_te", "--tp", "2"]
    for name, path in malformed_safetensors.write_all(
            lambda name: os.path.join(source(name), "model.safetensors")):
        cases.append((name, os.path.dirname(path), to_backend))

    norm = next(t for t in tensors if t["name"] == "model.norm.weight")
    others = [t for t in tensors if t is not norm]
    cases.append(("unknown-model", good,
                  ["--model", "nosuch", "--from", "hf", "--to", "mcore_te"]))
    cases.append(("wrong-shape", checkpoint(
        "wrong-shape", others + [dict(norm, shape=[norm["shape"][0] - 1])]),
        to_backend))
    cases.append(("wrong-dtype", checkpoint(
        "wrong-dtype", others + [dict(norm, dtype="F32")]), to_backend))
    cases.append(("missing-tensor", checkpoint("missing-tensor", others),
                  to_backend))
    cases.append(("extra-tensor", checkpoint(
        "extra-tensor", tensors + [dict(norm, name="model.extra.weight")]),
        to_backend))
    cases.append(("invalid-parallel", good,
                  ["--from", "hf", "--to", "mcore_te", "--tp", "3"]))
    d = source("missing-config", config=False)
    shutil.copy(os.path.join(good, "model.safetensors"), d)
    cases.append(("missing-config", d, to_backend))
    d = source("bad-json-config", config=False)
    shutil.copy(os.path.join(good, "model.safetensors"), d)
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write('{"hidden_size": 28,\n')
    cases.append(("bad-json-config", d, to_backend))
    to_hf = ["--from", "mcore_te", "--to", "hf"]
    cases.append(("no-plan", source("no-plan"), to_hf))
    # A backend checkpoint that lost one rank's file, or holds a broken one.
    backend = "backend"
    r = subprocess.run([args.convert, "--model", args.model, "--quiet"] +
                       to_backend + [good, backend], capture_output=True,
                       text=True)
    if r.returncode:
        sys.exit("hf -> mcore_te failed:\n" + r.stderr)
    root = os.path.join(backend, "release")
    ranks = sorted(e for e in os.listdir(root) if e.startswith("mp_rank"))
    for name, damage in (("missing-rank-file", None),
                         ("truncated-rank-file", b"\x10\x00\x00")):
        d = name
        shutil.copytree(backend, d)
        path = os.path.join(d, "release", ranks[-1], "model_optim_rng.pt")
        os.remove(path)
        if damage is not None:
            with open(path, "wb") as f:
                f.write(damage)
        cases.append((name, d, to_hf))

    # An output directory that exists, with something in the way of a rank:
    # a file where its directory goes, or a directory where its file goes
    # (found only when the written file is renamed over it). What was there
    # must be all that is left.
    in_the_way = {"rank-dir-is-a-file": "release/mp_rank_01",
                  "rank-file-is-a-dir": "release/mp_rank_01/model_optim_rng.pt/x"}
    for name, path in in_the_way.items():
        os.makedirs(os.path.dirname(os.path.join(name + ".out", path)),
                    exist_ok=True)
        if name.endswith("file"):
            open(os.path.join(name + ".out", path), "w").close()
        else:
            os.makedirs(os.path.join(name + ".out", path))
        # Written into with --overwrite (else it is refused as not empty).
        cases.append((name, good, to_backend + ["--overwrite"]))

    def tree(d):
        return sorted(os.path.relpath(os.path.join(r, f), d)
                      for r, ds, fs in os.walk(d) for f in ds + fs)

    failures = []
    for name, d, extra in cases:
        out = name + ".out"  # beside the input: never inside it
        before = tree(out)
        cmd = [args.convert, "--quiet"] + extra + [d, out]
        if "--model" not in extra:
            cmd[1:1] = ["--model", args.model]
        proc = refusals.run(name, cmd, failures)
        if proc is None:
            continue
        message = refusals.refusal(name, proc, PREFIX, failures)
        if name in in_the_way and tree(out) != before:
            failures.append(f"{name}: left {tree(out)} in {out}")
        elif name not in in_the_way and os.path.exists(out):
            failures.append(f"{name}: left {out} behind")
        if message is not None:
            print(f"{name}: {message}")
    return refusals.summary(len(cases), "cases", failures)


if __name__ == "__main__":
    sys.exit(main())
