"""A 0-1 knapsack (30 constraints, 400 items) HiGHS does not finish in minutes: a solve
to interrupt."""

from __future__ import annotations

import highspy
import numpy as np


def hard_program(highs_limit: float) -> highspy.Highs:
    """The knapsack, loaded, with HiGHS's own time limit at ``highs_limit`` seconds."""
    rng = np.random.default_rng(0)
    n, m = 400, 30
    weights = rng.integers(1, 100, (m, n)).astype(float)
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = n, m
    lp.col_cost_ = rng.integers(1, 100, n).astype(float)
    lp.col_lower_, lp.col_upper_ = np.zeros(n), np.ones(n)
    lp.row_lower_, lp.row_upper_ = np.full(m, -np.inf), weights.sum(1) / 3
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = np.arange(0, m * n + 1, n)
    lp.a_matrix_.index_ = np.tile(np.arange(n), m)
    lp.a_matrix_.value_ = weights.ravel()
    lp.sense_ = highspy.ObjSense.kMaximize
    lp.integrality_ = [highspy.HighsVarType.kInteger] * n
    solver = highspy.Highs()
    solver.setOptionValue("output_flag", False)
    solver.setOptionValue("time_limit", highs_limit)
    solver.passModel(lp)
    return solver
