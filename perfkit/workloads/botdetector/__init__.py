"""The built-in workload: the article's LSTM bot-player detector on a 7-day x 18-feature player table
(generated, or the user's ``--data`` file), class-weighted, one sequence per player."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfkit.config import RunConfig
from perfkit.workloads.botdetector.params import BotParams

NAME, VERSION = "botdetector", "1"


class BotDetector:
    name = NAME
    version = VERSION

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.p = BotParams.of(cfg)  # checked here, before any data is made
        self._cache: Path | None = None
        self._data: Any = None  # PreparedData, once a dataset or the sample count needs it

    def params(self) -> dict[str, Any]:
        p = self.p
        return {"data": Path(p.data_path).name if p.data_path else "synthetic", "train_players": p.train_players,
                "test_players": p.test_players, "sequence_length": p.sequence_length, "seed": self.cfg.seed}

    def prepare(self, cache_dir: Path) -> dict[str, Any]:
        """Generate the synthetic table once (a later call finds it cached and reads nothing), or read and
        validate the user's file, which training needs whole anyway."""
        from perfkit.workloads.botdetector.data import ensure_generated

        self._cache = Path(cache_dir)
        p = self.p
        if p.data_path:
            return dict(self._prepared().info)
        players = p.train_players + p.test_players
        path, generated = ensure_generated(self._cache, players, self.cfg.seed, p.sequence_length)
        return {"path": str(path), "source": "generated", "generated_now": generated, "players": players}

    def samples(self) -> tuple[int, int]:
        if self.p.data_path:  # a file's split depends on how many players it holds
            data = self._prepared()
            return len(data.y_train), len(data.y_test)
        return self.p.train_players, self.p.test_players

    def build_model(self) -> Any:
        from perfkit.workloads.botdetector.model import build_model
        from perfkit.workloads.botdetector.synth import FEATURES

        return build_model(self.p.sequence_length, len(FEATURES))

    def train_dataset(self, input_context: Any, global_batch: int) -> Any:
        from perfkit.workloads.pipeline import pipeline

        d = self._prepared()
        return pipeline(d.x_train, d.y_train, global_batch, self.cfg.seed, self.p.class_weight,
                        self.cfg.knobs.prefetch)(input_context)

    def eval_dataset(self, input_context: Any, global_batch: int) -> Any:
        from perfkit.workloads.pipeline import pipeline

        d = self._prepared()
        return pipeline(d.x_test, d.y_test, global_batch, None, None, self.cfg.knobs.prefetch)(input_context)

    def data_info(self) -> dict[str, Any]:
        """The prepared data as single mode records it (players, bot shares, the standardiser's source)."""
        return dict(self._prepared().info)

    def _prepared(self) -> Any:
        if self._data is None:
            from perfkit.workloads.botdetector.data import prepare

            if self._cache is None:
                raise RuntimeError("BotDetector.prepare(cache_dir) was not called")
            p = self.p
            self._data = prepare(data_path=p.data_path, cache_dir=self._cache, train_players=p.train_players,
                                 test_players=p.test_players, seed=self.cfg.seed, sequence_length=p.sequence_length)
        return self._data
