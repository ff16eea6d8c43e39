"""Is run B's mean step time different from run A's? Welch's t-test on the two runs' step samples: the
uncertainty of each mean is its steps' spread over the square root of their count, so 20 steps of 8%
spread pin a mean to about 1.8% (one standard error), where comparing single-step spreads (the old
rule) called a +26% change over 50 steps "unchanged".

Steps are taken as independent draws. The plain pass's steps are timed on the host, where an
asynchronous GPU loop runs ahead while the launch queue fills and waits for it to drain at the end:
resnet50's 50 plain steps read 22, 22, 22, 34 ms, then 42.5 ± 0.3 ms, then 114 ms, a standard deviation
of 11.4 ms that is queue structure, not noise (their sum, the window, is exact). Their spread is
therefore the robust one (1.4826 x the median absolute deviation: 0.29 ms there), which a few edge
steps cannot inflate; the device-timed profiled steps keep their plain standard deviation, slow steps
included, since those are the noise."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

CONFIDENCE_PCT = 95.0
_Z_975 = 1.959963984540054  # the standard normal's 97.5th percentile: a two-sided 95% interval


@dataclass(frozen=True)
class Steps:
    """One run's steps as the test needs them: mean, sample standard deviation (n - 1), count."""

    mean_ms: float
    std_ms: float
    count: int
    basis: str  # "profiled" (the analyzed collector's steps) or "plain" (the pass with no collector)


MAD_TO_SD = 1.4826  # a normal distribution's standard deviation per median absolute deviation


def from_samples(samples: list[float], basis: str, *, robust: bool = False) -> Steps | None:
    """The steps' statistics; None with fewer than two (no spread can be known from one). `robust`: the
    spread from the median absolute deviation (host-timed steps, see the module), where it is not 0."""
    if len(samples) < 2:
        return None
    mean = math.fsum(samples) / len(samples)
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in samples) / (len(samples) - 1))
    if robust:
        median = statistics.median(samples)
        mad = statistics.median(abs(x - median) for x in samples)
        std = MAD_TO_SD * mad if mad > 0 else std
    return Steps(mean, std, len(samples), basis)


def from_summary(mean_ms: float, population_std_ms: float, count: int, basis: str) -> Steps | None:
    """From a document that keeps only the mean and the spread over its steps (ddof=0, as results.json
    has always written it), corrected to the sample standard deviation."""
    if count < 2:
        return None
    return Steps(mean_ms, population_std_ms * math.sqrt(count / (count - 1)), count, basis)


def t_quantile_975(df: float) -> float:
    """Student's t 97.5th percentile. Exact for 1 and 2 degrees of freedom; above, the Cornish-Fisher
    expansion in 1/df (Abramowitz & Stegun 26.7.5), within 0.1% of the tables from 3 (3.179 vs 3.182)
    and within 0.01% from 10: no scipy for one number."""
    if df <= 1:
        return math.tan(math.pi * 0.475)
    if df < 3:
        p = 0.975
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    z, v = _Z_975, df
    return (
        z
        + (z**3 + z) / (4 * v)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
        + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * v**4)
    )


def welch(a: Steps, b: Steps) -> dict:
    """B's mean minus A's with its 95% confidence interval, in ms and in percent of A's mean (A's own
    uncertainty is in the interval's width; dividing by it as by a constant is good to second order).
    `steps_to_decide`: steps per run at which a change of this size would stand out of this noise."""
    var_a, var_b = a.std_ms**2 / a.count, b.std_ms**2 / b.count
    se = math.sqrt(var_a + var_b)
    delta = b.mean_ms - a.mean_ms
    if se == 0:  # identical steps in both runs: the difference is exact
        df, half = float(a.count + b.count - 2), 0.0
    else:
        df = (var_a + var_b) ** 2 / (var_a**2 / (a.count - 1) + var_b**2 / (b.count - 1))
        half = t_quantile_975(df) * se
    spread = a.std_ms**2 + b.std_ms**2
    needed = math.ceil(_Z_975**2 * spread / delta**2) if delta else None
    return {
        "delta_ms": delta,
        "delta_pct": 100.0 * delta / a.mean_ms,
        "se_ms": se,
        "df": df,
        "ci_ms": [delta - half, delta + half],
        "ci_pct": [100.0 * (delta - half) / a.mean_ms, 100.0 * (delta + half) / a.mean_ms],
        "confidence_pct": CONFIDENCE_PCT,
        "steps": [a.count, b.count],
        "basis": a.basis,
        "test": "Welch's t",
        "steps_to_decide": needed,
    }


def verdict(test: dict) -> str:
    """ "slower" or "faster" when the interval excludes no change, else "no significant change"."""
    low, high = test["ci_ms"]
    if low > 0:
        return "slower"
    if high < 0:
        return "faster"
    return "no significant change"


# A pass needs the interval's half-width under twice the threshold (and never needs it under this): then
# a regression of twice the threshold would have stood out. A ddp job's 10 steps (one of 12.4 ms among
# 6.1 ms ones) give +-28.5%: their 0% change at a 5% threshold cannot be a pass.
MIN_RESOLUTION_PCT = 5.0


def resolution_pct(threshold_pct: float) -> float:
    """The widest half-width of the 95% interval at which a change at or under the threshold passes."""
    return max(2.0 * threshold_pct, MIN_RESOLUTION_PCT)


def gate_outcome(test: dict, threshold_pct: float) -> str:
    """ "regressed": B is slower at 95% confidence and by an estimated more than the threshold;
    "inconclusive": the estimate is above the threshold but within what the noise can make, or the
    interval is too wide to rule out a regression of twice the threshold (resolution_pct);
    "pass": the estimate is at or under the threshold and the interval narrow enough."""
    if test["delta_pct"] > threshold_pct:
        return "regressed" if test["ci_ms"][0] > 0 else "inconclusive"
    half_width_pct = (test["ci_pct"][1] - test["ci_pct"][0]) / 2
    return "pass" if half_width_pct <= resolution_pct(threshold_pct) else "inconclusive"
