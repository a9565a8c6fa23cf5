"""A seeded generator of runs (:class:`~.data.Run`) with known truth, for the statistics'
acceptance tests and benchmarks: lognormal noise per rank and step with AR(1) correlation
along the steps, a per-rank speed of each run, an optional drift between runs, a warm-up at
a multiple of the step's time, chosen ranges made slower in the candidate, and chosen ranges
nested in others (their parents' inclusive time holds theirs)."""

from __future__ import annotations

import numpy as np

from .data import Run

__all__ = ["make_runs"]


def make_runs(
    rng: np.random.Generator,
    *,
    runs: int = 2,
    ranks: int = 8,
    steps: int = 500,
    n_ranges: int = 20,
    range_ns: float = 1e6,
    sigma: float = 0.05,
    rho: float = 0.5,
    run_sigma: float = 0.02,
    drift_sigma: float = 0.0,
    warmup: int = 50,
    warmup_factor: float = 3.0,
    uncovered_ns: float = 2e6,
    effect: dict[int, float] | None = None,
    nested: dict[int, int] | None = None,
    name: str = "run",
) -> list[Run]:
    """``runs`` runs of ``ranks`` ranks x ``steps`` steps over ``n_ranges`` ranges named
    ``r00``.. of ``range_ns`` each: every (rank, step, range) time is multiplied by
    exp(AR(1) noise of sd ``sigma``, correlation ``rho`` between steps), by the rank's speed in
    that run exp(N(0, ``run_sigma``)), and by the run's drift exp(N(0, ``drift_sigma``)) (the
    whole run); the first ``warmup`` steps take ``warmup_factor`` times as long. ``effect``:
    {range index: factor} (1.05: 5 % slower). A step is its ranges plus ``uncovered_ns``.
    ``nested``: {range index: its parent's index} (one level): the times above are the
    exclusive ones; a parent's inclusive time adds its children's."""
    effect = effect or {}
    factors = np.ones(n_ranges)
    for j, f in effect.items():
        factors[j] = f
    out = []
    innov = sigma * np.sqrt(1 - rho * rho)
    for k in range(runs):
        e = rng.standard_normal((ranks, steps, n_ranges))
        noise = np.empty_like(e)
        noise[:, 0] = sigma * e[:, 0]
        for s in range(1, steps):
            noise[:, s] = rho * noise[:, s - 1] + innov * e[:, s]
        rank_speed = rng.normal(0.0, run_sigma, size=(ranks, 1, 1))
        drift = rng.normal(0.0, drift_sigma) if drift_sigma else 0.0
        work = range_ns * factors * np.exp(noise + rank_speed + drift)
        work[:, :warmup] *= warmup_factor
        gap = uncovered_ns * np.exp(0.5 * noise[:, :, 0] + rank_speed[:, :, 0] + drift)
        gap[:, :warmup] *= warmup_factor
        step = work.sum(axis=2) + gap
        incl = None
        if nested:
            incl = work.copy()
            for child, parent in nested.items():
                incl[:, :, parent] += work[:, :, child]
        out.append(Run(f"{name}{k}", step, work, [f"r{j:02d}" for j in range(n_ranges)], incl))
    return out
