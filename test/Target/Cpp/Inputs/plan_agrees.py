#!/usr/bin/env python3
"""The generated code and the compiler agree on what each rank holds.

For every model of the library and every backend, over a few parallel
configurations, compares the tensors (directory, name, shape, dtype) that
`mdl-convert --dry-run` lists from the generated C++ with those `mdlc plan
--format=json` computes from the IR, families expanded.

  plan_agrees.py MDLC MDL_CONVERT MODELS_DIR CONFIGS_DIR WORK
"""
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "..", "Conversion"))
import numpy as np  # noqa: E402
import roundtrip  # noqa: E402

POINTS = {
    "mcore_te": [dict(tp=2, pp=2), dict(tp=2, ep=2, etp=2), dict(pp=2, vpp=2)],
    "mcore_local": [dict(tp=2, pp=2), dict(tp=4, ep=2)],
    "vllm": [dict(tp=2)],
    "mcore_te_dist": [dict()],
}


def expand(name, families):
    """`experts.{E 0..3}.w` -> experts.0.w ... experts.3.w"""
    m = re.search(r"\{(\w+) (\d+)\.\.(\d+)\}", name)
    if not m:
        return [name]
    out = []
    for i in range(int(m[2]), int(m[3]) + 1):
        out += expand(name[:m.start()] + str(i) + name[m.end():], families)
    return out


def main():
    mdlc, convert, models, configs, work = sys.argv[1:6]
    checked, bad = 0, []
    for line in subprocess.run([convert, "--list"], capture_output=True,
                               text=True).stdout.splitlines():
        model, backend, spec = line.split("\t")[:3]
        if backend == "hf":
            continue
        hf = os.path.join(work, model)
        config = os.path.join(configs, model + ".json")
        if not os.path.exists(hf):
            os.makedirs(hf)
            shutil.copy(config, os.path.join(hf, "config.json"))
            tensors = json.loads(subprocess.run(
                [mdlc, "params", os.path.join(models, spec), "--hf-config", config,
                 "--format=json"], capture_output=True, text=True).stdout)
            roundtrip.write_checkpoint(os.path.join(hf, "model.safetensors"),
                                       tensors, np.random.default_rng(1))
        for point in POINTS[backend]:
            args = []
            for k, v in point.items():
                args += ["--" + k, str(v)]
            gen = subprocess.run([convert, "--model", model, "--from", "hf", "--to",
                                  backend, "--format", "safetensors", "--dry-run", hf, os.path.join(work, "x")]
                                 + args, capture_output=True, text=True)
            plan = subprocess.run([mdlc, "plan", os.path.join(models, spec),
                                   "--backend", backend, "--hf-config", config,
                                   "--format=json"] + args,
                                  capture_output=True, text=True)
            where = "%s on %s %s" % (model, backend, point)
            if gen.returncode or plan.returncode:
                invalid = "is not a valid configuration"
                if invalid in gen.stderr and invalid in plan.stderr:
                    continue
                bad.append("%s: %s%s" % (where, gen.stderr, plan.stderr))
                continue
            expected = []
            p = json.loads(plan.stdout)
            vpp = point.get("vpp", 1)
            for r in p["ranks"]:
                for t in r["tensors"]:
                    prefix = "model%d." % t["chunk"] if vpp > 1 else ""
                    for name in expand(t["name"], t.get("families")):
                        expected.append((r["rank"], prefix + name, t["shape"], t["dtype"]))
            got, rank, last = [], -1, None
            for l in gen.stdout.splitlines():
                d, name, shape, dtype = l.split("\t")
                if d != last:
                    rank, last = rank + 1, d
                got.append((rank, name, json.loads(shape), dtype))
            checked += 1
            if sorted(map(str, got)) != sorted(map(str, expected)):
                diff = set(map(str, got)) ^ set(map(str, expected))
                bad.append("%s: %d differences, e.g. %s" % (where, len(diff), sorted(diff)[:3]))
    print("%d model/backend/configuration triples agree, %d disagree" % (checked - len(bad), len(bad)))
    for b in bad:
        print("DISAGREE: " + b)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
