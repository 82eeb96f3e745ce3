"""Writes safetensors files whose header is one large JSON object, for the
reader's member index (objects of more than 16 members keep one).

  large_header.py OUT N [DUPLICATE]

N tensors named t000, t001, ... (in a shuffled order, each of a distinct
shape), and with DUPLICATE the name of tensor DUPLICATE once more, last.
Prints the listing mdl-safetensors list should give, sorted by name, or
with DUPLICATE the error it should report (the repeat's byte offset in the
file, found here by searching the text).
"""
import json
import random
import struct
import sys

out, n = sys.argv[1], int(sys.argv[2])
order = list(range(n))
random.Random(7).shuffle(order)
entries, offset = [], 0
for i in order:
    size = 2 * (i + 1)
    entries.append((f"t{i:03d}", {"dtype": "BF16", "shape": [i + 1],
                                  "data_offsets": [offset, offset + size]}))
    offset += size
if len(sys.argv) > 3:
    d = int(sys.argv[3])
    entries.append((f"t{d:03d}", {"dtype": "BF16", "shape": [1],
                                  "data_offsets": [offset, offset + 2]}))
    offset += 2
# json.dumps of a dict cannot repeat a key: the object is written by hand.
text = ("{" + ",".join(json.dumps(k) + ":" + json.dumps(v) for k, v in entries) + "}").encode()
text += b" " * (-len(text) % 8)
with open(out, "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + bytes(offset))
if len(sys.argv) > 3:
    key = json.dumps(entries[-1][0]).encode()
    at = 8 + text.find(key, text.find(key) + 1)
    print(f"mdl-safetensors: error: {out}: header is not valid JSON: "
          f"duplicate key {key.decode()} (at byte {at})")
else:
    for i in range(n):
        print(f"t{i:03d}\t[{i + 1}]\tBF16")
