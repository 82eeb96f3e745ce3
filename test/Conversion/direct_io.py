#!/usr/bin/env python3
"""mdl-convert --io=direct against --io=buffered.

  direct_io.py --mdlc MDLC --convert MDL_CONVERT --spec SPEC --model NAME
               --config CONFIG --work DIR

On a random HF checkpoint whose rank files span several of the writer's
4 MB chunks, each target (Megatron's torch files, whose zip entries leave
gaps between tensors, and safetensors) is written with direct I/O and
buffered, on two threads: the files must be the same, byte for byte. Where
the work directory's file system takes direct I/O, the weight files written
with it must be (nearly) absent from the page cache, which holds those
written buffered: else direct I/O did not bypass the cache.
"""
import mmap
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import mpi  # noqa: E402
import roundtrip  # noqa: E402


def takes_direct_io(directory):
    """Whether the file system of `directory` accepts an aligned O_DIRECT
    write."""
    path = os.path.join(directory, "probe")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644)
    except (OSError, AttributeError):
        return False
    try:
        page = mmap.mmap(-1, 4096)  # page-aligned memory
        return os.write(fd, page) == 4096
    except OSError:
        return False
    finally:
        os.close(fd)
        os.unlink(path)


def resident(path):
    """The fraction of the file's pages in the page cache (fincore)."""
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--raw",
                          "--output", "RES,SIZE", path],
                         capture_output=True, text=True, check=True)
    res, size = (int(x) for x in out.stdout.split())
    return res / size


def main():
    args = roundtrip.arguments().parse_args()
    hf, _ = roundtrip.write_hf(args.mdlc, args.spec, args.config, args.work, 11)
    failures = []
    direct = takes_direct_io(args.work)
    for target in (["--to", "mcore_te", "--tp", "2"],
                   ["--to", "mcore_te", "--tp", "2", "--format", "safetensors"]):
        outs = {}
        for mode in ("cached", "direct"):
            out = os.path.join(args.work, mode)
            shutil.rmtree(out, ignore_errors=True)
            flags = ["--io=" + ("direct" if mode == "direct" else "buffered")]
            r = roundtrip.run([args.convert, "--model", args.model, "--from", "hf",
                               "--threads", "2", "--quiet"] + target + flags + [hf, out])
            if r.returncode:
                sys.exit("mdl-convert %s: exit %d\n%s" % (" ".join(target + flags),
                                                          r.returncode, r.stderr))
            # Residency first: reading the files brings them into the cache.
            weights = [os.path.join(d, f) for d, _, fs in os.walk(out) for f in fs
                       if f.endswith((".pt", ".safetensors"))]
            largest = max(os.path.getsize(w) for w in weights)
            if largest < 2 * (4 << 20):
                failures.append("the rank files are too small to span chunks: %d bytes"
                                % largest)
            cached = max(resident(w) for w in weights)
            if direct and mode == "direct" and cached > 0.05:
                failures.append("%s: %.0f%% of a file written with direct I/O is in "
                                "the page cache" % (" ".join(target), 100 * cached))
            if direct and mode == "cached" and cached < 0.5:
                failures.append("%s: the page cache holds only %.0f%% of a file written "
                                "through it" % (" ".join(target), 100 * cached))
            outs[mode] = mpi.files_of(out)
        same = outs["cached"] == outs["direct"]
        if not same:
            failures.append("%s: the files written with direct I/O differ" % " ".join(target))
        print("%s: %d files, %s" % (" ".join(target), len(outs["direct"]),
                                     "equal" if same else "DIFFERENT"))
    print("page cache checked: %s" % ("yes" if direct else
                                      "no, the file system refuses direct I/O"))
    print("direct-io: %d failures" % len(failures))
    for f in failures:
        print("FAIL: " + f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
