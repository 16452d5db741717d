"""Which measuring method gives the reference ceilings? bf16 matmul burst against sustained, and
host-to-device pageable copies timed several ways. Device machine: python3 validation/ceilings_methods.py"""

import statistics
import time

import torch

dev = torch.device("cuda")


def events_ms(fn, n):
    out = []
    for _ in range(n):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e))
    return out


def wall_ms(fn, n):
    out = []
    for _ in range(n):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t) * 1000)
    return out


n = 8192
a, b = torch.randn(n, n, device=dev, dtype=torch.bfloat16), torch.randn(n, n, device=dev, dtype=torch.bfloat16)
for _ in range(3):
    a @ b
torch.cuda.synchronize()
burst = events_ms(lambda: a @ b, 10)
tf = lambda ms: 2 * n**3 / (ms / 1e3) / 1e12
print(f"bf16 burst (3 warm-up, 10 single products): median {tf(statistics.median(burst)):.1f}, "
      f"mean-time {tf(statistics.mean(burst)):.1f} TFLOP/s")
t0 = time.perf_counter()
while time.perf_counter() - t0 < 3:
    a @ b
torch.cuda.synchronize()
after = events_ms(lambda: a @ b, 10)
print(f"bf16 after 3 s sustained load: median {tf(statistics.median(after)):.1f} TFLOP/s")
del a, b
torch.cuda.empty_cache()
for size_mib in (256, 1024):
    nbytes = size_mib << 20
    src = torch.empty(nbytes, dtype=torch.uint8).fill_(1)
    dst = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    gb = lambda ms: nbytes / (ms / 1e3) / 1e9
    dst.copy_(src)
    r = {
        "events copy_ non_blocking": events_ms(lambda: dst.copy_(src, non_blocking=True), 5),
        "events copy_ blocking": events_ms(lambda: dst.copy_(src), 5),
        "wall .to(cuda)": wall_ms(lambda: src.to(dev), 5),
        "wall copy_ blocking": wall_ms(lambda: dst.copy_(src), 5),
    }
    for k, v in r.items():
        print(f"pageable {size_mib} MiB {k}: median {gb(statistics.median(v)):.1f} GB/s")
    pin = src.pin_memory()
    print(f"pinned {size_mib} MiB events copy_ non_blocking: "
          f"{gb(statistics.median(events_ms(lambda: dst.copy_(pin, non_blocking=True), 5))):.1f} GB/s")
    del src, dst, pin
