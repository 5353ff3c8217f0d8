"""Cluster files for the tests, written one way: ``host(...)`` is one ``[[hosts]]`` table, ``write`` puts
tables in a file. Keys the cluster file format knows: name, address, cores, workers, base_port, ps, chief,
and a link's bandwidth_mbit/delay_ms/loss_pct."""

from __future__ import annotations

from pathlib import Path


def host(name: str, address: str = "127.0.0.1", cores: float = 1, workers: int | None = 1, extra: str = "",
         **keys: object) -> str:
    """One ``[[hosts]]`` table; ``workers=None`` leaves the key out, other keys follow in the order given, and
    ``extra`` (raw TOML lines, e.g. a link's inline table) last."""
    lines = ["[[hosts]]", f'name = "{name}"', f'address = "{address}"', f"cores = {cores:g}"]
    if workers is not None:
        lines.append(f"workers = {workers}")
    lines += [f"{k} = {_toml(v)}" for k, v in keys.items()]
    return "\n".join(lines) + "\n" + extra


def pair(cores: tuple[float, float] = (1, 1), names: tuple[str, str] = ("h0", "h1"), extra: str = "",
         **keys: object) -> str:
    """Two one-worker hosts on 127.0.0.1 and 127.0.0.2 (two emulated hosts), with the same extra keys."""
    return "".join(host(n, f"127.0.0.{i + 1}", c, 1, extra, **keys) for i, (n, c) in enumerate(zip(names, cores)))


def write(path: Path, *tables: str) -> Path:
    path.write_text("".join(tables))
    return path


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)
