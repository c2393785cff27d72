"""Post-hoc calibration of P(good): fit, apply, and store it in a checkpoint's sidecar.

One module for the one job, so the engine, the HTTP server, the RL scorer and `recalibrate` map a
raw score to a calibrated one identically. Three methods, all monotone (rankings and AUROC are
unchanged; only the probabilities move):

- `temperature`: P = sigmoid(logit(p) / T), params `{"temperature": T}`. One parameter, hard to
  overfit; fitted by minimising the binary cross-entropy against the (soft) labels. It cannot move
  a constant shift in logit, which is what class-balanced training leaves (every score low).
- `platt`: P = sigmoid(slope * logit(p) + bias), params `{"slope", "bias"}` (slope > 0). Two
  parameters, fitted the same way; undoes a scale and a shift.
- `isotonic`: a non-decreasing step-wise-linear map, params `{"x": [...], "y": [...]}` (scikit-learn's
  breakpoints; applied by linear interpolation, clipped at the ends). Fits any monotone distortion,
  needs more data.

A sidecar calibration is a dict `{"method", "params", "version", ...}`; `version` goes up by one on
every write, so a reader can tell a new calibration from the one it has. This module is the maths
only; storing a calibration in a sidecar and watching it change is `checkpoint.py`'s job
(`write_calibration`, `CalibrationWatch`; the old names here still resolve to them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

METHODS = ("temperature", "platt", "isotonic")
_EPS = 1e-12  # probabilities are clipped to [eps, 1 - eps] before taking logits (float64)


class CalibrationError(ValueError):
    """A calibration cannot be fitted, or a stored one is malformed."""


def validate(calibration: Mapping[str, Any] | None, source: str = "calibration") -> None:
    """Raise CalibrationError unless `calibration` is None or a usable stored calibration."""
    if calibration is None:
        return
    if not isinstance(calibration, Mapping):
        raise CalibrationError(f"{source}: expected an object, got {calibration!r}")
    method, params = calibration.get("method"), calibration.get("params")
    if method not in METHODS:
        raise CalibrationError(f"{source}: method {method!r} is not one of {'|'.join(METHODS)}")
    if not isinstance(params, Mapping):
        raise CalibrationError(f"{source}: params must be an object, got {params!r}")
    if method == "temperature":
        _check_number(params, "temperature", source, positive=True)
        return
    if method == "platt":
        _check_number(params, "slope", source, positive=True)
        _check_number(params, "bias", source, positive=False)
        return
    x, y = params.get("x"), params.get("y")
    if not isinstance(x, list) or not isinstance(y, list) or len(x) != len(y) or len(x) < 1:
        raise CalibrationError(f"{source}: isotonic params need lists x and y of equal, non-zero length")
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if not (np.isfinite(xa).all() and np.isfinite(ya).all()):
        raise CalibrationError(f"{source}: isotonic x and y must be finite numbers")
    if (np.diff(xa) < 0).any() or (np.diff(ya) < 0).any():
        raise CalibrationError(f"{source}: isotonic x and y must be non-decreasing")
    if ya.min() < 0 or ya.max() > 1:
        raise CalibrationError(f"{source}: isotonic y must lie in [0, 1]")


def _check_number(params: Mapping[str, Any], key: str, source: str, *, positive: bool) -> None:
    v = params.get(key)
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and (v > 0 or not positive):
        return
    raise CalibrationError(f"{source}: params.{key} must be a finite number{' > 0' if positive else ''}, got {v!r}")


def apply(probs: Any, calibration: Mapping[str, Any] | None) -> np.ndarray:
    """Calibrated probabilities (float64 array of the input's shape); None means no calibration."""
    p = np.asarray(probs, dtype=np.float64)
    if calibration is None:
        return p
    params = calibration["params"]
    if calibration["method"] == "temperature":
        z = _logit(p)
        return 1.0 / (1.0 + np.exp(-z / float(params["temperature"])))
    if calibration["method"] == "platt":
        z = float(params["slope"]) * _logit(p) + float(params["bias"])
        return 1.0 / (1.0 + np.exp(-z))
    return np.interp(p, np.asarray(params["x"], dtype=float), np.asarray(params["y"], dtype=float))


DEFAULT_THRESHOLD = 0.5  # the decision threshold of a checkpoint that chose none


def decision_threshold(checkpoint_threshold: float | None, calibration: Mapping[str, Any] | None) -> float:
    """The one rule for the threshold a checkpoint decides at (eval, recalibrate, the RL scorer):
    its own threshold, chosen on raw dev scores (else 0.5), mapped through the calibration the
    scores are served with, so a new calibration moves scores and threshold together and no
    decision changes (None = raw scores: the threshold as chosen)."""
    raw = DEFAULT_THRESHOLD if checkpoint_threshold is None else float(checkpoint_threshold)
    return float(apply([raw], calibration)[0])


def apply_each(scores: Sequence[Sequence[float]], calibration: Mapping[str, Any] | None) -> list[list[float]]:
    """Calibrated copies (plain lists) of several trajectories' per-step scores."""
    return [apply(s, calibration).tolist() for s in scores]


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, _EPS, 1 - _EPS)
    return np.log(p) - np.log1p(-p)


def _as_arrays(probs: Sequence[float], labels: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    p, y = np.asarray(probs, dtype=np.float64), np.asarray(labels, dtype=np.float64)
    if p.shape != y.shape or p.ndim != 1:
        raise CalibrationError(f"probs and labels must be 1-d and the same length, got {p.shape} and {y.shape}")
    if p.size < 2:
        raise CalibrationError(f"need at least 2 labelled steps to fit a calibration, got {p.size}")
    if not (np.isfinite(p).all() and ((p >= 0) & (p <= 1)).all()):
        raise CalibrationError("probs must be finite and in [0, 1]")
    if not (((y >= 0) & (y <= 1)).all()):
        raise CalibrationError("labels must be in [0, 1]")
    return p, y


def _fit_logistic(probs: Sequence[float], labels: Sequence[float], *, bias: bool, name: str) -> np.ndarray:
    """Weights w of sigmoid(w[0] * logit(p) [+ w[1]]) minimising the cross-entropy against the labels.

    A logistic regression on z = logit(p), convex: Newton's method from (1, 0), each step halved until
    the loss does not rise. Temperature scaling is this without the bias (T = 1 / w[0]). Scores that
    rank bad steps above good ones have no positive w[0] and are refused, naming `name`.
    """
    p, y = _as_arrays(probs, labels)
    z = _logit(p)
    if not np.any(z * (y - 0.5)):
        raise CalibrationError(f"the scores carry no information about the labels; no {name} fits")
    x = np.stack([z, np.ones_like(z)], axis=1) if bias else z[:, None]

    def loss(w: np.ndarray) -> float:
        u = x @ w
        return float(np.sum(np.logaddexp(0.0, u) - y * u))

    w = np.zeros(x.shape[1])
    w[0] = 1.0
    for _ in range(100):
        q = 0.5 * (1.0 + np.tanh(0.5 * (x @ w)))  # sigmoid without overflow
        grad = x.T @ (q - y)
        hess = (x * (q * (1 - q))[:, None]).T @ x + 1e-9 * np.eye(x.shape[1])
        step = np.linalg.solve(hess, grad)
        before, t = loss(w), 1.0
        while t > 1e-8 and loss(w - t * step) > before:
            t /= 2
        w = w - t * step
        if np.max(np.abs(t * step)) < 1e-10 * max(1.0, float(np.max(np.abs(w)))):
            break
    if not w[0] > 1e-4:
        raise CalibrationError(f"the scores rank bad steps above good ones; no positive {name} fits")
    return w


def fit_temperature(probs: Sequence[float], labels: Sequence[float]) -> float:
    """The T > 0 minimising the cross-entropy of sigmoid(logit(p) / T) against the labels."""
    return 1.0 / float(_fit_logistic(probs, labels, bias=False, name="temperature")[0])


def fit_platt(probs: Sequence[float], labels: Sequence[float]) -> dict[str, float]:
    """The slope > 0 and bias minimising the cross-entropy of sigmoid(slope * logit(p) + bias)."""
    slope, shift = _fit_logistic(probs, labels, bias=True, name="Platt slope")
    return {"slope": float(slope), "bias": float(shift)}


def fit_isotonic(probs: Sequence[float], labels: Sequence[float]) -> dict[str, list[float]]:
    """Breakpoints {x, y} of the isotonic regression of labels on probs."""
    from sklearn.isotonic import IsotonicRegression

    p, y = _as_arrays(probs, labels)
    iso = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip").fit(p, y)
    return {"x": [float(v) for v in iso.X_thresholds_], "y": [float(v) for v in iso.y_thresholds_]}


def fit(method: str, probs: Sequence[float], labels: Sequence[float]) -> dict[str, Any]:
    """A calibration dict (method, params) fitted on these steps."""
    if method == "temperature":
        params: dict[str, Any] = {"temperature": fit_temperature(probs, labels)}
    elif method == "platt":
        params = fit_platt(probs, labels)
    elif method == "isotonic":
        params = fit_isotonic(probs, labels)
    else:
        raise CalibrationError(f"unknown calibration method {method!r} (choose {'|'.join(METHODS)})")
    return {"method": method, "params": params, "n_fit_steps": len(probs)}


def version_of(calibration: Mapping[str, Any] | None) -> int:
    """The version of a stored calibration; 0 for none."""
    return int(calibration.get("version", 0)) if calibration else 0


def describe(calibration: Mapping[str, Any] | None) -> str:
    """A one-line human description, for logs and reports."""
    if calibration is None:
        return "none"
    if calibration["method"] == "temperature":
        return f"temperature T={calibration['params']['temperature']:.4g} (v{calibration.get('version', '?')})"
    if calibration["method"] == "platt":
        pr = calibration["params"]
        return f"platt slope={pr['slope']:.4g} bias={pr['bias']:.4g} (v{calibration.get('version', '?')})"
    return f"isotonic, {len(calibration['params']['x'])} breakpoints (v{calibration.get('version', '?')})"


__all__ = [
    "METHODS",
    "CalibrationError",
    "apply",
    "apply_each",
    "describe",
    "fit",
    "fit_isotonic",
    "fit_platt",
    "fit_temperature",
    "validate",
    "version_of",
]
