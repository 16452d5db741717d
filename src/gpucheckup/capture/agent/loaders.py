"""What the job's torch looks like from inside: DataLoader settings (a light wrapper on
`DataLoader.__init__`) and the torch, CUDA, cuDNN and NCCL versions it runs with."""

from __future__ import annotations

import functools

MAX_DATALOADERS = 20


def wrap_dataloader(torch, on_loader) -> None:
    """Call on_loader(loader) after every DataLoader.__init__ (its errors are on_loader's to handle)."""
    cls = torch.utils.data.DataLoader
    orig = cls.__init__

    @functools.wraps(orig)
    def __init__(loader, *args, **kwargs):
        orig(loader, *args, **kwargs)
        on_loader(loader)

    cls.__init__ = __init__


def loader_settings(loader) -> dict:
    """The settings of one DataLoader that bear on input-bound steps."""
    return {
        "num_workers": int(getattr(loader, "num_workers", 0)),
        "pin_memory": bool(getattr(loader, "pin_memory", False)),
        "batch_size": getattr(loader, "batch_size", None),
        "persistent_workers": bool(getattr(loader, "persistent_workers", False)),
        "prefetch_factor": getattr(loader, "prefetch_factor", None),
        "dataset": type(getattr(loader, "dataset", None)).__name__,
    }


def torch_info(torch, log) -> dict:
    """torch, CUDA, cuDNN and NCCL versions, intra-op threads and the devices, as the job sees them; log(msg) for
    what failed."""
    t = {"version": getattr(torch, "__version__", None), "cuda": getattr(torch.version, "cuda", None)}
    for key, fn in (("threads", lambda: torch.get_num_threads()),  # intra-op threads (OMP_NUM_THREADS, else cores)
                    ("cudnn", lambda: torch.backends.cudnn.version()),
                    ("cuda_available", lambda: torch.cuda.is_available()),
                    ("nccl", lambda: ".".join(map(str, torch.cuda.nccl.version()))
                     if torch.cuda.is_available() else None)):
        try:
            t[key] = fn()
        except Exception as e:  # noqa: BLE001
            t[key] = None
            log(f"could not read {key}: {e}")
    try:
        if torch.cuda.is_initialized():
            t["devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            t["current_device"] = torch.cuda.current_device()
    except Exception as e:  # noqa: BLE001
        log(f"could not read CUDA devices: {e}")
    return t
