"""The run directory's layout: file names, CSV columns and manifest keys, in one place.

Written by capture (the launcher, `gpucheckup attach`, and the agent inside the user's job) and
read by trace/rundir.py. Standard library only, and no imports at all: the agent imports this
module inside the user's process before torch.

A run directory holds (docs/capture.md):
- manifest.json: MANIFEST_KEYS (the kind is one of KINDS), every file listed under `artefacts`
- traces/<key>.json.gz: the profiled step window, one per process key (`trace.json.gz` for main);
  traces/time-window/ when no optimizer stepped; traces/attach/ for attach captures
- steps.csv / steps-<key>.csv (STEP_COLUMNS), nvml.csv (NVML_COLUMNS), cpu.csv (CPU_COLUMNS)
- gpu-steps.csv / gpu-steps-<key>.csv (GPU_STEP_COLUMNS): each step's time on the GPU, written at exit when the
  agent's `gpu_clock` setting is on (`gpucheckup ab` turns it on; capture/agent/gpu_clock.py)
- env.json, agent.json / agent-<key>.json, agent.log, agent-bootstrap.log, flops.json
- out-of-process attach: samples.csv (SAMPLE_COLUMNS), stacks.txt, attach.json (ATTACH_KEYS)
- light window (`run --light`): host-samples.json / host-samples-<key>.json (HOST_SAMPLES_KEYS), the py-spy
  stacks the launcher sampled during each process's window; sampling.start / sampling-<key>.start and
  .stop, the agent's marks that ask the launcher to start and stop that sampling
"""

ENV_RUN_DIR = "GPUCHECKUP_RUN_DIR"  # the variable that tells the injected agent where to write
ENV_RUN_DIR_ID = "GPUCHECKUP_RUN_DIR_ID"  # `device:inode` of that folder: the agent writes only into that very one
ENV_LAUNCHER_PID = "GPUCHECKUP_LAUNCHER_PID"  # the launcher: when it is gone at the job's exit, the agent writes the manifest

# the variables a run records (env.json `variables`, the launcher's; `job.<key>.variables`, each process's own:
# torchrun sets OMP_NUM_THREADS in its ranks, not in the launcher): those that change how a job runs
VARIABLE_PREFIXES = ("NCCL_", "TORCH_NCCL_", "CUDA_", "PYTORCH_", "OMP_", "MKL_", "KINETO_")
VARIABLE_NAMES = ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def run_variables(environ) -> dict:
    """The variables of `environ` a run records, sorted by name."""
    return {k: v for k, v in sorted(environ.items()) if k.startswith(VARIABLE_PREFIXES) or k in VARIABLE_NAMES}

MANIFEST = "manifest.json"
ENV = "env.json"
NVML = "nvml.csv"
CPU = "cpu.csv"
SAMPLES = "samples.csv"
STACKS = "stacks.txt"
SPEEDSCOPE = "stacks.speedscope.json"
ATTACH = "attach.json"
BOOTSTRAP_LOG = "agent-bootstrap.log"
TRACES = "traces"
TIME_WINDOW_TRACES = "traces/time-window"
ATTACH_TRACES = "traces/attach"
CLAIMS = ".claims"  # one file per process key, claimed by the first agent (removed at the end)
PART = ".part"  # a file being written; renamed into place when complete
STEPS_GLOB = "steps*.csv"
AGENT_GLOB = "agent*.json"
FLOPS_GLOB = "flops*.json"
MAIN_KEY = "main"  # the process key of a job without RANK; `rank<R>` under a distributed launcher
FLOPS_KEYS = ("main", "rank0")  # the processes whose FLOP count is the run's flops.json

KIND_RUN, KIND_ATTACH_INJECT, KIND_ATTACH_PYSPY = "run", "attach-inject", "attach-py-spy"
KINDS = (KIND_RUN, KIND_ATTACH_INJECT, KIND_ATTACH_PYSPY)
MANIFEST_KEYS = ("gpucheckup_version", "kind", "command", "cwd", "run_dir", "pid", "started_epoch_s",
                 "ended_epoch_s", "started", "duration_s", "exit_code", "exit_signal", "options", "agent_settings",
                 "captured", "failed", "versions", "artefacts")
ATTACH_KEYS = ("pid", "duration_s", "rate_hz", "native", "py_spy")
HOST_SAMPLES_GLOB = "host-samples*.json"
SAMPLING_GLOB = "sampling*.start"
# host-samples.json: the spawn time of py-spy (its clock's zero, Unix seconds), and the main thread's stack
# changes as [microseconds after spawned_epoch_s, main_stack] (the stack as samples.csv's main_stack).
HOST_SAMPLES_KEYS = ("pid", "key", "rate_hz", "spawned_epoch_s", "ended_epoch_s", "threads", "main", "py_spy")

# CSV columns, in the order they are written.
STEP_COLUMNS = ("step", "t_end_s", "ms", "phase")
GPU_STEP_COLUMNS = ("step", "gpu_ms")
NVML_COLUMNS = ("t_s", "gpu", "util_pct", "mem_util_pct", "mem_used_mb", "mem_total_mb", "power_w", "sm_clock_mhz",
                "clock_reasons", "temp_c", "pcie_tx_mbs", "pcie_rx_mbs", "proc_sm_util_pct")
CPU_COLUMNS = ("t_s", "pid", "ppid", "name", "cpu_pct", "rss_mb", "threads")
SAMPLE_COLUMNS = ("t_s", "main_thread_active", "threads", "active_threads_elsewhere", "main_stack")
# A py-spy frame in samples.csv's main_stack: `name@filename`, innermost first, joined by FRAME_SEP.
FRAME_SEP = ";"
FRAME_AT = "@"

ARTEFACT_WHAT = (  # (name prefix, what it holds) for the manifest's artefact list; the first match wins
    (MANIFEST, "this manifest"),
    (ATTACH_TRACES + "/", "trace captured by gpucheckup attach (gzipped Kineto JSON)"),
    (TIME_WINDOW_TRACES + "/", "time window profiled because no optimizer stepped (gzipped Kineto JSON)"),
    (TRACES + "/", "profiled window of the job (gzipped Kineto JSON, one per rank)"),
    ("steps", "wall time of every optimizer step of the whole run (CSV)"),
    ("gpu-steps", "GPU time of every optimizer step, between CUDA events at the steps' ends (CSV)"),
    (NVML, "NVML GPU telemetry at 10 Hz, sampled outside the job (CSV)"),
    (CPU, "CPU use of the job's processes, 1 Hz (CSV)"),
    (ENV, "environment: GPUs, driver, CUDA/cuDNN/NCCL/torch versions, topology, CPU budget, variables"),
    (BOOTSTRAP_LOG, "errors arming the agent"),
    ("agent", "the in-job agent's log (.log) and account of what it saw and did (.json)"),
    ("flops", "FLOPs of one training step counted by FlopCounterMode (JSON)"),
    (SAMPLES, "py-spy samples of the job's main thread, one per dump (CSV)"),
    (STACKS, "the sampled main-thread stacks, most common first"),
    (SPEEDSCOPE, "the sampled main-thread stacks for www.speedscope.app (speedscope's sampled profile)"),
    (ATTACH, "the out-of-process attach's settings (JSON)"),
    ("host-samples", "py-spy stacks sampled outside the job during its light window (JSON)"),
    ("sampling", "the agent's mark that started or stopped the light window's sampling"),
    ("trial", "what the fixes gpucheckup try asked for came to in the job: applied where, or why not (JSON)"),
)


def agent_files(key: str) -> dict:
    """The run-directory file names one agent writes, by process key (`main` or `rank<R>`)."""
    sfx = "" if key == MAIN_KEY else f"-{key}"
    return {
        "steps": f"steps{sfx}.csv",
        "gpu_steps": f"gpu-steps{sfx}.csv",
        "log": f"agent{sfx}.log",
        "info": f"agent{sfx}.json",
        "trace": f"{TRACES}/{'trace' if key == MAIN_KEY else key}.json.gz",
        "flops": "flops.json" if key in FLOPS_KEYS else f"flops{sfx}.json",
        "host_samples": f"host-samples{sfx}.json",
        "sampling_start": f"sampling{sfx}.start",
        "sampling_stop": f"sampling{sfx}.stop",
        "trial": f"trial{sfx}.json",  # what `gpucheckup try`'s fixes came to in this process (agent/trial.py)
    }


def steps_key(file_name: str) -> str:
    """The process key of a steps file: `steps.csv` -> main, `steps-rank1.csv` -> rank1."""
    stem = file_name.rsplit(".", 1)[0]
    return stem.split("-", 1)[1] if "-" in stem else MAIN_KEY


def steps_file(key: str) -> str:
    """The steps file of a process key."""
    return agent_files(key)["steps"]


def flops_file() -> str:
    """The run's FLOPs file (the main process's or rank 0's count)."""
    return agent_files(MAIN_KEY)["flops"]
