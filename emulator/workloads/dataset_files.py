"""Datasets read from the user's own files: MNIST-format IDX files (`mnist_idx`) and NumPy
.npz archives (`npz`). Everything wrong with a user's arrays is reported at once, naming the
YAML path of the file; features are never rescaled behind the user's back (only uint8 pixels
are scaled to [0, 1])."""
from __future__ import annotations

import gzip
import zipfile
from dataclasses import dataclass
from typing import Optional

import numpy as np
from pydantic import Field, field_validator

from ..errors import ScenarioError
from ..registry import Params, register
from .data import FederatedData
from .datasets import DatasetContext, _resolve_file


def _read_idx(path: str, magic: int, yaml_path: str) -> np.ndarray:
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ScenarioError([(yaml_path, f"cannot read {path}: {e}")])
    if len(raw) < 8:
        raise ScenarioError([(yaml_path, f"{path} is too short to be an IDX file")])
    got = int.from_bytes(raw[:4], "big")
    if got != magic:
        raise ScenarioError([(yaml_path, f"{path}: IDX magic number 0x{got:08x}, expected 0x{magic:08x}")])
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    start = 4 + 4 * ndim
    count = int(np.prod(dims))
    if len(raw) - start != count:
        raise ScenarioError([(yaml_path, f"{path}: header says {count} values, file holds {len(raw) - start}")])
    return np.frombuffer(raw, dtype=np.uint8, offset=start).reshape(dims)


class MnistIdxParams(Params):
    train_images: str = Field(description="IDX images file (magic 0x803), optionally .gz")
    train_labels: str = Field(description="IDX labels file (magic 0x801), optionally .gz")
    test_images: str = Field(description="IDX test images")
    test_labels: str = Field(description="IDX test labels")
    normalize: bool = Field(True, description="standardise with the training set's mean/std (else [0,1])")
    max_train: Optional[int] = Field(None, ge=1, description="use a seeded random subset of this many training samples")

    _files = field_validator("train_images", "train_labels", "test_images", "test_labels")(_resolve_file)


@register("dataset", "mnist_idx", MnistIdxParams,
          "MNIST-format IDX files at a user path (full MNIST, Fashion-MNIST, ...)")
def mnist_idx(p: MnistIdxParams, ctx: DatasetContext) -> FederatedData:
    P = ctx.path
    xtr = _read_idx(p.train_images, 0x803, f"{P}.train_images")
    ytr = _read_idx(p.train_labels, 0x801, f"{P}.train_labels")
    xte = _read_idx(p.test_images, 0x803, f"{P}.test_images")
    yte = _read_idx(p.test_labels, 0x801, f"{P}.test_labels")
    if len(xtr) != len(ytr):
        raise ScenarioError([(f"{P}.train_labels", f"{len(ytr)} labels for {len(xtr)} training images")])
    if len(xte) != len(yte):
        raise ScenarioError([(f"{P}.test_labels", f"{len(yte)} labels for {len(xte)} test images")])
    return _images("mnist_idx", xtr, ytr, xte, yte, p.normalize, p.max_train, ctx)


MAX_CLASSES = 10_000       # labels are class indices 0 .. MAX_CLASSES - 1
MAX_SAMPLES = 10 ** 9
NPZ_KEYS = ("x_train", "y_train", "x_test", "y_test")


class NpzParams(Params):
    path: str = Field(description=".npz with x_train, y_train, x_test, y_test (Keras layout); features (N, D) or "
                                  "images; labels whole class numbers 0 .. 9999")
    normalize: bool = Field(True, description="standardise per channel (images) or per feature with the training set's mean/std")
    max_train: Optional[int] = Field(None, ge=1, description="use a seeded random subset of this many training samples")

    _file = field_validator("path")(_resolve_file)

    @field_validator("path")
    @classmethod
    def _contents(cls, v):
        """Everything about the arrays that needs no feature values (names, shapes, dtypes,
        labels) is checked when the scenario validates, with its other problems."""
        problems = npz_contents(v)[1]
        if problems:
            raise ValueError("; ".join(problems))
        return v


@dataclass
class ArrayHeader:
    """An array of an .npz as its .npy header gives it (shape, dtype), its data unread."""
    shape: tuple
    dtype: np.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __len__(self) -> int:
        return self.shape[0] if self.shape else 0


def _header(f) -> ArrayHeader:
    version = np.lib.format.read_magic(f)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, _, dtype = read(f)
    return ArrayHeader(tuple(shape), dtype)


def npz_contents(path) -> tuple:
    """({x_*: ArrayHeader, y_*: labels array}, problems), reading no feature value."""
    if not zipfile.is_zipfile(path):
        return None, [f"cannot read {path}: not an .npz file (a zip of .npy arrays, as np.savez writes)"]
    try:
        with zipfile.ZipFile(path) as z:
            names = set(z.namelist())
            missing = [k for k in NPZ_KEYS if f"{k}.npy" not in names]
            if missing:
                return None, [f"{path} lacks arrays {missing}; needs x_train, y_train, x_test, y_test"]
            out = {}
            for k in NPZ_KEYS:
                with z.open(f"{k}.npy") as f:
                    out[k] = _header(f)
            for k in ("y_train", "y_test"):
                h = out[k]
                if h.dtype.hasobject or int(np.prod(h.shape)) > MAX_SAMPLES:
                    return None, [f"{path}: {k} has shape {h.shape}, dtype {h.dtype}; labels are whole class numbers, "
                                  "one per sample"]
                with z.open(f"{k}.npy") as f:
                    out[k] = np.lib.format.read_array(f, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        return None, [f"cannot read {path} as .npz (a zip of .npy arrays, np.savez): {e}"]
    return out, [f"{path}: {m}" for m in _npz_problems(out["x_train"], out["y_train"], out["x_test"], out["y_test"])]


@register("dataset", "npz", NpzParams,
          "arrays x_train, y_train, x_test, y_test from a user .npz (CIFAR-10, SVHN, tabular features, ...)")
def npz(p: NpzParams, ctx: DatasetContext) -> FederatedData:
    where = f"{ctx.path}.path"
    problems = npz_contents(p.path)[1]
    if not problems:
        with np.load(p.path, allow_pickle=False) as z:
            xtr, ytr, xte, yte = (z[k] for k in NPZ_KEYS)
        problems = [f"{p.path}: x_{n} must hold finite numbers" for x, n in ((xtr, "train"), (xte, "test"))
                    if x.dtype.kind == "f" and not np.isfinite(x).all()]
    if problems:
        raise ScenarioError([(where, m) for m in problems])
    return _images("npz", xtr, ytr.reshape(-1), xte, yte.reshape(-1), p.normalize, p.max_train, ctx)


def _npz_problems(xtr, ytr, xte, yte) -> list:
    """What is wrong with a user's arrays (all of it) that shows without the feature values:
    sizes, shapes, dtypes, labels."""
    out = []
    for x, y, name in ((xtr, ytr, "train"), (xte, yte, "test")):
        if x.ndim < 2 or x.ndim > 4 or not len(x):
            out.append(f"x_{name} has shape {x.shape}; needs at least one sample, as (N, features), "
                       "(N, H, W), (N, H, W, C) or (N, C, H, W)")
        if y.size != len(x):
            out.append(f"{y.size} {name} labels for {len(x)} {name} samples")
        if x.dtype.kind not in "uif":
            out.append(f"x_{name} must hold finite numbers (dtype {x.dtype})")
        out += _label_problems(y, name)
    if not out and _layout(xtr.shape)[1:] != _layout(xte.shape)[1:]:
        out.append(f"test samples have shape {xte.shape[1:]}, training samples {xtr.shape[1:]}: they must match")
    return out


def _label_problems(y, name) -> list:
    if y.dtype.kind not in "uif" or (y.dtype.kind == "f" and not (np.isfinite(y).all() and (y == np.round(y)).all())):
        return [f"y_{name} must hold whole class numbers (dtype {y.dtype}); convert with y.astype(int)"]
    if y.size and (y.min() < 0 or y.max() >= MAX_CLASSES):
        return [f"y_{name} holds labels from {y.min():g} to {y.max():g}; labels are class numbers "
                f"0 .. {MAX_CLASSES - 1}"]
    return []


def _channels_last(shape) -> bool:
    return len(shape) == 4 and shape[-1] in (1, 3, 4) and shape[1] not in (1, 3, 4)


def _layout(shape) -> tuple:
    """The shape `_nchw` gives an array of `shape`."""
    if len(shape) == 3:
        return (shape[0], 1, *shape[1:])
    if _channels_last(shape):
        return (shape[0], shape[3], shape[1], shape[2])
    return tuple(shape)


def _nchw(x):
    """(N, D) features stay as they are; images (N,H,W) / (N,H,W,C) / (N,C,H,W) -> (N,C,H,W)."""
    x = np.asarray(x)
    if x.ndim == 3:
        return x[:, None]
    if _channels_last(x.shape):
        return np.transpose(x, (0, 3, 1, 2))
    return x


def _images(name, xtr, ytr, xte, yte, normalize, max_train, ctx) -> FederatedData:
    """Features (N, D) or images (N,H,W) / (N,H,W,C) / (N,C,H,W) -> float32 (N, D) or
    (N,C,H,W). uint8 values (pixels) are scaled to [0, 1]; other dtypes are kept as given.
    `normalize` standardises per channel (images) or per feature (N, D) with the training
    set's mean and std."""
    def to_float(x):
        x = _nchw(x)
        return x.astype(np.float32) / 255.0 if x.dtype == np.uint8 else x.astype(np.float32)

    xtr, xte = to_float(xtr), to_float(xte)
    ytr, yte = np.asarray(ytr).astype(np.int64), np.asarray(yte).astype(np.int64)
    if max_train is not None and max_train < len(ytr):
        keep = np.sort(ctx.rng_split.choice(len(ytr), max_train, replace=False))
        xtr, ytr = xtr[keep], ytr[keep]
    if normalize:
        axes = (0, 2, 3) if xtr.ndim == 4 else (0,)
        mean = xtr.mean(axis=axes, keepdims=True)
        std = xtr.std(axis=axes, keepdims=True) + 1e-8
        xtr, xte = (xtr - mean) / std, (xte - mean) / std
    classes = int(max(ytr.max(initial=0), yte.max(initial=0))) + 1
    return FederatedData(name, xtr, ytr, xte, yte, classes, tuple(xtr.shape[1:]))
