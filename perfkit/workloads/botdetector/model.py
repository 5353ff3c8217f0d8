"""The article's bot-player detector: a stacked LSTM binary classifier of ~440k parameters."""

from __future__ import annotations

from typing import Any

from perfkit._tf import keras

# LSTM(240) -> LSTM(128) -> Dense(32) -> Dense(1) on 18 features = 441,729 parameters (article: "44w").
LSTM_UNITS = (240, 128)
DENSE_UNITS = 32


def build_model(sequence_length: int, n_features: int, learning_rate: float = 1e-3) -> Any:
    """Build and compile the model; call inside ``strategy.scope()``.

    ``unroll=True``: on CPU the unrolled cell becomes plain matmuls with per-step trace markers that the
    TF profiler can attribute, and with 7 time steps it costs nothing in graph size.
    """
    k = keras()
    model = k.Sequential(
        [
            k.layers.Input(shape=(sequence_length, n_features), name="days"),
            k.layers.LSTM(LSTM_UNITS[0], return_sequences=True, unroll=True, name="lstm_1"),
            k.layers.LSTM(LSTM_UNITS[1], unroll=True, name="lstm_2"),
            k.layers.Dense(DENSE_UNITS, activation="relu", name="dense"),
            k.layers.Dense(1, activation="sigmoid", name="bot_probability"),
        ],
        name="bot_detector",
    )
    model.compile(
        optimizer=k.optimizers.Adam(learning_rate=learning_rate),
        loss="binary_crossentropy",
        metrics=[
            "accuracy",
            k.metrics.AUC(name="auc"),
            k.metrics.Precision(name="precision"),
            k.metrics.Recall(name="recall"),
        ],
    )
    return model
