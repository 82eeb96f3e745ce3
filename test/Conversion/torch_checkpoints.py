#!/usr/bin/env python3
"""Megatron's torch checkpoints through mdl-convert, checked with torch.

A tiny random HF checkpoint goes to mcore_te in Megatron's layout (tracker,
release/ or iter_*/, mp_rank_TT[_PPP][_EEE]/model_optim_rng.pt) and in
per-rank safetensors; every rank file loads with torch.load(...,
weights_only=True) and equals the independent reference (reference.py);
back to HF it is byte for byte the original. Then the rank files are saved
again by torch.save as a training run saves them (args, optimizer and RNG
states, TE extra state, virtual stages model0/model1) without plan.json or
config.json, and read back to HF with --config: byte for byte again. A
rank file whose `model` is a call of os.system is refused and runs nothing.

  torch_checkpoints.py --mdlc MDLC --convert MDL_CONVERT --spec SPEC
                       --model M --config CONFIG.json --work DIR
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "Runtime", "Inputs"))
import roundtrip  # noqa: E402
import torch_files  # noqa: E402


def tree(d):
    return sorted(os.path.relpath(os.path.join(r, f), d)
                  for r, ds, fs in os.walk(d) for f in fs)


def main():
    ap = roundtrip.arguments()
    args = ap.parse_args()
    hf = roundtrip.write_hf(args.mdlc, args.spec, args.config, args.work, 3)[0]
    work = lambda *p: os.path.join(args.work, *p)  # noqa: E731

    def convert(*extra, expect=0):
        r = roundtrip.run([args.convert, "--model", args.model, "--quiet"] + list(extra))
        if r.returncode != expect:
            sys.exit("mdl-convert %s: exit %d\n%s" % (" ".join(extra), r.returncode, r.stderr))
        return r.stderr.strip()

    def check(out, par, label):
        r = roundtrip.run([sys.executable, os.path.join(HERE, "reference.py"), hf, out,
                           "--model", args.model, "--backend", "mcore_te"] +
                          sum([["--" + k, str(v)] for k, v in par.items()], []))
        print("%s: %s" % (label, (r.stdout + r.stderr).strip()))

    def back(src, label, *extra):
        dst = work("back-" + label)
        convert("--from", "mcore_te", "--to", "hf", *extra, src, dst)
        print("%s -> hf: %s" % (label, roundtrip.same(hf, dst) or "byte for byte the original"))

    # Megatron's layout, the default.
    out = work("mcore")
    convert("--from", "hf", "--to", "mcore_te", "--tp", "2", "--pp", "2", hf, out)
    print("layout:", " ".join(tree(out)))
    ckpt = torch.load(os.path.join(out, "release", "mp_rank_01_001", "model_optim_rng.pt"),
                      map_location="cpu", weights_only=True)
    print("torch.load(weights_only=True): keys %s, checkpoint_version %r, iteration %r, "
          "model %s of %d tensors, first %s %s %s" % (
              sorted(ckpt), ckpt["checkpoint_version"], ckpt["iteration"],
              type(ckpt["model"]).__name__, len(ckpt["model"]),
              *[(n, tuple(t.shape), t.dtype) for n, t in ckpt["model"].items()][0]))
    check(out, {"tp": 2, "pp": 2}, "tp=2 pp=2 torch")
    back(out, "torch")

    # Per-rank safetensors; an iteration instead of a release.
    out = work("mcore-st")
    convert("--from", "hf", "--to", "mcore_te", "--tp", "2", "--format", "safetensors", hf, out)
    print("layout:", " ".join(tree(out)))
    check(out, {"tp": 2}, "tp=2 safetensors")
    back(out, "safetensors")
    out = work("mcore-it")
    convert("--from", "hf", "--to", "mcore_local", "--iteration", "7", hf, out)
    print("layout:", " ".join(tree(out)),
          "tracker:", open(os.path.join(out, "latest_checkpointed_iteration.txt")).read())

    # What a training run saves: no plan.json, no config.json, much besides
    # the weights; the configuration comes from the directories.
    for label, par in (("tp=2 pp=2", ["--tp", "2", "--pp", "2"]),
                       ("pp=2 vpp=2", ["--pp", "2", "--vpp", "2"]),
                       ("tp=1", [])):
        src = work("src-" + label.replace(" ", "-"))
        convert("--from", "hf", "--to", "mcore_te", *par, hf, src)
        train = work("train-" + label.replace(" ", "-"))
        for rel in tree(src):
            if not rel.endswith(".pt"):
                continue
            sd = torch.load(os.path.join(src, rel), map_location="cpu", weights_only=True)
            models = {k: v for k, v in sd.items()
                      if k == "model" or (k.startswith("model") and k[5:].isdigit())}
            saved = torch_files.training_style(next(iter(models.values())))
            del saved["model"]
            for key, m in models.items():  # each with TE extra state
                saved[key] = torch_files.training_style(m)["model"]
            path = os.path.join(train, rel.replace("release", "iter_0000100"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            torch.save(saved, path)
        with open(os.path.join(train, "latest_checkpointed_iteration.txt"), "w") as f:
            f.write("100")
        back(train, "training " + label, "--config", args.config)
    # An iteration directory, and one rank's directory, given directly.
    back(os.path.join(work("train-tp=1"), "iter_0000100"), "iter_0000100",
         "--config", args.config)
    back(os.path.join(work("train-tp=1"), "iter_0000100", "mp_rank_00"), "mp_rank_00",
         "--config", args.config)
    print(convert("--from", "mcore_te", "--to", "hf", work("train-tp=1"), work("no-config"),
                  expect=1))

    # A rank file that would run code: refused, and nothing runs.
    marker = work("marker")
    evil = work("evil")
    os.makedirs(os.path.join(evil, "mp_rank_00"))
    torch.save({"model": torch_files.Call(os.system, "touch " + marker), "iteration": 1},
               os.path.join(evil, "mp_rank_00", "model_optim_rng.pt"))
    print(convert("--from", "mcore_te", "--to", "hf", "--config", args.config, evil,
                  work("evil-out"), expect=1))
    print("marker:", "present" if os.path.exists(marker) else "absent")


if __name__ == "__main__":
    main()
