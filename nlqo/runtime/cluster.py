"""Dask clusters for batch work (``--cluster``): ``local:N`` starts N worker processes on this
machine, ``tcp://HOST:PORT`` joins a running scheduler. Imported only when ``--cluster`` is given,
so nothing else in nlqo loads Dask.

Workers must import the same nlqo as this process. Local workers get this process's
``PYTHONPATH`` with the folder nlqo is imported from in front; remote workers must be started
under the same checkout or install (``PYTHONPATH=... dask worker tcp://...``). :func:`connect`
refuses workers that import another nlqo version.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import attrs

from nlqo._version import __version__
from nlqo.errors import ConfigError

_SOURCE_ROOT = Path(__file__).resolve().parents[2]
"""The folder this process imports nlqo from."""
_SPEC = re.compile(r"^(?:local:(?P<n>\d+)|(?P<address>(?:tcp|tls)://[^\s/]+:\d+))$")


@attrs.frozen
class ClusterSpec:
    """What ``--cluster`` names: a local cluster of ``workers`` processes, or a scheduler ``address``."""

    workers: int = 0
    """Worker processes of a local cluster (0 when joining a running scheduler)."""
    address: str = ""
    """Scheduler address, ``tcp://HOST:PORT`` (empty for a local cluster)."""

    @classmethod
    def parse(cls, text: str) -> ClusterSpec:
        """Read ``local:N`` or ``tcp://HOST:PORT``.

        >>> ClusterSpec.parse("local:2")
        ClusterSpec(workers=2, address='')
        >>> ClusterSpec.parse("tcp://10.0.0.5:8786").address
        'tcp://10.0.0.5:8786'
        """
        match = _SPEC.match(text.strip())
        if match is None or match["n"] == "0":
            raise ConfigError(
                f"--cluster wants local:N (N >= 1 worker processes here) or tcp://HOST:PORT (a running Dask scheduler), not {text!r}"
            )
        return cls(workers=int(match["n"])) if match["n"] else cls(address=match["address"])

    def __str__(self) -> str:
        return self.address or f"local:{self.workers}"


@attrs.frozen
class WorkerInfo:
    """One worker process as it describes itself."""

    address: str
    host: str
    pid: int
    cores: int
    """Cores the worker process may run on."""
    nthreads: int
    """Tasks the worker runs at once (Dask threads)."""
    nlqo_version: str
    nlqo_path: str
    """The folder the worker imports nlqo from."""


def worker_env(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """Environment for local workers: ``PYTHONPATH`` led by the folder this process imports nlqo
    from, and no progress bars (workers' bars would interleave on this terminal).

    >>> worker_env({"PYTHONPATH": "/x"})["PYTHONPATH"].endswith(os.pathsep + "/x")
    True
    """
    here = str(_SOURCE_ROOT)
    rest = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != here]
    return {"PYTHONPATH": os.pathsep.join([here, *rest]), "TQDM_DISABLE": "1"}


def cores() -> int:
    """Cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def host_threads(workers: Sequence[WorkerInfo]) -> dict[str, int]:
    """Threads each task may use on each host: its cores shared among the task threads there.

    >>> w = [WorkerInfo(f"tcp://h:{i}", "h", i, 2, 1, "0", "/") for i in range(2)]
    >>> host_threads(w)
    {'h': 1}
    """
    out: dict[str, int] = {}
    for host in dict.fromkeys(w.host for w in workers):
        here = [w for w in workers if w.host == host]
        out[host] = max(1, min(w.cores for w in here) // sum(w.nthreads for w in here))
    return out


def describe_workers(client) -> tuple[WorkerInfo, ...]:
    """Every worker connected to ``client``'s scheduler, as it describes itself."""
    return tuple(sorted((WorkerInfo(**info) for info in client.run(_about).values()), key=lambda w: w.address))


def _about(dask_worker) -> dict:
    return {
        "address": dask_worker.address,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "cores": cores(),
        "nthreads": dask_worker.state.nthreads,
        "nlqo_version": __version__,
        "nlqo_path": str(_SOURCE_ROOT),
    }


@attrs.frozen
class Connection:
    """A client on a cluster and the workers it had when it connected."""

    client: Any
    """A ``distributed.Client``."""
    spec: ClusterSpec
    workers: tuple[WorkerInfo, ...]


@contextlib.contextmanager
def connect(spec: ClusterSpec, *, timeout_s: float = 120.0) -> Iterator[Connection]:
    """Connect to the cluster ``spec`` names (starting it when local) and check its workers.

    A local cluster runs on loopback, one task thread per worker process, no dashboard, and is
    shut down on exit; a remote one is only disconnected from.
    """
    try:
        from distributed import Client, LocalCluster
    except ImportError as exc:
        raise ConfigError(f"--cluster needs dask.distributed: pip install 'nlqo[cluster]' ({exc})") from None
    with contextlib.ExitStack() as stack:
        if spec.workers:
            cluster = stack.enter_context(
                LocalCluster(
                    n_workers=spec.workers,
                    threads_per_worker=1,
                    processes=True,
                    host="127.0.0.1",
                    dashboard_address=None,
                    env=worker_env(),
                    silence_logs=logging.ERROR,
                )  # fmt: skip
            )
            client = stack.enter_context(Client(cluster))
        else:
            try:
                client = stack.enter_context(Client(spec.address, timeout=timeout_s))
            except OSError as exc:
                raise ConfigError(f"cannot reach the Dask scheduler at {spec.address}: {exc}") from None
        client.wait_for_workers(max(1, spec.workers), timeout=timeout_s)
        workers = describe_workers(client)
        stray = [w for w in workers if w.nlqo_version != __version__]
        if stray:
            raise ConfigError(
                f"workers import another nlqo than this process ({__version__}): "
                + ", ".join(f"{w.address} has {w.nlqo_version} from {w.nlqo_path}" for w in stray)
            )
        yield Connection(client, spec, workers)
