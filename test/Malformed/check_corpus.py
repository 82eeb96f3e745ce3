#!/usr/bin/env python3
"""Runs mdlc on every input of the malformed corpus.

Each spec (*.mdl) is checked against the corpus's base config, and each
config (*.json) is fed to the corpus's reading spec. Every run must end with
exit code 1, print `file:line:col: error:` as its first line, and neither
crash nor hang. Files whose names start with `_` are the corpus's helpers.
"""
import os
import re
import subprocess
import sys

LOCATED = re.compile(rb"^[^\n:]+:\d+:\d+: error: \S")
CRASH = [b"PLEASE submit a bug report", b"Assertion", b"Stack dump",
         b"AddressSanitizer", b"runtime error:", b"terminate called"]


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
        try:
            proc = subprocess.run(cmd, capture_output=True, timeout=60)
        except subprocess.TimeoutExpired:
            failures.append(f"{name}: timed out")
            continue
        # The include stack of an imported file precedes its error.
        err = b"\n".join(l for l in proc.stderr.split(b"\n")
                         if not l.startswith(b"Included from "))
        if proc.returncode != 1:
            failures.append(f"{name}: exit code {proc.returncode}, expected 1")
        elif not LOCATED.match(err):
            first = err.split(b"\n", 1)[0].decode(errors="replace")
            failures.append(f"{name}: first line is not a located error: {first}")
        elif any(c in err for c in CRASH):
            failures.append(f"{name}: crashed")
        else:
            first = err.split(b"\n", 1)[0].decode(errors="replace")
            print(f"ok {name}: {first}")
    print(f"{len(names)} inputs, {len(failures)} failures")
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
