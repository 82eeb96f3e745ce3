"""Checks what mdl-convert reports against what it wrote.

  progress.py spec PARAMS.json           a mdl-safetensors write spec for
                                         the HF tensors mdlc params lists
  progress.py json LOG OUT_DIR DRY_RUN   the --progress=json lines of LOG
  progress.py log LOG OUT_DIR DRY_RUN    the summary line of a log

The reference is independent of the converter's counters: bytes are those
of the tensors in OUT_DIR's files (from their headers), tensors and ranks
those --dry-run lists.
"""
import glob
import json
import os
import re
import struct
import sys

SIZE = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "F8_E4M3": 1, "I64": 8}


def written(out_dir):
    total = 0
    for path in glob.glob(os.path.join(out_dir, "**", "*.safetensors"), recursive=True):
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
        for name, t in header.items():
            if name != "__metadata__":
                total += t["data_offsets"][1] - t["data_offsets"][0]
    return total


def dry_run(path):
    lines = [l.split("\t") for l in open(path).read().splitlines()]
    return len(lines), len({l[0] for l in lines})


def main():
    mode = sys.argv[1]
    if mode == "spec":
        params = json.load(open(sys.argv[2]))
        print(json.dumps({t["name"]: {"dtype": t["dtype"], "shape": t["shape"],
                                      "fill": f"random:{i}"}
                          for i, t in enumerate(params)}))
        return
    text = open(sys.argv[2]).read()
    bytes_, (tensors, ranks) = written(sys.argv[3]), dry_run(sys.argv[4])
    if mode == "json":
        events = [json.loads(l) for l in text.splitlines()]
        kinds = [e["event"] for e in events]
        progress = [e for e in events if e["event"] == "progress"]
        done = [e["bytes_done"] for e in progress]
        print("events:", " ".join(sorted(set(kinds))), "last:", kinds[-1])
        print("progress lines:", "several" if len(progress) > 1 else len(progress),
              "increasing:", done == sorted(done))
        last = events[-1]
        print("totals match:", all(e["bytes_total"] == bytes_ and e["tensors_total"] == tensors
                                   and e["ranks_total"] == ranks for e in events))
        print("done:", last["bytes_done"] == bytes_, last["tensors_done"] == tensors,
              last["ranks_done"] == ranks, "threads", last["threads"])
    else:
        # Progress lines may come first on a slow machine; the summary ends.
        text = text.splitlines(keepends=True)[-1]
        m = re.fullmatch(r"converted (.*), (\d+) tensors, (\d+) ranks in [0-9.]+ s, "
                         r"[0-9.]+ (k|M|G)?B/s, (\d+) threads\n", text)
        if not m:
            print("no summary in:", text)
            return
        size = m.group(1)
        expect = (f"{bytes_} B" if bytes_ < 1e3 else f"{bytes_ / 1e3:.1f} kB"
                  if bytes_ < 1e6 else f"{bytes_ / 1e6:.1f} MB")
        print("summary:", size == expect, int(m.group(2)) == tensors,
              int(m.group(3)) == ranks, "threads", m.group(5))


main()
