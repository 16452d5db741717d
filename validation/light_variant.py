"""Run a validation job with a variant of the CUPTI light window's recorder (light_ab.py's `attached` and `kern` modes).

  python3 validation/light_variant.py VARIANT JOB.py [job args...]

Under `gpucheckup run --light`, in the job's own process, before the job starts:
- attached: CUPTI stays attached after the window (no cupti.finalize(): the backend's behaviour before 6c)
- kern:     the window records CONCURRENT_KERNEL only (no MEMCPY, no MEMSET, no SYNCHRONIZATION)
- null:     the window runs as shipped (host ranges, the agent's marks, py-spy outside) but CUPTI is never loaded:
            a stand-in answers its calls (clock: time.time_ns) and records nothing. The control of a whole run's
            measure: what the window's steps read against the steps before it when CUPTI costs nothing
- shared:   CUPTI's per-thread activity buffers (ATTR_PER_THREAD_BUFFER) flipped from their default before every
            window registers its buffer callbacks (paired_steps.py's `shared` mode, in a whole run)
then the job script runs as __main__. Validation only: the variant measured, never shipped this way.
"""

import runpy
import sys


class NoCupti:
    """cupti-python's calls the window makes, answered without CUPTI: nothing is recorded."""

    class ActivityKind:
        CONCURRENT_KERNEL, MEMCPY, MEMSET, SYNCHRONIZATION = 10, 1, 2, 38

    @staticmethod
    def get_timestamp() -> int:
        import time

        return time.time_ns()

    def activity_register_callbacks(self, requested, completed) -> None:
        pass

    def activity_enable(self, kind) -> None:
        pass

    def activity_disable(self, kind) -> None:
        pass

    def activity_flush_all(self, flag) -> None:
        pass

    def finalize(self) -> None:
        pass


def per_thread_buffer(cu, value: int | None = None) -> int:
    """CUPTI's ATTR_PER_THREAD_BUFFER (a uint8), set to `value` first when given: the value it holds after."""
    import ctypes

    attr = cu.ActivityAttribute.ATTR_PER_THREAD_BUFFER
    v, n = ctypes.c_uint8(0), ctypes.c_size_t(1)
    if value is not None:
        new = ctypes.c_uint8(value)
        cu.activity_set_attribute(attr, ctypes.addressof(n), ctypes.addressof(new))
    cu.activity_get_attribute(attr, ctypes.addressof(n), ctypes.addressof(v))
    return int(v.value)


def main() -> None:
    variant, script = sys.argv[1], sys.argv[2]
    from gpucheckup.capture.agent import cupti_window as cw

    if variant == "kern":
        cw.ACTIVITIES = ("CONCURRENT_KERNEL",)
    elif variant == "null":
        cw.load_cupti = lambda: NoCupti()
    elif variant == "attached":
        def stay_attached(self):
            self.log("light window: CUPTI left attached after the window (validation variant 'attached')")

        cw.CuptiWindow._detach = stay_attached
    elif variant == "shared":
        start, default = cw.CuptiWindow.start, []

        def flipped_start(self):
            try:  # the attribute is the process's: flipped from the default read before any window set it
                default[:] = default or [per_thread_buffer(self.cupti)]
                now = per_thread_buffer(self.cupti, 1 - default[0])
                self.log(f"light window: CUPTI per-thread buffers {default[0]} -> {now} (variant 'shared')")
            except Exception as e:  # noqa: BLE001 - the window runs as shipped
                self.log(f"light window: per-thread buffers not set: {type(e).__name__}: {e}")
            start(self)

        cw.CuptiWindow.start = flipped_start
    else:
        sys.exit(f"light_variant: unknown variant {variant!r} (attached, kern, null, shared)")
    sys.argv = [script, *sys.argv[3:]]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
