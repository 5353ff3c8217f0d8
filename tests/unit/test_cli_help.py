"""Help and code agree (issue 52): every command line the README and docs/ show names only flags its command
has; every example in a command's help parses; long commands group their options in panels; enumerated
options show their choices; flags show no value placeholder; a usage error is one line."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer

from perfkit.cli import _register
from perfkit.cli._help import CHOICES, EXAMPLES, PANELS_FROM, dress
from perfkit.cli._shared import app

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.fixture(scope="module")
def cli() -> Any:
    _register()
    command = typer.main.get_command(app)
    dress(command, "perfkit")
    return command


def _commands(cli: Any) -> dict[str, Any]:
    """'run', 'data generate', ... -> the click command."""
    out = {}
    for name, command in cli.commands.items():
        out[name] = command
        for sub_name, sub in (getattr(command, "commands", None) or {}).items():
            out[f"{name} {sub_name}"] = sub
    return out


def _flags(command: Any) -> set[str]:
    return {flag for p in command.params for flag in (*p.opts, *p.secondary_opts)} | {"-h", "--help"}


def _shown_command_lines(text: str) -> list[str]:
    """Every `perfkit CMD ...` a page shows: in inline code, or a line of a code block."""
    spans = re.findall(r"`([^`\n]*perfkit [a-z][^`\n]*)`", text)
    blocks = [line for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S) for line in block.splitlines()]
    return [m for s in spans + blocks for m in re.findall(r"\bperfkit [a-z][^|;&`]*", s)]


def test_every_flag_the_docs_show_is_a_flag_of_its_command(cli: Any) -> None:
    commands = _commands(cli)
    wrong, checked = [], 0
    for page in PAGES:
        for line in _shown_command_lines(page.read_text(encoding="utf-8")):
            words = line.split("--  ")[0].split(" -- ")[0].split()
            name = " ".join(words[1:3]) if " ".join(words[1:3]) in commands else words[1]
            if name not in commands:
                if name not in ("record", "bench") and not name.startswith(("launch", "...")):
                    wrong.append(f"{page.name}: `{line}`: no command {name!r}")
                continue
            for flag in (w.split("=")[0] for w in words[2:] if w.startswith("-") and w not in ("-", "--")):
                checked += 1
                if flag.rstrip(".,)") not in _flags(commands[name]):
                    wrong.append(f"{page.name}: `{line}`: perfkit {name} has no {flag}")
    assert checked > 100, f"only {checked} flags read: the pages' command lines are not being found"
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_example_in_a_commands_help_parses(cli: Any, name: str) -> None:
    for example in EXAMPLES[name]:
        words, depth = shlex.split(example), len(name.split())
        assert words[1:1 + depth] == name.split(), example
        command, args = _commands(cli)[name], words[1 + depth:]
        if "--" in args:
            args = args[:args.index("--")] + ["--", "cmd"]
        command.make_context(name, list(args))  # raises on an unknown flag or a value of the wrong type


def test_long_commands_group_every_option_in_a_panel(cli: Any) -> None:
    loose = {}
    for name, command in _commands(cli).items():
        options = [p for p in command.params if p.param_type_name == "option" and not p.hidden]
        if len(options) >= PANELS_FROM:
            loose[name] = [p.opts[0] for p in options if getattr(p, "rich_help_panel", None) is None]
    assert {"run", "compare", "launch", "sweep"} <= set(loose), sorted(loose)
    assert not any(loose.values()), loose


def _help_text(command: Any, name: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):  # typer's rich help prints as it renders
        print(command.get_help(command.make_context(name, [], resilient_parsing=True)))
    return out.getvalue()


def test_enumerated_options_show_their_choices_and_flags_no_value(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # one line an option: its flag and placeholder side by side
    seen = set()
    for name, command in _commands(cli).items():
        text = _help_text(command, name)
        assert "<bool>" not in text, f"perfkit {name} -h shows a flag taking a value"
        for p in command.params:
            if p.name in CHOICES and not p.hidden:
                seen.add(p.name)
                choices = "<" + "|".join(CHOICES[p.name]) + ">"
                assert re.search(rf"{re.escape(p.opts[0])}\s+(-\w\s+)?{re.escape(choices)}", text), (name, p.opts)
    assert seen == set(CHOICES), f"choices listed for options no command has: {set(CHOICES) - seen}"


def test_a_usage_error_is_one_line_naming_the_command() -> None:
    proc = subprocess.run([sys.executable, "-m", "perfkit", "run", "--mode", "bad"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("perfkit run: error: ") and "'single'" in lines[0], lines


def test_each_commands_summary_is_one_line_on_a_wide_terminal(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    text = _help_text(cli, "perfkit")
    for name in cli.commands:
        [line] = [row for row in text.splitlines() if re.match(rf"│ {re.escape(name)}\s", row)]
        assert line.rstrip(" │").endswith("."), f"perfkit -h: {name}'s summary breaks off: {line!r}"
