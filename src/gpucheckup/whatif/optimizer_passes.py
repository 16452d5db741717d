"""How much of a for-each optimizer's GPU work its fused form keeps: the passes over memory each makes.

An optimizer's update is elementwise and memory-bound: a kernel's time is the bytes it moves. The for-each form
(torch.optim's default on CUDA, `foreach=True`) runs one `multi_tensor_apply_kernel` per operation of the update
(for AdamW: the weight decay, lerp, mul, addcmul, sqrt, div, add, addcdiv), a large tensor list in several launches
of the same kernel, each reading its input lists and writing one. Its functor names the lists:
`XFunctor<T, depth, r_args_depth, res_arg_index>` reads r_args_depth lists and writes one (ATen's
ForeachFunctors.cuh), so a launch makes r_args_depth + 1 passes over its elements (`kernel_passes`). The fused form
reads each tensor of the update once and writes each it updates once: FUSED_PASSES per optimizer class.

Definition (`fused_work`): one pass over the parameters takes the for-each kernels' work over their passes
(each kernel's work / its passes, summed), divided by the number of distinct for-each kernels (names). The update
runs at least that many operations (two of AdamW's are multiplies by a scalar, one kernel name), so the pass time
is never under-estimated; with several parameter groups every group runs each operation and the sum holds them all.
The fused kernel keeps min(FUSED_PASSES, the distinct kernels' passes) such passes, never more than the work there
was. Where any of the step's kernels is not a for-each kernel whose passes can be read (the for-loop form's
per-tensor kernels, an optimizer already fused, another library's), or no class of FUSED_PASSES is named, or
the trace names more than one, the fused kernel keeps all the work (the edit's earlier bound).
"""

from __future__ import annotations

import re
from functools import lru_cache

from gpucheckup.analysis.one_trace.host.optimizer_spans import STEP_RANGE

# passes over memory per element of the fused update, by optimizer class: reads then writes (AdamW: param, grad,
# exp_avg, exp_avg_sq read; param, exp_avg, exp_avg_sq written; amsgrad's max_exp_avg_sq, rare, is not counted)
FUSED_PASSES = {"Adam": 7, "AdamW": 7, "SGD": 5, "Adagrad": 5}
_FUNCTOR = re.compile(r"multi_tensor_apply_kernel<.*?(\w+Functor)<\s*[\w:]+\s*,\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*>")
_CLASS = re.compile(rf"^{re.escape(STEP_RANGE)}(\w+)\.step$")


@lru_cache(maxsize=4096)
def kernel_passes(name: str) -> int | None:
    """Passes over memory of one for-each kernel (the lists its functor reads, plus the one it writes), or None."""
    m = _FUNCTOR.search(name)
    return int(m.group(3)) + 1 if m else None


def optimizer_class(names: list[str]) -> str | None:
    """The one class of FUSED_PASSES the trace's `Optimizer.step#<Class>.step` ranges name (among its `names`), or
    None (none, or several); a wrapper's range (accelerate's `AcceleratedOptimizer`, around the real one's) is not a
    class there."""
    classes = {m.group(1) for n in names if (m := _CLASS.match(n))} & FUSED_PASSES.keys()
    return classes.pop() if len(classes) == 1 else None


def fused_work(names: list[str], work_us: list[float], cls: str | None) -> float:
    """The work (us) the fused kernel keeps of one step's optimizer kernels (their names and work): see the module."""
    total = float(sum(work_us))
    passes = [kernel_passes(n) for n in names]
    if cls not in FUSED_PASSES or not passes or any(p is None for p in passes):
        return total
    per_name = dict(zip(names, passes))
    one_pass = sum(w / p for w, p in zip(work_us, passes)) / len(per_name)
    return min(total, min(FUSED_PASSES[cls], sum(per_name.values())) * one_pass)
