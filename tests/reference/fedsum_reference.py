"""The NumPy reference of docs/algorithms/fedsum.md Appendix A, verbatim (deterministic,
float64; spec rounds 0-based): the oracle of tests/test_fedsum*.py. Do not "fix" it here:
it is the specification."""

import numpy as np

def problem():
    A = [np.diag([1.0, 2.0]), np.diag([2.0, 1.0]), np.diag([1.0, 1.0])]
    b = [np.array([1.0, 0.0]), np.array([0.0, 1.0]), np.array([2.0, 3.0])]
    grads = [(lambda x, A=A_, b=b_: A @ (x - b)) for A_, b_ in zip(A, b)]
    xstar = np.linalg.solve(sum(A), sum(A_ @ b_ for A_, b_ in zip(A, b)))   # (0.75, 1.0)
    return grads, xstar

SEQ = [[0], [1], [], [0, 2], [1], [0, 1, 2]]

def delays(seq, N):                                    # Eqs. (2)-(4)
    s = np.full(N, -1); tau = []
    for t, St in enumerate(seq):
        for i in St:
            s[i] = t
        tau.append(t - s.min())
    tau = np.array(tau)
    return tau, int(tau.max()), float(tau.mean())

def _lr(eta_l, t):
    return eta_l(t) if callable(eta_l) else eta_l

def _local(gi, x, K, lr, c):                           # K steps on g + c; returns (z_K, mean raw g)
    z, acc = x.copy(), np.zeros_like(x)
    for _ in range(K):
        gk = gi(z); acc += gk
        z = z - lr * (gk + c)
    return z, acc / K

def fedsum_family(variant, grads, x0, seq, eta_l, eta_g, K):   # 'B' | 'SUM' | 'CR'
    N = len(grads)
    x, y = x0.copy(), np.zeros_like(x0)
    yi = [np.zeros_like(x0) for _ in range(N)]
    r = [0] * N; xhat = [x0.copy() for _ in range(N)]
    gam, xs = [], [x0.copy()]
    for t, St in enumerate(seq):
        lr = _lr(eta_l, t); gamma = eta_g * lr * K
        merged = np.zeros_like(x0)
        for i in St:
            if variant == 'B':
                new = sum(grads[i](x) for _ in range(K)) / K                   # B2, Eq. (5)
            else:
                if variant == 'SUM':
                    c = y - yi[i]                                               # S2, Eq. (9)
                else:
                    c = (np.zeros_like(x0) if t == r[i]
                         else (xhat[i] - x) / sum(gam[r[i]:t]) - yi[i])         # C2, Eq. (11)
                    r[i], xhat[i] = t, x.copy()                                 # C3, Eq. (10)
                _, new = _local(grads[i], x, K, lr, c)                          # S3-S4, Eq. (8)
            merged += new - yi[i]                                               # Delta_i, Eq. (6)
            yi[i] = new
        y = y + merged / N                                                      # Eq. (7)
        x = x - gamma * y                                                       # Eq. (14)/(39)
        gam.append(gamma); xs.append(x.copy())
    return xs

def fedavg(grads, x0, seq, eta_l, eta_g, K):
    x, xs = x0.copy(), [x0.copy()]
    for t, St in enumerate(seq):
        if St:
            x = x + eta_g * sum(_local(grads[i], x, K, _lr(eta_l, t), 0.0)[0] - x
                                for i in St) / len(St)
        xs.append(x.copy())
    return xs

def scaffold(grads, x0, seq, eta_l, eta_g, K):         # option II
    N = len(grads); x, c = x0.copy(), np.zeros_like(x0)
    ci = [np.zeros_like(x0) for _ in range(N)]; xs = [x0.copy()]
    for t, St in enumerate(seq):
        lr = _lr(eta_l, t); dy = np.zeros_like(x0); dc = np.zeros_like(x0)
        for i in St:
            z, _ = _local(grads[i], x, K, lr, c - ci[i])
            ci_new = ci[i] - c + (x - z) / (K * lr)
            dy += z - x; dc += ci_new - ci[i]; ci[i] = ci_new
        if St:
            x = x + eta_g * dy / len(St)
        c = c + dc / N
        xs.append(x.copy())
    return xs

def mifa(grads, x0, seq, eta_l, eta_g, K):
    N = len(grads); x = x0.copy(); u = [np.zeros_like(x0) for _ in range(N)]; xs = [x0.copy()]
    for t, St in enumerate(seq):
        for i in St:
            u[i] = _local(grads[i], x, K, _lr(eta_l, t), 0.0)[0] - x
        x = x + eta_g * sum(u) / N
        xs.append(x.copy())
    return xs

def fedvarp(grads, x0, seq, eta_l, eta_g, K):
    N = len(grads); x = x0.copy(); u = [np.zeros_like(x0) for _ in range(N)]; xs = [x0.copy()]
    for t, St in enumerate(seq):
        if St:
            ubar = sum(u) / N
            D = {i: _local(grads[i], x, K, _lr(eta_l, t), 0.0)[0] - x for i in St}
            v = ubar + sum(D[i] - u[i] for i in St) / len(St)
            for i in St:
                u[i] = D[i]
            x = x + eta_g * v
        xs.append(x.copy())
    return xs

def fedau(grads, x0, seq, eta_l, eta_g, K, cutoff=50):
    N = len(grads); x = x0.copy(); cnt = [0] * N; iv = [[] for _ in range(N)]; xs = [x0.copy()]
    for t, St in enumerate(seq):
        D = np.zeros_like(x0)
        for i in range(N):
            if i in St:
                w = float(np.mean(iv[i])) if iv[i] else 1.0
                D += w * (_local(grads[i], x, K, _lr(eta_l, t), 0.0)[0] - x)
                iv[i].append(cnt[i] + 1); cnt[i] = 0
            else:
                cnt[i] += 1
                if cnt[i] >= cutoff:
                    iv[i].append(cnt[i]); cnt[i] = 0
        x = x + eta_g * D / N
        xs.append(x.copy())
    return xs

def fedawe(grads, x0, seq, eta_l, eta_g, K, clip=None):
    N = len(grads); x = x0.copy(); xl = [x0.copy() for _ in range(N)]; last = [-1] * N
    xs = [x0.copy()]
    for t, St in enumerate(seq):
        if St:
            base = sum(xl[i] for i in St) / len(St)
            echo = np.zeros_like(x0)
            for i in St:
                z, _ = _local(grads[i], xl[i], K, _lr(eta_l, t), 0.0)
                echo += (t - last[i]) * (xl[i] - z); last[i] = t
            echo /= len(St)
            if clip is not None and np.linalg.norm(echo) > clip:
                echo *= clip / np.linalg.norm(echo)
            x = base - eta_g * echo
            for i in St:
                xl[i] = x.copy()
        xs.append(x.copy())
    return xs

from math import comb
def expected_tau_bernoulli(p, T):          # p: (N,) fixed or (T, N) time-varying
    p = np.asarray(p, float); p = np.tile(p, (T, 1)) if p.ndim == 1 else p
    return np.array([sum(1 - np.prod(1 - np.prod(1 - p[t-k+1:t+1], axis=0))
                         for k in range(1, t + 2)) for t in range(T)])
def expected_tau_uniform(N, S, T):
    cover = lambda k: sum((-1)**j * comb(N, j) * (comb(N-j, S) / comb(N, S))**k
                          for j in range(N - S + 1))
    return np.array([sum(1 - cover(k) for k in range(1, t + 2)) for t in range(T)])
# expected_tau_bernoulli(np.full(5, .3), 50).mean() = 5.496567...
# expected_tau_uniform(4, 2, 30).mean()            = 2.674667...
