#!/usr/bin/env python3
"""Writes a corpus of broken safetensors files into DIR and runs TOOL on each.

  malformed_safetensors.py TOOL DIR

Each case is read three ways: `list` (mapped), `list --header-only` (pread)
and `cat`. Every run must exit 1 with one line on stderr,
`mdl-safetensors: error: PATH: MESSAGE`, the same MESSAGE for all three, and
no crash. Prints `CASE: MESSAGE` per case, then a summary.
"""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "Inputs"))
import refusals  # noqa: E402


def st(header, data=b"", length=None):
    """A file: header (text, bytes or a JSON value) and data section."""
    if isinstance(header, (dict, list)):
        header = json.dumps(header)
    if isinstance(header, str):
        header = header.encode()
    n = len(header) if length is None else length
    return struct.pack("<Q", n) + header + data


def t(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def cases():
    f32x2 = t("F32", [2], 0, 8)
    yield "empty", b""
    yield "truncated", b"\x10\x00\x00"
    yield "header-past-end", st("{}", length=1000)
    yield "header-length-huge", st("{}", length=2 ** 64 - 1)
    yield "header-empty", st("")
    yield "bad-json", st('{"a": {"dtype": "F32",')
    yield "header-array", st([f32x2], bytes(8))
    yield "header-string", st('"weights"')
    yield "header-null", st("null")
    yield "nul-padding", st(b'{"w":' + json.dumps(f32x2).encode() + b"}\0\0",
                            bytes(8))
    yield "binary-garbage", st(bytes(range(200, 256)) * 3)
    yield "deep-nesting", st('{"__metadata__": ' + "[" * 100000 +
                             "]" * 100000 + "}")
    yield "overlap", st({"a": f32x2, "b": t("F32", [2], 4, 12)}, bytes(12))
    yield "out-of-range", st({"a": f32x2}, bytes(4))
    yield "gap", st({"a": t("U8", [4], 0, 4), "b": t("U8", [4], 8, 12)},
                    bytes(12))
    yield "leading-gap", st({"a": t("U8", [4], 4, 8)}, bytes(8))
    yield "trailing-bytes", st({"a": t("U8", [4], 0, 4)}, bytes(8))
    yield "data-without-tensors", st({}, bytes(4))
    yield "unknown-dtype", st({"w": t("F24", [2], 0, 6)}, bytes(6))
    yield "unsupported-dtype", st({"w": t("U16", [2], 0, 4)}, bytes(4))
    yield "spec-spelling-dtype", st({"w": t("f32", [2], 0, 8)}, bytes(8))
    yield "dtype-number", st({"w": t(4, [2], 0, 8)}, bytes(8))
    yield "size-mismatch", st({"x": t("F32", [2, 3], 0, 12)}, bytes(12))
    yield "duplicate-names", st('{"w": %s, "w": %s}' % (
        json.dumps(t("U8", [1], 0, 1)), json.dumps(t("U8", [1], 1, 2))),
        bytes(2))
    yield "non-utf8-name", st(b'{"\xff\xfe": ' +
                              json.dumps(t("U8", [1], 0, 1)).encode() + b"}",
                              bytes(1))
    yield "control-char-name", st(b'{"a\x01": ' +
                                  json.dumps(t("U8", [1], 0, 1)).encode() +
                                  b"}", bytes(1))
    yield "negative-dim", st({"w": t("F32", [-1, 2], 0, 0)})
    yield "shape-overflow", st({"w": t("F32", [2 ** 62, 4], 0, 0)})
    yield "shape-overflow-elements", st({"w": t("U8", [2 ** 31] * 3, 0, 0)})
    yield "shape-float", st({"w": t("U8", [1.5], 0, 1)}, bytes(1))
    yield "shape-not-array", st({"w": t("U8", 3, 0, 3)}, bytes(3))
    yield "end-before-begin", st({"w": t("U8", [0], 8, 4)}, bytes(8))
    yield "offsets-not-pair", st({"w": {"dtype": "U8", "shape": [4],
                                        "data_offsets": [0, 4, 8]}}, bytes(8))
    yield "offsets-negative", st({"w": t("U8", [4], -4, 0)}, bytes(4))
    yield "offsets-too-big", st('{"w": {"dtype": "U8", "shape": [1], '
                                '"data_offsets": [0, 99999999999999999999]}}')
    yield "missing-offsets", st({"w": {"dtype": "U8", "shape": [1]}}, b"x")
    yield "tensor-not-object", st({"w": [1, 2]})
    yield "unknown-key", st({"w": dict(t("U8", [1], 0, 1), layout="C")},
                            b"x")
    yield "metadata-not-object", st({"__metadata__": ["a"]})
    yield "metadata-non-string", st({"__metadata__": {"step": 1}})


def write_all(path_of):
    """Writes each case to `path_of(NAME)`, and after them a header length
    past the limit (in a sparse file long enough for it), a directory and
    nothing (a missing file); the (name, path) pairs, sorted."""
    paths = []
    for name, content in cases():
        path = path_of(name)
        with open(path, "wb") as f:
            f.write(content)
        paths.append((name, path))
    path = path_of("header-too-large")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", 100_000_001) + b"{")
        f.truncate(8 + 100_000_001)
    paths.append(("header-too-large", path))
    path = path_of("directory")
    os.makedirs(path, exist_ok=True)
    paths.append(("directory", path))
    paths.append(("missing", path_of("missing")))
    return sorted(paths)


def main():
    tool, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    paths = write_all(lambda name: os.path.join(out, name + ".safetensors"))
    failures = []
    for name, path in paths:
        messages = set()
        for args in (["list", path], ["list", "--header-only", path],
                     ["cat", path, "w"]):
            run = f"{name}: {args[:2]}"
            proc = refusals.run(run, [tool] + args, failures, timeout=60)
            if proc is None:
                continue
            message = refusals.refusal(
                run, proc, f"mdl-safetensors: error: {path}: ", failures,
                one_line=True)
            if message is not None:
                messages.add(message)
        if len(messages) > 1:
            failures.append(f"{name}: messages differ: {sorted(messages)}")
        for m in sorted(messages):
            print(f"{name}: {m}")
    return refusals.summary(len(paths), "cases", failures)

if __name__ == "__main__":
    sys.exit(main())
