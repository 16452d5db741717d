"""Run one example under torch.profiler (CPU activity, shapes recorded) and print, after the example's own line,
one line `PROFILE {json}`: every op's count, the first aten::topk call's k and input shape, and TF32 matmuls' switch.
argv: example name, then its flags."""
import importlib
import json
import sys
from collections import Counter

import torch
from torch.profiler import ProfilerActivity, profile

name, argv = sys.argv[1], sys.argv[2:]
module = importlib.import_module(f"gpucheckup.examples.{name}")
with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
    module.main(argv)
events = list(prof.events())
topk = next(([*e.concrete_inputs[1:2], e.input_shapes[0]] for e in events if e.name == "aten::topk"), None)
print("PROFILE " + json.dumps({"ops": Counter(e.name for e in events), "topk": topk,
                               "tf32": torch.backends.cuda.matmul.allow_tf32}, default=str))
