"""How separable is the synthetic dataset with and without the time axis?

Fits a class-weighted ({0:1, 1:4}, as the model is trained) L2 logistic regression by Newton's method on
(a) the 18 per-player 7-day averages (raw, and log1p of them) and (b) those plus hand-made temporal features
(per-feature log day-to-day std and a weekend-vs-weekday contrast), a stand-in for what the LSTM can learn. The
generator is tuned so that (a) stays clearly below (b): the sequence must matter.

    python -m benchmarks.separability --players 200000 --seed 1
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from perfkit.workloads.botdetector.data import Windows, split_by_player, window
from perfkit.workloads.botdetector.params import DEFAULT_CLASS_WEIGHT
from perfkit.workloads.botdetector.synth import generate


@dataclass(frozen=True)
class Score:
    features: str
    n_features: int
    accuracy_at_05: float
    best_threshold: float
    accuracy_at_best: float


def mean_features(x: np.ndarray) -> np.ndarray:
    # log1p of the average (not the average of log1p, which would smuggle in the day-to-day spread)
    return np.log1p(x.mean(axis=1))


def temporal_features(x: np.ndarray) -> np.ndarray:
    """Averages + per-feature std of log1p over days + weekend contrast at the likeliest weekend."""
    z = np.log1p(x)
    std = np.log(z.std(axis=1) + 0.01)  # log: the spread differs by a factor between kinds, not by an offset
    length = x.shape[1]
    # The weekday is hidden, but any 7 consecutive days hold Sat+Sun as one cyclically adjacent pair:
    # take the pair where overall activity rises most and measure each feature's rise there.
    scaled = (z - z.mean(axis=(0, 1))) / (z.std(axis=(0, 1)) + 1e-6)
    activity = scaled.mean(axis=2)  # (N, L)
    pairs = np.stack([np.arange(length), (np.arange(length) + 1) % length], axis=1)  # (L, 2)
    onehot = np.zeros((length, length), dtype=np.float32)
    onehot[np.arange(length)[:, None], pairs] = 0.5
    rest = (1 - 2 * onehot) / max(length - 2, 1)
    weights = onehot - rest  # (pairs, L): pair mean minus the other days' mean
    best = (activity @ weights.T).argmax(axis=1)
    contrast = np.einsum("nl,nlf->nf", weights[best], z)
    return np.hstack([mean_features(x), std, contrast])


def fit_logreg(x: np.ndarray, y: np.ndarray, l2: float = 1e-3, iters: int = 30) -> np.ndarray:
    """Newton/IRLS for a class-weighted, L2-penalised logistic regression; x gets an intercept column."""
    xb = np.hstack([x, np.ones((x.shape[0], 1))])
    weight = np.where(y == 1, DEFAULT_CLASS_WEIGHT[1], DEFAULT_CLASS_WEIGHT[0])
    beta = np.zeros(xb.shape[1])
    penalty = l2 * weight.sum() * np.eye(xb.shape[1])
    penalty[-1, -1] = 0.0
    for _ in range(iters):
        p = 1 / (1 + np.exp(-(xb @ beta)))
        grad = xb.T @ (weight * (p - y)) + penalty @ beta
        hess = (xb * (weight * p * (1 - p))[:, None]).T @ xb + penalty
        step = np.linalg.solve(hess, grad)
        beta -= step
        if np.abs(step).max() < 1e-8:
            break
    return beta


def predict(beta: np.ndarray, x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-(x @ beta[:-1] + beta[-1])))


def best_threshold(p: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """The accuracy-maximising threshold on this very split: an upper bound for the linear model."""
    order = np.argsort(p)
    ys = y[order]
    # predicting bot for everything from position i on: humans below i and bots from i are right
    correct = np.r_[0, np.cumsum(1 - ys)] + np.r_[np.cumsum(ys[::-1])[::-1], 0]
    i = int(correct.argmax())
    ps = p[order]
    thr = 1.0 if i == len(p) else (ps[i] if i == 0 else (ps[i - 1] + ps[i]) / 2)
    return float(thr), float(correct[i] / len(y))


def score(name: str, train: np.ndarray, y_train: np.ndarray, test: np.ndarray, y_test: np.ndarray) -> Score:
    mu, sd = train.mean(axis=0), train.std(axis=0) + 1e-9
    beta = fit_logreg((train - mu) / sd, y_train.astype(np.float64))
    p = predict(beta, (test - mu) / sd)
    thr, acc_best = best_threshold(p, y_test)
    acc = float(((p >= 0.5) == (y_test == 1)).mean())
    return Score(name, train.shape[1], round(acc, 4), round(thr, 4), round(acc_best, 4))


def run(players: int, seed: int) -> dict[str, object]:
    t0 = time.perf_counter()
    w: Windows = window(generate(players, seed), 7)
    train, test = split_by_player(w, test_players=players // 5, seed=seed)
    scores = [
        score("means (raw)", train.x.mean(axis=1), train.y, test.x.mean(axis=1), test.y),
        score("means", mean_features(train.x), train.y, mean_features(test.x), test.y),
        score("means+temporal", temporal_features(train.x), train.y, temporal_features(test.x), test.y),
    ]
    return {
        "players": players,
        "seed": seed,
        "train_players": len(train),
        "test_players": len(test),
        "test_bot_share": round(float(test.y.mean()), 4),
        "class_weight": {str(k): v for k, v in DEFAULT_CLASS_WEIGHT.items()},
        "scores": [asdict(s) for s in scores],
        "seconds": round(time.perf_counter() - t0, 1),
    }


def write_json(data: dict[str, object], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=2)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--players", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=20190101)
    parser.add_argument("--out", type=Path, default=Path("results/bench/separability.json"))
    args = parser.parse_args(argv)
    result = run(args.players, args.seed)
    print(f"{args.players} players, seed {args.seed}, test bot share {result['test_bot_share']}\n")
    print("| features | n | acc @0.5 | best thr | acc @best |\n|---|---:|---:|---:|---:|")
    for s in result["scores"]:
        print(f"| {s['features']} | {s['n_features']} | {s['accuracy_at_05']:.4f} | "
              f"{s['best_threshold']:.3f} | {s['accuracy_at_best']:.4f} |")
    write_json(result, args.out)
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
