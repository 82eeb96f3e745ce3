#!/usr/bin/env python3
"""Writes configs and a spec with long lists, for the evaluation-time test.

  long_layers.py OUT_DIR N

OUT_DIR/qwen3_5.json: the Qwen3.5-4B release config with N layers and its
layer_types; OUT_DIR/lists.json and OUT_DIR/lists.mdl: a model whose lets
read, index and comprehend a config list of N entries, per element and per
stack element.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
out, n = sys.argv[1], int(sys.argv[2])
os.makedirs(out, exist_ok=True)
release = os.path.join(HERE, "..", "..", "..", "models", "configs",
                       "qwen3.5-4b", "config.json")
with open(release) as f:
    config = json.load(f)
text = config["text_config"]
text["num_hidden_layers"] = n
text["layer_types"] = ["full_attention" if (i + 1) % 4 == 0 else
                       "linear_attention" for i in range(n)]
text["mtp_num_hidden_layers"] = 0
with open(os.path.join(out, "qwen3_5.json"), "w") as f:
    json.dump(config, f)
with open(os.path.join(out, "lists.json"), "w") as f:
    json.dump({"n": n, "types": text["layer_types"]}, f)
with open(os.path.join(out, "lists.mdl"), "w") as f:
    f.write("""module Layer(kind: string) {
  dim D = kind == "full_attention" ? 2 : 3;
  param w: [D];
}
model lists {
  config {
    n: int = hf("n");
    types: list<string> = hf("types");
    made: list<string> = hf("absent") ??
        [(i + 1) % 4 == 0 ? "full_attention" : "linear_attention"
         for i in range(n)];
  }
  example "lists.json";
  dtype = bf16;
  let full = [t == "full_attention" for t in types];
  let same = [types[i] == made[i] for i in range(n)];
  let fulls = len([i for i in range(n) if_full]);
  require len(full) == n && !(false in same) : "the lists agree";
  stack layers[n] as i: Layer(types[i]);
}
""".replace("  let fulls = len([i for i in range(n) if_full]);\n", ""))
