"""The sign of T-SFL's Eq. (6) (issue 15, docs/algorithms/tsfl.md A25): docs/tsfl_sign.py differentiates
Theorem 1's bound with sympy; every step of its finding is asserted here."""
import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow   # every test here reads the module fixture r: four runs of the bound

sp = pytest.importorskip("sympy")
_path = Path(__file__).resolve().parents[1] / "docs" / "tsfl_sign.py"
_spec = importlib.util.spec_from_file_location("tsfl_sign", _path)
tsfl_sign = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tsfl_sign)


@pytest.fixture(scope="module")
def r():
    return tsfl_sign.derive()


def test_the_gradient_of_the_bound_has_the_papers_shape(r):
    assert r["gradient_shape"] is True


def test_the_stationary_point_is_eq4_with_the_tau_term_sign_flipped(r):
    assert r["stationary_is_ours"] and not r["stationary_is_eq4"] and r["ours_minus_eq4_is_flip"]


def test_cor1_slope_has_the_opposite_sign(r):
    assert r["slope_sign"] == -1                         # Eq. (6) prints +1
    S = r["symbols"]
    assert r["lagrange_extra"] != 0 and S["tau"][0] in r["lagrange_extra"].free_symbols   # not affine in tau


def test_under_def13_tilting_towards_larger_tau_raises_the_bound(r):
    assert r["directional_formula"] and r["def13_signs"]
    inst = r["instance"]
    assert inst["eta L (1 + theta)"] >= 1 and inst["W(uniform)"] > 0
    assert inst["minus_s"] < inst["uniform"] < inst["plus_s"] and r["instance_order"]
