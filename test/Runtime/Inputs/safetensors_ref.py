#!/usr/bin/env python3
"""An independent safetensors reader and writer (struct and json only), to
cross-check mdl-safetensors both ways.

  check-written TOOL FILE SPEC   parse FILE (written by `mdl-safetensors write
                                 FILE SPEC`) by hand: the layout the writer
                                 promises, and every tensor's bytes against
                                 the fills computed here and `TOOL cat`
  write-python DIR               write files by hand into DIR
  check-cat TOOL FILE            compare `TOOL cat` of every tensor of FILE
                                 with the bytes read here
"""
import json
import math
import os
import struct
import subprocess
import sys

SIZES = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "I64": 8, "I32": 4,
         "I16": 2, "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}
INTS = {"I64": "<q", "I32": "<i", "I16": "<h", "I8": "<b", "U8": "<B"}


def read(path):
    """Returns (header pairs in file order, header length, data section)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    pairs = json.loads(raw[8:8 + n].decode("utf-8"),
                       object_pairs_hook=lambda p: p)
    return pairs, n, raw[8:8 + n], raw[8 + n:]


def decode_minifloat(byte, exp_bits, man_bits, bias):
    """The value of an 8-bit float, decoded from its fields."""
    sign = -1.0 if byte >> 7 else 1.0
    e = (byte >> man_bits) & ((1 << exp_bits) - 1)
    m = byte & ((1 << man_bits) - 1)
    if e == 0:
        return sign * m * 2.0 ** (1 - bias - man_bits)
    return sign * (1 + m / 2 ** man_bits) * 2.0 ** (e - bias)


def encode_by_search(value, exp_bits, man_bits, bias):
    # Inverting the decoder keeps this independent of the C++ encoder.
    for b in range(128):
        if decode_minifloat(b, exp_bits, man_bits, bias) == value:
            return bytes([b])
    raise ValueError(f"{value} not representable")


def iota_element(dtype, i):
    if dtype == "F32":
        return struct.pack("<f", float(i % 2 ** 24))
    if dtype == "F64":
        return struct.pack("<d", float(i % 2 ** 53))
    if dtype == "F16":
        return struct.pack("<e", float(i % 2 ** 11))
    if dtype == "BF16":  # the upper half of the float32, exact below 2^8
        return struct.pack("<f", float(i % 2 ** 8))[2:]
    if dtype == "F8_E4M3":
        return encode_by_search(float(i % 16), 4, 3, 7)
    if dtype == "F8_E5M2":
        return encode_by_search(float(i % 8), 5, 2, 15)
    if dtype == "BOOL":
        return bytes([i & 1])
    bits = SIZES[dtype] * 8
    v = i % 2 ** bits
    if dtype != "U8" and v >= 2 ** (bits - 1):
        v -= 2 ** bits
    return struct.pack(INTS[dtype], v)


def splitmix64(seed, word):
    mask = 2 ** 64 - 1
    z = (seed + (word + 1) * 0x9E3779B97F4A7C15) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return z ^ (z >> 31)


def expected_bytes(desc, spec_dir):
    dtype, shape = desc["dtype"], desc["shape"]
    count = math.prod(shape)
    size = count * SIZES[dtype]
    fill = desc.get("fill", "zeros")
    if fill == "zeros":
        return bytes(size)
    if fill == "iota":
        return b"".join(iota_element(dtype, i) for i in range(count))
    if fill.startswith("random:"):
        seed = int(fill[7:])
        words = b"".join(struct.pack("<Q", splitmix64(seed, w))
                         for w in range((size + 7) // 8))[:size]
        return bytes(b & 1 for b in words) if dtype == "BOOL" else words
    if fill.startswith("bytes:"):
        with open(spec_dir + "/" + fill[6:], "rb") as f:
            return f.read()
    raise ValueError(fill)


def cat(tool, path, name):
    return subprocess.run([tool, "cat", path, name], check=True,
                          capture_output=True).stdout


def check_written(tool, path, spec_path):
    with open(spec_path) as f:
        spec = json.load(f)
    spec_dir = os.path.dirname(spec_path) or "."
    pairs, n, header_raw, data = read(path)
    problems = []
    if n % 8:
        problems.append(f"header length {n} is not a multiple of 8")
    if not header_raw.decode().rstrip(" ").endswith("}"):
        problems.append("header padding is not spaces")
    names = [k for k, _ in pairs if k != "__metadata__"]
    if names != sorted(names):
        problems.append(f"header keys not sorted: {names}")
    if "__metadata__" in spec:
        meta = dict(pairs).get("__metadata__")
        if meta is None or dict(meta) != spec["__metadata__"]:
            problems.append(f"metadata {meta}")
    if set(names) != {k for k in spec if k != "__metadata__"}:
        problems.append(f"tensors {names}")
    entries = sorted((dict(v)["data_offsets"], k) for k, v in pairs
                     if k != "__metadata__")
    pos = 0
    for (begin, end), name in entries:
        if begin != pos:
            problems.append(f"{name} begins at {begin}, not {pos}")
        pos = end
    if pos != len(data):
        problems.append(f"data section is {len(data)} bytes, tensors {pos}")
    # Data order: larger elements first, then by name; each aligned.
    order = [name for _, name in entries]
    by_size = sorted(order, key=lambda k: (-SIZES[spec[k]["dtype"]], k))
    if order != by_size:
        problems.append(f"data order {order}, expected {by_size}")
    for (begin, end), name in entries:
        desc = spec[name]
        info = dict(dict(pairs)[name])
        if info["dtype"] != desc["dtype"] or info["shape"] != desc["shape"]:
            problems.append(f"{name}: header {info}")
        if (8 + n + begin) % SIZES[desc["dtype"]]:
            problems.append(f"{name} is not aligned")
        want = expected_bytes(desc, spec_dir)
        if data[begin:end] != want:
            problems.append(f"{name}: file bytes differ from the fill")
        if cat(tool, path, name) != want:
            problems.append(f"{name}: cat bytes differ from the fill")
        print(f"{name}: {want[:16].hex()}")
    for p in problems:
        print("PROBLEM", p)
    print(f"{len(entries)} tensors, {len(problems)} problems")


def write(path, header_pairs, data, pad=0):
    text = "{" + ",".join(json.dumps(k) + ":" + json.dumps(v)
                          for k, v in header_pairs) + "}" + " " * pad
    raw = text.encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + data)


def write_python(out_dir):
    # Header in neither name nor data order, metadata last, no padding; a
    # scalar, an empty tensor, and every dtype.
    blobs = [("z.f32", "F32", [2, 2], struct.pack("<4f", 1.5, -2, 3.25, 0)),
             ("a.i64", "I64", [3], struct.pack("<3q", -1, 2 ** 40, 7)),
             ("m.bf16", "BF16", [2], bytes([0x80, 0x3F, 0x00, 0xC0])),
             ("e.empty", "F32", [0, 3], b""),
             ("s.scalar", "F64", [], struct.pack("<d", math.pi)),
             ("h.f16", "F16", [3], struct.pack("<3e", 0.5, 65504, -1)),
             ("i32", "I32", [1], struct.pack("<i", -5)),
             ("i16", "I16", [2], struct.pack("<2h", 300, -300)),
             ("i8", "I8", [2], struct.pack("<2b", -128, 127)),
             ("u8", "U8", [3], bytes([0, 128, 255])),
             ("flags", "BOOL", [2, 1], bytes([1, 0])),
             ("q.e4m3", "F8_E4M3", [2], bytes([0x38, 0x7E])),
             ("q.e5m2", "F8_E5M2", [1], bytes([0x3C])),
             ("unicode.\u00e9\u4e2d", "U8", [1], bytes([42]))]
    data, offsets = b"", {}
    for name, _, _, blob in sorted(blobs, key=lambda b: b[0]):
        offsets[name] = [len(data), len(data) + len(blob)]
        data += blob
    pairs = [(name, {"dtype": dt, "shape": shape,
                     "data_offsets": offsets[name]})
             for name, dt, shape, _ in reversed(blobs)]
    pairs.append(("__metadata__", {"format": "pt", "note": "by hand"}))
    write(out_dir + "/python.safetensors", pairs, data)
    # Padded with spaces, as the reference implementation pads.
    write(out_dir + "/padded.safetensors",
          [("w", {"dtype": "U8", "shape": [3], "data_offsets": [0, 3]})],
          b"abc", pad=5)
    # Only metadata, no tensors.
    write(out_dir + "/empty.safetensors", [("__metadata__", {})], b"")


def check_cat(tool, path):
    pairs, _, _, data = read(path)
    tensors = [(k, v) for k, v in pairs if k != "__metadata__"]
    bad = 0
    for name, info in tensors:
        begin, end = dict(info)["data_offsets"]
        if cat(tool, path, name) != data[begin:end]:
            print(f"PROBLEM {name}: cat bytes differ")
            bad += 1
    print(f"{len(tensors)} tensors, {bad} problems")


def main():
    cmd = sys.argv[1]
    if cmd == "check-written":
        check_written(*sys.argv[2:5])
    elif cmd == "write-python":
        write_python(sys.argv[2])
    elif cmd == "check-cat":
        check_cat(*sys.argv[2:4])
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
