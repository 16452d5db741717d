"""gpucheckup's injected sitecustomize: `gpucheckup run` puts this folder first on PYTHONPATH.

It (1) arms the gpucheckup agent when GPUCHECKUP_RUN_DIR is set: the agent does nothing until
`torch` is imported; any error here is written to the run directory's agent-bootstrap.log and
the job carries on; then (2) runs the sitecustomize the job would have run without us (the
next one on sys.path), so an environment's own start-up code still runs.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _arm_agent():
    run_dir = os.environ.get("GPUCHECKUP_RUN_DIR")
    if not run_dir:
        return
    root = os.path.dirname(os.path.dirname(os.path.dirname(_HERE)))  # the folder that holds `gpucheckup`
    try:
        sys.path.insert(0, root)
        try:
            from gpucheckup.capture import agent
        finally:
            sys.path.remove(root)
        agent.install()
    except Exception as e:  # noqa: BLE001 - the job must start whatever happens here
        # A log is appended, not written atomically: one whole line per write on an O_APPEND
        # descriptor, so lines from several processes never interleave (docs/capture.md).
        line = f"pid {os.getpid()}: the agent could not be armed: {type(e).__name__}: {e}"
        try:
            nofollow = getattr(os, "O_NOFOLLOW", 0)  # never through a link (docs/reliability.md, threat model)
            dfd = os.open(run_dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | nofollow)
            try:
                if os.fstat(dfd).st_uid != os.geteuid():
                    return
                fd = os.open("agent-bootstrap.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND | nofollow, 0o644,
                             dir_fd=dfd)
                try:
                    os.write(fd, (" ".join(line.split()) + "\n").encode("utf-8", "replace"))
                finally:
                    os.close(fd)
            finally:
                os.close(dfd)
        except OSError:
            pass


def _run_previous_sitecustomize():
    import importlib.machinery
    import importlib.util

    paths = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", paths)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_arm_agent()
_run_previous_sitecustomize()
