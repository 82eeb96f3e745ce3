#!/usr/bin/env python3
"""Runs mdlc on every input of the malformed corpus.

Each spec (*.mdl) is checked against the corpus's base config, and each
config (*.json) is fed to the corpus's reading spec. Every run must end with
exit code 1, print `file:line:col: error:` as its first line, and neither
crash nor hang. Files whose names start with `_` are the corpus's helpers.
"""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "Inputs"))
import refusals  # noqa: E402

LOCATED = re.compile(r"^[^\n:]+:\d+:\d+: error: \S", re.ASCII)


def main():
    mdlc, inputs = sys.argv[1], sys.argv[2]
    names = sorted(n for n in os.listdir(inputs)
                   if not n.startswith("_") and n.endswith((".mdl", ".json")))
    failures = []
    for name in names:
        path = os.path.join(inputs, name)
        if name.endswith(".mdl"):
            cmd = [mdlc, "check", path, "--hf-config",
                   os.path.join(inputs, "_base.json")]
        else:
            cmd = [mdlc, "check", os.path.join(inputs, "_reads.mdl"),
                   "--hf-config", path]
        proc = refusals.run(name, cmd, failures, timeout=60)
        if proc is None:
            continue
        # The include stack of an imported file precedes its error.
        err = "\n".join(l for l in proc.stderr.split("\n")
                        if not l.startswith("Included from "))
        first = err.split("\n", 1)[0]
        if proc.returncode != 1:
            failures.append(f"{name}: exit code {proc.returncode}, expected 1")
        elif not LOCATED.match(err):
            failures.append(f"{name}: first line is not a located error: {first}")
        elif refusals.crashed(err):
            failures.append(f"{name}: crashed")
        else:
            print(f"ok {name}: {first}")
    return refusals.summary(len(names), "inputs", failures)


if __name__ == "__main__":
    sys.exit(main())
