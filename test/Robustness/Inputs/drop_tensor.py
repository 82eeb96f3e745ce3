#!/usr/bin/env python3
"""drop_tensor.py FILE NAME: rewrites safetensors file FILE without tensor
NAME (struct and json only, independent of MDL's reader and writer)."""
import json
import struct
import sys


def main():
    path, name = sys.argv[1], sys.argv[2]
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    if name not in header:
        sys.exit("%s holds no tensor %r" % (path, name))
    body = data[8 + n:]
    out, blobs, offset = {}, [], 0
    for k, t in header.items():
        if k == name:
            continue
        if k == "__metadata__":
            out[k] = t
            continue
        b, e = t["data_offsets"]
        blobs.append(body[b:e])
        out[k] = dict(t, data_offsets=[offset, offset + e - b])
        offset += e - b
    text = json.dumps(out).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


if __name__ == "__main__":
    main()
