"""Datasets and models as docs/algorithms/workloads.md defines them."""
import gzip

import numpy as np
import pytest
from pydantic import ValidationError
import torch

from emulator.scenario import schema as scenario
from emulator.errors import ScenarioError
from emulator.workloads import datasets as D
from emulator.workloads import models as M


def ctx(n=10, seed=0):
    return D.DatasetContext(n, np.random.default_rng(seed), np.random.default_rng(seed + 1))


# -------------------------------------------------------------------------------- synthetic
def test_synthetic_statistics():
    p = scenario.member("dataset", "synthetic", alpha=1.0, beta=1.0)
    devs = D.synthetic_devices(p, 30, np.random.default_rng(0))
    assert len(devs) == 30
    assert all(len(y) >= 50 for _, y in devs)                        # n_k = floor(LogNormal(4,2)) + 50
    y_all = np.concatenate([y for _, y in devs])
    assert y_all.min() >= 0 and y_all.max() <= 9 and len(np.unique(y_all)) == 10
    # per-coordinate variance around the device mean ~ j^-1.2 (pooled over devices)
    resid = np.concatenate([x - x.mean(0) for x, _ in devs])
    var = resid.var(0)
    expect = np.arange(1, 61) ** -1.2
    assert np.all(np.abs(var / expect - 1) < 0.1)


def test_synthetic_alpha_beta_zero_share_means():
    """alpha = beta = 0: every device draws W, b ~ N(0, 1) and v ~ N(0, 1): device means of x
    scatter only by sampling noise; alpha = beta = 1 spreads them (B_k ~ N(0, 1) per device)."""
    def device_means(a, b):
        p = scenario.member("dataset", "synthetic", alpha=a, beta=b)
        devs = D.synthetic_devices(p, 60, np.random.default_rng(1))
        return np.array([x.mean() for x, _ in devs])
    m0, m1 = device_means(0.0, 0.0), device_means(1.0, 1.0)
    # v_k entries ~ N(B_k, 1): mean over 60 coordinates has sd 1/sqrt(60) ~ 0.13 when B_k = 0
    assert abs(m0.mean()) < 0.1 and m0.std() < 0.25
    assert m1.std() > 0.5


def test_synthetic_iid_variant_shares_everything():
    p = scenario.member("dataset", "synthetic", iid=True)
    devs = D.synthetic_devices(p, 40, np.random.default_rng(2))
    means = np.array([x.mean(0) for x, _ in devs])
    assert np.abs(means.mean(0)).max() < 0.15          # v_k = 0 for every device


def test_synthetic_dataset_natural_split():
    p = scenario.member("dataset", "synthetic", alpha=0.5, beta=0.5, max_samples_per_client=200)
    d = D.synthetic(p, ctx(12))
    assert d.natural and len(d.client_indices) == 12
    assert sum(len(i) for i in d.client_indices) == len(d.y_train)
    assert d.input_shape == (60,) and d.num_classes == 10 and len(d.y_test) > 0


# -------------------------------------------------------------------------------- quadratic
def test_quadratic_problem_structure():
    A, b, w_star, f_star, F = D.quadratic_problem_dense(24, 4, 2e-4)
    N, d = 24, 97
    assert A.shape == (N, d, d) and b.shape == (N, d)
    Lap = A.sum(0).copy()
    Lap[0, 0] -= 1
    Lap[-1, -1] -= 1
    # sum of B_k is the Laplacian of a path on Np+1 nodes
    path = np.diag(np.r_[1, np.full(d - 2, 2.0), 1]) - np.eye(d, k=1) - np.eye(d, k=-1)
    np.testing.assert_array_equal(Lap, path)
    assert b[0, 0] == 1 and b.sum() == 1
    # w* = (A + N mu I)^-1 b zeroes the gradient of F = (1/2N)(w'Aw - 2b'w) + mu/2 |w|^2
    grad = (A.sum(0) @ w_star - b.sum(0)) / N + 2e-4 * w_star
    assert np.abs(grad).max() < 1e-12
    rng = np.random.default_rng(0)
    for _ in range(5):
        assert F(w_star + 1e-3 * rng.normal(size=d)) > f_star


def test_quadratic_model_gradient_is_exact():
    p = scenario.member("dataset", "quadratic", block=3, mu=0.1)
    d = D.quadratic(p, ctx(5))
    m = M.QuadraticModel(d.extra["blocks"], d.extra["offsets"], d.extra["b"], 0.1).double()
    w = torch.randn(d.extra["dim"], dtype=torch.float64)
    for k in range(5):
        x = torch.as_tensor(d.x_train[d.client_indices[k]], dtype=torch.float64)
        wp = w.clone().requires_grad_(True)
        from torch.func import functional_call
        loss = functional_call(m, {"w": wp}, (x,)).mean()
        (g,) = torch.autograd.grad(loss, wp)
        A_k = D.dense_block(d.extra["blocks"], d.extra["offsets"], d.extra["dim"], k)
        ref = A_k @ w.numpy() - d.extra["b"][k] + 0.1 * w.numpy()
        loss_c, g_c = m.loss_and_grad(w, x)                      # the closed form agrees
        np.testing.assert_allclose(g_c.numpy(), ref, rtol=1e-12, atol=1e-12)
        assert float(loss_c) == pytest.approx(float(loss), rel=1e-12)
        np.testing.assert_allclose(g.numpy(), ref, rtol=1e-12, atol=1e-12)


# -------------------------------------------------------------------------------- models
def test_model_sizes_and_macs():
    c = M.ModelContext((1, 28, 28), 10)
    cnn = M.cnn_mnist(scenario.member("model", "cnn_mnist"), c)
    assert M.count_params(cnn) == 21_840
    assert M.forward_macs(cnn, (1, 28, 28)) == 480_500
    mc = M.cnn_mcmahan(scenario.member("model", "cnn_mcmahan"), c)
    assert M.count_params(mc) == 1_663_370
    assert M.forward_macs(mc, (1, 28, 28)) == 12_273_152
    assert M.count_params(M.logreg(None, c)) == 7_850
    assert M.count_params(M.mlp(scenario.member("model", "mlp", hidden=200), c)) == 159_010
    assert M.count_params(M.logreg(None, M.ModelContext((60,), 10))) == 610
    assert M.count_params(M.logreg(None, M.ModelContext((1, 8, 8), 10))) == 650


def test_cnn_on_small_images_is_a_clear_error():
    with pytest.raises(ScenarioError, match="cnn_mnist needs image inputs"):
        M.cnn_mnist(scenario.member("model", "cnn_mnist"), M.ModelContext((1, 8, 8), 10))


# -------------------------------------------------------------------------------- real data
def test_mnist5k_and_digits():
    d = D.mnist5k(scenario.member("dataset", "mnist5k"), ctx())
    assert d.x_train.shape == (4000, 1, 28, 28) and d.x_test.shape == (1000, 1, 28, 28)
    assert (np.bincount(d.y_test) == 100).all()          # stratified 20 %
    assert abs(d.x_train.mean()) < 0.1 and abs(d.x_train.std() - 1) < 0.1   # standardised
    g = D.digits(scenario.member("dataset", "digits"), ctx())
    assert len(g.y_train) + len(g.y_test) == 1797 and g.x_train.max() <= 1.0


# -------------------------------------------------------------------------------- user files
def _idx(path, arr, magic, gz=False):
    arr = np.asarray(arr, dtype=np.uint8)
    head = magic.to_bytes(4, "big") + b"".join(int(s).to_bytes(4, "big") for s in arr.shape)
    data = head + arr.tobytes()
    (gzip.open if gz else open)(path, "wb").write(data)


def test_idx_loader(tmp_path):
    rng = np.random.default_rng(0)
    xtr, ytr = rng.integers(0, 256, (50, 28, 28)), rng.integers(0, 10, 50)
    xte, yte = rng.integers(0, 256, (20, 28, 28)), rng.integers(0, 10, 20)
    _idx(tmp_path / "tr-img.gz", xtr, 0x803, gz=True)
    _idx(tmp_path / "tr-lab", ytr, 0x801)
    _idx(tmp_path / "te-img", xte, 0x803)
    _idx(tmp_path / "te-lab", yte, 0x801)
    p = scenario.member("dataset", "mnist_idx", train_images=str(tmp_path / "tr-img.gz"),
                        train_labels=str(tmp_path / "tr-lab"), test_images=str(tmp_path / "te-img"),
                        test_labels=str(tmp_path / "te-lab"), normalize=False)
    d = D.mnist_idx(p, ctx())
    assert d.x_train.shape == (50, 1, 28, 28) and d.input_shape == (1, 28, 28)
    np.testing.assert_allclose(d.x_train[:, 0] * 255, xtr, atol=1e-3)
    np.testing.assert_array_equal(d.y_test, yte)
    # wrong magic and count mismatch are scenario errors naming the path
    _idx(tmp_path / "bad", ytr, 0x802)
    with pytest.raises(ScenarioError, match=r"workload\.dataset\.train_labels.*magic"):
        D.mnist_idx(p.model_copy(update={"train_labels": str(tmp_path / "bad")}), ctx())
    _idx(tmp_path / "short", ytr[:40], 0x801)
    with pytest.raises(ScenarioError, match="40 labels for 50"):
        D.mnist_idx(p.model_copy(update={"train_labels": str(tmp_path / "short")}), ctx())


def test_npz_loader_channels_last(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "c.npz", x_train=rng.integers(0, 256, (30, 32, 32, 3), dtype=np.uint8),
             y_train=rng.integers(0, 10, (30, 1)), x_test=rng.integers(0, 256, (10, 32, 32, 3), dtype=np.uint8),
             y_test=rng.integers(0, 10, 10))
    d = D.npz(scenario.member("dataset", "npz", path=str(tmp_path / "c.npz")), ctx())
    assert d.x_train.shape == (30, 3, 32, 32) and d.y_train.shape == (30,)
    assert np.allclose(d.x_train.mean(axis=(0, 2, 3)), 0, atol=1e-5)
    np.savez(tmp_path / "m.npz", x_train=np.zeros((3, 4, 4)))
    with pytest.raises(ValidationError, match="lacks arrays"):       # refused when the block validates
        scenario.member("dataset", "npz", path=str(tmp_path / "m.npz"))


def test_quadratic_closed_form_gradient_with_noise_samples_matches_autograd():
    """Several (client, noise) samples per batch: the block-wise closed form (index_add) equals
    autograd through the module's forward."""
    from torch.func import functional_call
    p = scenario.member("dataset", "quadratic", block=3, mu=0.1, grad_noise=0.5, noise_samples=4)
    d = D.quadratic(p, ctx(5))
    m = M.QuadraticModel(d.extra["blocks"], d.extra["offsets"], d.extra["b"], 0.1).double()
    w = torch.randn(d.extra["dim"], dtype=torch.float64)
    x = torch.as_tensor(d.x_train[np.r_[0, 3, 5, 9, 14, 18]], dtype=torch.float64)   # mixed clients
    wp = w.clone().requires_grad_(True)
    loss = functional_call(m, {"w": wp}, (x,)).mean()
    (g,) = torch.autograd.grad(loss, wp)
    lc, gc = m.loss_and_grad(w, x)
    np.testing.assert_allclose(gc.numpy(), g.numpy(), rtol=1e-12, atol=1e-12)
    assert float(lc) == pytest.approx(float(loss.detach()), rel=1e-12)


class _HalfSquare(M.DirectLoss, torch.nn.Module):
    """f(w; x) = 1/2 ||w||^2 - x . w per sample (forward: per-sample losses); `loss_and_grad`
    is its exact closed form, and counts its calls."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([0.5, -1.0], dtype=torch.float64))
        self.calls = 0

    def forward(self, x):
        return 0.5 * (self.w ** 2).sum() - x @ self.w

    def loss_and_grad(self, w, x):
        self.calls += 1
        return 0.5 * (w ** 2).sum() - (x @ w).mean(), w - x.mean(0)


class _DeclaredHalfSquare(_HalfSquare, M.ClosedFormLoss):
    pass


def test_closed_form_gradient_is_used_only_when_declared():
    """FlatModel uses a model's closed-form gradient when the model declares ClosedFormLoss
    (the quadratic does), and autograd otherwise, even if a same-named method exists; a
    model's forward is per-sample losses when it declares DirectLoss, else logits."""
    from emulator.compute.flat import FlatModel
    x = torch.tensor([[1.0, 2.0], [3.0, -2.0]], dtype=torch.float64)
    w = torch.tensor([0.25, 0.75], dtype=torch.float64)
    exact = (0.5 * 0.625 - 0.5, [0.25 - 2.0, 0.75 - 0.0])     # mean x = (2, 0); mean x . w = (1.75 - 0.75) / 2
    for cls, closed_calls in ((_DeclaredHalfSquare, 1), (_HalfSquare, 0)):
        net = FlatModel(cls(), torch.device("cpu"), torch.float64)
        loss, g = net.loss_and_grad(w, x, None)
        assert net.module.calls == closed_calls, cls.__name__
        assert float(loss) == pytest.approx(exact[0], rel=1e-15)
        np.testing.assert_allclose(g.numpy(), exact[1], rtol=1e-15)
    assert M.loss_kind(_HalfSquare()) == "direct" and M.loss_kind(M.QuadraticModel(
        np.ones((1, 1, 1)), np.zeros(1), np.zeros((1, 1)), 0.0)) == "direct"
    undeclared = torch.nn.Linear(2, 2)
    undeclared.loss = "direct"                 # an attribute is no declaration: logits
    assert M.loss_kind(undeclared) == "cross_entropy"
    assert FlatModel(M.QuadraticModel(np.ones((1, 1, 1)), np.zeros(1), np.zeros((1, 1)), 0.0),
                     torch.device("cpu"), torch.float64).closed_form
