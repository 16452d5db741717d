"""Run a validation job with a variant of the CUPTI light window's recorder (light_ab.py's `attached` and `kern` modes).

  python3 validation/light_variant.py VARIANT JOB.py [job args...]

Under `gpucheckup run --light`, in the job's own process, before the job starts:
- attached: CUPTI stays attached after the window (no cupti.finalize(): the backend's behaviour before 6c)
- kern:     the window records CONCURRENT_KERNEL only (no MEMCPY, no MEMSET, no SYNCHRONIZATION)
- null:     the window runs as shipped (host ranges, the agent's marks, py-spy outside) but CUPTI is never loaded:
            a stand-in answers its calls (clock: time.time_ns) and records nothing. The control of a whole run's
            measure: what the window's steps read against the steps before it when CUPTI costs nothing
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
    else:
        sys.exit(f"light_variant: unknown variant {variant!r} (attached, kern, null)")
    sys.argv = [script, *sys.argv[3:]]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
