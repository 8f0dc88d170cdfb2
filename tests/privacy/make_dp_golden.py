#!/usr/bin/env python3
"""Golden values for tests/privacy/accountant_test.cpp: epsilon of the Poisson-subsampled Gaussian
from Opacus's RDPAccountant and dp-accounting's PLDAccountant on a 50-point grid of
(sigma, q, steps, delta), plus Opacus's get_noise_multiplier at a few targets.

    pip install opacus dp-accounting
    python3 tests/privacy/make_dp_golden.py > tests/privacy/data/dp_golden.json
"""
import json
import sys
import warnings

import numpy as np
import opacus
import dp_accounting
from dp_accounting.pld import pld_privacy_accountant
from opacus.accountants import RDPAccountant
from opacus.accountants.utils import get_noise_multiplier

warnings.filterwarnings("ignore")


def rdp_eps(sigma, q, steps, delta):
    acc = RDPAccountant()
    acc.history = [(sigma, q, steps)]
    eps, alpha = acc.get_privacy_spent(delta=delta)
    return float(eps), float(alpha)


def pld_eps(sigma, q, steps, delta):
    acc = pld_privacy_accountant.PLDAccountant()  # value_discretization_interval 1e-4, ADD_OR_REMOVE_ONE
    ev = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma))
    acc.compose(ev, steps)
    return float(acc.get_epsilon(delta))


def main():
    rng = np.random.default_rng(44)
    points = [(1.5, 0.04, 2250, 1e-5)]  # Opacus's accountants_test value, 7.32911117143
    while len(points) < 50:
        sigma = float(np.round(np.exp(rng.uniform(np.log(0.6), np.log(6.0))), 4))
        q = float(np.round(np.exp(rng.uniform(np.log(1e-3), np.log(0.3))), 5))
        steps = int(np.round(np.exp(rng.uniform(np.log(1), np.log(5000)))))
        delta = float(rng.choice([1e-3, 1e-5, 1e-6, 1e-8]))
        points.append((sigma, q, steps, delta))
    grid = []
    for sigma, q, steps, delta in points:
        e_rdp, alpha = rdp_eps(sigma, q, steps, delta)
        e_pld = pld_eps(sigma, q, steps, delta)
        grid.append({"sigma": sigma, "q": q, "steps": steps, "delta": delta,
                     "eps_rdp": e_rdp, "rdp_order": alpha, "eps_pld": e_pld})
        print(f"sigma {sigma} q {q} steps {steps} delta {delta}: rdp {e_rdp:.9g} (alpha {alpha}), "
              f"pld {e_pld:.9g}", file=sys.stderr)
    inverse = []
    for eps, q, steps, delta in [(8.0, 0.04, 2000, 1e-5), (3.0, 256 / 60000, 2000, 1e-5), (1.0, 0.01, 500, 1e-6)]:
        inverse.append({"target_epsilon": eps, "q": q, "steps": steps, "delta": delta,
                        "sigma_rdp": float(get_noise_multiplier(target_epsilon=eps, target_delta=delta,
                                                                sample_rate=q, steps=steps, accountant="rdp"))})
    doc = {"schema": "rtx.dp_golden.v1",
           "made_by": "tests/privacy/make_dp_golden.py",
           "opacus": opacus.__version__,
           "dp_accounting": getattr(dp_accounting, "__version__", "0.6.0"),
           "pld_discretization": 1e-4,
           "grid": grid, "inverse": inverse}
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
