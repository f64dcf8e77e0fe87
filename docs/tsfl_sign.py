"""The sign of T-SFL's Eq. (6), derived symbolically (issue 15; docs/algorithms/tsfl.md A25).

Theorem 1 (Eqs. 2-3, as transcribed in tsfl.md section 8) bounds ||grad F(w^T)||^2 / L^2 by

    Phi(rho) = (Q + X + Y + Z) / W,      Q = ||w^0 - w*||^2,
    X = C  sum_t sum_i rho_i^t (tau_i^t)^2,                 C = eta^3 L (H - 1) G^2
    Y = eta^2 N sum_t sum_i sigma_i^2 (rho_i^t)^2 tau_i^t
    Z = A  sum_t sum_i rho_i^t tau_i^t Gamma_i,              A = eta {2L[eta L (1 + theta) - 1] + eta}
    W = 1 + B sum_t sum_i rho_i^t tau_i^t,                   B = 2 eta L [1 - eta L (1 + theta)]

Theorem 2 / Eq. (4) minimises Phi in rho and, with the self-referential sums frozen (App. B's
"constants of an optimal system": D_i = numerator, F = W), prints

    rho_i* = [B D_i + (A Gamma_i + C tau_i) F] / [F 2 eta^2 N sigma_i^2]            (4)

whence Cor. 1 / Eq. (6): rho_i* - rho_j* = + s (tau_i - tau_j), s = eta L (H - 1) G^2 / (2 N sigma^2).

This script differentiates Phi with sympy (one interval t of three clients, the other
intervals' contributions to the sums kept as symbols) and finds:

1. d Phi / d rho_i = tau_i [(C tau_i + 2 eta^2 N sigma_i^2 rho_i + A Gamma_i) W - B Num] / W^2.
2. Its stationary point with the sums frozen is
       rho_i = [B Num - (A Gamma_i + C tau_i) W] / [W 2 eta^2 N sigma_i^2]:
   Eq. (4) with the sign of the (A Gamma_i + C tau_i) F term flipped.
3. Under Cor. 1's assumptions (sigma_i = sigma, Gamma_i = Gamma):
       rho_i - rho_j = - s (tau_i - tau_j)      (Eq. (6) says + s).
4. With the constraint sum rho = 1 (multiplier lambda) the stationary point gains
   + lambda W / (2 eta^2 N sigma^2 tau_i), which is not affine in tau at all.
5. Without freezing anything: at uniform weights, tilting them along tau - mean(tau) (Eq. (6)'s
   direction) changes Phi at the rate
       [C n Cov(tau, tau^2) W + (2 eta^2 N sigma^2 / n + A Gamma) n delta W - B Num n delta] / W^2,
   every term >= 0 under the theorem's own Def. 1.3 (eta L (1 + theta) >= 1, so A >= eta^2 > 0
   and B <= 0) and W > 0: Eq. (6)'s tilt *raises* the bound; the bound is lowered by giving
   more weight to the clients with fewer iterations.
6. A numerical instance (Def. 1.3 satisfied, W > 0) orders Phi(-s tilt) < Phi(uniform) < Phi(+s tilt).

Run:  python docs/tsfl_sign.py        (tests/test_tsfl_sign.py asserts every line above)
"""
from __future__ import annotations

import sympy as sp

NC = 3                                    # clients in the symbolic interval (any n >= 2 behaves alike)


def is_zero(expr) -> bool:
    """Exact zero test of a rational expression: numerator of the combined fraction expands to 0."""
    return sp.expand(sp.numer(sp.together(expr))) == 0


def symbols():
    pos = dict(positive=True)
    S = dict(eta=sp.Symbol("eta", **pos), L=sp.Symbol("L", **pos), theta=sp.Symbol("theta", **pos),
             G2=sp.Symbol("G2", **pos), N=sp.Symbol("N", **pos), H=sp.Symbol("H", **pos),
             Q=sp.Symbol("Q", **pos), lam=sp.Symbol("lambda"),
             R1=sp.Symbol("R1", nonnegative=True), R2=sp.Symbol("R2", nonnegative=True),
             R3=sp.Symbol("R3", nonnegative=True), R4=sp.Symbol("R4", nonnegative=True),
             # R1..R4: the other intervals' sums of rho tau, rho tau^2, sigma^2 rho^2 tau, rho tau Gamma
             Num=sp.Symbol("Num", **pos), W=sp.Symbol("W", **pos))   # frozen numerator and denominator
    S["tau"] = sp.symbols(f"tau0:{NC}", **pos)
    S["rho"] = sp.symbols(f"rho0:{NC}", real=True)
    S["sig2"] = sp.symbols(f"sigma2_0:{NC}", **pos)
    S["Gam"] = sp.symbols(f"Gamma0:{NC}", nonnegative=True)
    e, L, th = S["eta"], S["L"], S["theta"]
    S["A"] = e * (2 * L * (e * L * (1 + th) - 1) + e)
    S["B"] = 2 * e * L * (1 - e * L * (1 + th))
    S["C"] = e ** 3 * L * (S["H"] - 1) * S["G2"]
    return S


def bound(S, rho=None, tau=None, sig2=None, Gam=None):
    """Theorem 1's Phi = (Q + X + Y + Z) / W for one interval's weights (others in R1..R3)."""
    rho, tau = rho or S["rho"], tau or S["tau"]
    sig2, Gam = sig2 or S["sig2"], Gam or S["Gam"]
    e, N = S["eta"], S["N"]
    s1 = sum(r * t for r, t in zip(rho, tau)) + S["R1"]
    s2 = sum(r * t ** 2 for r, t in zip(rho, tau)) + S["R2"]
    s3 = sum(v * r ** 2 * t for v, r, t in zip(sig2, rho, tau)) + S["R3"]
    sz = sum(r * t * g for r, t, g in zip(rho, tau, Gam)) + S["R4"]
    num = S["Q"] + S["C"] * s2 + e ** 2 * N * s3 + S["A"] * sz
    den = 1 + S["B"] * s1
    return num, den


def derive() -> dict:
    S = symbols()
    e, N, A, B, C = S["eta"], S["N"], S["A"], S["B"], S["C"]
    num, den = bound(S)
    phi = num / den
    out = {"symbols": S}

    # 1. the gradient, in the paper's shape
    grads, shape_ok = [], True
    for i in range(NC):
        g = sp.diff(phi, S["rho"][i])
        shape = S["tau"][i] * ((C * S["tau"][i] + 2 * e ** 2 * N * S["sig2"][i] * S["rho"][i] + A * S["Gam"][i]) * den
                               - B * num) / den ** 2
        shape_ok &= is_zero(g - shape)
        grads.append(g)
    out["gradient_shape"] = bool(shape_ok)

    # 2. stationary point, numerator and denominator frozen (App. B)
    i = 0
    bracket = (C * S["tau"][i] + 2 * e ** 2 * N * S["sig2"][i] * S["rho"][i] + A * S["Gam"][i]) * S["W"] - B * S["Num"]
    rho_star = sp.solve(sp.Eq(bracket, 0), S["rho"][i])[0]
    ours = (B * S["Num"] - (A * S["Gam"][i] + C * S["tau"][i]) * S["W"]) / (S["W"] * 2 * e ** 2 * N * S["sig2"][i])
    paper = (B * S["Num"] + (A * S["Gam"][i] + C * S["tau"][i]) * S["W"]) / (S["W"] * 2 * e ** 2 * N * S["sig2"][i])
    out["stationary"] = rho_star
    out["stationary_is_ours"] = is_zero(rho_star - ours)
    out["stationary_is_eq4"] = is_zero(rho_star - paper)
    # stationary - Eq.(4) = -(A Gamma + C tau) / (eta^2 N sigma^2): exactly the flipped term, twice
    out["ours_minus_eq4_is_flip"] = is_zero(rho_star - paper + (A * S["Gam"][i] + C * S["tau"][i])
                                            / (e ** 2 * N * S["sig2"][i]))

    # 3. Cor. 1: equal sigma, Gamma -> difference of two stationary weights
    sig, Gam = sp.Symbol("sigma2", positive=True), sp.Symbol("Gamma", nonnegative=True)
    r = lambda k: rho_star.subs({S["tau"][0]: S["tau"][k], S["sig2"][0]: sig, S["Gam"][0]: Gam})   # noqa: E731
    diff = sp.factor(r(1) - r(2))
    s = e * S["L"] * (S["H"] - 1) * S["G2"] / (2 * N * sig)
    out["difference"] = diff
    out["slope_sign"] = sp.cancel(diff / (s * (S["tau"][1] - S["tau"][2])))       # -1; Eq. (6) says +1

    # 4. with the simplex constraint: grad_i = lambda
    brk_l = sp.Eq(bracket, S["lam"] * S["W"] ** 2 / S["tau"][i])
    rho_l = sp.solve(brk_l, S["rho"][i])[0]
    out["lagrange_extra"] = sp.factor(rho_l - rho_star)          # lambda W / (2 eta^2 N sigma^2 tau)

    # 5. directional derivative at uniform weights along tau - mean(tau), Cor. 1's setting
    sub = {S["sig2"][k]: sig for k in range(NC)} | {S["Gam"][k]: Gam for k in range(NC)}
    uni = {S["rho"][k]: sp.Rational(1, NC) for k in range(NC)}
    tbar = sum(S["tau"]) / NC
    dd = sum(g.subs(sub) * (S["tau"][k] - tbar) for k, g in enumerate(grads)).subs(uni)
    num_u, den_u = (num.subs(sub).subs(uni), den.subs(uni))
    n = NC
    delta = sum((t - tbar) ** 2 for t in S["tau"]) / n                       # heterogeneity degree (fn. 1)
    cov = sum(t ** 3 for t in S["tau"]) / n - tbar * sum(t ** 2 for t in S["tau"]) / n   # Cov(tau, tau^2)
    claimed = (C * n * cov * den_u + (2 * e ** 2 * N * sig / n + A * Gam) * n * delta * den_u
               - B * num_u * n * delta) / den_u ** 2
    out["directional_formula"] = is_zero(dd - claimed)
    # the signs of A and B under Def. 1.3: write eta L (1 + theta) = 1 + u with u >= 0
    u = sp.Symbol("u", nonnegative=True)
    th_u = {S["theta"]: (1 + u) / (e * S["L"]) - 1}
    out["def13_signs"] = (is_zero(A.subs(th_u) - e * (2 * S["L"] * u + e))       # A = eta (2 L u + eta) >= eta^2
                          and is_zero(B.subs(th_u) + 2 * e * S["L"] * u))          # B = -2 eta L u <= 0
    out["directional"] = claimed

    # 6. a numerical instance: Def. 1.3 holds (eta L (1 + theta) = 1.23 >= 1), W > 0
    vals = {e: sp.Rational(1, 100), S["L"]: 3, S["theta"]: 40, S["G2"]: 2, S["N"]: NC, S["H"]: 4,
            S["Q"]: 1, S["R1"]: 0, S["R2"]: 0, S["R3"]: 0, S["R4"]: 0, sig: sp.Rational(1, 2), Gam: sp.Rational(3, 10)}
    taus = (1, 2, 4)
    tb = sp.Rational(sum(taus), NC)
    s_num = (e * S["L"] * (S["H"] - 1) * S["G2"] / (2 * N * sig)).subs(vals)
    phis = {}
    for name, sl in (("minus_s", -s_num), ("uniform", 0), ("plus_s", s_num)):
        rho_v = [sp.Rational(1, NC) + sl * (t - tb) for t in taus]
        nu, de = bound(S, rho=rho_v, tau=list(taus), sig2=[sig] * NC, Gam=[Gam] * NC)
        phis[name] = sp.nsimplify((nu / de).subs(vals))
    out["instance"] = {"eta L (1 + theta)": (e * S["L"] * (1 + S["theta"])).subs(vals), "s": s_num,
                       "W(uniform)": den.subs(uni).subs({S["tau"][k]: taus[k] for k in range(NC)}).subs(vals),
                       **{k: float(v) for k, v in phis.items()}}
    out["instance_order"] = bool(phis["minus_s"] < phis["uniform"] < phis["plus_s"])
    return out


def main():
    r = derive()
    S = r["symbols"]
    print("1. dPhi/drho_i = tau_i [(C tau_i + 2 eta^2 N sigma_i^2 rho_i + A Gamma_i) W - B Num] / W^2:",
          r["gradient_shape"])
    print("2. stationary rho_0 (sums frozen):", r["stationary"])
    print("   = [B Num - (A Gamma + C tau) W] / (W 2 eta^2 N sigma^2):", r["stationary_is_ours"],
          "| = Eq. (4) as printed:", r["stationary_is_eq4"])
    print("   stationary - Eq.(4) = -(A Gamma + C tau) / (eta^2 N sigma^2):", r["ours_minus_eq4_is_flip"])
    print("3. rho_1 - rho_2 (sigma_i = sigma, Gamma_i = Gamma):", r["difference"])
    print("   = k s (tau_1 - tau_2) with s = eta L (H-1) G^2 / (2 N sigma^2), k =", r["slope_sign"], "(Eq. (6): +1)")
    print("4. with sum rho = 1 (multiplier lambda) the stationary weight gains:", r["lagrange_extra"])
    print("5. rate of change of Phi along tau - mean(tau) at uniform weights matches the",
          "closed form (every term >= 0 under Def. 1.3):", r["directional_formula"],
          "| A = eta (2 L u + eta), B = -2 eta L u with eta L (1 + theta) = 1 + u:", r["def13_signs"])
    print("6. instance:", r["instance"], "| Phi(-s) < Phi(0) < Phi(+s):", r["instance_order"])


if __name__ == "__main__":
    main()
