"""What ``kevo extract`` found in a model, as ``kevo apply`` reads it back: ``manifest.json``.

One module declares the records both sides use (``Manifest``, ``RegionEntry``);
nothing here runs a model or imports torch.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

MANIFEST_FILE = "manifest.json"
SWEEP_FILE = "sweep.yaml"
VERSION = 1


class CaptureError(Exception):
    """A model that cannot be extracted or applied as asked (a bad model file, nothing to
    extract, a sweep that is not of this model); the message says why and what to do."""


@dataclasses.dataclass
class RegionEntry:
    """One problem file: a region of the model (``count`` identical ones)."""

    problem: str  # the file's name, beside the manifest
    key: str  # the region's spec key (evolve.models.regions): apply finds the region by it
    kind: str  # gemm, conv, attention, recurrent, fused
    ops: list[str]  # its operators, in order
    share: float  # of the model's device time, all ``count`` instances together
    count: int  # instances per forward
    model_ms: float  # one instance's device time inside the model (the profiler's)
    eager_ms: float | None  # the problem's reference, timed as kevo times a kernel
    compiled_ms: float | None  # the problem under torch.compile, timed the same way (None: not timed)
    where: list[str]  # the model's parameters and buffers the first instance reads

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RegionEntry":
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls)})


@dataclasses.dataclass
class Manifest:
    """The model, how it was profiled, and the regions written (the hottest first)."""

    model: str  # the model file, absolute
    shapes: dict[str, int]  # the overrides it was extracted at (apply uses them too)
    device: str  # the platform: cpu, cuda, rocm
    device_name: str
    total_ms: float  # the model's device time per forward, as the profiler saw it
    cover: float  # the share asked for
    covered: float  # the share of total_ms the written regions take
    in_regions: float  # the share all regions found take (the rest: views, code outside the graphs)
    eager_ms: float | None  # the whole model, timed as kevo times a kernel
    compiled_ms: float | None  # the whole model under torch.compile, timed the same way
    regions: list[RegionEntry]
    skipped: list[dict[str, Any]]  # regions hot enough but not written, each with its reason
    version: int = VERSION

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Manifest":
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in fields}
        values["regions"] = [RegionEntry.from_dict(r) for r in data["regions"]]
        return cls(**values)


def write_manifest(manifest: Manifest, directory: Path) -> Path:
    path = directory / MANIFEST_FILE
    path.write_text(json.dumps(manifest.to_dict(), indent=2) + "\n", encoding="utf-8")
    return path


def read_manifest(directory: Path) -> Manifest:
    """The manifest in ``directory``; ``CaptureError`` if there is none or it cannot be read."""
    path = Path(directory) / MANIFEST_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("version") != VERSION:
            raise CaptureError(f"{path}: manifest version {data.get('version')!r}, this kevo reads {VERSION}; "
                               "extract the model again")
        return Manifest.from_dict(data)
    except OSError as exc:
        raise CaptureError(f"cannot read {path}: {exc.strerror} (written by 'kevo extract')") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise CaptureError(f"{path}: not a manifest kevo extract wrote ({type(exc).__name__}: {exc})") from None


def sweep_text(manifest: Manifest, model_name: str) -> str:
    """A sweep file over the regions: each its own run, seeded from torch.compile's kernels."""
    lines = [f"# The hot regions of {model_name}, written by kevo extract ({manifest.covered:.0%} of its "
             f"{manifest.device} time).",
             "# Seeds come from torch.compile (a GPU); then parametric search, no LLM needed.",
             "#   kevo sweep sweep.yaml --run-dir SWEEP_DIR && kevo apply MODEL.py SWEEP_DIR",
             "defaults:",
             "  search: {population_size: 8, max_evaluations: 48, patience: 6, seed: 0}",
             f"  platform: {manifest.device}",
             "problems:"]
    for region in manifest.regions:
        lines.append(f"  - reference: {region.problem}   # {region.share:.1%} of the model, x{region.count}")
        lines.append("    seeds: compile")
    return "\n".join(lines) + "\n"
