"""uvicorn's server with ``nlqo serve``'s shutdown: on SIGTERM or Ctrl-C the service keeps listening
through the grace and answers every new request, ``/v1/health`` included, 503 (also on keep-alive
connections opened before); running requests have the grace to finish, after which the HTTP layer
answers the ones still running 503 (a stream ends with an ``error`` event) and stops their runs.
Only once none is left (or shortly after the grace, for a run that cannot be interrupted) does
uvicorn close the listener and the connections. A second signal stops at once.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time

import uvicorn

from nlqo.serve.service import POLL, Service


class GracefulServer(uvicorn.Server):
    """A :class:`uvicorn.Server` for ``service`` that shuts down as the module docstring says."""

    def __init__(self, config: uvicorn.Config, *, service: Service, grace: float):
        super().__init__(config)
        self.service, self.grace = service, grace

    def handle_exit(self, sig, frame) -> None:
        if self.service.closing:  # a second signal: stop now
            super().handle_exit(sig, frame)
            return
        self.service.begin_close(self.grace)  # new requests get 503 from the first signal on
        threading.Thread(target=self._exit_when_idle, name="nlqo-shutdown", daemon=True).start()

    def _exit_when_idle(self) -> None:
        # past the grace the HTTP layer answers within a poll and the runs stop within a token; a few
        # polls more let the last answers leave before uvicorn closes the connections
        self.service.wait_idle(time.monotonic() + self.grace + 10 * POLL)
        time.sleep(2 * POLL)
        self.should_exit = True

    @contextlib.contextmanager
    def capture_signals(self):
        """SIGINT and SIGTERM stop the server gracefully; unlike uvicorn's own, the signal is not
        raised again afterwards, so a graceful stop exits 0 with its last line said."""
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
