"""Each measured job's outcome in a trace run, the job metrics of results.json computed from
them, and a paired bootstrap of two runs over the same jobs: how sure a change is.

Two policies run on one trace see the same jobs, so their difference in a metric is best
judged job by job: the bootstrap draws the measured jobs with replacement (spot and HP
apart, as each metric reads one class), the same draw for both runs, and takes the
metric of each run on the draw. The spread of the relative change over the draws is its
confidence interval; a change whose interval holds 0 is not told apart from the
scheduling's own chaos (one job started earlier reorders every later one). It speaks for
these jobs, not for other seeds or traces: :func:`tally` sets the comparisons of several
replicates (runs of other seeds) side by side, the wider test.
"""

from __future__ import annotations

import csv
import gzip
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from stoker.core.model import Job, JobClass

# the file's columns, in order, and the field and type each fills: the one description
# the arrays, the writer and the reader follow ("class" is spot or hp)
_LAYOUT: tuple[tuple[str, str, type], ...] = (
    ("name", "name", object),
    ("class", "spot", bool),
    ("pool", "gpu_pool", object),
    ("gpus", "gpus", float),
    ("submitted", "submitted", float),
    ("queue_s", "queue_s", float),
    ("jct_s", "jct_s", float),
    ("evictions", "evictions", np.int64),
    ("periods_ok", "periods_ok", np.int64),
)
COLUMNS = tuple(column for column, _, _ in _LAYOUT)
# where ``stoker sim gfs --jobs`` puts a run's file: <out>/jobs/<load>/<policy>.csv.gz
JOBS_DIR = "jobs"
SUFFIX = ".csv.gz"
# the class column's place, and its text -> whether the job is spot
_CLASS = COLUMNS.index("class")
_CLASSES = {"spot": True, "hp": False}
# results.json's job metrics, each lower-is-better; the rest (allocation) are not per job
METRICS = (
    "spot.eviction_rate",
    "spot.mean_queue_s",
    "spot.mean_jct_s",
    "hp.mean_queue_s",
    "hp.p99_jct_s",
)
HP_QUANTILE = 99.0
# a change's verdict: its interval below 0, above 0, or holding it
VERDICTS = ("better", "worse", "no clear difference")
# a policy's verdict against the base within a margin m over replicates (:meth:`Tally.within`):
# every replicate's interval below -m; every one's upper end at most +m; neither
MARGIN_VERDICTS = ("superior", "non-inferior", "not shown")
# the margin the docs state the claims with: no figure worse by more than 2 % beyond chance
MARGIN = 0.02
# resamples drawn per block (each a row of job counts): bounds the memory of a draw
_BLOCK = 32


class PairedError(ValueError):
    """Job outcomes that cannot be read or paired (the message names the file or run)."""


@dataclass(frozen=True, slots=True)
class JobOutcomes:
    """The measured jobs of one run, in the run's order (its metrics' sums run in it):
    class, GPU pool, GPUs, submit time, queueing, JCT, evictions and guaranteed periods
    that ended well."""

    name: np.ndarray
    spot: np.ndarray
    gpu_pool: np.ndarray
    gpus: np.ndarray
    submitted: np.ndarray
    queue_s: np.ndarray
    jct_s: np.ndarray
    evictions: np.ndarray
    periods_ok: np.ndarray

    @classmethod
    def of(cls, jobs: Iterable[tuple[Job, str]]) -> JobOutcomes:
        """From the core's finished jobs, each with its GPU pool."""
        rows = [
            (
                j.id,
                j.job_class is JobClass.SPOT,
                gpu_pool,
                j.gpus,
                j.submitted,
                j.queue_s,
                (j.finished or 0.0) - j.submitted,
                j.evictions,
                j.periods_ok,
            )
            for j, gpu_pool in jobs
        ]
        return cls._from_columns(list(zip(*rows, strict=True)) if rows else [()] * len(_LAYOUT))

    @classmethod
    def _from_columns(cls, columns: Sequence[Sequence[object]]) -> JobOutcomes:
        return cls(
            **{
                field: np.array(values, dtype=dtype)
                for (_, field, dtype), values in zip(_LAYOUT, columns, strict=True)
            }
        )

    def write(self, path: Path) -> None:
        """A gzip CSV of :data:`COLUMNS`; floats as Python writes them, so they read back
        exactly and the metrics computed from the file are the run's to the last digit.
        Written aside and renamed: a file there is whole."""
        path.parent.mkdir(parents=True, exist_ok=True)
        columns = [getattr(self, field).tolist() for _, field, _ in _LAYOUT]
        columns[_CLASS] = ["spot" if spot else "hp" for spot in columns[_CLASS]]
        part = path.with_name(path.name + ".part")
        with gzip.open(part, "wt", newline="") as f:
            w = csv.writer(f)
            w.writerow(COLUMNS)
            w.writerows(zip(*columns, strict=True))
        part.replace(path)

    @classmethod
    def read(cls, path: Path) -> JobOutcomes:
        """A file :meth:`write` wrote."""
        try:
            with gzip.open(path, "rt", newline="") as f:
                reader = csv.reader(f)
                header = tuple(next(reader, ()))
                if header != COLUMNS:
                    raise PairedError(f"{path}: not a job outcomes file (columns {header})")
                rows = list(reader)
            columns = list(zip(*rows, strict=True)) if rows else [()] * len(_LAYOUT)
            # the class column as spot or not; the numbers parse as their arrays' types
            columns[_CLASS] = [_CLASSES[c] for c in columns[_CLASS]]
            return cls._from_columns(columns)
        except (OSError, EOFError, ValueError, KeyError, csv.Error) as exc:
            if isinstance(exc, PairedError):
                raise
            raise PairedError(f"{path}: unreadable job outcomes ({exc})") from None

    def take(self, index: np.ndarray) -> JobOutcomes:
        """These jobs in the order ``index`` gives."""
        return JobOutcomes(*(getattr(self, f.name)[index] for f in fields(self)))


def job_metrics(o: JobOutcomes) -> dict[str, float | int]:
    """results.json's per-job metrics (and job counts) of these jobs."""
    spot, hp = o.spot, ~o.spot
    failed = int(o.evictions[spot].sum())
    ok = int(o.periods_ok[spot].sum())
    jobs = int(spot.sum())
    return {
        "spot.jobs": jobs,
        "spot.eviction_rate": failed / (failed + ok) if failed + ok else 0.0,
        "preemptions_per_spot_job": failed / jobs if jobs else 0.0,
        "spot.mean_queue_s": _mean(o.queue_s[spot]),
        "spot.mean_jct_s": _mean(o.jct_s[spot]),
        "hp.jobs": int(hp.sum()),
        "hp.mean_queue_s": _mean(o.queue_s[hp]),
        "hp.p99_jct_s": float(np.percentile(o.jct_s[hp], HP_QUANTILE)) if hp.any() else 0.0,
    }


def _mean(values: np.ndarray) -> float:
    return float(np.mean(values)) if len(values) else 0.0


@dataclass(frozen=True, slots=True)
class Change:
    """One metric of two runs: their values, the relative change (other / base - 1) and
    its confidence interval; ``verdict`` is ``better`` or ``worse`` when the interval
    leaves out 0 (every metric here is lower-is-better), else ``no clear difference``."""

    base: float
    other: float
    change: float
    low: float
    high: float
    verdict: str

    def as_dict(self) -> dict[str, float | str]:
        """JSON-ready."""
        return {
            "base": self.base,
            "other": self.other,
            "change": self.change,
            "ci_low": self.low,
            "ci_high": self.high,
            "verdict": self.verdict,
        }

    @classmethod
    def from_dict(cls, d: dict[str, float | str]) -> Change:
        """Back from :meth:`as_dict` (a compare file's cell)."""
        return cls(
            float(d["base"]),
            float(d["other"]),
            float(d["change"]),
            float(d["ci_low"]),
            float(d["ci_high"]),
            str(d["verdict"]),
        )


def paired_bootstrap(
    base: JobOutcomes | Sequence[JobOutcomes],
    other: JobOutcomes,
    *,
    resamples: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, Change]:
    """Each of :data:`METRICS`, ``other`` against ``base`` on the same jobs: the change and
    its percentile interval at ``level`` over ``resamples`` paired draws (seeded: the same
    inputs give the same intervals). ``base`` may be several runs: their metrics' mean on
    each draw is the base (the paper's "against the average of the baselines")."""
    check_draws(resamples, level)
    bases = [base] if isinstance(base, JobOutcomes) else list(base)
    if not bases:
        raise PairedError("no base run")
    ref = bases[0]
    runs = [ref, *(_aligned(ref, o) for o in bases[1:]), _aligned(ref, other)]
    rng = np.random.default_rng(seed)
    draws = {m: np.empty((len(runs), resamples)) for m in METRICS}
    classes = [(ref.spot, METRICS[:3]), (~ref.spot, METRICS[3:])]
    views = [[_ClassView(o, mask) for mask, _ in classes] for o in runs]
    for start in range(0, resamples, _BLOCK):
        rows = min(_BLOCK, resamples - start)
        at = slice(start, start + rows)
        for c, (mask, names) in enumerate(classes):
            counts = _counts(rng, int(mask.sum()), rows)
            for i, run_views in enumerate(views):
                for m in names:
                    draws[m][i, at] = run_views[c].metric(m, counts)
    tail = (1 - level) / 2 * 100
    out = {}
    whole = [job_metrics(o) for o in runs]
    for m in METRICS:
        b = float(np.mean([w[m] for w in whole[:-1]]))
        a = float(whole[-1][m])
        rel = _relative(draws[m][-1], draws[m][:-1].mean(axis=0))
        low, high = (float(x) for x in np.percentile(rel, [tail, 100 - tail]))
        better, worse, unclear = VERDICTS
        verdict = better if high < 0 else worse if low > 0 else unclear
        out[m] = Change(b, a, float(_relative(np.array([a]), np.array([b]))[0]), low, high, verdict)
    return out


def check_draws(resamples: int, level: float) -> None:
    """The draws' settings, or a :class:`PairedError` naming the bad one."""
    if resamples < 1:
        raise PairedError(f"resamples: must be >= 1, got {resamples}")
    if not 0 < level < 1:
        raise PairedError(f"level: must be in (0, 1), got {level}")


def check_margin(margin: float) -> None:
    """A non-inferiority margin (a relative change in [0, 1)), or a :class:`PairedError`."""
    if not 0 <= margin < 1:
        raise PairedError(f"margin: a relative change in [0, 1), got {margin}")


def _aligned(base: JobOutcomes, other: JobOutcomes) -> JobOutcomes:
    """``other``'s jobs in ``base``'s order; an error unless both ran the same jobs."""
    b, o = np.argsort(base.name), np.argsort(other.name)
    if len(b) != len(o) or not np.array_equal(base.name[b], other.name[o]):
        raise PairedError(
            f"not the same jobs: {len(b)} and {len(o)} measured jobs"
            " (pair runs of one trace, seed, load and window)"
        )
    index = np.empty(len(b), dtype=np.int64)
    index[b] = o  # base's i-th job is other's index[i]-th
    aligned = other.take(index)
    if not np.array_equal(base.spot, aligned.spot):
        raise PairedError("not the same jobs: a job is spot in one run and HP in the other")
    return aligned


def _counts(rng: np.random.Generator, n: int, rows: int) -> np.ndarray:
    """``rows`` draws of ``n`` jobs with replacement, as how often each job is drawn
    (floats: the draws' sums are matrix products)."""
    picks = rng.integers(0, n, size=(rows, n)) + (np.arange(rows) * n)[:, None]
    return np.bincount(picks.ravel(), minlength=rows * n).reshape(rows, n).astype(np.float64)


class _ClassView:
    """One run's jobs of one class, as the draws read them."""

    def __init__(self, o: JobOutcomes, mask: np.ndarray) -> None:
        self.queue_s = o.queue_s[mask]
        self.jct_s = o.jct_s[mask]
        self.evictions = o.evictions[mask].astype(np.float64)
        self.periods_ok = o.periods_ok[mask].astype(np.float64)
        self.jct_top = np.argsort(self.jct_s, kind="stable")[::-1]  # longest first

    def metric(self, metric: str, counts: np.ndarray) -> np.ndarray:
        """``metric`` of each draw (a row of ``counts`` over these jobs)."""
        if counts.shape[1] == 0:
            return np.zeros(counts.shape[0])
        if metric == "spot.eviction_rate":
            failed = counts @ self.evictions
            total = failed + counts @ self.periods_ok
            return np.divide(failed, total, out=np.zeros(len(failed)), where=total > 0)
        if metric == "hp.p99_jct_s":
            return _weighted_percentile(self.jct_s, counts, HP_QUANTILE, self.jct_top)
        values = self.queue_s if metric.endswith("queue_s") else self.jct_s
        return counts @ values / counts.sum(axis=1)


def _weighted_percentile(
    values: np.ndarray, counts: np.ndarray, q: float, top: np.ndarray | None = None
) -> np.ndarray:
    """``np.percentile`` (linear) of each row's sample: ``values[i]`` taken ``counts[r, i]``
    times, without building the sample. ``top``: the values' indices, largest first.

    A high quantile sits among the sample's largest values, so only the running counts of
    the largest are summed, as many as reach it (widened until they do)."""
    if top is None:
        top = np.argsort(values, kind="stable")[::-1]
    n = counts.sum(axis=1)
    h = (n - 1) * q / 100
    lo = np.floor(h)
    # the sample's k-th smallest is its (n - 1 - k)-th largest
    from_top_lo = n - 1 - lo
    from_top_hi = n - 1 - np.minimum(lo + 1, n - 1)
    width = min(len(values), math.ceil(1.5 * (1 - q / 100) * len(values)) + 64)
    while True:
        cum = np.cumsum(counts[:, top[:width]], axis=1)
        if width == len(values) or bool((cum[:, -1] > from_top_lo).all()):
            break
        width = min(len(values), width * 4)
    out = np.empty(len(n))
    for r in range(len(n)):
        # the j-th largest value is the first whose running count (from the top) passes j
        j_lo, j_hi = np.searchsorted(cum[r], [from_top_lo[r], from_top_hi[r]], side="right")
        v_lo, v_hi = values[top[j_lo]], values[top[j_hi]]
        out[r] = v_lo + (h[r] - lo[r]) * (v_hi - v_lo)
    return out


def _relative(other: np.ndarray, base: np.ndarray) -> np.ndarray:
    """other / base - 1, taking 0 against 0 as no change (and anything against 0 as +inf)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = other / base - 1
    rel[(base == 0) & (other == 0)] = 0.0
    rel[(base == 0) & (other != 0)] = math.inf
    return rel


def jobs_file(out: Path, load: str, policy: str) -> Path:
    """Where ``stoker sim gfs --jobs`` writes a run's job outcomes under ``out``."""
    return out / JOBS_DIR / load / f"{policy}{SUFFIX}"


def find_runs(paths: Iterable[Path]) -> dict[str, dict[str, Path]]:
    """Per load, per policy, the job outcomes file under each of ``paths`` (output folders
    of ``stoker sim gfs --jobs``, searched at any depth); a run found twice is an error."""
    found: dict[str, dict[str, Path]] = {}
    for root in paths:
        if not root.is_dir():
            raise PairedError(f"{root}: not a folder")
        for f in sorted(root.rglob(f"*{SUFFIX}")):
            if f.parent.parent.name != JOBS_DIR:
                continue
            load, policy = f.parent.name, f.name[: -len(SUFFIX)]
            seen = found.setdefault(load, {}).get(policy)
            if seen is not None and seen != f:
                raise PairedError(f"{load}/{policy} is in both {seen} and {f}")
            found[load][policy] = f
    return found


def compare_runs(
    runs: dict[str, dict[str, Path]],
    bases: Sequence[str],
    *,
    resamples: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, dict[str, dict[str, Change]]]:
    """Per load, every policy of ``runs`` (as :func:`find_runs` gives them) against
    ``bases`` (one run, or the mean of several) at each load that has every base; a
    :class:`PairedError` names the run that does not pair."""
    results: dict[str, dict[str, dict[str, Change]]] = {}
    for load, by_policy in sorted(runs.items()):
        if any(name not in by_policy for name in bases):
            continue
        refs = [JobOutcomes.read(by_policy[name]) for name in bases]
        for name, path in sorted(by_policy.items()):
            if name in bases:
                continue
            try:
                changes = paired_bootstrap(
                    refs, JobOutcomes.read(path), resamples=resamples, seed=seed, level=level
                )
            except PairedError as exc:
                raise PairedError(f"{load}/{name} against {','.join(bases)}: {exc}") from None
            results.setdefault(load, {})[name] = changes
    return results


@dataclass(frozen=True, slots=True)
class Tally:
    """One metric of one policy over replicates (runs of other seeds: other jobs, other
    paths), each judged on its own jobs: the changes, their intervals' ends and how many of
    each verdict. What the job draws cannot show, how far another path moves a figure, is
    their spread."""

    changes: tuple[float, ...]
    verdicts: tuple[str, ...]
    lows: tuple[float, ...]
    highs: tuple[float, ...]

    @classmethod
    def of(cls, seen: Sequence[Change]) -> Tally:
        """The replicates' comparisons of one metric, in the replicates' order."""
        return cls(
            tuple(c.change for c in seen),
            tuple(c.verdict for c in seen),
            tuple(c.low for c in seen),
            tuple(c.high for c in seen),
        )

    def within(self, margin: float) -> str:
        """Against the base within ``margin`` (a relative change, lower is better), as a
        non-inferiority test reads it: ``superior`` when every replicate's interval lies
        below ``-margin``, ``non-inferior`` when every one's upper end is at most
        ``+margin`` (no replicate allows a figure worse by more than the margin beyond
        chance), else ``not shown``."""
        check_margin(margin)
        if not self.highs:
            raise PairedError("margin: no replicate to judge")
        superior, non_inferior, not_shown = MARGIN_VERDICTS
        if max(self.highs) < -margin:
            return superior
        return non_inferior if max(self.highs) <= margin else not_shown

    def as_dict(self, margin: float = MARGIN) -> dict[str, object]:
        """JSON-ready: the count, the mean, least and greatest change, each verdict's
        count, the verdict within ``margin``, and the changes and interval ends in the
        replicates' order."""
        return {
            "replicates": len(self.changes),
            "mean_change": float(np.mean(self.changes)),
            "min_change": min(self.changes),
            "max_change": max(self.changes),
            **{v: self.verdicts.count(v) for v in VERDICTS},
            "margin": margin,
            "within_margin": self.within(margin),
            "changes": list(self.changes),
            "ci_lows": list(self.lows),
            "ci_highs": list(self.highs),
        }


def tally(
    replicates: Sequence[dict[str, dict[str, dict[str, Change]]]],
) -> dict[str, dict[str, dict[str, Tally]]]:
    """Per load, policy and metric, the replicates' comparisons (each from
    :func:`compare_runs`) side by side; a load or policy counts the replicates it is in."""
    out: dict[str, dict[str, dict[str, Tally]]] = {}
    for load in sorted({load for r in replicates for load in r}):
        for name in sorted({name for r in replicates for name in r.get(load, {})}):
            seen = [r[load][name] for r in replicates if name in r.get(load, {})]
            out.setdefault(load, {})[name] = {m: Tally.of([c[m] for c in seen]) for m in METRICS}
    return out
