"""Reaching Ray: join a cluster at an address, or start a loopback-only local instance.

Ray's defaults reach off the machine: it finds its own address with a UDP
connect to a public resolver, and its head asks the cloud metadata address
which cloud it runs on. ``start_ray`` keeps a local instance, and a cluster
joined at a loopback address (several raylets on one machine), on 127.0.0.1
and away from any metadata service. Ray is imported only when this is called.

>>> start_ray()  # doctest: +SKIP
>>> start_ray("10.0.0.1:6379")  # a cluster's head, started with 'ray start --head'  # doctest: +SKIP
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import ipaddress
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fitness import CutoffError, ProblemError
from fitness.boundary.keys import is_secret
from platforms import PlatformUnavailable

log = logging.getLogger(__name__)

# Environment of Ray processes that must reach nothing but loopback.
# RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 makes every Ray process take 127.0.0.1 as
# its node address instead of finding one with a UDP connect to a public
# resolver (Ray reads it when ``ray`` is imported). Token authentication is
# off: the instance listens on loopback only, and the sandboxed worker that
# runs candidates never sees Ray's environment anyway (fitness.boundary.sandbox drops
# *AUTH* and *TOKEN* names).
LOCAL_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "disabled",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
}
# Ray's head asks the cloud metadata address (169.254.169.254) which cloud it
# runs on unless $HOME/ray_bootstrap_config.yaml exists, even with usage stats
# off. Rather than write into the user's home, the head processes are started
# with HOME pointing at a kevo directory that holds that file; actors get the
# real HOME back (see ``RayDispatcher``).
BOOTSTRAP_FILE = "ray_bootstrap_config.yaml"
BOOTSTRAP_TEXT = "# written by kevo: tells Ray's head it runs on a local cluster\nprovider: {type: local}\n"


class RayUnavailable(RuntimeError):
    """Ray is not installed, or the cluster cannot run the evaluators asked for."""


def import_ray() -> Any:
    """The ``ray`` module; ``RayUnavailable`` with what to do when it is not installed."""
    try:
        import ray
    except ImportError:
        raise RayUnavailable("Ray is not installed: pip install 'ray>=2.50' "
                             "(or set cluster.actors: 0 to evaluate in this process)") from None
    return ray


def start_ray(address: str | None = None, num_cpus: int | None = None, num_gpus: int | None = None) -> None:
    """Connect to Ray: join the cluster at ``address``, or start a loopback-only local instance.

    A local instance binds and connects to 127.0.0.1 only, sends no usage
    statistics, asks no cloud metadata service, runs no dashboard, and has
    ``num_cpus`` (default: this machine's cores) and ``num_gpus`` (default:
    what Ray detects). A cluster at a loopback address is joined on loopback
    too (the variables of ``LOCAL_ENV`` that are not set already). Does
    nothing when Ray is already initialised.
    """
    if address is None:
        # Before the import: Ray reads some of these when it is imported.
        os.environ.update(LOCAL_ENV)
    elif is_loopback(address):
        for name, value in LOCAL_ENV.items():
            os.environ.setdefault(name, value)
    ray = import_ray()
    if ray.is_initialized():
        return
    _cluster_errors_to_stderr()
    if address is not None:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        try:
            with _sigterm_kept():
                ray.init(address=address, log_to_driver=False)
        except ConnectionError as exc:  # e.g. address "auto" with no cluster on this machine
            raise RayUnavailable(f"cannot join the Ray cluster at cluster.address {address!r}: {exc}") from None
        return
    home = os.environ.get("HOME")
    os.environ["HOME"] = bootstrap_home()
    try:
        # address "local": a new instance, even where RAY_ADDRESS or a cluster started on this
        # machine ('ray start', which leaves its address in Ray's temp folder) would be joined instead
        with _sigterm_kept(), _sessions_of_their_own(), _secrets_withheld():
            ray.init(address="local", num_cpus=num_cpus or os.cpu_count() or 1, num_gpus=num_gpus,
                     include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False)
        atexit.register(_remove_session, ray, _session_dir(ray))
    finally:
        if home is None:
            del os.environ["HOME"]
        else:
            os.environ["HOME"] = home


@contextlib.contextmanager
def _secrets_withheld() -> Iterator[None]:
    """The driver's environment without its secrets (``fitness.boundary.keys``; Ray's own
    ``RAY_*`` settings stay) while the local instance starts: its processes hand their
    environment down to the actors, the evaluators, and so none holds a provider's key. The
    LLM client, in the driver, keeps them: they are back in ``os.environ`` after."""
    withheld = {name: os.environ.pop(name) for name in list(os.environ)
                if is_secret(name) and not name.startswith("RAY_")}
    try:
        yield
    finally:
        os.environ.update(withheld)


@contextlib.contextmanager
def _sessions_of_their_own() -> Iterator[None]:
    """The local instance's processes (its GCS, raylet, and through the raylet the actors) start in
    sessions of their own, out of the driver's process group: ``timeout`` and shells stop a command
    by signalling its whole group, and a GCS stopped that way leaves the driver unable to close its
    actors (Ray's core worker gives up after 60 s and aborts the process; the actors' workers and
    their folders are left behind). Out of the group, only the driver gets the SIGTERM, ends as on
    Ctrl-C, and closes the actors itself. They still die with the driver (Ray binds them to it
    with the parent-death signal), and Ctrl-C never reached them (Ray blocks SIGINT in them)."""
    try:
        from ray._private import services
    except ImportError:  # another layout of Ray's internals: its processes stay in the driver's group
        yield
        return
    popen = getattr(services, "ConsolePopen", None)
    if popen is None:
        yield
        return
    services.ConsolePopen = functools.partial(popen, start_new_session=True)
    try:
        yield
    finally:
        services.ConsolePopen = popen


def _session_dir(ray: Any) -> str | None:
    """The folder of the local instance's session (its logs and sockets), where Ray says it."""
    node = getattr(getattr(getattr(ray, "_private", None), "worker", None), "_global_node", None)
    try:
        return node.get_session_dir_path() if node is not None else None
    except Exception:  # noqa: BLE001 - another layout of Ray's internals: the folder stays
        return None


def _remove_session(ray: Any, folder: str | None) -> None:
    """At exit (before Ray's own shutdown, registered later than it): the local instance stopped, and its
    session folder removed with the ``session_latest`` link to it, so that a run leaves nothing of Ray's in
    the temporary folder (Ray keeps every session's folder otherwise)."""
    if folder is None:
        return
    with contextlib.suppress(Exception):
        ray.shutdown()
    shutil.rmtree(folder, ignore_errors=True)
    latest = Path(folder).parent / "session_latest"
    with contextlib.suppress(OSError):
        if latest.is_symlink() and os.path.realpath(latest) == os.path.realpath(folder):
            latest.unlink()


@contextlib.contextmanager
def _sigterm_kept() -> Iterator[None]:
    """Ray's init puts in a SIGTERM handler of its own (``sys.exit(15)``); the driver keeps the one it
    had (kevo's command line turns SIGTERM into its interrupt: ``evolve.cli``)."""
    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    finally:
        if before is not None:
            signal.signal(signal.SIGTERM, before)


def actor_errors(ray: Any) -> tuple[type[Exception], ...]:
    """What a call to an actor raises when the actor is dead or could not be placed (its node gone)."""
    return ray.exceptions.RayActorError, ray.exceptions.ActorUnschedulableError


#: What an actor's evaluator raises for a problem it refuses: the problem's error, not kevo's.
REFUSALS = (ProblemError, CutoffError, PlatformUnavailable)


def get_answer(ray: Any, ref: Any, timeout_s: float, waited: str) -> Any:
    """An actor's answer; ``RayUnavailable`` when it does not come within ``timeout_s`` (``waited``
    says how long was allowed), and the original error of a problem the actor's evaluator refuses."""
    try:
        return ray.get(ref, timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        raise RayUnavailable(f"the Ray evaluator actors were not ready within {waited} "
                             f"(the cluster has {ray.available_resources()} free)") from None
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, REFUSALS):
            raise exc.cause from None
        raise exc.as_instanceof_cause() from None


def _cluster_errors_to_stderr() -> None:
    """Ray's driver prints what the cluster reports (a node marked dead, a worker killed) on
    stdout, where ``kevo sweep --json`` writes its one JSON object: send it to stderr.

    Ray has no setting for it: its error listener calls ``print_to_stdstream``
    of ``ray._private.worker``, which this wraps. Another Ray without that
    function keeps printing where it does.
    """
    worker = sys.modules.get("ray._private.worker")
    original = getattr(worker, "print_to_stdstream", None)
    if original is None:
        log.debug("ray._private.worker.print_to_stdstream not found: Ray's cluster errors go to stdout")
        return
    if getattr(original, "kevo_to_stderr", False):
        return

    def to_stderr(data: dict, ignore_prefix: bool) -> None:
        original({**data, "is_err": True}, ignore_prefix)

    to_stderr.kevo_to_stderr = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = to_stderr


def is_loopback(address: str) -> bool:
    """Whether a cluster ``address`` (``host:port`` or ``ray://host:port``) names this machine's loopback."""
    host = address.removeprefix("ray://").rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bootstrap_home() -> str:
    """A directory of kevo's holding Ray's local-cluster marker file."""
    home = Path(tempfile.gettempdir()) / f"kevo-ray-home-{os.getuid()}"
    home.mkdir(mode=0o700, exist_ok=True)
    marker = home / BOOTSTRAP_FILE
    if not marker.is_file():
        marker.write_text(BOOTSTRAP_TEXT, encoding="utf-8")
    return str(home)
