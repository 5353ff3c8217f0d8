"""Student's t quantiles for the intervals perfkit states: the sweep's forecast (90%) and `perfkit diff`'s
noise band (95%).

Written out rather than taking SciPy as a dependency for sixty numbers (checked against
``scipy.stats.t.ppf`` to three decimals). Beyond 30 degrees of freedom the normal quantile, within 4% of t.
"""

from __future__ import annotations

# two-sided level -> the t quantile at 1..30 degrees of freedom
_T = {
    0.90: (6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812, 1.796, 1.782, 1.771, 1.761, 1.753,
           1.746, 1.740, 1.734, 1.729, 1.725, 1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697),
    0.95: (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
           2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045,
           2.042),
}
_Z = {0.90: 1.645, 0.95: 1.960}


def t_quantile(level: float, df: int) -> float:
    """The half-width, in standard errors, of a two-sided ``level`` interval with ``df`` >= 1 degrees of
    freedom (``level``: 0.90 or 0.95)."""
    if level not in _T:
        raise ValueError(f"level {level}: one of {', '.join(map(str, _T))}")
    if df < 1:
        raise ValueError(f"{df} degrees of freedom: at least 1")
    table = _T[level]
    return table[df - 1] if df <= len(table) else _Z[level]
