#!/usr/bin/env python3
"""One conversion spread over processes: mpirun and --ranks-from-env.

  mpi.py --mdlc MDLC --convert MDL_CONVERT --spec SPEC --model NAME
         --config CONFIG --work DIR [--np N]

On a tiny random HF checkpoint (dimension sizes of CONFIG), each target is
converted by one process and by `mpirun -np N`, and the two outputs must
hold the same files, byte for byte: Megatron's torch layout (tp 2, pp 2,
ep 2), vLLM's sharded_state with parts, and sharded HF with its index (from
the Megatron output). The same with N processes started one by one with
torchrun's RANK and WORLD_SIZE (--ranks-from-env). Then a failure seen by
one process only (a tensor missing from one source rank, which only the
process writing the target rank that needs it reads, not the first) must fail every
process with exit 1, print the error once, and leave no output.
"""
import json
import os
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import roundtrip  # noqa: E402

# Open MPI in a container: no ptrace-based single copy between processes.
MPI_ENV = dict(os.environ, OMPI_MCA_btl_vader_single_copy_mechanism="none",
               OMPI_MCA_rmaps_base_oversubscribe="1")


def files_of(root):
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = f.read()
    return out


def drop_tensor(path, name):
    """Rewrites a safetensors file without tensor `name`."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out, blobs, offset = {}, [], 0
    for k, t in header.items():
        if k == "__metadata__":
            out[k] = t
            continue
        if k == name:
            continue
        b, e = t["data_offsets"]
        blobs.append(body[b:e])
        out[k] = dict(t, data_offsets=[offset, offset + e - b])
        offset += e - b
    text = json.dumps(out).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def main():
    ap = roundtrip.arguments()
    ap.add_argument("--np", type=int, default=3)
    args = ap.parse_args()

    hf = roundtrip.write_hf(args.mdlc, args.spec, args.config, args.work, 11)[0]
    mpirun = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(args.np)]
    failures, checked = [], 0

    def convert(prefix, src, out, options, env=None):
        r = subprocess.run(prefix + [args.convert, "--model", args.model, "--quiet"] +
                           options + [src, out], capture_output=True, text=True, env=env)
        return r

    def same_both_ways(what, src, options):
        nonlocal checked
        one = os.path.join(args.work, what + "-one")
        many = os.path.join(args.work, what + "-mpi")
        env_out = os.path.join(args.work, what + "-env")
        r = convert([], src, one, options)
        if r.returncode:
            failures.append("%s: one process failed: %s" % (what, r.stderr.strip()))
            return one
        r = convert(mpirun, src, many, options, MPI_ENV)
        if r.returncode:
            failures.append("%s: mpirun failed: %s" % (what, r.stderr.strip()))
        elif files_of(one) != files_of(many):
            failures.append("%s: mpirun wrote other files: %s" % (
                what, sorted(set(files_of(one)) ^ set(files_of(many)))[:5] or "other bytes"))
        else:
            checked += 1
        for rank in range(args.np):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(args.np))
            r = convert([], src, env_out, options + ["--ranks-from-env"], env)
            if r.returncode:
                failures.append("%s: --ranks-from-env process %d failed: %s" % (
                    what, rank, r.stderr.strip()))
        if files_of(one) != files_of(env_out):
            failures.append("%s: --ranks-from-env wrote other files" % what)
        else:
            checked += 1
        return one

    mcore = same_both_ways("mcore_te", hf, ["--from", "hf", "--to", "mcore_te",
                                            "--tp", "2", "--pp", "2", "--ep", "2"])
    same_both_ways("vllm", hf, ["--from", "hf", "--to", "vllm", "--tp", "4",
                                "--max-shard-size", "20KB"])
    same_both_ways("hf", mcore, ["--from", "mcore_te", "--to", "hf",
                                 "--max-shard-size", "20KB"])
    for what in ("mcore_te", "vllm", "hf"):
        parts = sorted(files_of(os.path.join(args.work, what + "-one")))
        weights = [p for p in parts if p.endswith((".pt", ".safetensors"))]
        print("%s: %d files, %d of weights, e.g. %s" % (what, len(parts), len(weights),
                                                        weights[-1]))

    # A tensor missing from the source rank of pipeline stage 2 (of 4, one
    # layer each): to mcore_local at the same configuration, only the
    # process writing target rank 2 reads it, and it is not the first.
    src = os.path.join(args.work, "mcore-st")
    r = convert([], hf, src, ["--from", "hf", "--to", "mcore_te", "--pp", "4",
                              "--format", "safetensors"])
    if r.returncode:
        failures.append("safetensors source failed: " + r.stderr.strip())
    else:
        victim = os.path.join(src, "mp_rank_00_002", "model.safetensors")
        with open(victim, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            names = sorted(k for k in json.loads(f.read(n)) if k != "__metadata__")
        drop_tensor(victim, names[0])
        out = os.path.join(args.work, "failed")
        r = convert(mpirun, src, out, ["--from", "mcore_te", "--to", "mcore_local",
                                       "--pp", "4"], MPI_ENV)
        errors = [l for l in r.stderr.splitlines() if "error:" in l]
        print("failure: exit %d, %d error line(s), output %s" % (
            r.returncode, len(errors), "left" if os.path.exists(out) else "absent"))
        for l in errors:
            print("  " + l)

    # A failure while writing, after every process began: a directory in
    # the way of one rank's file. Every process removes what it wrote; only
    # what was there before stays.
    out = os.path.join(args.work, "blocked")
    os.makedirs(os.path.join(out, "release", "mp_rank_00_002", "model_optim_rng.pt"))
    r = convert(mpirun, hf, out, ["--from", "hf", "--to", "mcore_te", "--pp", "4",
                                  "--overwrite"], MPI_ENV)
    left = sorted(os.path.relpath(os.path.join(d, n), out)
                  for d, dirs, names in os.walk(out) for n in dirs + names)
    errors = [l for l in r.stderr.splitlines() if "error:" in l]
    print("blocked: exit %d, %d error line(s), left: %s" % (r.returncode, len(errors), left))
    for l in errors:
        print("  " + l)

    print("mpi: %d comparisons equal to one process, %d failures" % (checked, len(failures)))
    for f in failures:
        print("FAIL: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
