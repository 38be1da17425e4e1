"""The judge<->worker protocol: every step, answer and reply as a typed message.

The evaluator (``fitness.judge.channel``) runs one step at a time in its sandboxed
worker (``fitness.worker``)::

    Warm   compile the candidate's kernels ahead, on the ``meta`` device (before the memory plan lets it on)
    Load   build the candidate's ModelNew at one variant's shapes
    Call   run forward once on the inputs drawn from a seed; its outputs come back
    Time   the timed window; checked runs' outputs come back as the runs end
    Ping   does the worker still answer (before it is handed a candidate)
    Reset  drop the candidate and the problem: the worker serves another problem next
    Info   the names in the worker's environment (no secret reaches it)

A step ends with one reply: its own (``Ok``; ``Outputs`` for a call, ``Timed``
for the time step, ``Environment`` for info), or ``Refused`` (a known failure
of the candidate, with its ``Status``), or ``Failed`` (a bug of kevo). In its
middle the worker may send interim messages, each answered with ``Continue``
or ``Stop``: ``Compiling`` and ``Compiled`` around a compile while a load or a
call lends the device's timing lane out (``fitness.judge.lane``), and ``TimedRun``
with the outputs of a checked timed run.

``to_wire()`` turns a message into the JSON object the wire carries
(``fitness.boundary.wire``: JSON and shared memory, never pickle) and ``from_wire()``
reads it back, checking every field for type and range (``fitness.boundary.messages``).
The worker runs candidate code, so what it sends is untrusted: ``read_reply``
raises ``ProtocolViolation`` for anything an honest worker does not send, and
the evaluator's verdict is then ``forbidden``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Union

from fitness.boundary.messages import (Message, ProtocolViolation, count, dict_of, duration, field, flag, integer,
                                       list_of, message, optional, require, scalar, text)
from fitness.problems.probes import Probe
from fitness.result import Status

#: The statuses a step can be refused with (``fitness.refusal.Refusal``): never ``accepted``,
#: nor those only the evaluator gives (``nan``, ``timeout``, ``wrong_off_distribution``).
REFUSED_STATUSES = frozenset({
    Status.WRONG, Status.FORBIDDEN, Status.COMPILE_ERROR, Status.RUNTIME_ERROR, Status.CRASHED,
    Status.MUTATED_INPUT, Status.OUT_OF_MEMORY, Status.OUT_OF_BOUNDS,
})
#: The wire's status of ``Failed``: ``fitness.boundary.sandbox`` raises on it (a bug of kevo is no verdict).
INTERNAL_ERROR = "internal_error"
#: The longest reason a refusal carries (characters); the worker cuts its own to this.
MAX_REASON = 1 << 16


def reason(value: Any, name: str) -> str:
    require(type(value) is str and len(value) <= MAX_REASON, name, f"not a string of at most {MAX_REASON} characters")
    return value


def refusal_status(value: Any, name: str) -> Status:
    require(type(value) is str and value in {s.value for s in REFUSED_STATUSES}, name,
            f"{str(value)[:40]!r} is no status a step is refused with")
    return Status(value)


def probe(value: Any, name: str) -> Probe | None:
    try:
        return Probe.from_message(value)
    except ValueError:
        raise ProtocolViolation(f"{name}: not a probe") from None


# Replies: the end of a step.

@message
class Ok(Message):
    """The step is done."""

    HEAD = {"ok": True}


@message
class Outputs(Ok):
    """A call is done: the candidate's outputs travel as the message's tensors. ``compile_s``:
    the seconds Triton compiled in the step, and ``phases_s``: where the step's wall time went
    (seconds), for kevo's own breakdowns only."""

    TENSORS = True
    compile_s: float = field(duration, default=0.0)
    phases_s: dict[str, float] = field(dict_of(duration), default_factory=dict)


@message
class Timed(Message):
    """The time step is done (milliseconds, one entry per run of the window).

    ``runs_ms`` and ``wall_ms``: the timer's and the wall clock's time of each run;
    ``device_ms``: the device trace's span of each run, where there is one;
    ``overhead_ms``: the timer's own cost; ``checked``: the runs whose outputs were
    handed over, in order; ``phases_s``: where the step's wall time went (seconds),
    and ``compile_s``: the seconds Triton compiled in it, for kevo's own breakdowns only.
    """

    HEAD = {"ok": True}
    runs_ms: list[float] = field(list_of(duration))
    wall_ms: list[float] = field(list_of(duration))
    overhead_ms: float = field(duration)
    device_ms: list[float] | None = field(optional(list_of(duration)))
    checked: list[int] = field(list_of(count))
    phases_s: dict[str, float] = field(dict_of(duration))
    compile_s: float = field(duration, default=0.0)

    def check(self) -> None:
        n = len(self.runs_ms)
        require(n > 0, "Timed", "no timings")
        require(len(self.wall_ms) == n and (self.device_ms is None or len(self.device_ms) == n), "Timed",
                "not one time of each kind per run")
        require(all(a < b for a, b in zip(self.checked, self.checked[1:])) and all(r < n for r in self.checked),
                "Timed.checked", "not runs of the window in order")


@message
class Warmed(Message):
    """The warm step is done: ``reached``, the variants whose forward ran to its end on ``meta``
    (``stopped``: what ended it before, if anything); ``compile_s``: the seconds Triton compiled in it."""

    HEAD = {"ok": True}
    reached: int = field(count)
    stopped: str = field(reason, default="")
    compile_s: float = field(duration, default=0.0)


@message
class Environment(Message):
    """The info step is done: the names of the worker's environment variables."""

    HEAD = {"ok": True}
    env: list[str] = field(list_of(text))


@message
class Refused(Message):
    """The candidate failed the step with ``status`` (``fatal``: the worker cannot go on;
    ``harness``: kevo's own allocation failed, not the candidate's)."""

    HEAD = {"ok": False}
    status: Status = field(refusal_status, write=lambda status: status.value)
    reason: str = field(reason)
    fatal: bool = field(flag, default=False)
    harness: bool = field(flag, default=False)


@message
class Failed(Message):
    """A bug of kevo in the worker (``fitness.boundary.sandbox`` raises it in the evaluator)."""

    HEAD = {"ok": False, "status": INTERNAL_ERROR}
    reason: str = field(text)
    fatal: bool = field(flag, default=False)


# Interim messages: the worker's, in the middle of a step; each waits for an answer.

@message
class Compiling(Message):
    """A compile starts: the device's lane is lent out until ``Compiled``."""

    HEAD = {"ok": True, "interim": "compiling"}


@message
class Compiled(Message):
    """The loan ends: the worker waits for the lane back before anything else runs."""

    HEAD = {"ok": True, "interim": "compiled"}


@message
class TimedRun(Message):
    """The outputs of timed run ``run`` (inputs drawn from ``seed``), to be judged now."""

    HEAD = {"ok": True, "interim": "timed_run"}
    TENSORS = True
    run: int = field(count)
    seed: int = field(integer)


# Answers: the evaluator's, to an interim message.

@message
class Continue(Message):
    """Go on with the step."""

    HEAD = {"step": "continue"}


@message
class Stop(Message):
    """End the step: the timed run just handed over was judged wrong."""

    HEAD = {"step": "stop"}


# Steps: the evaluator's.

def cache_name(value: Any, name: str) -> str:
    """The name of one evaluation's Triton cache (``Load.cache``, ``Warm.cache``): 32 hexadecimal
    digits drawn by the evaluator, or '' for the worker's own (``fitness.worker.harness.Harness.use_cache``)."""
    require(type(value) is str and (value == "" or (len(value) == 32 and set(value) <= set("0123456789abcdef"))),
            name, "not a cache's name")
    return value


class Step(Message):
    """One step of the worker; ``DONE`` is the reply it ends with unless refused."""

    KIND: ClassVar[str] = ""
    DONE: ClassVar[type] = Ok

    def interims(self) -> tuple[type, ...]:
        """The interim messages the worker may send in the middle of this step."""
        return ()


@message
class Warm(Step):
    """Import the candidate apart (a module of its own, dropped after), build its ModelNew and run
    forward on the ``meta`` device at each of ``shapes`` in turn, Triton compiling every launch
    without running it: the kernels land in the evaluation's Triton cache (``cache``) before the
    evaluation holds memory (``fitness.judge.ahead``). The compiles lend the (absent) lane like a load's, under the same budget."""

    KIND = "warm"
    HEAD = {"step": KIND}
    DONE = Warmed
    source: str = field(text)
    problem: str = field(text)
    problem_source: str = field(text)
    shapes: list[dict[str, int]] = field(list_of(dict_of(integer)))
    init_seed: int = field(integer)
    dtype: str | None = field(optional(text), default=None)
    cache: str = field(cache_name, default="")

    @property
    def lend(self) -> bool:
        """Always: the worker tells each compile (``fitness.worker.loan``), so that ``compile_timeout_s`` bounds it."""
        return True

    def interims(self) -> tuple[type, ...]:
        return (Compiling, Compiled)


@message
class Load(Step):
    """Import the candidate (once per source) and build its ModelNew at ``shapes``
    (``problem``: the reference file's path, ``problem_source``: its text, which the worker
    builds the problem from without reading the file; ``dtype``: the problem's own dtypes if None;
    ``lend``: the worker may lend the lane out while Triton compiles; ``cache``: the name of
    the evaluation's own Triton cache, ``cache_name``)."""

    KIND = "load"
    HEAD = {"step": KIND}
    source: str = field(text)
    problem: str = field(text)
    problem_source: str = field(text)
    shapes: dict[str, int] = field(dict_of(integer))
    init_seed: int = field(integer)
    dtype: str | None = field(optional(text), default=None)
    lend: bool = field(flag, default=False)
    cache: str = field(cache_name, default="")

    def interims(self) -> tuple[type, ...]:
        return (Compiling, Compiled) if self.lend else ()


@message
class Call(Step):
    """Run forward once on the inputs drawn from ``seed`` (transformed by ``probe``), with
    ``poison``'s buffer sizes (bytes) poisoned first."""

    KIND = "call"
    HEAD = {"step": KIND}
    DONE = Outputs
    seed: int = field(integer)
    poison: list[int] = field(list_of(count))
    probe: Probe | None = field(probe, write=Probe.to_message, default=None)
    lend: bool = field(flag, default=False)

    def interims(self) -> tuple[type, ...]:
        return (Compiling, Compiled) if self.lend else ()


@message
class Time(Step):
    """Time forward, run ``i`` on the inputs drawn from ``base_seed + i``; ``checks`` runs
    (drawn with ``check_seed``) and the last are handed over (``TimedRun``). ``timing``:
    ``platforms.TimingSettings`` as a dict."""

    KIND = "time"
    HEAD = {"step": KIND}
    DONE = Timed
    base_seed: int = field(integer)
    check_seed: int = field(integer)
    checks: int = field(count)
    poison: list[int] = field(list_of(count))
    timing: dict[str, Any] = field(dict_of(scalar))

    def interims(self) -> tuple[type, ...]:
        return (TimedRun,)


@message
class Ping(Step):
    """Answer, nothing more: the worker is alive and not stuck."""

    KIND = "ping"
    HEAD = {"step": KIND}


@message
class Reset(Step):
    """Drop the candidate, its model and the problem, and give cached device memory back."""

    KIND = "reset"
    HEAD = {"step": KIND}


@message
class Info(Step):
    """The names of the worker's environment variables."""

    KIND = "info"
    HEAD = {"step": KIND}
    DONE = Environment


Reply = Union[Ok, Outputs, Timed, Warmed, Environment, Refused, Failed, Compiling, Compiled, TimedRun]
Answer = Union[Continue, Stop]
#: Messages in the middle of a step.
INTERIMS: tuple[type, ...] = (Compiling, Compiled, TimedRun)
STEPS: dict[str, type] = {step.KIND: step for step in (Warm, Load, Call, Time, Ping, Reset, Info)}
_INTERIM_KINDS: dict[str, type] = {kind.HEAD["interim"]: kind for kind in INTERIMS}


def read_reply(step: Step, data: Any, tensors: list) -> Reply:
    """The worker's message in the middle or at the end of ``step``, every field checked:
    an interim message the step has, a refusal, or the step's own reply. Raises
    ``ProtocolViolation``."""
    require(type(data) is dict, "reply", "not a JSON object")
    kind: type
    if "interim" in data:
        named = data["interim"]
        found = _INTERIM_KINDS.get(named) if type(named) is str else None
        require(found in step.interims(), "reply", f"a message the {step.KIND} step does not have")
        kind = found  # type: ignore[assignment]
    else:
        kind = Refused if data.get("ok") is False else step.DONE
    read = kind.from_wire(data)
    require(kind.TENSORS or not tensors, kind.__name__, "tensors where it has none")
    return read


def read_step(data: Any) -> Step:
    """The step ``data`` names (the worker's side); raises ``ProtocolViolation``."""
    named = data.get("step") if type(data) is dict else None
    kind = STEPS.get(named) if type(named) is str else None
    require(kind is not None, "step", f"unknown step {str(named)[:40]!r}")
    return kind.from_wire(data)  # type: ignore[union-attr]


def read_answer(data: Any) -> Answer:
    """The evaluator's answer to an interim message (the worker's side); raises ``ProtocolViolation``."""
    named = data.get("step") if type(data) is dict else None
    kind = {"continue": Continue, "stop": Stop}.get(named) if type(named) is str else None
    require(kind is not None, "answer", f"{str(named)[:40]!r} is no answer")
    return kind.from_wire(data)  # type: ignore[union-attr]
