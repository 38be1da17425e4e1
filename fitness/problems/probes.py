"""Probe inputs: a problem's inputs from a wider value domain than its own draw.

KernelBench draws its inputs with ``torch.rand``: values in [0, 1) and
nothing else. A kernel right only there (a polynomial fitted to [0, 1), an
identity for a ReLU, a softmax without its max-subtraction, a missing
clamp) is not the operator. A probe draws the problem's inputs as usual and
then transforms its floating-point inputs in place: random signs (an input
from [0, 1) then covers (-1, 1)), random signs with a large scale factor
(large enough that exp of the values overflows float32), or that scale
alone. Integer, index and boolean inputs stay as they are, so indices stay
indices.

A problem file may declare what its inputs mean, so that the probes stay
inside it: ``INPUT_DOMAIN = "nonnegative"`` (no sign changes; for a log or a
sqrt), ``"as_drawn"`` (no probes), or a list with one of ``"real"``,
``"nonnegative"``, ``"as_drawn"`` per input of ``get_inputs()``.

Both sides transform the same way from the same seed: the worker before it
calls the candidate, the judge before it runs the reference.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

#: What an input may be probed with; ``INPUT_DOMAIN`` in a problem file names one per input.
DOMAINS = ("real", "nonnegative", "as_drawn")
#: The scale factor of the scaled probe is drawn in secret from this range, once per problem:
#: large enough that exp() of the values overflows float32 (exp(89) does), so a softmax or a
#: log-sum-exp without its max-subtraction fails, small enough to stay finite in float16.
FACTOR_RANGE = (100.0, 400.0)
#: Elements whose signs are drawn at a time (bounded scratch memory, the same on both sides).
SIGN_CHUNK = 1 << 24


@dataclasses.dataclass(frozen=True)
class Probe:
    """One transform of the problem's floating-point inputs."""

    signs: bool  # each element's sign drawn at random
    factor: float = 1.0  # then every element scaled by this
    cutoff: float | None = None  # the cutoff on this probe (PreparedProblem sets it)

    def describe(self) -> str:
        """The transform in words (never the values it makes): what a verdict's reason names."""
        if self.signs:
            return "inputs with random signs" + (f", scaled by {self.factor:.0f}" if self.factor != 1.0 else "")
        return f"inputs scaled by {self.factor:.0f}" if self.factor != 1.0 else "inputs as drawn"

    def unsigned(self) -> "Probe | None":
        """This probe without the sign changes (None when nothing would be left)."""
        if not self.signs or self.factor == 1.0:
            return None
        return dataclasses.replace(self, signs=False)

    def to_message(self) -> dict[str, Any]:
        return {"signs": self.signs, "factor": self.factor}

    @classmethod
    def from_message(cls, data: Any) -> "Probe | None":
        if data is None:
            return None
        if (not isinstance(data, dict) or type(data.get("signs")) is not bool
                or not isinstance(data.get("factor"), (int, float))):
            raise ValueError(f"malformed probe {data!r}")
        return cls(data["signs"], float(data["factor"]))


def domains_for(declared: Any, n_inputs: int) -> list[str]:
    """One domain per input from a problem's ``INPUT_DOMAIN`` (None: every input ``real``).

    Raises ``ValueError`` with what is wrong.
    """
    if declared is None:
        return ["real"] * n_inputs
    if isinstance(declared, str):
        declared = [declared] * n_inputs
    if not isinstance(declared, (list, tuple)) or len(declared) != n_inputs:
        raise ValueError(f"INPUT_DOMAIN must be one of {', '.join(DOMAINS)} or a list of one per input "
                         f"({n_inputs} here), got {declared!r}")
    for d in declared:
        if d not in DOMAINS:
            raise ValueError(f"INPUT_DOMAIN entry {d!r}: expected one of {', '.join(DOMAINS)}")
    return list(declared)


def probed(x: Any, domain: str) -> bool:
    """Whether a probe transforms input ``x`` (a floating-point tensor not declared ``as_drawn``)."""
    import torch

    return isinstance(x, torch.Tensor) and x.is_floating_point() and domain != "as_drawn"


def changes(probe: Probe, x: Any, domain: str) -> bool:
    """Whether ``probe`` changes input ``x`` of ``domain``."""
    if not probed(x, domain):
        return False
    return (probe.signs and domain == "real") or probe.factor != 1.0


def transform(inputs: Sequence[Any], probe: Probe, seed: int, domains: Sequence[str]) -> int:
    """Apply ``probe`` to ``inputs`` in place; the signs are drawn from ``seed``.

    Returns how many inputs it changed. Inputs of domain ``nonnegative`` keep
    their signs; ``as_drawn`` and non-floating-point ones are left alone.
    """
    import torch

    changed = 0
    for j, (x, domain) in enumerate(zip(inputs, domains)):
        if not changes(probe, x, domain):
            continue
        changed += 1
        if probe.signs and domain == "real":
            generator = torch.Generator(device=x.device)
            generator.manual_seed((seed * 1_000_003 + j) % (2**63))
            flat = x.view(-1) if x.is_contiguous() else None
            if flat is None:  # rare: flip the whole tensor at once
                x.mul_(_signs(x.numel(), x, generator).view(x.shape))
            else:
                for start in range(0, flat.numel(), SIGN_CHUNK):
                    part = flat[start:start + SIGN_CHUNK]
                    part.mul_(_signs(part.numel(), x, generator))
        if probe.factor != 1.0:
            x.mul_(probe.factor)
    return changed


def _signs(n: int, like: Any, generator: Any) -> Any:
    import torch

    s = torch.empty(n, dtype=like.dtype, device=like.device).bernoulli_(0.5, generator=generator)
    return s.mul_(-2.0).add_(1.0)  # 1 -> -1, 0 -> 1
