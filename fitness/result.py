"""The one record every evaluation produces.

A known failure of a candidate (a wrong answer, a compile error, a hang, a
crash, a forbidden construct) is a result with a status; a bug of kevo raises.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any


class Status(str, enum.Enum):
    """Outcome of evaluating one candidate. Only ``ACCEPTED`` carries a fitness."""

    ACCEPTED = "accepted"
    WRONG = "wrong"  # finite outputs farther than the cutoff, or wrong shape/dtype
    NAN = "nan"  # non-finite output where the reference is finite
    # right on the problem's own draws, wrong (or non-finite) on probe inputs from a wider domain
    WRONG_OFF_DISTRIBUTION = "wrong_off_distribution"
    FORBIDDEN = "forbidden"  # static screen, runtime trace or tamper check refused it
    COMPILE_ERROR = "compile_error"  # does not parse, import or compile
    RUNTIME_ERROR = "runtime_error"  # raised while running
    TIMEOUT = "timeout"  # exceeded its time limit; the worker was killed
    CRASHED = "crashed"  # the worker process died (segfault, exit, lost GPU context)
    MUTATED_INPUT = "mutated_input"  # changed one of its input tensors
    OUT_OF_MEMORY = "out_of_memory"  # asked for more memory than the device has
    OUT_OF_BOUNDS = "out_of_bounds"  # a kernel read or wrote outside its tensors (checked where the platform can)


@dataclasses.dataclass
class EvalResult:
    """Verdict on one candidate for one problem on one platform.

    ``runtime_ms`` is the median over timed runs and ``runtime_spread`` the
    relative spread ``(p90 - p10) / median`` of those runs; both are ``None``
    unless the candidate was accepted.

    An accepted verdict carries the problem's speed of light (``fitness.judge.sol``):
    ``floor_ms`` (the time below which no kernel can go on this device),
    ``sol`` (``floor_ms / runtime_ms``, in [0, 1]), ``bound`` (``memory`` or
    ``compute``) and ``floor`` (how the floor was obtained:
    ``fitness.judge.floor.Floor.to_dict()``); all None where no floor is known. A
    kernel that read faster than the floor was judged again with every timed
    run checked; passing that, it is ``below_floor``, with
    ``below_floor_reason`` saying why the floor may not hold for it.
    """

    status: Status
    reason: str = ""
    max_abs_diff: float | None = None
    runtime_ms: float | None = None
    runtime_spread: float | None = None
    reference_ms: float | None = None
    platform: str = ""
    device_name: str = ""
    checks: int = 0  # number of output comparisons that passed
    profile: dict[str, Any] | None = None
    # kevo's own side (the worker's harness, the evaluator) ran out of memory, not the
    # candidate: worth another try with fewer evaluations in flight
    harness_failure: bool = False
    # what the operating system held the worker to (fitness.boundary.confine): "landlock+netns", or what
    # was missing and why ("netns (landlock unavailable: ...)")
    confinement: str = ""
    floor_ms: float | None = None
    sol: float | None = None
    bound: str | None = None  # "memory" or "compute"
    floor: dict[str, Any] | None = None
    below_floor: bool = False
    below_floor_reason: str = ""
    # where the evaluation's wall time went, in seconds (fitness.judge.evaluator: the worker's steps, the
    # reference's outputs, the comparisons, the waits for the timing lane and the device's lock)
    walls_s: dict[str, float] | None = None
    # when the evaluation held its place under the memory plan: [admitted, released], epoch seconds
    # (evolve.dispatch.actor), so that a run's record shows how many evaluated at once, and when
    admitted_s: list[float] | None = None

    @property
    def accepted(self) -> bool:
        return self.status is Status.ACCEPTED

    @property
    def speedup(self) -> float | None:
        if self.runtime_ms and self.reference_ms:
            return self.reference_ms / self.runtime_ms
        return None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; ``from_dict`` reads it back."""
        data = dataclasses.asdict(self)
        data["status"] = self.status.value
        data["speedup"] = self.speedup
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "EvalResult":
        fields = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in fields}
        kwargs["status"] = Status(kwargs["status"])
        return cls(**kwargs)
