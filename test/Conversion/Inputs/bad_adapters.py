#!/usr/bin/env python3
"""Writes two broken copies of HF-PEFT adapters: one whose q_proj lora_A has
a column too many, one naming a module the model does not have.

  bad_adapters.py PEFT_DIR OUT_DIR   (writes OUT_DIR/wrong-shape, OUT_DIR/unknown)
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import adapters  # noqa: E402

peft, out = sys.argv[1:3]
good = adapters.load_adapters(os.path.join(peft, "adapter_model.safetensors"))
q = "model.language_model.layers.3.self_attn.q_proj"
wrong = dict(good)
a, b = good[q]
wrong[q] = (np.concatenate([a, a[:, :1]], axis=1), b)
unknown = {(m.replace("q_proj", "qkv") if m == q else m): f for m, f in good.items()}
for name, ads in (("wrong-shape", wrong), ("unknown", unknown)):
    adapters.write_adapters(os.path.join(out, name, "adapter_model.safetensors"), ads)
