"""Headless Chromium driven over the DevTools protocol (CDP), for the HTML report tests.

`Browser` starts Debian's `chromium` with a throw-away profile and `--remote-debugging-port=0`,
reads the port from the profile's DevToolsActivePort file, and talks CDP to the page over a
websocket (websocket-client). Every console message, uncaught exception, log entry, JavaScript
dialog and network request of the page is recorded, so a test can assert there were none.
The network is cut with Network.emulateNetworkConditions(offline) before the page loads.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

CHROMIUM_NAMES = ("chromium", "chromium-browser")
REQUIRE_BROWSER = "GPUCHECKUP_REQUIRE_BROWSER"  # =1 (.ci/run sets it): a missing browser fails the tests


def chromium_path() -> str:
    """The Chromium binary; missing, the test skips, or fails when $GPUCHECKUP_REQUIRE_BROWSER is 1 (CI)."""
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    why = "chromium not found on PATH: install it with `apt-get install -y chromium` (.ci/run does)"
    if os.environ.get(REQUIRE_BROWSER) == "1":
        pytest.fail(f"{why}; {REQUIRE_BROWSER}=1 makes the browser tests required", pytrace=False)
    pytest.skip(f"{why} to run the HTML report's browser tests")


class Browser:
    """One headless Chromium with one page, recording what the page reports."""

    def __init__(self, width: int = 1100, height: int = 900):
        binary = chromium_path()  # first: no browser skips (or fails) before anything starts
        import websocket

        self._websocket = websocket
        self.ids = itertools.count(1)
        self.events: list[dict] = []
        args = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-default-apps", "--disable-extensions", "--no-first-run", "--no-default-browser-check",
                "--hide-scrollbars", "--mute-audio", "--remote-debugging-port=0",
                f"--window-size={width},{height}", "about:blank"]
        self.ws = websocket.create_connection(self._start(args), timeout=30, suppress_origin=True)
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable")
        self.call("Network.emulateNetworkConditions", offline=True, latency=0, downloadThroughput=-1,
                  uploadThroughput=-1)
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                  mobile=False)

    def _start(self, args: list[str]) -> str:
        """Start Chromium and return its page's websocket URL; a start that hangs is killed and tried again.

        On a loaded two-core machine a cold start has been seen to take over 30 s; two tries of
        60 s each cover it, and a Chromium that never answers is not left running.
        """
        for _ in range(2):
            self.profile = tempfile.mkdtemp(prefix="gpucheckup-chromium-")
            self.proc = subprocess.Popen(args + [f"--user-data-dir={self.profile}"],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            url = self._page_ws(deadline_s=60)
            if url:
                return url
            self._stop()
        raise AssertionError("chromium's DevTools endpoint did not come up in two tries of 60 s")

    def _page_ws(self, deadline_s: float) -> str | None:
        """The first page's websocket URL once the DevTools endpoint answers, None after deadline_s."""
        port_file = Path(self.profile) / "DevToolsActivePort"
        deadline = time.time() + deadline_s
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"chromium exited early with code {self.proc.returncode}")
            if port_file.exists() and port_file.read_text().strip():
                port = port_file.read_text().split()[0]
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
                        pages = [t for t in json.load(r) if t.get("type") == "page"]
                    if pages:
                        return pages[0]["webSocketDebuggerUrl"]
                except (OSError, ValueError):
                    pass
            time.sleep(0.1)
        return None

    def call(self, method: str, **params) -> dict:
        """Send one CDP command and return its result; events that arrive meanwhile are recorded."""
        msg_id = next(self.ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise AssertionError(f"CDP {method} failed: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self._record(msg)

    def _record(self, msg: dict) -> None:
        self.events.append(msg)
        if msg["method"] == "Page.javascriptDialogOpening":  # never leave a dialog blocking the page
            self.ws.send(json.dumps({"id": next(self.ids), "method": "Page.handleJavaScriptDialog",
                                     "params": {"accept": False}}))

    def pump(self, seconds: float) -> None:
        """Record events for a while (late console errors, timers)."""
        deadline = time.time() + seconds
        while time.time() < deadline:
            self.ws.settimeout(max(0.05, deadline - time.time()))
            try:
                msg = json.loads(self.ws.recv())
            except self._websocket.WebSocketTimeoutException:
                break
            if "method" in msg:
                self._record(msg)
        self.ws.settimeout(30)

    def open(self, url: str, settle_s: float = 1.0) -> None:
        """Navigate and wait for the load event, then a little more; what the last page reported is forgotten."""
        self.events.clear()
        self.call("Page.navigate", url=url)
        deadline = time.time() + 60
        while not any(e["method"] == "Page.loadEventFired" for e in self.events):
            if time.time() > deadline:
                raise AssertionError(f"{url} did not finish loading in 60 s")
            self.pump(0.5)
        self.pump(settle_s)

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page (JSON-serialisable)."""
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise AssertionError(f"evaluate failed: {r['exceptionDetails']}")
        return r["result"].get("value")

    def screenshot_full(self) -> bytes:
        """A PNG of the whole page at 1 CSS pixel per image pixel."""
        w, h = self.evaluate("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
        r = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                      clip={"x": 0, "y": 0, "width": w, "height": h, "scale": 1})
        return base64.b64decode(r["data"])

    def errors(self) -> list[str]:
        """Console errors and warnings, uncaught exceptions, error log entries (CSP violations included)."""
        out = []
        for e in self.events:
            m, p = e["method"], e.get("params", {})
            if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert", "warning"):
                out.append(f"console.{p['type']}: {[a.get('value', a.get('description')) for a in p['args']]}")
            elif m == "Runtime.exceptionThrown":
                out.append(f"exception: {p['exceptionDetails']}")
            elif m == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
                out.append(f"log {p['entry']['level']}: {p['entry'].get('text')} {p['entry'].get('url', '')}")
        return out

    def dialogs(self) -> list[dict]:
        return [e["params"] for e in self.events if e["method"] == "Page.javascriptDialogOpening"]

    def requests(self) -> list[str]:
        """URLs the page asked for."""
        return [e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"]

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self._stop()

    def _stop(self) -> None:
        """End the Chromium process and remove its profile."""
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
