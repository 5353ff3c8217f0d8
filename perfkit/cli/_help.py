"""How every command's ``--help`` reads: options in panels by what they set, the choices of every enumerated
option, flags without a value placeholder, and examples at the end.

One table for every command, applied to the click commands typer builds, rather than a keyword on each of
the ~150 option declarations: an option shared by several commands (``--preset``, the knobs, the cluster
flags) gets the same panel and choices everywhere, and ``tests/unit/test_cli_help.py`` holds that every
option of a long command has a panel and that each choice list is the one the library checks against.
Enumerated options stay strings checked by the library (``perfkit.config``, ``perfkit.schedulers``), which
names the valid choices in one line; here they are only shown.
"""

from __future__ import annotations

from typing import Any

from perfkit.config import ALL_REDUCE_CHOICES, METRICS_CHOICES, PRESETS
from perfkit.schedulers import SOURCES

# panel -> the option names (parameter names, as typer derives them from the flags) shown in it
PANELS: dict[str, tuple[str, ...]] = {
    "Workload": ("preset", "epochs", "batch_size", "train_players", "test_players", "sequence_length", "seed",
                 "class_weight", "data", "workload"),
    "Strategy and cluster": ("mode", "workers", "replicas", "ps", "cluster", "host", "hosts", "task_index",
                             "emulate", "pin", "connect_timeout", "hang_timeout", "max_restarts", "cluster_from",
                             "base_port", "allow_unenforced", "env", "remote_perfkit", "remote_results_dir",
                             "modes", "ways", "scaling", "cores_per_worker"),
    "Profiling": ("profile_steps", "no_profile", "profile_retries", "sample_interval", "no_auto_record",
                  "step_function"),
    "Knobs (docs/tuning.md)": ("steps_per_execution", "metrics", "bytes_per_pack", "all_reduce", "prefetch"),
    "Study": ("verify", "try_", "repeats", "forecast", "forecast_cluster", "analyze_only", "faults", "at_epoch",
              "at_step", "timeout"),
    "Output": ("results_dir", "run_id", "label", "quiet", "live", "html", "no_html", "format", "fmt", "output", "csv"),
}
# A command with fewer options than this keeps them in one box: panels help only where there are many.
PANELS_FROM = 12

# option name -> the values it takes, as the library checks them (a placeholder in capitals is a number)
CHOICES: dict[str, tuple[str, ...]] = {
    "preset": tuple(PRESETS),
    "metrics": METRICS_CHOICES,
    "all_reduce": ALL_REDUCE_CHOICES,
    "cluster_from": SOURCES,
    "profile_steps": ("A-B", "auto", "off"),
    "hang_timeout": ("SECONDS", "auto"),
    "prefetch": ("auto", "N", "0"),
}

EXAMPLES: dict[str, tuple[str, ...]] = {
    "run": ("perfkit run --mode single --preset quick",
            "perfkit run --mode multi --workers 2 --preset tiny",
            "perfkit run --mode multi --cluster examples/blog-cluster.toml --steps-per-execution 8"),
    "compare": ("perfkit compare --preset quick --cluster examples/blog-cluster.toml",
                "perfkit compare --preset quick --workers 4 --verify"),
    "launch": ("perfkit launch --workers 2 -- python train.py",
               "perfkit launch --hosts h1,h2 -- python train.py",
               "perfkit launch --mode ps --workers 2 --ps 1 -- python ps_train.py"),
    "sweep": ("perfkit sweep --workers 1,2,4 --preset quick",
              "perfkit sweep --workers 1,2,4 --cores-per-worker 0.25 --forecast 8",
              "perfkit sweep --workers 1,2,3 --cores-per-worker 0.4 --forecast-cluster examples/blog-cluster.toml",
              "perfkit sweep --workers 1,2 --ways replicas,workers,ps --preset tiny"),
    "tune": ("perfkit tune --workers 2 --try 3 --repeats 2",
             "perfkit tune --cluster examples/blog-cluster.toml --preset quick"),
    "analyze": ("perfkit analyze", "perfkit analyze results/RUN_ID --format json --no-html"),
    "export": ("perfkit export RUN_ID", "perfkit export results/RUN_ID --output run.trace.json.gz"),
    "diff": ("perfkit diff SINGLE_RUN MULTI_RUN", "perfkit diff A1,A2,A3 B1,B2,B3 --fail-if-slower 5",
             "perfkit diff A B --format json --output diff.json --html diff.html"),
    "runs": ("perfkit runs",),
    "watch": ("perfkit watch", "perfkit watch results/RUN_ID --baseline SINGLE_RUN",
              "perfkit watch RUN_ID --plain --interval 10", "perfkit watch --format json",
              "perfkit watch RUN_ID --trace-now --trace-steps 5"),
    "tensorboard": ("perfkit tensorboard", "perfkit tensorboard --port 6007"),
    "data generate": ("perfkit data generate --preset quick", "perfkit data generate --players 5000 --out p.csv"),
    "data check": ("perfkit data check players.parquet",),
    "check overhead": ("perfkit check overhead --preset quick --repeats 3",
                       "perfkit check overhead --preset tiny --repeats 5 --epochs 4"),
    "check faults": ("perfkit check faults", "perfkit check faults --faults stop,lock,kill --hang-timeout 10"),
}


def panel_of(name: str) -> str | None:
    return next((panel for panel, names in PANELS.items() if name in names), None)


def dress(command: Any, name: str) -> None:
    """Panels, choices, flags and examples on ``command`` (a click command typer built) and its subcommands."""
    options = [p for p in command.params if getattr(p, "param_type_name", "") == "option" and not p.hidden]
    for param in options:
        if param.name in CHOICES:
            param.metavar = "<" + "|".join(CHOICES[param.name]) + ">"
        elif getattr(param, "is_flag", False):
            param.metavar = ""  # a flag takes no value: no <bool> after it
        if len(options) >= PANELS_FROM and getattr(param, "rich_help_panel", None) is None:
            param.rich_help_panel = panel_of(param.name)
    if len(options) >= PANELS_FROM:  # the panels in PANELS' order, each option's place within its panel kept
        order = list(PANELS)
        command.params.sort(key=lambda p: order.index(p.rich_help_panel) if getattr(p, "rich_help_panel", None)
                            in order else len(order))
    _flag_help_option(command)
    if command.help:  # a docstring's line breaks are not the terminal's: each paragraph reflows as one
        command.help = "\n\n".join(" ".join(par.split()) for par in command.help.split("\n\n"))
        command.short_help = command.short_help or command.help.split("\n\n")[0]
    # a group (data, check) shows its subcommands' examples
    examples = [line for key, lines in EXAMPLES.items() if key == name or key.startswith(f"{name} ")
                for line in lines]
    if examples and not command.epilog:
        command.epilog = "Examples:\n\n" + "\n\n".join(f"  $ {line}" for line in examples)
    for sub_name, sub in (getattr(command, "commands", None) or {}).items():
        dress(sub, sub_name if name == "perfkit" else f"{name} {sub_name}")


def _flag_help_option(command: Any) -> None:
    """``-h, --help`` shown as the flag it is: click makes that option anew for every context, so its
    placeholder is cleared where the command hands it out."""
    made = command.get_help_option

    def help_option(ctx: Any) -> Any:
        option = made(ctx)
        if option is not None:
            option.metavar = ""
        return option

    command.get_help_option = help_option
