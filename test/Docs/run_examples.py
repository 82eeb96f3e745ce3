#!/usr/bin/env python3
"""Runs the example commands of Markdown files and compares their output.

A fenced block whose lines start with `$ ` is an example: each `$ ` line is
a shell command, and the lines up to the next command or the end of the
block are its output. The commands of a file run in order, in one scratch
directory where `build`, `models`, `test`, `docs` and `bench` point into the
tree, so that they run as written from its top. In the shown output a line
`...` stands for any number of lines, and times (`0.71 s`) match any time.

A block right after the line `<!-- docs-test: skip (REASON) -->` is not run.

The scratch directory also holds `qwen3-hf`, `ds-hf` and `qwen3_5-hf`, the
HF checkpoints the README's conversion and Python examples start from: the
small test configs `test/Conversion/Inputs/qwen3.json`, `deepseek_v3.json`
and `qwen3_5.json` with random weights, written with `mdl-safetensors
write`.

Usage: run_examples.py --src SRC_DIR --build BUILD_DIR --work DIR FILE.md...
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

SKIP = re.compile(r"<!--\s*docs-test:\s*skip\b(.*?)-->")
TIME = re.compile(r"\b\d+\.\d+ s\b")


def blocks(path):
    """(line number, skip reason or None, lines) of each fenced block."""
    lines = open(path, encoding="utf-8").read().split("\n")
    out, i, last = [], 0, ""
    while i < len(lines):
        m = re.match(r"^(\s*)```", lines[i])
        if not m:
            if lines[i].strip():
                last = lines[i]
            i += 1
            continue
        indent, start = len(m.group(1)), i + 1
        body = []
        i += 1
        while i < len(lines) and not re.match(r"^\s*```", lines[i]):
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        skip = SKIP.search(last)
        out.append((start, skip.group(1).strip(" ()") if skip else None, body))
        last = ""
        i += 1
    return out


def matches(expected, actual):
    """Whether actual lines match expected ones, `...` matching any run."""
    expected = [TIME.sub("<time> s", l) for l in expected]
    actual = [TIME.sub("<time> s", l) for l in actual]

    def go(e, a):
        if e == len(expected):
            return a == len(actual)
        if expected[e].strip() == "...":
            return any(go(e + 1, k) for k in range(a, len(actual) + 1))
        return a < len(actual) and expected[e].rstrip() == actual[a].rstrip() and go(e + 1, a + 1)

    return go(0, 0)


def make_hf(work, env, name, spec, config):
    """Writes the HF checkpoint `name` in `work`: `config` with random
    weights of the tensors `spec` lists (see the file comment)."""
    hf = os.path.join(work, name)
    os.makedirs(hf)
    shutil.copy(os.path.join(work, config), os.path.join(hf, "config.json"))
    params = json.loads(subprocess.run(
        ["mdlc", "params", spec, "--hf-config", config, "--format=json"],
        cwd=work, env=env, check=True, capture_output=True, text=True).stdout)
    # A copy (an MTP layer's embedding or head) holds the bytes of the
    # tensor it copies, as in a real release: same seed, same shape.
    seed = {t["name"]: i for i, t in enumerate(params)}
    fills = {t["name"]: {"dtype": t["dtype"], "shape": t["shape"],
                         "fill": f"random:{seed[t.get('copy_of', t['name'])]}"}
             for t in params}
    with open(os.path.join(work, name + ".spec.json"), "w") as f:
        json.dump(fills, f)
    subprocess.run(["mdl-safetensors", "write", name + "/model.safetensors",
                    name + ".spec.json"], cwd=work, env=env, check=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    checked = skipped = failed = 0
    for md in args.files:
        rel = os.path.relpath(md, args.src)
        work = os.path.join(args.work, rel.replace("/", "_"))
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        for name in ("models", "test", "docs", "bench"):
            os.symlink(os.path.join(args.src, name), os.path.join(work, name))
        os.symlink(args.build, os.path.join(work, "build"))
        env = dict(os.environ)
        env["PATH"] = os.path.join(args.build, "bin") + os.pathsep + env["PATH"]
        make_hf(work, env, "qwen3-hf", "models/qwen3.mdl",
                "test/Conversion/Inputs/qwen3.json")
        make_hf(work, env, "ds-hf", "models/deepseek_v3.mdl",
                "test/Conversion/Inputs/deepseek_v3.json")
        make_hf(work, env, "qwen3_5-hf", "models/qwen3_5.mdl",
                "test/Conversion/Inputs/qwen3_5.json")
        for line, skip, body in blocks(md):
            commands = []
            for text in body:
                if text.startswith("$ "):
                    commands.append((text[2:], []))
                elif commands:
                    commands[-1][1].append(text)
            if not commands:
                continue
            if skip is not None:
                print(f"{rel}:{line}: skipped ({skip})")
                skipped += 1
                continue
            ok = True
            for command, expected in commands:
                while expected and not expected[-1].strip():
                    expected.pop()
                r = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=work, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                actual = r.stdout.rstrip("\n").split("\n") if r.stdout.strip() else []
                if not matches(expected, actual):
                    ok = False
                    print(f"{rel}:{line}: '$ {command}' printed:")
                    print("\n".join("  | " + l for l in actual))
                    print("  expected:")
                    print("\n".join("  | " + l for l in expected))
                    if r.stderr:
                        print("  stderr:\n" + "\n".join("  ! " + l for l in r.stderr.splitlines()[:20]))
            print(f"{rel}:{line}: {'ok' if ok else 'FAILED'} ({len(commands)} commands: "
                  + "; ".join(c.split()[0] + " " + (c.split()[1] if len(c.split()) > 1 else "") for c, _ in commands)
                  + ")")
            checked += 1
            failed += not ok
    print(f"{checked} example blocks run, {skipped} skipped, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
