"""Every preset of the one core by name: Firepool's and GFS's defaults and every baseline.

A preset is a complete :class:`~stoker.core.core.Policies` (warm-pool and hp/spot policies
together) plus the forecaster the driver must feed it (None: it reads no forecast). The
simulator and the broker's configuration both choose presets from here by name; each call
builds fresh, unshared policy objects.

Warm-pool presets (the Firepool paper's comparisons; GFS's hp/spot defaults):
``firepool`` (default), ``fixed`` (the same: fixed keep-alive), ``fitted``, ``always_on``,
``warm_reuse`` (no standby), ``fresh_tag``, ``fresh_pod``; and how the HP forecast bounds
the warm budget (the default: idle pods hold only what HP is not forecast to need within
their keep-alive, beyond what it holds now): ``warm-strict`` (capacity minus the next
hour's HP demand, held pods stopped: the rule as first built), ``warm-new-only`` (the same
bound, on new idle capacity only), ``warm-uncapped`` (no bound), ablations of the one
capacity model. hp/spot
presets (GFS's paper and ablations; Firepool's warm defaults): ``gfs`` (default),
``yarn-cs``, ``chronus``, ``lyra``, ``fgd`` (each gated by GFS's forecast quota, as the
authors' simulator runs them; ``yarn-cs-noquota``, ``lyra-noquota``, ``fgd-noquota``:
ungated), ``static-quota``,
``min-runtime``, ``gfs-naive``, ``gfs-fixed-eta``, ``gfs-simple-placement`` and
``gfs-simple-preemption`` (the paper's ablations of its scheduler's two halves), and
``gfs-small-first``, ``gfs-eta-slack``, ``gfs-lend``, ``gfs-fragments``,
``gfs-checkpoint-cost``, ``gfs-reserve``, ``gfs-reserve-lend``, ``gfs-reserve-day``,
``gfs-reserve-multi``, ``gfs-reserve-multi-day``, ``gfs-reserve-gangs``,
``gfs-reserve-patient``, ``gfs-reserve-patient-lend`` and
``gfs-reserve-patient-lend-multi`` (stoker's own: GFS with spot
queued smallest request first; GFS whose eta may grow to 2; GFS lending spot what HP does
not hold while no HP job waits; GFS starting fractional spot on shared cards past the
quota; GFS costing victims by the work lost since their last checkpoint; GFS reserving
nodes for a whole-GPU HP job that has waited an hour; that with lending; and that
bounded: to nodes that drain within a day, to workers of two cards or more, both, or to
gangs of such workers while no smaller HP job waits; and the last with HP evicting only
after half an hour queued and never to backfill, then also lending spot half of what HP
does not hold while no HP job waits, and that reserving for single multi-card workers too).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace

from stoker.core.core import Policies
from stoker.core.gfs.placement import BestFitScorer, FGDScorer, GFSScorer
from stoker.core.gfs.preemption import FGDVictims, FifoVictims, GFSVictims, LyraVictims
from stoker.core.gfs.quota import ForecastQuota, StaticQuota
from stoker.core.gfs.scheduler import GFSConfig
from stoker.core.policies import (
    AlwaysOn,
    BesideActive,
    FittedKeepAlive,
    FixedKeepAlive,
    HourCap,
    KeepAliveCap,
    NoStandby,
    NoWarmCap,
    QueueDrivenBudget,
    ReuseMatching,
)

FIXED_KEEPALIVE_S = 60.0
"""The fixed keep-alive of every preset that keeps pods."""
# a static spot quota's share of each GPU pool (ours: the share of capacity GFS's forecast
# quota averages on the v2026 trace is near this; a fixed number is what the baseline is)
STATIC_SHARE = 0.3
# Chronus (the figures): 300 s rounds, 1,200 s leases, 120 s restart
CHRONUS_ROUND_S = 300.0
CHRONUS_LEASE_S = 1200.0
CHRONUS_RESTART_S = 120.0
# gfs-eta-slack's eta ceiling (GFS's is 1)
ETA_SLACK_CEILING = 2.0
# gfs-lend's share of the GPUs HP does not hold that spot may take while no HP job waits
LEND_SHARE = 1.0
# gfs-reserve's wait before a whole-GPU HP job that finds no room reserves nodes to drain
RESERVE_AFTER_S = 3600.0
# gfs-reserve-day's bound on how far ahead a reservation's nodes may drain
RESERVE_WITHIN_S = 86400.0
# gfs-reserve-patient's wait before an HP job that finds no free room evicts spot: under
# the reservation's hour, so a gang that evicting would start does so before it reserves
HP_EVICT_AFTER_S = 1800.0
# gfs-reserve-patient-lend's share lent (gfs-lend's is all): half, the best of 0.25, 0.5,
# 0.75 and 1 on the ten 1/10-scale v2026 seeds (docs/gfs.md); what is lent past the
# forecast is what HP takes back by evicting, so a smaller loan evicts less
PATIENT_LEND_SHARE = 0.5
# gfs-reserve-gangs's reservation (gfs-reserve-patient's too): gangs of workers of two
# cards or more, after an hour queued, while no HP job of a smaller request waits
_RESERVE_GANGS: dict[str, object] = {
    "reserve_after_s": RESERVE_AFTER_S,
    "reserve_min_worker": 2.0,
    "reserve_min_workers": 2,
    "reserve_smaller_first": True,
}
# gfs-reserve-patient's (and gfs-reserve-patient-lend's): gfs-reserve-gangs that backfills
# on free room only and evicts only after HP_EVICT_AFTER_S queued
_PATIENT: dict[str, object] = {
    **_RESERVE_GANGS,
    "reserve_backfill_free": True,
    "hp_evict_after_s": HP_EVICT_AFTER_S,
}
# the paper's comparison set for hp/spot
PAPER_BASELINES = ("yarn-cs", "chronus", "lyra", "fgd")


@dataclass(frozen=True, slots=True)
class Preset:
    """A named configuration of the core and the forecaster it needs ("default": the
    driver's default forecaster, "naive", or None)."""

    name: str
    policies: Policies
    forecaster: str | None


@dataclass(frozen=True, slots=True)
class _Params:
    g: float
    guarantee_s: float


def _firepool(p: _Params) -> Policies:
    return Policies(
        matching=ReuseMatching(reuse=True, standby=True),
        keepalive=FixedKeepAlive(FIXED_KEEPALIVE_S),
        budget=QueueDrivenBudget(),
        standby=BesideActive(),
        gangs=GFSConfig(quota=ForecastQuota(p.g, p.guarantee_s), g=p.g, guarantee_s=p.guarantee_s),
        warm_cap=KeepAliveCap(),
    )


def _warm(**changes: object) -> Callable[[_Params], Policies]:
    def build(p: _Params) -> Policies:
        policies = _firepool(p)
        for key, value in changes.items():
            setattr(policies, key, value() if callable(value) else value)
        return policies

    return build


def _gangs(**config: object) -> Callable[[_Params], Policies]:
    def build(p: _Params) -> Policies:
        policies = _firepool(p)
        args = {k: (v(p) if callable(v) else v) for k, v in config.items()}
        args.setdefault("g", p.g)
        args.setdefault("guarantee_s", p.guarantee_s)
        policies.gangs = GFSConfig(**args)  # type: ignore[arg-type]
        return policies

    return build


def _no_quota(p: _Params) -> StaticQuota:
    return StaticQuota(1.0)


def _forecast_quota(p: _Params) -> ForecastQuota:
    return ForecastQuota(p.g, p.guarantee_s)


_Entry = tuple[Callable[[_Params], Policies], str | None]


def _gfs_variant(name: str, forecaster: str = "default", **changes: object) -> _Entry:
    """GFS with ``changes`` to its hp/spot config (the forecast quota unless one is given),
    fed by ``forecaster``."""
    changes.setdefault("quota", _forecast_quota)
    return _gangs(name=name, **changes), forecaster


# each baseline's own parts (placement, victims, queue order), its quota aside
_YARN: dict[str, object] = {
    "scorer": lambda p: BestFitScorer(),
    "victims": lambda p: FifoVictims(),
    "queue": "fifo",
    "hp_preempt_first": True,
}
_LYRA: dict[str, object] = {
    "scorer": lambda p: GFSScorer(),
    "victims": lambda p: LyraVictims(),
    "queue": "size-stop",
}
_FGD: dict[str, object] = {
    "scorer": lambda p: FGDScorer(),
    "victims": lambda p: FGDVictims(),
    "queue": "fifo",
    "hp_preempt_first": True,
}


def _baseline(name: str, parts: dict[str, object]) -> dict[str, _Entry]:
    """``name`` with the forecast quota (the authors' setup) and ``name-noquota`` with none
    (spot may take everything HP leaves: stoker's earlier setup, kept as an extra)."""
    return {
        name: (_gangs(name=name, quota=_forecast_quota, **parts), "default"),
        f"{name}-noquota": (_gangs(name=f"{name}-noquota", quota=_no_quota, **parts), None),
    }


_PRESETS: dict[str, _Entry] = {
    # warm pools (the hp/spot part keeps GFS's defaults)
    "firepool": (_firepool, "default"),
    "fixed": (_firepool, "default"),
    "fitted": (_warm(keepalive=FittedKeepAlive), "default"),
    "always_on": (_warm(keepalive=AlwaysOn), "default"),
    # ablations of the one capacity model (docs/shared-sim.md): how the HP forecast bounds
    # the warm budget. The rule as first built, the same bound on new idle capacity only,
    # no bound (idle pods give way to HP only when an HP job reclaims them)
    "warm-strict": (_warm(warm_cap=HourCap), "default"),
    "warm-new-only": (_warm(warm_cap=lambda: HourCap(holds=False)), "default"),
    "warm-uncapped": (_warm(warm_cap=NoWarmCap), "default"),
    "warm_reuse": (
        _warm(matching=lambda: ReuseMatching(reuse=True, standby=False), standby=NoStandby),
        "default",
    ),
    "fresh_tag": (
        _warm(
            matching=lambda: ReuseMatching(reuse=False, standby=False),
            keepalive=lambda: FixedKeepAlive(FIXED_KEEPALIVE_S),
            standby=NoStandby,
        ),
        "default",
    ),
    "fresh_pod": (
        _warm(
            matching=lambda: ReuseMatching(reuse=False, standby=False),
            keepalive=lambda: FixedKeepAlive(0.0),
            standby=NoStandby,
        ),
        "default",
    ),
    # hp and spot (warm pools keep Firepool's defaults)
    "gfs": (_firepool, "default"),
    "gfs-naive": _gfs_variant("gfs-naive", "naive"),
    "gfs-fixed-eta": _gfs_variant(
        "gfs-fixed-eta", quota=lambda p: ForecastQuota(p.g, p.guarantee_s, fixed_eta=True)
    ),
    # the paper's ablations of its preemptive task scheduler, each half swapped for the
    # baselines' plain part (the authors' code: ``policy/placer/consolidate.py``, the
    # placer every other policy uses, and ``fifo_spot.py``'s cost-free victims)
    "gfs-simple-placement": _gfs_variant("gfs-simple-placement", scorer=lambda p: BestFitScorer()),
    "gfs-simple-preemption": _gfs_variant("gfs-simple-preemption", victims=lambda p: FifoVictims()),
    # stoker's own (beyond the paper): eta may grow to 2 while evictions stay under half the
    # target, so the quota lends spot the slack a cautious forecast leaves
    "gfs-eta-slack": _gfs_variant(
        "gfs-eta-slack",
        quota=lambda p: ForecastQuota(p.g, p.guarantee_s, eta_ceiling=ETA_SLACK_CEILING),
    ),
    # stoker's own (beyond the paper): GFS with spot queued smallest request first
    "gfs-small-first": _gfs_variant("gfs-small-first", queue="size-small-spot"),
    # stoker's own (beyond the paper): while no HP job waits in a GPU pool, spot may hold
    # up to eta x the GPUs HP does not hold now, past the forecast quota (the forecast's
    # reserve for HP that has not come is lent; evictions shrink eta and take it back)
    "gfs-lend": _gfs_variant("gfs-lend", lend_idle=LEND_SHARE),
    # stoker's own (beyond the paper): a fractional spot job that fits on cards other jobs
    # already share starts past the quota (it takes no whole card from HP)
    "gfs-fragments": _gfs_variant("gfs-fragments", lend_fragments=True),
    # stoker's own (beyond the paper): victims costed by the work lost since their last
    # checkpoint (what a restart really redoes; the paper's words) instead of since their
    # run started (the authors' code)
    "gfs-checkpoint-cost": _gfs_variant(
        "gfs-checkpoint-cost", victims=lambda p: GFSVictims("paper")
    ),
    # stoker's own (beyond the paper): a whole-GPU HP job that has waited an hour and finds
    # no room reserves the nodes closest to holding it; nothing else is placed there until
    # it starts (instead of smaller HP and spot backfilling the cards it waits for)
    "gfs-reserve": _gfs_variant("gfs-reserve", reserve_after_s=RESERVE_AFTER_S),
    # the same with gfs-lend's quota: one capacity model, where spot borrows what HP does
    # not hold while no HP waits and a waiting HP gang holds back the nodes it drains
    "gfs-reserve-lend": _gfs_variant(
        "gfs-reserve-lend", reserve_after_s=RESERVE_AFTER_S, lend_idle=LEND_SHARE
    ),
    # stoker's own (beyond the paper): gfs-reserve, but only a reservation whose nodes drain
    # within a day (a drain further away keeps GFS's backfill until it comes that close)
    "gfs-reserve-day": _gfs_variant(
        "gfs-reserve-day", reserve_after_s=RESERVE_AFTER_S, reserve_within_s=RESERVE_WITHIN_S
    ),
    # stoker's own (beyond the paper): gfs-reserve for HP jobs whose workers take two cards or
    # more (what backfilling fragments); a gang of 1-GPU workers waits as under GFS
    "gfs-reserve-multi": _gfs_variant(
        "gfs-reserve-multi", reserve_after_s=RESERVE_AFTER_S, reserve_min_worker=2.0
    ),
    # both bounds: workers of two cards or more, nodes that drain within a day
    "gfs-reserve-multi-day": _gfs_variant(
        "gfs-reserve-multi-day",
        reserve_after_s=RESERVE_AFTER_S,
        reserve_min_worker=2.0,
        reserve_within_s=RESERVE_WITHIN_S,
    ),
    # gfs-reserve-multi for gangs only: an HP job of two workers or more, each of two cards or
    # more (a single worker waits as under GFS), and only while no HP job of a smaller
    # request waits in the pool (one that waits finds no card: the pool is short of cards
    # for HP, and a reservation would only serve the gang before the many small jobs)
    "gfs-reserve-gangs": _gfs_variant("gfs-reserve-gangs", **_RESERVE_GANGS),
    # gfs-reserve-gangs that evicts less: its backfill beside a reservation starts HP on
    # free room only (a job GFS's skip rule would have kept waiting evicts no spot job to
    # start early), and an HP job evicts only after half an hour queued (room freed by
    # jobs ending meanwhile is taken first)
    "gfs-reserve-patient": _gfs_variant("gfs-reserve-patient", **_PATIENT),
    # gfs-reserve-patient with gfs-lend's loan at half the share: the wait before evicting
    # lets HP take lent room back as jobs end rather than by evictions, and the loan gives
    # spot the room the forecast holds for HP that has not come
    "gfs-reserve-patient-lend": _gfs_variant(
        "gfs-reserve-patient-lend", **_PATIENT, lend_idle=PATIENT_LEND_SHARE
    ),
    # gfs-reserve-patient-lend reserving for a single worker of two cards or more too (its
    # bound kept: not while a smaller HP job waits); measured on Philly contended, spot
    # queueing 7-9 % under gfs-reserve-patient-lend's (docs/gfs.md, "Paired intervals")
    "gfs-reserve-patient-lend-multi": _gfs_variant(
        "gfs-reserve-patient-lend-multi",
        **{**_PATIENT, "reserve_min_workers": 1},
        lend_idle=PATIENT_LEND_SHARE,
    ),
    # the paper's baselines: as the authors' simulator builds them, spot gated by the same
    # forecast quota as GFS (fifo_spot.py, lyra.py, fgd.py; chronus.py has none)
    **_baseline("yarn-cs", _YARN),
    "chronus": (
        _gangs(
            name="chronus",
            quota=_no_quota,
            scorer=lambda p: GFSScorer(),
            preempt=False,
            round_s=CHRONUS_ROUND_S,
            lease_s=CHRONUS_LEASE_S,
            lease_restart_s=CHRONUS_RESTART_S,
        ),
        None,
    ),
    **_baseline("lyra", _LYRA),
    **_baseline("fgd", _FGD),
    "static-quota": (
        _gangs(
            name="static-quota",
            quota=lambda p: StaticQuota(STATIC_SHARE),
            victims=lambda p: GFSVictims(),
            oversize_alone=True,
        ),
        None,
    ),
    "min-runtime": (
        _gangs(
            name="min-runtime",
            quota=_no_quota,
            victims=lambda p: GFSVictims(),
            min_runtime_s=lambda p: p.guarantee_s,
        ),
        None,
    ),
}

WARM_PRESETS = (
    "fresh_pod",
    "fresh_tag",
    "warm_reuse",
    "firepool",
    "fixed",
    "always_on",
    "fitted",
    "warm-strict",
    "warm-new-only",
    "warm-uncapped",
)
"""The warm-pool presets (Firepool's comparisons)."""
GANG_PRESETS = tuple(name for name in _PRESETS if name not in WARM_PRESETS)
"""The hp/spot presets (GFS's comparisons and ablations)."""


def presets() -> list[str]:
    """Every preset's name."""
    return list(_PRESETS)


def preset(name: str, g: float = 0.9, guarantee_s: float = 3600.0) -> Preset:
    """Build the named preset (fresh policy objects).

    An hp/spot preset may have parameters of its :class:`GFSConfig` changed after ``+``,
    ``gfs-reserve-patient-lend+hp_evict_after_s=600+lend_idle=0.25`` (numbers,
    ``true``/``false`` or ``1``/``0``, a queue order's name), each checked as the config
    checks its own. ValueError names what is wrong: an unknown preset (listing the known
    ones), a field that is not such a parameter (listing those), a bad value."""
    base, *changes = name.split(VARIANT_SEP)
    entry = _PRESETS.get(base)
    if entry is None:
        raise ValueError(f"preset: unknown {base!r}; known: {', '.join(_PRESETS)}")
    build, forecaster = entry
    policies = build(_Params(g, guarantee_s))
    if changes:
        if base not in GANG_PRESETS:
            raise ValueError(
                f"preset: {base!r} is a warm-pool preset; only hp/spot presets take +field=value"
            )
        policies.gangs = _changed(policies.gangs, changes)
    return Preset(name, policies, forecaster)


# a preset's changed GFSConfig fields follow its name, each after this
VARIANT_SEP = "+"
# GFSConfig fields a preset name may change: its scalar parameters, but those set
# elsewhere: g and guarantee_s (preset()'s own arguments, which build the quota too),
# cost_window_s (the simulator's window), grace_s (the broker's setting), and the name
_SET_ELSEWHERE = ("name", "g", "guarantee_s", "cost_window_s", "grace_s")
_SCALARS = ("float", "int", "bool", "str")
_TUNABLE = {
    f.name: kind
    for f in fields(GFSConfig)
    # a field's type is its annotation's text (postponed annotations) or the type itself
    if (kind := f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")) in _SCALARS
    and f.name not in _SET_ELSEWHERE
}
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _changed(config: GFSConfig, changes: list[str]) -> GFSConfig:
    """``config`` with each ``field=value`` of ``changes`` set, checked by GFSConfig."""
    values: dict[str, object] = {}
    for item in changes:
        key, sep, text = item.partition("=")
        kind = _TUNABLE.get(key)
        if not sep or kind is None:
            raise ValueError(
                f"preset: {item!r} is not field=value of a GFSConfig parameter; "
                f"known: {', '.join(sorted(_TUNABLE))}"
            )
        try:
            if kind == "bool":
                if text.lower() not in _TRUE + _FALSE:
                    raise ValueError("not a bool")
                values[key] = text.lower() in _TRUE
            else:
                values[key] = {"float": float, "int": int, "str": str}[kind](text)
        except ValueError:
            raise ValueError(f"preset: {key}: expected a {kind}, got {text!r}") from None
    try:
        return replace(config, **values)  # type: ignore[arg-type]
    except ValueError as exc:
        raise ValueError(f"preset: {exc}") from None
