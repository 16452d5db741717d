"""`--flops`: one step counted with torch's FlopCounterMode, written to flops.json {"flops_per_step", "how",
"step"}. torch is imported only when the count starts."""

from __future__ import annotations

import os


class FlopCount:
    """One FlopCounterMode session over one training step."""

    def __init__(self):
        from torch.utils.flop_counter import FlopCounterMode

        self.mode = FlopCounterMode(display=False)
        self.mode.__enter__()

    def finish(self, step: int, rd, name: str) -> dict:
        """Stop counting; the result, written atomically to `name` in the run directory `rd`."""
        self.mode.__exit__(None, None, None)
        total = int(self.mode.get_total_flops())
        rank = os.environ.get("RANK")
        how = (f"torch.utils.flop_counter.FlopCounterMode over run step {step} (forward, backward and "
               f"optimizer of one step{', on rank ' + rank if rank else ''}; FLOPs of matrix products "
               "and convolutions as torch counts them)")
        result = {"flops_per_step": total, "how": how, "step": step}
        rd.write_json(name, result)
        return result

    def abandon(self) -> None:
        """Stop counting without a result (the job ended during the counted step)."""
        self.mode.__exit__(None, None, None)
