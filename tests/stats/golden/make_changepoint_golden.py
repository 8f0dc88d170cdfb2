#!/usr/bin/env python3
# Writes changepoint_golden.json: E-divisive q-hat values, candidates and change points from
# MongoDB's signal-processing-algorithms, the reference for tests/stats/changepoint_test.cpp.
#
# Not a project dependency. Made with:
#   python3 -m venv /tmp/spa-venv && /tmp/spa-venv/bin/pip install signal-processing-algorithms==2.1.6
#   /tmp/spa-venv/bin/python tests/stats/golden/make_changepoint_golden.py > tests/stats/golden/changepoint_golden.json
# (numpy 1.26.4, Python 3.11; the package's C extension computes the t-statistics.)
#
# Calls (signal_processing_algorithms.energy_statistics.energy_statistics, v2.1.6):
#   e_divisive(series, pvalue=0.05, permutations=199) after np.random.seed(SEED)  -> change points
#   _calculate_t_stats(_get_distance_matrix(series[a:b]))                         -> q-hat per tau
# The package's q-hat is the V-statistic form (rtx::stats::EnergyForm::V) with no minimum
# segment size (min_size = 1); its permutation RNG is numpy's, so only the deterministic part
# (q-hat values, argmax per window) is compared exactly. "steps" are the planted steps of a
# series; "unambiguous": true marks a series whose steps are far above the noise, where the
# test asserts that the package's change points include every planted step and that rtx finds
# exactly the planted steps (the package, with p = count/(R+1) and min_size 1, may add a
# spurious change point next to an edge; rtx's test is the stricter (count+1)/(R+1)).
import json
import sys

import numpy as np
from signal_processing_algorithms.energy_statistics import energy_statistics as es

SEED = 1234
PVALUE = 0.05
PERMUTATIONS = 199


def series_list():
    rs = np.random.RandomState(20261130)
    out = []
    out.append(("step_clean_n30", [1.0] * 15 + [2.0] * 15, [15], True))
    out.append(("two_steps_clean_n30", [1.0] * 10 + [3.0] * 10 + [2.0] * 10, [10, 20], True))
    out.append(("step_n7", list(1.0 + 0.01 * rs.standard_normal(4)) + list(2.0 + 0.01 * rs.standard_normal(3)), [4], False))
    out.append(("noise_n200", list(1.0 + 0.05 * rs.standard_normal(200)), [], False))
    out.append(("step20_noise_n200", list(1.0 + 0.03 * rs.standard_normal(120)) + list(1.2 + 0.03 * rs.standard_normal(80)),
                [120], True))
    out.append(("step20_noise_n30", list(1.0 + 0.03 * rs.standard_normal(18)) + list(1.2 + 0.03 * rs.standard_normal(12)),
                [18], True))
    out.append(("two_steps_noise_n200", list(1.0 + 0.02 * rs.standard_normal(70)) + list(1.5 + 0.02 * rs.standard_normal(60))
                + list(0.8 + 0.02 * rs.standard_normal(70)), [70, 130], True))
    return out


def tstats(x):
    d = es._get_distance_matrix(es._get_valid_input(np.asarray(x, dtype=np.float64)))
    return [float(v) for v in es._calculate_t_stats(d)]


def main():
    cases = []
    for name, x, steps, unambiguous in series_list():
        x = [float(v) for v in x]
        np.random.seed(SEED)
        cps = sorted(int(c) for c in es.e_divisive(x, pvalue=PVALUE, permutations=PERMUTATIONS))
        bounds = [0] + cps + [len(x)]
        windows = []
        for a, b in zip(bounds[:-1], bounds[1:]):
            t = tstats(x[a:b])
            i = int(np.argmax(t))
            windows.append({"start": a, "end": b, "argmax": a + i, "q": t[i]})
        q_full = tstats(x)
        cases.append({
            "name": name, "n": len(x), "steps": steps, "unambiguous": unambiguous, "series": x,
            "qhat_full": q_full, "argmax_full": int(np.argmax(q_full)),
            "change_points": cps, "final_windows": windows,
        })
    doc = {
        "schema": "rtx.golden.changepoint.v1",
        "generator": "signal-processing-algorithms 2.1.6, energy_statistics.e_divisive",
        "numpy": np.__version__, "seed": SEED, "pvalue": PVALUE, "permutations": PERMUTATIONS,
        "cases": cases,
    }
    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
