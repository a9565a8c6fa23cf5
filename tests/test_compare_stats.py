"""`nvtx-tf compare` (issue 46), its statistics on a seeded generator of runs with known truth
(nvtx_plugins_tf/recorder/compare/synthetic.py), acceptance criteria 1-5: 2 runs x 8 ranks x 500
steps a side, lognormal noise of sd 5 % with AR(1) correlation 0.5 along the steps, each rank's
speed in a run N(0, 2 %) (the run effect), 50 warm-up steps at 3x, 20 ranges.

1. +5 % in 1 of the 20 ranges: flagged (q < 0.01) in >= 95 of 100 seeds, its interval covering
   the truth in >= 93; the estimate within +-1 point of it: in >= 80 seeds and by the median
   error (two runs of 8 ranks a side at a 2 % rank speed give the estimate itself a standard
   error of 0.7 points: about 84 % of seeds is what any estimator of this range's own times reaches).
2. 100 A/A pairs: at most 1 with any range flagged; so too with a drift of 3 % between runs
   (each run's speed N(0, 3 %)) and 5 runs a side.
3. --warmup auto cuts 45-60 steps in >= 95 % of the runs, and the verdicts equal --warmup 50's.
4. --threshold 3 %: a true +1 % is "equivalent" in >= 90 % of seeds; a true +5 % is "slower"
   (the command's exit 16). Here the ranks' speed varies by 1 %, not 2 %: at 2 %, two runs of
   8 ranks a side leave the estimate a standard error of 0.7 points, and no interval at 98 %
   fits inside +-3 % around a +1 % change in 90 % of seeds (about 70 %: the test would ask the
   impossible; tests/test_compare_stats.py::test_criterion_4_at_a_two_percent_rank_speed says so).
5. The injected range comes first in >= 95 % of seeds; the shares of the ranges and the
   uncovered part add up to the step's change within 1 %.

The seeds are fixed, the resamples few (200) and vectorized: the whole file takes some tens of
seconds.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("scipy")

from nvtx_plugins_tf.recorder.compare.stats import RANKS, RUNS  # noqa: E402
from nvtx_plugins_tf.recorder.compare.synthetic import make_runs  # noqa: E402
from nvtx_plugins_tf.recorder.compare.verdict import (  # noqa: E402
    EQUIVALENT,
    SLOWER,
    compare_runs,
)

SEEDS = range(100)
INJECTED = 7  # (r07)
RESAMPLES = 200


def _pair(seed: int, effect: float | None = None, **kw):
    rng = np.random.default_rng(seed)
    baseline = make_runs(rng, name="base", **kw)
    candidate = make_runs(rng, name="cand", effect={INJECTED: effect} if effect else None, **kw)
    return baseline, candidate


@pytest.fixture(scope="module")
def five_percent():
    """Per seed: (the runs, the comparison with --warmup auto)."""
    out = []
    for seed in SEEDS:
        b, c = _pair(seed, 1.05)
        out.append((b, c, compare_runs(b, c, seed=seed, resamples=RESAMPLES)))
    return out


def test_criterion_1_a_five_percent_range_is_flagged_with_its_interval(five_percent):
    row = 1 + INJECTED
    flagged = sum(r.q[row] < 0.01 for *_, r in five_percent)
    covered = sum(r.effects.low[row] <= 1.05 <= r.effects.high[row] for *_, r in five_percent)
    errors = np.array([abs(r.effects.ratio[row] - 1.05) for *_, r in five_percent])
    assert five_percent[0][2].level == RANKS
    assert flagged >= 95, flagged
    assert covered >= 93, covered
    assert (errors <= 0.01).sum() >= 80 and np.median(errors) < 0.01, np.sort(errors)[-20:]
    assert all(r.verdict[row] == SLOWER for *_, r in five_percent if r.q[row] < 0.01)


def test_criterion_2_a_a_pairs_flag_nothing():
    flagged = 0
    for seed in SEEDS:
        b, c = _pair(1000 + seed)
        r = compare_runs(b, c, seed=seed, resamples=RESAMPLES)
        flagged += bool((r.q[1:] < 0.01).any())
    assert flagged <= 1, flagged


def test_criterion_2_a_a_pairs_with_drift_between_runs_flag_nothing_given_five_runs():
    flagged = 0
    for seed in SEEDS:
        b, c = _pair(2000 + seed, runs=5, drift_sigma=0.03, steps=200, warmup=20)
        r = compare_runs(b, c, seed=seed, resamples=RESAMPLES)
        assert r.level == RUNS
        flagged += bool((r.q[1:] < 0.01).any())
    assert flagged <= 1, flagged


def test_criterion_3_warmup_auto_cuts_the_warmup_and_changes_no_verdict(five_percent):
    cuts = [cut for *_, r in five_percent for side in r.warmup.values() for cut in side]
    assert sum(45 <= cut <= 60 for cut in cuts) >= 0.95 * len(cuts), sorted(cuts)
    differ = 0
    for seed, (b, c, auto) in zip(SEEDS, five_percent):
        fixed = compare_runs(b, c, warmup=50, seed=seed, resamples=RESAMPLES)
        differ += fixed.verdict != auto.verdict
    assert differ <= 5, differ  # (>= 95 % of seeds: the same verdict for every row)


def test_criterion_4_a_change_inside_the_threshold_is_equivalent():
    equivalent = slower = 0
    for seed in SEEDS:
        b, c = _pair(3000 + seed, 1.01, run_sigma=0.01)
        r = compare_runs(b, c, threshold=0.03, seed=seed, resamples=RESAMPLES)
        equivalent += r.verdict[1 + INJECTED] == EQUIVALENT
        slower += r.regression()
    assert equivalent >= 90, equivalent
    assert slower <= 1, slower
    for seed in range(5):
        b, c = _pair(4000 + seed, 1.05)
        r = compare_runs(b, c, threshold=0.03, seed=seed, resamples=RESAMPLES)
        assert r.verdict[1 + INJECTED] == SLOWER and r.regression()


def test_criterion_4_at_a_two_percent_rank_speed():
    """The same at the 2 % rank speed of criterion 1: "equivalent" most of the time, "slower"
    at most once in 30 (an estimate 3 standard errors off: a 0.3 % chance a seed). Why not 90 %
    (docs/compare.md, "How small a change can be called equivalent"): the estimate's standard
    error is 0.73 points, above the 0.54 that 90 % needs; its spread across the seeds shows it."""
    equivalent = slower = 0
    logs = []
    for seed in range(30):
        b, c = _pair(3000 + seed, 1.01)
        r = compare_runs(b, c, threshold=0.03, seed=seed, resamples=RESAMPLES)
        equivalent += r.verdict[1 + INJECTED] == EQUIVALENT
        slower += r.regression()
        logs.append(np.log(r.effects.ratio[1 + INJECTED]))
    assert equivalent >= 15 and slower <= 1, (equivalent, slower)
    assert 0.0054 < np.std(logs, ddof=1) < 0.0105, np.std(logs, ddof=1)  # (0.73 points, 30 seeds: +-13 %)


def test_criterion_5_the_injected_range_first_and_shares_add_up(five_percent):
    first = sum(r.order()[0] == 1 + INJECTED for *_, r in five_percent)
    assert first >= 95, first
    for *_, r in five_percent:
        total = float(np.nansum(r.share[1:]) + r.uncovered_share)
        assert abs(total - 1.0) < 0.01, total


def test_the_q_values_are_scipys_benjamini_hochberg():
    from scipy.stats import false_discovery_control

    from nvtx_plugins_tf.recorder.compare.stats import bh

    rng = np.random.default_rng(3)
    for n in (1, 2, 20, 1000):
        p = rng.uniform(size=n) ** 3
        assert np.allclose(bh(p), false_discovery_control(p, method="bh"), rtol=1e-12, atol=0)
    p = np.array([0.01, np.nan, 0.04, 0.03])
    q = bh(p)
    assert np.isnan(q[1]) and np.allclose(q[[0, 2, 3]], false_discovery_control(p[[0, 2, 3]], method="bh"))


def test_the_same_seed_gives_the_same_result():
    b, c = _pair(5, 1.05)
    one, two = (compare_runs(b, c, seed=9, resamples=RESAMPLES) for _ in range(2))
    assert np.array_equal(one.effects.low, two.effects.low) and one.verdict == two.verdict


NESTED = {INJECTED: 2}  # (r07 nested in r02: r02's inclusive time holds r07's)


def test_a_nested_ranges_slowdown_is_in_its_parents_inclusive_time_not_its_exclusive():
    """+10 % in r07, nested in r02 (half of r02's inclusive time): r07 slower; r02's inclusive
    time slower (about +5 %), its exclusive time not; the ranges nested in nothing judged once
    (their inclusive rows the exclusive ones'); the exit code's regression either way."""
    parent_incl_slower = 0
    for seed in range(20):
        b, c = _pair(6000 + seed, 1.10, nested=NESTED)
        r = compare_runs(b, c, seed=seed, resamples=RESAMPLES)
        assert r.nested.tolist() == [i == 3 for i in range(21)]
        assert r.verdict[1 + INJECTED] == SLOWER
        assert r.verdict[3] != SLOWER and abs(r.effects.ratio[3] - 1) < 0.02, r.effects.ratio[3]
        assert abs(r.inclusive.ratio[3] - 1.05) < 0.02, r.inclusive.ratio[3]
        parent_incl_slower += r.verdict_incl[3] == SLOWER
        assert r.verdict_incl[4] == r.verdict[4] and r.q_incl[4] == r.q[4]
    assert parent_incl_slower >= 19, parent_incl_slower


def test_a_a_pairs_with_nested_ranges_flag_nothing_on_either_measure():
    """Criterion 2's A/A pairs with r07 nested in r02: at most 1 in 50 with any range flagged,
    exclusive or inclusive (one family of tests)."""
    flagged = 0
    for seed in range(50):
        b, c = _pair(7000 + seed, nested=NESTED)
        r = compare_runs(b, c, seed=seed, resamples=RESAMPLES)
        flagged += bool((r.q[1:] < 0.01).any() or (r.q_incl[1:] < 0.01).any())
    assert flagged <= 1, flagged
