"""``calibration.json``: durations measured on a host, for the simulator to draw from.

``stoker bench local --out DIR`` writes it (:mod:`stoker.runtime.calibrate`); ``stoker sim
firepool --calibration FILE`` reads it (:meth:`stoker.sim.params.RuntimeParams.calibrated`).
Each duration is its samples in seconds, with their median and p90 for a reader's eye. It
lives beside the wire models so that writer and reader share one definition.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from stoker.api.config import ConfigError

#: the runtime steps a calibration may measure (the simulator's names)
STEPS = ("bind", "rebind", "recycle", "promote", "stop")
Step = Literal["bind", "rebind", "recycle", "promote", "stop"]


class Measured(BaseModel):
    """One step's measured durations (seconds)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    samples_s: list[float] = Field(min_length=1)
    p50_s: float | None = None
    p90_s: float | None = None

    @field_validator("samples_s")
    @classmethod
    def _finite(cls, v: list[float]) -> list[float]:
        if any(not (math.isfinite(x) and x >= 0) for x in v):
            raise ValueError("every sample must be finite and >= 0")
        return v

    @staticmethod
    def of(samples: list[float]) -> Measured:
        """Samples with their median and p90 (nearest rank)."""
        xs = sorted(samples)
        rank = lambda q: xs[max(0, math.ceil(q * len(xs)) - 1)]  # noqa: E731
        return Measured(samples_s=list(samples), p50_s=rank(0.5), p90_s=rank(0.9))


class Calibration(BaseModel):
    """Where and how the durations were measured, and the durations per step."""

    model_config = ConfigDict(extra="forbid", strict=True)

    version: Literal[1] = 1
    source: str
    host: dict[str, Any] = {}
    profile: str
    durations: dict[Step, Measured]

    @staticmethod
    def load(path: Path | str) -> Calibration:
        """Read a calibration file; anything wrong is a one-line ConfigError naming the
        file and the key."""
        try:
            raw = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"calibration {path}: {exc}") from exc
        try:
            return Calibration.model_validate(raw)
        except ValidationError as exc:
            err = exc.errors()[0]
            key = ".".join(str(p) for p in err["loc"])
            raise ConfigError(f"calibration {path}: {key}: {err['msg']}") from exc

    def write(self, path: Path) -> None:
        path.write_text(self.model_dump_json(indent=2) + "\n")
