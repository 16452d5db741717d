"""torch.compile and CUDA graphs as graph edits (edits.py's TRANSFORMS): what the compiled model is (`_outside_the_model`:
not the optimizer, the loop's code around the model, inputs' copies, reads of GPU values), its calls (`_compiled_calls`:
the forward and the backward between graph breaks), Inductor's fusion of its kernels (`_inductor_fusion`: pointwise,
reduction, indexing and copy kernels, not autocast's operand casts) and what generated code and graph replays cost the
host, measured on the H200 (docs/validation.md section 7, 7g, 7h, 7i, 7j). Where the forward reads GPU values on the
host, the reads are replayed gone (compiled code may skip them) and the saving is an upper bound
(`_without_forward_reads`). Definitions: docs/metrics.md, "What-if".
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from gpucheckup.analysis.distinct import unique
from gpucheckup.analysis.one_trace.gpu.kernels import CATEGORIES, data_movement_family
from gpucheckup.trace.tables import CPU_OP, KERNEL, MEMCPY, MEMSET
from gpucheckup.whatif import replay
from gpucheckup.whatif.replay import CALL, MARK, NO_DEP, SYNC, Graph
from gpucheckup.whatif.nodes import (Edit, after_backward, autograd_thread, categories, drop_reads, has_operators,
                                     in_optimizer, outermost_ops, remembered, starts_inside, step_of)

# Kernels torch.compile fuses into one another: Inductor generates one Triton kernel for pointwise work, for a
# reduction with the pointwise work around it, and for indexing (gathers, scatters, index_put / index_add, embedding
# lookups: pointwise loads and stores at computed addresses). Measured on the H200 MoE example: its data-movement
# kernels took 1.42 ms per step eager and 0.58 ms compiled, GEMMs unchanged (docs/validation.md section 7c).
COMPILE_FUSES = ("elementwise", "reduction_norm")  # kernel categories (analysis/one_trace/gpu/kernels.py)

# Data-movement families (kernels.py) it fuses too: indexing, and copies (layout copies of activations: reshape,
# contiguous, transposes; their casts), which Inductor folds into the pointwise kernels around them or removes. Measured
# on the H200 bf16 transformer (docs/validation.md 7i): eager ran 97.7 copy kernels a step (2.81 ms), compiled 1.7
# (0.49 ms); its elementwise, copy and normalisation kernels, 8.7 ms a step eager, took 4.4 ms compiled.
COMPILE_FUSES_MOVES = ("gather", "scatter", "index", "embedding", "copy")

# Except the casts autocast makes of a GEMM's or convolution's operand (launched inside that operator: a weight read
# from its parameter in fp32) and their gradients' casts (`ToCopyBackward0`): the GEMM is a library call Inductor does
# not generate, so the cast before it stays a kernel of its own, and a weight's cast reads a parameter, not a value the
# graph computes next to it. Matched on the outermost operator's name.
OPERAND_CASTS = re.compile(r"^aten::(linear|matmul|mm|addmm|bmm|baddbmm|einsum|conv\w*|_convolution\w*|cudnn_conv\w*)$"
                           r"|ToCopyBackward", re.I)
# Never fused, whatever the category: library algorithms Inductor calls rather than generates (CUB's sorts, scans,
# selects and device reductions, top-k), and kernels Inductor already generated (a compiled trace's `triton_*`)
COMPILE_KEEPS = re.compile(r"cub::|sort|topk|^triton_", re.I)

COMPILE_REDUCES = "reduction_norm"  # of those, the reductions: a fused kernel holds at most one (Inductor's groups)

# What compiled and graphed code costs the host beyond the kernels it launches, in launch calls: the trace's median
# runtime launch call (`replay.typical_launch_us`), so that it follows the host's speed as the trace measures it (and the
# profiler calibration scales it with every host cost). Measured on the H200 (torch 2.11; docs/validation.md
# section 7) in traces of the launch example run with --compile and with --cuda-graphs, each against that trace's
# own median cudaLaunchKernel. A call into the compiled model (forward or backward) runs wrappers around the
# generated code (`## Call CompiledFxGraph`): Dynamo's guards and pre-graph bytecode, AOTAutograd's runtime
# wrapper, and with graphs cudagraph trees' replay bookkeeping (static input addresses checked, other inputs
# copied in). Each of them walks the call's inputs (the pre-graph bytecode gathers the parameters, the guards
# check each tensor), so the cost is taken per input: a call's inputs are its share of the parameters (the
# trace's PARAM_OP count per step, shared among the calls of one direction by their launches) and the one
# tensor it is called with, on top of a fixed part: what AOTAutograd's wrapper does before it touches them, as the
# trace labels it (`AOTDispatcher Runtime Wrapper Prologue`: 34-42 us against a 7.45 us launch call compiled,
# 26-37 us against 5.33 us graphed). On the launch example (144 parameters: 145 inputs per call) the wrappers took
# 820 us (forward) and 538 us (backward) compiled, and 788 and 1041 us graphed less the graph launch: per input,
# forward and backward, beyond the fixed part,
CALL_FIXED_LAUNCHES = 5.0

COMPILED_INPUT_LAUNCHES = (0.72, 0.46)  # (820 / 7.45 - 5) / 145, (538 / 7.45 - 5) / 145

GRAPHED_INPUT_LAUNCHES = (0.99, 1.31)  # (788 / 5.33 - 5) / 145, (1041 / 5.33 - 5) / 145

GRAPH_NODE_LAUNCHES = 0.24  # cudaGraphLaunch per kernel in the graph (1.28 us per node: 180 us for 145 kernels)

# What a kernel launched from Inductor's generated code costs the host, in launch calls: its launcher and launch call
# (2.9) and the generated Python before it (1.5), measured in the same compiled trace (docs/validation.md section 7).
# That code is the same whatever the eager model ran between its kernels (module calls, hooks, autocast's casts and
# dispatch), so a compiled launch costs at most this; where eager cost less, it keeps eager's cost.
COMPILED_LAUNCH_LAUNCHES = 2.9 + 1.5

COMPILED_RANGES = ("## Call CompiledFxGraph", "CompiledFunction")  # generated code already running in the trace

PARAM_OP = "torch::autograd::AccumulateGrad"  # one per parameter with a gradient, per step
# autograd's engine calling it (the operator the trace nests PARAM_OP in, where it records the engine's calls)
BOOKKEEPING_OPS = ("autograd::engine::evaluate_function: " + PARAM_OP, PARAM_OP)


def _outside_the_model(g: Graph) -> np.ndarray:
    """Per node: whether torch.compile(model) leaves it eager: the optimizer's own span and zero_grad
    (`in_optimizer`), copies of the inputs to the GPU (made before the model is called: a compiled graph moves no
    host data), the operators that wait for the GPU (`_host_reads`: a graph break each), and on the threads that
    call the model, per step, the backward's call (its last launch before each burst of autograd's thread: the
    gradient seed, `loss.backward()`'s ones) and all after the step's last backward (gradient clipping, loss
    scaling, NaN checks, logging: the loop's code, not the model's)."""
    return remembered(g, "outside_the_model", (g.h_kind, g.h_row), lambda: _find_outside(g))


def _find_outside(g: Graph) -> np.ndarray:
    """_outside_the_model, computed."""
    out = in_optimizer(g, zero_grad=True)
    out[g.g_launch[_copies_to_gpu(g)]] = True
    launching = np.zeros(len(g.h_kind), dtype=bool)
    launching[replay.launch_nodes(g)] = True
    backward = autograd_thread(g)
    calling = launching & ~backward & (g.h_row >= 0)
    seq = np.flatnonzero(calling | backward)  # the seed: a calling thread's launch right before a backward node
    step = step_of(g, seq)
    seed = calling[seq[:-1]] & backward[seq[1:]] & (step[:-1] >= 0) & (step[:-1] == step[1:])
    out[seq[:-1][seed]] = True
    compiled = _already_compiled(g)
    if compiled.any():  # the model is compiled already: what runs outside its generated code is not the model
        out |= ~compiled & (g.h_row >= 0)
    return out | (after_backward(g) & ~backward) | _host_reads(g)


def _host_reads(g: Graph) -> np.ndarray:
    """Per node: whether it belongs to an operator that waits for the GPU (a sync: `.item()`, a size read,
    `.cpu()`; not the wait for an input's copy to the GPU), outermost on its thread: torch.compile breaks its graph
    at such an operator, which runs eager."""
    host = g.trace.host
    syncs = np.flatnonzero((g.h_kind == SYNC) & (g.h_row >= 0) & ~_input_waits(g))
    ops = unique(outermost_ops(g, g.h_row[syncs]))
    ops = ops[ops >= 0]
    return starts_inside(g, host.start[ops].astype(np.float64), host.end[ops].astype(np.float64), host.tid[ops])


def _input_waits(g: Graph) -> np.ndarray:
    """Per node: a sync made by an operator that copies to the GPU (an input's transfer, `.to(device)`: its
    outermost operator launched a host-to-device copy), which reads no GPU value."""
    return remembered(g, "input_waits", (g.h_kind, g.g_launch), lambda: _find_input_waits(g))


def _find_input_waits(g: Graph) -> np.ndarray:
    """_input_waits, computed."""
    copying = unique(outermost_ops(g, g.h_row[g.g_launch[_copies_to_gpu(g)]]))
    syncs = np.flatnonzero((g.h_kind == SYNC) & (g.h_row >= 0))
    out = np.zeros(len(g.h_kind), dtype=bool)
    out[syncs[np.isin(outermost_ops(g, g.h_row[syncs]), copying[copying >= 0])]] = True
    return out


def _copies_to_gpu(g: Graph) -> np.ndarray:
    """Per GPU op: a host-to-device copy whose launching node the trace holds (an input's transfer)."""
    gpu = g.trace.gpu
    return (gpu.kind == MEMCPY) & np.isin(gpu.name, g.trace.name_ids(lambda n: "HtoD" in n)) & (g.g_launch >= 0)


def _compiled_calls(g: Graph, eager: np.ndarray) -> list[tuple[int, bool, np.ndarray, float]]:
    """The calls into the compiled model, as (entry node, backward?, its launching nodes, its parameters): each
    stretch of the host chain between sync calls, markers (step bounds, data waits) and `eager` nodes whose
    launches are made by one thread, from its first launch (a compiled graph cannot hold a sync; the forward runs
    on the calling thread, the backward on autograd's, so each is its own call); backward when that thread runs
    autograd's operators (AUTOGRAD_THREAD_OP). Its parameters: the trace's (PARAM_OP per step) shared among the
    calls of its direction by their launches."""
    return remembered(g, "compiled_calls", (g.g_launch, g.h_kind, g.h_row, eager), lambda: _find_calls(g, eager))


def _find_calls(g: Graph, eager: np.ndarray) -> list[tuple[int, bool, np.ndarray, float]]:
    """_compiled_calls, computed."""
    host = g.trace.host
    launching = np.zeros(len(g.h_kind), dtype=bool)
    launching[replay.launch_nodes(g)] = True
    tid = np.where(g.h_row >= 0, host.tid[np.maximum(g.h_row, 0)], -1)
    backward = autograd_thread(g)
    breaks = ((g.h_kind == SYNC) | (g.h_kind == MARK) | eager).tolist()
    out, cur, cur_tid = [], [], None
    for j, (brk, ln, t) in enumerate(zip(breaks, launching.tolist(), tid.tolist())):
        if brk or (ln and cur and t != cur_tid):
            if cur:
                out.append(cur)
            cur, cur_tid = [], None
            if brk:
                continue
        if ln:
            cur.append(j)
            cur_tid = t
    if cur:
        out.append(cur)
    calls = _split_backwards(g, [(c[0], bool(backward[c[0]]), np.asarray(c, dtype=np.int64)) for c in out])
    if "params_per_step" not in g.memo:
        ids = g.trace.name_ids(lambda n: n == PARAM_OP)
        g.memo["params_per_step"] = float(np.isin(host.name[host.cat == CPU_OP], ids).sum()) / max(g.steps.count, 1)
    total = {b: sum(len(n) for _, bb, n in calls if bb == b) for b in (False, True)}
    params = g.memo["params_per_step"] * g.steps.count
    return [(e, b, n, params * len(n) / total[b]) for e, b, n in calls]


def _split_backwards(g: Graph, calls: list[tuple[int, bool, np.ndarray]]) -> list[tuple[int, bool, np.ndarray]]:
    """A forward broken into K graphs has K backward graphs (each compiled region differentiates itself): in a
    step whose forward is K calls and whose backward is one, that call becomes K, in the forward's reverse order,
    each with launches in proportion to its forward's."""
    by_step: dict[int, list] = {}
    step = np.searchsorted(g.step_start_node, [e for e, _, _ in calls], side="right") - 1
    for c, s in zip(calls, step.tolist()):  # one pass: the calls of each step, in order
        by_step.setdefault(s, []).append(c)
    out = []
    for mine in by_step.values():
        fwd = [len(n) for _, b, n in mine if not b]
        bwd = [c for c in mine if c[1]]
        if len(fwd) < 2 or len(bwd) != 1:
            out += mine
            continue
        nodes = bwd[0][2]
        cuts = np.rint(np.cumsum(fwd[::-1])[:-1] / sum(fwd) * len(nodes)).astype(np.int64)
        pieces = [p for p in np.split(nodes, cuts) if len(p)]
        out += [c for c in mine if not c[1]] + [(int(p[0]), True, p) for p in pieces]
    return sorted(out, key=lambda c: c[0])


def _inductor_fusion(g: Graph, eager: np.ndarray) -> tuple[np.ndarray, int]:
    """The GPU side of torch.compile (shared by the graphs edit: mode="reduce-overhead" compiles with Inductor
    too): each chain of elementwise, normalisation/reduction, indexing and copy kernels of the model (`_fusable`, less
    autocast's operand casts, `_operand_casts`; device-to-device copies before such a kernel, `_slice_copies`;
    consecutive on a stream passing over operand casts and memsets, launched by one thread in one step with no sync
    between, not in `eager` ranges, not already generated code) becomes
    fused kernels, each holding at most one reduction (COMPILE_REDUCES) with the pointwise kernels before and after
    it (Inductor fuses pointwise producers and consumers into a reduction; two reductions make two kernels). A fused
    kernel takes its longest member's time (it still moves the largest operand) at its first member's place; the
    others take none. Edits g's GPU side; the launching nodes of the kernels folded into another, and their count."""
    folded, gdur = remembered(g, "inductor_fusion", (g.g_dur, g.g_prev, g.g_launch, g.g_step, g.h_kind, g.h_row,
                                                      eager), lambda: _fusion_plan(g, eager))
    g.g_dur[:] = gdur
    g.g_lat[folded] = NO_DEP
    g.g_gap[folded] = 0.0
    return g.g_launch[folded], len(folded)


def _fusion_plan(g: Graph, eager: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """_inductor_fusion's kernels folded into another and every op's duration after it, computed."""
    gpu = g.trace.gpu
    tid = np.where(g.h_row >= 0, g.trace.host.tid[np.maximum(g.h_row, 0)], -1)
    cats = categories(g)
    fusable = _fusable(g)
    reduces = (cats == CATEGORIES.index(COMPILE_REDUCES))[gpu.name]
    kernels = (gpu.kind == KERNEL) & fusable[gpu.name]
    ew = (kernels | _slice_copies(g, kernels)) & (g.g_launch >= 0)
    ew &= ~eager[np.maximum(g.g_launch, 0)] & ~_already_compiled(g)[np.maximum(g.g_launch, 0)]  # Inductor's own: kept
    casts = _operand_casts(g)
    ew &= ~casts
    # what Inductor's fusion passes over, not folding it: operand casts and memsets (the compiled transformer ran
    # as many memsets as the eager one: 362 against 365 in 6 steps)
    passed = casts | (gpu.kind == MEMSET)
    # which of them may join their stream predecessor's fused kernel: it is fusable too, in the same step, launched
    # by the same thread with no sync call from its launch to this one's
    o = np.flatnonzero(ew)
    p = _passing_over(g.g_prev, passed)[o]
    pp = np.maximum(p, 0)
    lo, lp = g.g_launch[o], g.g_launch[pp]
    syncs_before = np.concatenate(([0], np.cumsum(g.h_kind == SYNC)))  # sync nodes before each node
    joins = ((p >= 0) & ew[pp] & (g.g_step[pp] == g.g_step[o]) & (lo >= 0) & (lp >= 0)
             & (syncs_before[np.maximum(lo + 1, 0)] - syncs_before[lp] <= 0) & (tid[lp] == tid[np.maximum(lo, 0)]))
    folded, heads = _as_arrays(fold_chains(o[joins].tolist(), p[joins].tolist(), reduces.tolist()))
    return folded, fused_durations(g.g_dur, folded, heads)


def _as_arrays(head_of: dict[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """fold_chains' mapping as (the ops folded into another, each one's group head)."""
    folded = np.fromiter(head_of.keys(), dtype=np.int64, count=len(head_of))
    return folded, np.fromiter(head_of.values(), dtype=np.int64, count=len(head_of))


def fused_durations(dur: np.ndarray, folded: np.ndarray, heads: np.ndarray) -> np.ndarray:
    """Each op's duration once its group is fused (`folded[i]` joins the kernel of `heads[i]`, fold_chains): a fused
    kernel takes its longest member's time at its first member's place (it still moves the largest operand); the
    members folded into it take none."""
    out = np.asarray(dur, dtype=np.float64).copy()
    np.maximum.at(out, heads, out[folded])
    out[folded] = 0.0
    return out


def fold_chains(ops: list[int], preds: list[int], reduces: list[bool]) -> dict[int, int]:
    """Inductor's groups over the fusable ops that may join their predecessor's kernel (`ops[i]` after `preds[i]`, in
    op order, so a predecessor's group is known first): each joins its predecessor's group unless both would then
    hold a reduction (COMPILE_REDUCES: two reductions make two kernels). The ops folded into another, each mapped to
    its group's first op (the fused kernel, at its place)."""
    head_of: dict[int, int] = {}
    has_reduction: dict[int, bool] = {}
    for o, p in zip(ops, preds):
        head = head_of.get(p, p)
        h_red = has_reduction.get(head, reduces[head])
        if reduces[o] and h_red:
            continue  # a second reduction starts a kernel of its own
        head_of[o] = head
        has_reduction[head] = h_red or reduces[o]
    return head_of


def fused_in_gpu_order(names: list[str], categories: list[str], streams: np.ndarray, steps: np.ndarray,
                       dur: np.ndarray) -> tuple[int, float]:
    """Inductor's fusion of these kernels (one per entry, in start order on each stream; their names, categories,
    streams, steps and durations) judged on the GPU's order alone, for a trace that holds no launch call and no
    operator (a light window): each fusable kernel (`fusable_kernel`) joins its stream predecessor's kernel when that
    is fusable too and ran in the same step, as `_inductor_fusion` joins them (`fold_chains`). With no launching
    thread, sync call or operator to break a chain or mark a cast, its groups hold the replay's kernel groups (the
    replay also folds a copy engine's slice copies, which are not kernels). Returns the kernels folded into another
    (the launches compiled code removes) and the kernel time (us) the fusion removes (`fused_durations`)."""
    ok = np.array([fusable_kernel(n, c) for n, c in zip(names, categories)], dtype=bool)
    streams, steps = np.asarray(streams), np.asarray(steps)
    on = np.lexsort((np.arange(len(ok)), streams))  # stream by stream, each in its order: a predecessor comes first
    preds, ops = on[:-1], on[1:]
    joins = (streams[preds] == streams[ops]) & ok[preds] & ok[ops] & (steps[preds] == steps[ops])
    reduces = [c == COMPILE_REDUCES for c in categories]
    folded, heads = _as_arrays(fold_chains(ops[joins].tolist(), preds[joins].tolist(), reduces))
    dur = np.asarray(dur, dtype=np.float64)
    return len(folded), float(dur.sum() - fused_durations(dur, folded, heads).sum())


def cuda_graphs(g: Graph) -> Edit:
    """CUDA graphs as `torch.compile(model, mode="reduce-overhead")` makes them: the model's kernels as
    Inductor fuses them (`_inductor_fusion`), each call into the compiled model (`_compiled_calls`: the forward,
    the backward, each stretch between syncs and data waits, which a graph cannot hold) one graph replay: the
    host's launch calls, operator dispatch and other runtime calls in it cost nothing, and its first launch
    becomes the call: the wrappers and cudagraph trees' bookkeeping (CALL_FIXED_LAUNCHES, GRAPHED_INPUT_LAUNCHES
    per input) and the graph's launch (GRAPH_NODE_LAUNCHES per kernel), in launch calls. The kernels keep their
    durations and run back to back (launch latency at the trace's typical one). The optimizer step and the loop's
    code around the model (`_outside_the_model`) are not part of the compiled model and stay eager, launch by
    launch (the trace cannot tell whether a user would compile or capture them too: that takes capturable=True and
    whole-step capture). Inside a call after its entry, the host time between launches goes too (the model's
    Python and autograd's dispatch between its nodes: a replay runs none of it), except autograd's per-parameter
    bookkeeping (`_bookkeeping_us`: gradient accumulation, which runs outside the graph); the host work before a
    call's entry (the loop's Python, data loading) stays, and all of it in a trace without operators (a light
    window), where nothing tells the model's Python from the loop's. Reads of GPU values in the forward are replayed
    gone (`_without_forward_reads`: an upper bound)."""
    g = g.copy()
    unmodelled = _without_forward_reads(g)
    eager = _outside_the_model(g)
    _inductor_fusion(g, eager)
    unit = replay.typical_launch_us(g)
    calls = _compiled_calls(g, eager)
    gpu = g.trace.gpu
    kernels = np.bincount(g.g_launch[(g.g_launch >= 0) & (gpu.kind == KERNEL) & (g.g_dur > 0)],
                          minlength=len(g.h_kind))
    captured = np.zeros(len(g.h_kind), dtype=bool)
    changed = 0
    modelled = has_operators(g)  # without operators the trace cannot tell the model's Python from the loop's
    kept = _bookkeeping_us(g) if modelled else None
    for entry, backward, nodes, params in calls:
        lo, hi = nodes[0], nodes[-1]
        inside = np.arange(lo, hi + 1)
        inside = inside[g.h_kind[inside] == CALL]
        captured[inside] = True
        pos = g.h_gap[inside] > 0
        g.h_gap[inside[pos]] -= np.minimum(g.h_dispatch[inside[pos]], g.h_gap[inside[pos]])
        if modelled:  # the model's Python after the call's entry
            rest = inside[(inside != entry) & (g.h_gap[inside] > 0)]
            g.h_gap[rest] = np.minimum(g.h_gap[rest], kept[rest])
        g.h_dur[inside] = 0.0
        g.h_dur[entry] = unit * (CALL_FIXED_LAUNCHES + GRAPHED_INPUT_LAUNCHES[backward] * (params + 1)
                                 + GRAPH_NODE_LAUNCHES * kernels[nodes].sum())
        changed += len(nodes)
    ops = (g.g_launch >= 0) & captured[np.maximum(g.g_launch, 0)]
    g.g_lat[ops] = np.minimum(g.g_lat[ops], g.typical_lat)
    return Edit(g, f"{len(calls)} graph replays per trace in place of {changed} launches; operator "
                   f"dispatch removed, each replay costing its wrappers and graph launch (the optimizer stays eager)",
                changed, unmodelled=unmodelled)


def torch_compile(g: Graph) -> Edit:
    """torch.compile(model): the model's kernels as Inductor fuses them (`_inductor_fusion`); the dispatch and
    launch of each kernel folded into another go; every other kernel (GEMMs, data movement, copies, the fused
    kernels) keeps its launch, costing the host what generated code costs per launch (COMPILED_LAUNCH_LAUNCHES:
    its launcher and call and the Python before it) or its eager cost where that was less
    (`_generated_launches`; launches the trace already runs in compiled code keep theirs). Each call into the
    compiled model (`_compiled_calls`: the forward and the backward between syncs and data waits) costs its wrappers:
    CALL_FIXED_LAUNCHES and COMPILED_INPUT_LAUNCHES per input, in launch calls, on its first launch. The
    optimizer step and the loop's code around the model (`_outside_the_model`) stay as they are. Reads of GPU values
    in the forward are replayed gone (`_without_forward_reads`: an upper bound)."""
    g = g.copy()
    unmodelled = _without_forward_reads(g)
    eager = _outside_the_model(g)
    unit = replay.typical_launch_us(g)
    folded, n = _inductor_fusion(g, eager)
    j = unique(folded)
    g.h_dur[j] = 0.0
    g.h_gap[j] -= np.clip(np.minimum(g.h_dispatch[j], g.h_gap[j]), 0.0, None)  # a positive gap loses its dispatch
    calls = _compiled_calls(g, eager)
    for entry, backward, nodes, params in calls:
        _generated_launches(g, nodes[1:], unit)
        g.h_dur[entry] += unit * (CALL_FIXED_LAUNCHES + COMPILED_INPUT_LAUNCHES[backward] * (params + 1))
    return Edit(g, f"{n} elementwise/normalisation/indexing/copy kernels fused into others (at most one reduction each); "
                   f"{len(calls)} compiled calls per trace, each costing its wrappers", n, unmodelled=unmodelled)


def _forward_reads(g: Graph) -> np.ndarray:
    """The sync nodes of the model's forward: reads of GPU values on the host (`.item()`, `if tensor:`, a size read)
    before the step's backward, outside the optimizer, on the calling thread, not an input's copy waiting."""
    return np.flatnonzero((g.h_kind == SYNC) & (g.h_row >= 0) & ~in_optimizer(g, zero_grad=True) & ~after_backward(g)
                          & ~autograd_thread(g) & ~_input_waits(g))


def _without_forward_reads(g: Graph) -> str:
    """The model's forward as one graph: each read of a GPU value in it gone (`drop_reads`), as where the compiled code
    skips it (libraries skip such checks when torch.compile traces them: transformers' packed-sequence check in
    its attention masks) or the user removed it. Where a read stays, torch.compile breaks its graph there: the
    compiled code runs in more pieces, each resume with its guards and frame, and the read still drains the GPU's
    queue, so the saving replayed without the reads is an upper bound. Edits g; why, "" where the forward reads
    nothing."""
    reads = _forward_reads(g)
    per_step = len(reads) / max(g.steps.count, 1)
    if per_step < 1.0:
        return ""
    drop_reads(g, reads.tolist())
    n = round(per_step)
    return (f"the model's forward reads GPU values on the host {n} time{'s' if n != 1 else ''} a step: replayed "
            "without them (as where compiled code skips such a check, or once they are removed); where a read stays, "
            "torch.compile breaks its graph there and saves less, so this is an upper bound")


def _bookkeeping_us(g: Graph) -> np.ndarray:
    """Per node: the host time, us, of autograd's per-parameter operators (PARAM_OP, gradient accumulation, with the
    engine's call of each: BOOKKEEPING_OPS) that end in the gap before it on its thread: they run eagerly outside a
    compiled or graphed backward."""
    if "bookkeeping" not in g.memo:
        host = g.trace.host
        calls = _named(g, lambda n: n == BOOKKEEPING_OPS[0])
        name = calls if calls[host.name[host.cat == CPU_OP]].any() else _named(g, lambda n: n == PARAM_OP)
        ops = np.flatnonzero((host.cat == CPU_OP) & name[host.name])
        out = np.zeros(len(g.h_kind))
        nodes = np.flatnonzero(g.h_row >= 0)
        tid = host.tid[g.h_row[nodes]]
        for t in unique(host.tid[ops]).tolist():
            mine = nodes[tid == t]
            starts = host.start[g.h_row[mine]]
            order = np.argsort(starts, kind="stable")
            mine, starts = mine[order], starts[order]
            theirs = ops[host.tid[ops] == t]
            i = np.searchsorted(starts, host.end[theirs], side="left")
            ok = i < len(mine)
            np.add.at(out, mine[i[ok]], (host.end[theirs] - host.start[theirs])[ok].astype(np.float64))
        g.memo["bookkeeping"] = out
    return g.memo["bookkeeping"]


def _generated_launches(g: Graph, nodes: np.ndarray, unit: float) -> None:
    """Each launch inside a compiled call after its first costs the host at most COMPILED_LAUNCH_LAUNCHES: the host
    time before it (its gap, from the node before) and its call, cut to that by shortening the gap."""
    nodes = nodes[(g.h_kind[nodes] == CALL) & (g.h_dur[nodes] > 0)]
    nodes = nodes[~_already_compiled(g)[nodes]]
    gap = np.maximum(g.h_gap[nodes], 0.0)
    g.h_gap[nodes] -= np.clip(gap + g.h_dur[nodes] - COMPILED_LAUNCH_LAUNCHES * unit, 0.0, gap)


def _already_compiled(g: Graph) -> np.ndarray:
    """Per node: whether its host row starts inside generated code the trace already runs (COMPILED_RANGES): a
    compiled model's launches cost what compiled code costs, which the trace measured."""
    if "already_compiled" not in g.memo:
        host = g.trace.host
        ranges = np.flatnonzero(np.isin(host.name, g.trace.name_ids(lambda n: n.startswith(COMPILED_RANGES))))
        g.memo["already_compiled"] = starts_inside(g, host.start[ranges].astype(np.float64),
                                                    host.end[ranges].astype(np.float64), host.tid[ranges])
    return g.memo["already_compiled"]


def _slice_copies(g: Graph, fusable: np.ndarray) -> np.ndarray:
    """Per GPU op: a device-to-device copy whose next op on its stream is a kernel Inductor generates (`fusable`): a
    gradient written into a slice of a larger one before a pointwise kernel fills the rest. Inductor writes such an
    output in the generated kernel itself, so the copy folds into it as copy kernels do (COMPILE_FUSES_MOVES).
    Measured on the H200 bf16 transformer: 84 device-to-device copies in 6 steps eager, 6 compiled."""
    gpu = g.trace.gpu
    copies = np.flatnonzero((gpu.kind == MEMCPY) & _named(g, lambda n: "DtoD" in n)[gpu.name])
    nxt = np.full(len(gpu.kind), -1, dtype=np.int64)
    has = g.g_prev >= 0
    nxt[g.g_prev[has]] = np.flatnonzero(has)
    out = np.zeros(len(gpu.kind), dtype=bool)
    after = nxt[copies]
    out[copies[after >= 0]] = fusable[after[after >= 0]]
    return out


def _passing_over(prev: np.ndarray, passed: np.ndarray) -> np.ndarray:
    """Per GPU op: its stream predecessor, passing over the `passed` ops (operand casts, memsets): a weight's cast
    launched between two pointwise kernels reads neither's output, so it does not keep Inductor from fusing them."""
    out = prev.copy()
    for c in np.flatnonzero(passed).tolist():  # in op order, each stream's ops in time: a passed op's is done
        q = out[c]
        if 0 <= q < c and passed[q]:
            out[c] = out[q]
    hop = out >= 0
    hop[hop] = passed[out[hop]]
    out[hop] = out[out[hop]]
    return out


def _operand_casts(g: Graph) -> np.ndarray:
    """Per GPU op: a copy kernel launched inside a GEMM's or convolution's operator, or autograd's node of a cast
    (OPERAND_CASTS, by the outermost operator's name): autocast's cast of an operand, which stays a kernel."""
    gpu, host = g.trace.gpu, g.trace.host
    copies = np.flatnonzero((gpu.kind == KERNEL) & (g.g_launch >= 0)
                            & _named(g, lambda n: data_movement_family(n) == "copy")[gpu.name])
    out = np.zeros(len(gpu.kind), dtype=bool)
    rows = g.h_row[g.g_launch[copies]]
    ok = rows >= 0
    top = outermost_ops(g, rows[ok])
    casts = _named(g, lambda n: bool(OPERAND_CASTS.search(n)))[host.name[np.maximum(top, 0)]] & (top >= 0)
    out[copies[ok][casts]] = True
    return out


def _named(g: Graph, predicate) -> np.ndarray:
    """Per name of the trace: whether predicate(name) holds (a lookup table: np.isin would sort through np.unique,
    which imports numpy.ma)."""
    out = np.zeros(len(g.trace.names), dtype=bool)
    out[g.trace.name_ids(predicate)] = True
    return out


def _fusable(g: Graph) -> np.ndarray:
    """Per name of the trace: whether torch.compile fuses that kernel with its neighbours: a category of
    COMPILE_FUSES or a data-movement family of COMPILE_FUSES_MOVES, and none of COMPILE_KEEPS."""
    if "fusable" not in g.memo:
        cats, names = categories(g), g.trace.names
        ok = np.zeros(len(names), dtype=bool)
        for i in np.flatnonzero(cats >= 0).tolist():
            ok[i] = fusable_kernel(names[i], CATEGORIES[cats[i]])
        g.memo["fusable"] = ok
    return g.memo["fusable"]


@lru_cache(maxsize=1 << 16)
def fusable_kernel(name: str, category: str) -> bool:
    """Whether torch.compile fuses a kernel of this name and category (kernels.CATEGORIES) with its neighbours: a
    category of COMPILE_FUSES or a data-movement family of COMPILE_FUSES_MOVES, and none of COMPILE_KEEPS."""
    fuses = category in COMPILE_FUSES or (category == "data_movement"
                                          and data_movement_family(name) in COMPILE_FUSES_MOVES)
    return fuses and not COMPILE_KEEPS.search(name)
