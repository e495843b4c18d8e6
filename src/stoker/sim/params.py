"""Every duration the virtual runtime samples, as a named, documented parameter with its source.

Two kinds of source: the Firepool paper (arXiv 2611.10832) where it states a figure for an
input (pod start with and without the image on the node), and an explicit assumption
everywhere else. ``stoker bench local --out DIR`` measures bind, rebind, recycle, promotion
and stop on its host and writes ``DIR/calibration.json``; :meth:`RuntimeParams.calibrated`
draws those from it instead (``stoker sim firepool --calibration FILE``). Pod start and
image pull stay the paper's; CUDA initialisation on promotion stays an assumption, added to
the measured promotion, until it is measured on a GPU.
No result of the paper (speedups, percentiles, handover, hit fraction) appears here: results
are computed from the simulated records, never put in.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

import numpy as np

if TYPE_CHECKING:
    from stoker.api.calibration import Calibration

Kind = Literal["uniform", "lognormal", "const", "empirical"]


@dataclass(frozen=True, slots=True)
class Dist:
    """A positive duration distribution in seconds.

    ``uniform``: between ``a`` and ``b``. ``lognormal``: median ``a``, log-space sigma ``b``.
    ``const``: always ``a``. ``empirical``: one of ``samples`` (measured), drawn uniformly.
    ``plus``: another duration added to each draw (an assumed part of a measured step).
    ``source`` says where the numbers come from.
    """

    kind: Kind
    a: float = 0.0
    b: float = 0.0
    source: str = "assumption"
    samples: tuple[float, ...] = ()
    plus: Dist | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("uniform", "lognormal", "const", "empirical"):
            raise ValueError(f"dist kind: unknown {self.kind!r}")
        if self.a < 0 or self.b < 0:
            raise ValueError(f"dist {self.kind}: a and b must be >= 0 (got {self.a}, {self.b})")
        if self.kind == "uniform" and self.b < self.a:
            raise ValueError(f"dist uniform: b ({self.b}) must be >= a ({self.a})")
        if (self.kind == "empirical") != bool(self.samples):
            raise ValueError("dist: samples are for (and needed by) the empirical kind")
        if any(x < 0 for x in self.samples):
            raise ValueError("dist empirical: samples must be >= 0")

    @property
    def measured(self) -> bool:
        """Drawn from measurements (an assumed ``plus`` part may be added)."""
        return self.kind == "empirical"

    def sample(self, rng: np.random.Generator) -> float:
        extra = self.plus.sample(rng) if self.plus is not None else 0.0
        if self.kind == "uniform":
            return float(rng.uniform(self.a, self.b)) + extra
        if self.kind == "lognormal":
            return float(self.a * np.exp(self.b * rng.standard_normal())) + extra
        if self.kind == "empirical":
            return self.samples[int(rng.integers(len(self.samples)))] + extra
        return self.a + extra

    def sample_n(self, rng: np.random.Generator, n: int) -> np.ndarray:
        extra = self.plus.sample_n(rng, n) if self.plus is not None else 0.0
        if self.kind == "uniform":
            return rng.uniform(self.a, self.b, n) + extra
        if self.kind == "lognormal":
            return self.a * np.exp(self.b * rng.standard_normal(n)) + extra
        if self.kind == "empirical":
            return np.asarray(self.samples)[rng.integers(len(self.samples), size=n)] + extra
        return np.full(n, self.a) + extra

    def scaled(self, factor: float) -> Dist:
        """The same shape with its location scaled (a sensitivity sweep's knob)."""
        if self.kind == "empirical":
            return replace(
                self,
                samples=tuple(x * factor for x in self.samples),
                plus=None if self.plus is None else self.plus.scaled(factor),
                source=f"{self.source} (x{factor:g})",
            )
        if self.kind == "lognormal":
            return replace(self, a=self.a * factor, source=f"{self.source} (x{factor:g})")
        return replace(
            self, a=self.a * factor, b=self.b * factor, source=f"{self.source} (x{factor:g})"
        )

    def describe(self) -> str:
        more = "" if self.plus is None else f" + {self.plus.describe()}"
        if self.kind == "uniform":
            return f"uniform {self.a:g}-{self.b:g} s{more}"
        if self.kind == "lognormal":
            return f"lognormal median {self.a:g} s, sigma {self.b:g}{more}"
        if self.kind == "empirical":
            xs = sorted(self.samples)
            return f"measured, {len(xs)} samples, median {xs[len(xs) // 2]:.4g} s{more}"
        return f"{self.a:g} s{more}"


_PAPER = "Firepool, arXiv 2611.10832"
_MEASURE = "assumption; `stoker sim firepool --calibration FILE` replaces it with measurements"
# what a promotion on a GPU adds to the local one (no GPU here): an assumption until measured
CUDA_INIT = Dist(
    "uniform", 0.3, 1.0, "assumption: CUDA context initialisation on promotion (not measured)"
)


@dataclass(frozen=True, slots=True)
class RuntimeParams:
    """Durations of the virtual runtime's steps (the infrastructure, not the workload)."""

    pod_start: Dist = field(
        default_factory=lambda: Dist(
            "uniform", 20.0, 35.0, f"{_PAPER}: 20-35 s pod start with the image on the node"
        )
    )
    """Cold pod start (schedule, container start, agent up, CUDA init) with the image cached."""

    image_pull: Dist = field(
        default_factory=lambda: Dist(
            "uniform",
            60.0,
            180.0,
            f"{_PAPER} says 'minutes' without the image; 1-3 min is our assumption",
        )
    )
    """Extra time for the first pod of a profile on a node (the base image is not cached)."""

    standby_start: Dist = field(
        default_factory=lambda: Dist(
            "uniform",
            20.0,
            35.0,
            "assumption: a standby pod starts like a pod (it skips CUDA init, which is small)",
        )
    )
    """Starting a zero-VRAM standby pod, in the background (off every job's path)."""

    promote: Dist = field(default_factory=lambda: Dist("uniform", 0.3, 1.0, _MEASURE))
    """Promoting a standby pod: the warm pod beside it is killed, CUDA context initialised."""

    bind: Dist = field(default_factory=lambda: Dist("lognormal", 1.0, 0.5, _MEASURE))
    """Binding a job into a pod that never ran its caller (fresh, promoted or recycled): fetch
    code, install extra deps from a warm cache, topology, start the process."""

    rebind: Dist = field(default_factory=lambda: Dist("lognormal", 0.3, 0.5, _MEASURE))
    """Binding a job into a warm pod of its own caller: its deps are installed already, only
    the new code and argv are written and the process started."""

    recycle: Dist = field(default_factory=lambda: Dist("uniform", 1.0, 3.0, _MEASURE))
    """Scrubbing a pod in place (kill processes, wipe workspace, restart agent)."""

    stop: Dist = field(
        default_factory=lambda: Dist(
            "uniform",
            5.0,
            20.0,
            "assumption: Kubernetes pod deletion within its 30 s grace period",
        )
    )
    """Stopping a pod until its GPU share is free (PodGone)."""

    def with_pod_start(self, factor: float) -> RuntimeParams:
        """Pod start (and standby start) scaled by ``factor`` (the sensitivity sweep)."""
        return replace(
            self,
            pod_start=self.pod_start.scaled(factor),
            standby_start=self.standby_start.scaled(factor),
        )

    def calibrated(self, cal: Calibration, where: str = "calibration") -> RuntimeParams:
        """These parameters with the steps ``cal`` measured drawn from its samples; a
        measured promotion gets CUDA initialisation (:data:`CUDA_INIT`, assumed) added.
        Pod start, image pull and standby start stay as they are."""
        changes: dict[str, Dist] = {}
        for step, got in cal.durations.items():
            source = f"measured: {where} ({cal.source}; {len(got.samples_s)} samples)"
            plus = CUDA_INIT if step == "promote" else None
            changes[step] = Dist(
                "empirical", source=source, samples=tuple(got.samples_s), plus=plus
            )
        return replace(self, **changes)  # type: ignore[arg-type]

    def table(self) -> dict[str, dict[str, object]]:
        """Each parameter, its distribution, its source and whether it was measured (an
        assumed part of a measured one is named) (for results.json and docs)."""
        return {
            name: {
                "dist": d.describe(),
                "source": d.source,
                "measured": d.measured,
                "assumed_part": None if d.plus is None else d.plus.source,
            }
            for name, d in (
                ("pod_start", self.pod_start),
                ("image_pull", self.image_pull),
                ("standby_start", self.standby_start),
                ("promote", self.promote),
                ("bind", self.bind),
                ("rebind", self.rebind),
                ("recycle", self.recycle),
                ("stop", self.stop),
            )
        }
