"""A real headless Chromium (Debian's ``chromium`` package) driven over the DevTools protocol.

Only what the EXPLAIN page tests need: open a file, evaluate JavaScript, click like a mouse, take
a screenshot, and collect console errors, uncaught exceptions and every request the page makes.
The browser runs with a new empty profile and the background services off (no update checks,
no sync), so the only requests are the page's own.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None)
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--hide-scrollbars",
    "--mute-audio",
)
TIMEOUT = 60.0
"""Seconds to wait for the browser (the machine may be busy with a benchmark)."""


class Page:
    """One tab over a DevTools websocket."""

    def __init__(self, ws_url: str):
        import websocket

        self.ws = websocket.create_connection(
            ws_url, timeout=TIMEOUT, suppress_origin=True, http_no_proxy=["127.0.0.1", "localhost"]
        )
        self._id = 0
        self.events: list[dict[str, Any]] = []
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable")

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """Call ``method``; return its result (events that arrive meanwhile are kept)."""
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self._id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def _pump(self, seconds: float) -> None:
        """Read events for ``seconds``."""
        import websocket

        self.ws.settimeout(seconds)
        try:
            while True:
                self.events.append(json.loads(self.ws.recv()))
        except websocket.WebSocketTimeoutException:
            pass
        finally:
            self.ws.settimeout(TIMEOUT)

    def open(self, url: str, *, width: int = 1280, height: int = 900) -> None:
        """Load ``url`` in a ``width`` x ``height`` window and wait for its load event (events so far are dropped)."""
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        self.events.clear()
        self.send("Page.navigate", url=url)
        deadline = time.monotonic() + TIMEOUT
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not load")
            self.events.append(json.loads(self.ws.recv()))
        self._pump(0.3)

    def eval(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 10.0) -> Any:
        """Poll ``expression`` until it is truthy; return its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.eval(expression)
            if value or time.monotonic() > deadline:
                return value
            time.sleep(0.05)

    def click(self, selector: str) -> None:
        """A left mouse click at the centre of the first element matching ``selector``."""
        box = self.eval(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)}); if (!e) return null;"
            " e.scrollIntoView({block: 'center', inline: 'center'}); const r = e.getBoundingClientRect();"
            " return [r.left + r.width / 2, r.top + r.height / 2]; })()"
        )
        if box is None:
            raise LookupError(f"no element matches {selector!r}")
        x, y = box
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.send(
                "Input.dispatchMouseEvent",
                type=kind,
                x=x,
                y=y,
                button="left" if kind != "mouseMoved" else "none",
                clickCount=1,
            )

    def press(self, key: str, code: str | None = None) -> None:
        """Press and release a key (``Enter``, say) on the focused element."""
        windows = {"Enter": 13, " ": 32}.get(key, 0)
        for kind in ("keyDown", "keyUp"):
            self.send("Input.dispatchKeyEvent", type=kind, key=key, code=code or key, windowsVirtualKeyCode=windows)

    def screenshot(self, path: Path, *, full_page: bool = True) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.eval("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params["clip"] = {"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1}
            params["captureBeyondViewport"] = True
        import base64

        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", **params)["data"]))
        return path

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and browser log errors (CSP violations, failed loads) so far."""
        self._pump(0.2)
        out = []
        for e in self.events:
            method, p = e.get("method"), e.get("params", {})
            if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(
                    "console: " + " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
                )
            elif method == "Runtime.exceptionThrown":
                out.append("exception: " + json.dumps(p.get("exceptionDetails", {}))[:500])
            elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append("log: " + p["entry"].get("text", ""))
        return out

    def requests(self) -> list[str]:
        """The URL of every request the page made so far."""
        self._pump(0.2)
        return [e["params"]["request"]["url"] for e in self.events if e.get("method") == "Network.requestWillBeSent"]

    def close(self) -> None:
        self.ws.close()


class Chromium:
    """A headless Chromium process with one tab; a context manager that ends the process it started."""

    def __init__(self, executable: str | None = None):
        self.executable = executable or CHROMIUM
        if self.executable is None:
            raise FileNotFoundError("chromium is not installed")
        self.home = Path(tempfile.mkdtemp(prefix="nlqo-chromium-"))
        self.log = self.home / "stderr.log"
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                [
                    self.executable,
                    *FLAGS,
                    f"--user-data-dir={self.home / 'profile'}",
                    "--remote-debugging-port=0",
                    "--remote-debugging-address=127.0.0.1",
                    "about:blank",
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        self.port = self._port()
        self.page = Page(self._page_socket())

    def _port(self) -> int:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and self.process.poll() is None:
            match = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", self.log.read_text(errors="replace"))
            if match:
                return int(match.group(1))
            time.sleep(0.05)
        text = self.log.read_text(errors="replace")
        self.close()
        raise RuntimeError("chromium did not start:\n" + text[-3000:])

    def _page_socket(self) -> str:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        deadline = time.monotonic() + TIMEOUT
        while True:
            with opener.open(f"http://127.0.0.1:{self.port}/json/list", timeout=TIMEOUT) as response:
                pages = [t for t in json.load(response) if t.get("type") == "page"]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
            if time.monotonic() > deadline:
                raise RuntimeError("chromium opened no tab")
            time.sleep(0.1)

    def close(self) -> None:
        if getattr(self, "page", None) is not None:
            self.page.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.home, ignore_errors=True)

    def __enter__(self) -> "Chromium":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
