"""A synthetic mobile-game dataset standing in for the article's private one.

Each player is observed for ``sequence_length`` consecutive days with 18 behaviour features; the label says
whether the player is a bot. The generator is built so that the *sequence* matters: roughly 40% of bots are
"disguised" with human-like per-player levels and only a temporal tell (no weekend effect, no days off, low
day-to-day variation, a regularity that barely moves), and some "grinder" humans look bot-like on average but
vary like humans. A classifier on 7-day averages therefore stays well below one that sees the days.

Everything is vectorised over players x days; the only Python loop is over the 18 features.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from perfkit.errors import UsageError

FEATURES: tuple[str, ...] = (
    "logins",
    "online_minutes",
    "sessions",
    "dungeon_runs",
    "dungeon_minutes",
    "exp_gained",
    "level_ups",
    "gold_earned",
    "gold_spent",
    "market_listings",
    "market_sales",
    "market_purchases",
    "player_trades",
    "chat_messages",
    "party_members",
    "quests_completed",
    "night_share",
    "action_regularity",
)
COUNT_FEATURES: tuple[str, ...] = FEATURES[:16]
SHARE_FEATURES: tuple[str, ...] = FEATURES[16:]
MINUTES_PER_DAY = 1440.0
GENERATOR_VERSION = 1  # bump whenever the output for a given seed changes: it names the cache files


@dataclass(frozen=True)
class Archetype:
    """Typical levels of one kind of player: an active day's median counts and the shares' logits."""

    name: str
    counts: tuple[float, ...]  # one per COUNT_FEATURES, median on an active day
    night_logit: float
    regularity_logit: float
    level_spread: float  # sd of the per-player log level around the archetype


# Count order: logins, online_minutes, sessions, dungeon_runs, dungeon_minutes, exp_gained, level_ups,
# gold_earned, gold_spent, market_listings, market_sales, market_purchases, player_trades, chat_messages,
# party_members, quests_completed.
ARCHETYPES: tuple[Archetype, ...] = (
    Archetype("casual", (2, 35, 3, 2, 15, 3e3, 0.4, 800, 600, 0.3, 0.2, 1, 0.3, 12, 1.5, 3),
              night_logit=-2.2, regularity_logit=-0.6, level_spread=0.5),
    Archetype("regular", (4, 110, 5, 6, 50, 1.2e4, 0.8, 3e3, 2.5e3, 1.5, 1, 3, 1, 30, 3, 7),
              night_logit=-2.0, regularity_logit=-0.3, level_spread=0.5),
    Archetype("hardcore", (6, 300, 8, 18, 150, 4e4, 1.2, 1.2e4, 1e4, 5, 3, 6, 2.5, 45, 4, 10),
              night_logit=-1.6, regularity_logit=0.1, level_spread=0.5),
    # Humans who grind like bots: long online, many dungeon runs, fairly quiet and regular.
    Archetype("grinder", (3, 600, 4, 30, 230, 5e4, 1, 1.8e4, 6e3, 2, 1.5, 2, 1.5, 12, 2.5, 4),
              night_logit=-1.2, regularity_logit=0.6, level_spread=0.5),
    Archetype("dungeon_bot", (1.5, 900, 2, 45, 300, 6e4, 1, 2.5e4, 2e3, 0.5, 0.3, 0.3, 0.5, 0.5, 0.3, 1),
              night_logit=-1.0, regularity_logit=2.4, level_spread=0.4),
    Archetype("market_bot", (1.5, 700, 2, 3, 20, 2e3, 0.1, 1.8e4, 4e3, 25, 15, 12, 8, 0.5, 0.2, 0.3),
              night_logit=-1.1, regularity_logit=2.1, level_spread=0.4),
)
HUMAN_MIX = np.array([0.47, 0.36, 0.14, 0.03, 0.0, 0.0])
BOT_MIX = np.array([0.0, 0.0, 0.0, 0.0, 0.5, 0.5])
# Disguised bots copy the levels of ordinary humans (not grinders: those already look like bots).
DISGUISE_MIX = np.array([0.45, 0.40, 0.15, 0.0, 0.0, 0.0])
DISGUISED_SHARE = 0.4
OFF_DAY_P = np.array([0.22, 0.10, 0.05, 0.04, 0.0, 0.0])  # per archetype, humans only
# Share of days a human of each archetype logs in at all (measured). A disguised bot, which never idles,
# scales its levels and shares by this so that its 7-day averages match the humans' it copies.
ACTIVE_DAYS = np.array([0.75, 0.90, 0.95, 0.95, 1.0, 1.0])


@dataclass(frozen=True, eq=False)
class _Players:
    """Per-player latent draws, each of shape (N,) or (N, k)."""

    label: np.ndarray  # true label before noise, bool
    log_level: np.ndarray  # (N, 16) log of the active-day median per count feature
    share_logit: np.ndarray  # (N, 2) night_share, action_regularity
    share_scale: np.ndarray  # (N,) multiplier of both shares
    day_sd: np.ndarray  # sd of the log activity shared by all features on a day
    feature_sd: np.ndarray  # sd of each feature's own daily log noise
    share_sd: np.ndarray  # (N, 2) daily logit noise of the two shares
    weekend_boost: np.ndarray  # activity multiplier on Saturday and Sunday
    off_p: np.ndarray  # probability of a day with (almost) no play
    start_weekday: np.ndarray


# Temporal behaviour of humans, plain bots and disguised bots: (low, high) of uniform per-player draws.
# Day-to-day variation is humans > disguised bots > plain bots; that gap, no weekend and no days off, and a
# regularity that barely moves are all a disguised bot gives away.
HUMAN, PLAIN_BOT, DISGUISED_BOT = 0, 1, 2
DAY_SD = np.array([(0.25, 0.5), (0.03, 0.08), (0.05, 0.1)], dtype=np.float32)
FEATURE_SD = np.array([(0.2, 0.35), (0.06, 0.06), (0.1, 0.1)], dtype=np.float32)
SHARE_SD = np.array([(0.3, 0.35), (0.03, 0.03), (0.12, 0.02)], dtype=np.float32)  # night, regularity
WEEKEND_NIGHT_LOGIT = 0.4  # humans stay up later at the weekend
WEEKEND_BOOST = np.array([(1.15, 1.8), (1.0, 1.0), (1.0, 1.0)], dtype=np.float32)


def _between(rng: np.random.Generator, bounds: np.ndarray, kind: np.ndarray) -> np.ndarray:
    low, high = bounds[kind, 0], bounds[kind, 1]
    return low + (high - low) * rng.random(kind.shape[0], dtype=np.float32)


def _draw_players(rng: np.random.Generator, n: int, bot_share: float) -> _Players:
    is_bot = rng.random(n) < bot_share
    disguised = is_bot & (rng.random(n) < DISGUISED_SHARE)
    kind = np.where(disguised, DISGUISED_BOT, np.where(is_bot, PLAIN_BOT, HUMAN))
    mix = np.stack([HUMAN_MIX, BOT_MIX, DISGUISE_MIX])[kind]
    arch = (rng.random(n)[:, None] > np.cumsum(mix, axis=1)[:, :-1]).sum(axis=1)
    counts = np.log(np.array([a.counts for a in ARCHETYPES], dtype=np.float32))
    spread = np.array([a.level_spread for a in ARCHETYPES], dtype=np.float32)[arch, None]
    z = rng.standard_normal((n, len(COUNT_FEATURES)), dtype=np.float32)
    shared = rng.standard_normal((n, 1), dtype=np.float32)  # busy players are busy at everything
    # A disguised bot never idles, so it plays a little less on its days to match the humans' 7-day averages.
    scale = np.where(disguised, ACTIVE_DAYS[arch], 1.0).astype(np.float32)
    log_level = counts[arch] + spread * (0.8 * z + 0.6 * shared) + np.log(scale)[:, None]
    logits = np.array([(a.night_logit, a.regularity_logit) for a in ARCHETYPES], dtype=np.float32)[arch]
    logits[:, 0] += np.where(disguised, WEEKEND_NIGHT_LOGIT * 2 / 7, 0.0)  # the humans' weekend nights, averaged
    return _Players(
        label=is_bot,
        log_level=log_level,
        share_logit=logits + 0.5 * rng.standard_normal((n, 2), dtype=np.float32),
        share_scale=scale,
        day_sd=_between(rng, DAY_SD, kind),
        feature_sd=_between(rng, FEATURE_SD, kind),
        share_sd=SHARE_SD[kind],
        weekend_boost=_between(rng, WEEKEND_BOOST, kind),
        off_p=np.where(is_bot, 0.0, OFF_DAY_P[arch]).astype(np.float32),
        start_weekday=rng.integers(0, 7, n),
    )


def _activity(rng: np.random.Generator, p: _Players, length: int) -> tuple[np.ndarray, np.ndarray]:
    """The (N, L) multiplier shared by every count on a day, and the weekend mask."""
    n = p.label.shape[0]
    weekend = (p.start_weekday[:, None] + np.arange(length)) % 7 >= 5
    act = rng.standard_normal((n, length), dtype=np.float32)
    act *= p.day_sd[:, None]
    act -= np.square(p.day_sd[:, None]) / 2  # lognormal with mean 1: noise must not shift the levels
    np.exp(act, out=act)
    # The boost moves play into the weekend without changing the weekly total, so that a disguised bot
    # with the same level has the same 7-day average.
    boost = p.weekend_boost[:, None]
    act *= np.where(weekend, 7 * boost / (5 + 2 * boost), 7 / (5 + 2 * boost))
    off = rng.random((n, length), dtype=np.float32) < p.off_p[:, None]
    act[off] *= np.float32(0.02)  # a day off: the player barely (or not at all) logs in
    return act, weekend


def _count(rng: np.random.Generator, p: _Players, act: np.ndarray, j: int, out: np.ndarray) -> None:
    """Feature j's daily counts into ``out`` (N, L), in place: level x day activity x own noise, rounded."""
    out[...] = rng.standard_normal(out.shape, dtype=np.float32)
    out *= p.feature_sd[:, None]
    out += p.log_level[:, j, None] - np.square(p.feature_sd[:, None]) / 2
    np.exp(out, out=out)
    out *= act
    # Stochastic rounding keeps the expected count: plain rounding would turn a steady 0.3 into 0 every day
    # for a quiet bot, while a noisy human at 0.3 sometimes reaches 1, a difference in the averages.
    out += rng.random(out.shape, dtype=np.float32)
    np.floor(out, out=out)


def _shares(rng: np.random.Generator, p: _Players, weekend: np.ndarray, k: int, out: np.ndarray) -> None:
    out[...] = rng.standard_normal(out.shape, dtype=np.float32)
    out *= p.share_sd[:, k, None]
    out += p.share_logit[:, k, None]
    if k == 0:  # humans stay up later at the weekend
        late = weekend & (p.weekend_boost[:, None] > 1)
        out += np.where(late, np.float32(WEEKEND_NIGHT_LOGIT), np.float32(0.0))
    np.negative(out, out=out)
    np.exp(out, out=out)
    out += 1
    np.reciprocal(out, out=out)
    out *= p.share_scale[:, None]


def _features(rng: np.random.Generator, p: _Players, length: int) -> np.ndarray:
    """All features as one (F, N*L) float32 block, so the DataFrame can wrap it without a copy."""
    n = p.label.shape[0]
    act, weekend = _activity(rng, p, length)
    block = np.empty((len(FEATURES), n * length), dtype=np.float32)
    days = block.reshape(len(FEATURES), n, length)
    for j in range(len(COUNT_FEATURES)):
        _count(rng, p, act, j, days[j])
    # Bots (disguised or not) never take a day off: they log in at least once, every day.
    np.maximum(days[0], p.label[:, None].astype(np.float32), out=days[0])
    np.minimum(days[1], MINUTES_PER_DAY, out=days[1])
    np.minimum(days[4], days[1], out=days[4])  # dungeon time is part of online time
    for k in range(len(SHARE_FEATURES)):
        _shares(rng, p, weekend, k, days[len(COUNT_FEATURES) + k])
    idle = days[0] == 0  # no login that day: nothing else can have happened
    for j in range(1, len(FEATURES)):
        days[j][idle] = 0
    return block


def generate(
    n_players: int,
    seed: int,
    sequence_length: int = 7,
    bot_share: float = 0.2,
    label_noise: float = 0.01,
) -> pd.DataFrame:
    """Long-form frame: player_id, day, the 18 FEATURES (float32), label (int8, 1 = bot); sorted by player, day."""
    if n_players < 1 or sequence_length < 1:
        raise UsageError(f"generate: players ({n_players}) and sequence length ({sequence_length}) must be >= 1")
    if not (0.0 <= bot_share <= 1.0 and 0.0 <= label_noise <= 1.0):
        raise UsageError(f"generate: bot share ({bot_share}) and label noise ({label_noise}) must lie in [0, 1]")
    rng = np.random.default_rng(seed)
    players = _draw_players(rng, n_players, bot_share)
    block = _features(rng, players, sequence_length)
    label = players.label ^ (rng.random(n_players) < label_noise)
    df = pd.DataFrame(block.T, columns=list(FEATURES), copy=False)
    df.insert(0, "player_id", np.repeat(np.arange(n_players, dtype=np.int64), sequence_length))
    df.insert(1, "day", np.tile(np.arange(sequence_length, dtype=np.int32), n_players))
    df["label"] = np.repeat(label.astype(np.int8), sequence_length)
    return df
