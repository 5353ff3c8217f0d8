"""The documentation of every key of `perfkit analyze --format json` (section -> key -> meaning): the JSON
renderer (renderers/json.py) writes the keys named here, in this order; ``keys_markdown()`` renders them for
docs/analysis-json.md, and a test checks that the output and the documentation name the same keys. Every
number is in seconds, bytes, fractions (0.5 = 50%) or CPU percent (100 = one core) as its key says; a figure
that was not measured is ``null``, never a made-up value."""

from __future__ import annotations

from perfkit.analysis.verify import HELD_WITHIN

FORMAT_VERSION = 1
_STEP = "per step, mean over the compared steps"

KEYS: dict[str, dict[str, str]] = {
    "top": {
        "format": '"perfkit-analysis"', "version": f"format version ({FORMAT_VERSION})",
        "generated": "UTC time of the analysis", "baseline": "{run_id, chosen}: the baseline and how it was chosen "
        "(run_id null when there is none; chosen then says why)",
        "verdict": "list of plain sentences generated from the figures, the answer first (speedup, the largest "
        "cause of lost speed and its cost, the equal-workers what-if)",
        "assumptions": "list: what each what-if assumed, one sentence per run and what-if (runs[] keep them too: "
        "equal_assumptions, placement_assumptions)", "runs": "one object per analysed run",
        "epochs": "per run and epoch (convergence)", "workers": "per run and worker",
        "processes": "per run and process", "hosts": "per run and host", "placement": "per run and host: the "
        "placement what-if (runs with several hosts)", "ops": "per run: top traced ops by self time",
        "excluded": "runs left out, with the reason",
        "verifications": "per verification run (`perfkit compare --verify`): the what-if it ran, predicted vs "
        "measured", "modes": "per mode (single, multi, ps): its latest run, synchronous against asynchronous "
        "training", "advice": "per run: the causes of lost speed ranked by their share of a steady epoch, each with "
        "its knob and predicted gain", "step_timeline": "per run, worker and step of the "
        "trace window (its first 1,000 steps): where each step starts and how it splits, and the equal-workers "
        "what-if's steps", "warnings": "list of warnings (e.g. trace skipped)",
        "startup": "per run, worker and phase: where its start-up went, up to its first step (workers that "
        "report states)", "waterfall": "per synchronous run and term: from the ideal speedup to the measured "
        "one, each term's loss in seconds per 1,000 samples and in speedup (largest first, not_explained last)",
        "goodput": "per run and worker: the goodput ledger, the command's span cut into buckets that add up to it",
    },
    "runs": {
        "run_id": "run id", "is_baseline": "true for the baseline", "mode": "single, multi or ps",
        "strategy": "the tf.distribute strategy it trained under", "ps": "parameter servers (ps mode)",
        "step_shares": "each worker's share of the training steps (\"0 38%, 1 62%\")",
        "min_step_share": "the smallest share", "min_share_worker": "the worker that had it",
        "min_share_vs_even": "min_step_share x workers: 1 when every worker ran as many steps (always so "
        "under a synchronous strategy); below 1, that worker was slower and ran fewer steps (ps)",
        "workers_died": "ps: workers that died while the run went on (\"1 (SIGKILL)\"); null when none did",
        "steps_lost": "ps: steps that failed on a dying worker and ran again on another (counted for a launched "
        "script; null where nothing counted them)",
        "status": "run status (always complete here)", "preset": "workload preset", "data": "dataset and split",
        "workers": "worker processes (1 for single)", "hosts": "hosts in the cluster", "epochs": "epochs recorded",
        "steady_epoch_s": "median epoch time (train + validation, worker 0) over the epochs after the first",
        "steady_is_warmup": "true when only one epoch ran (the figure includes warm-up)",
        "trace_window_s": "seconds perfkit's trace window added to the epoch that held it: its traced steps and "
        "the step after them (the capture stopped and written) over the epoch's median untraced step, median over "
        "the workers (a window that ends its epoch: that epoch's validation over the others'); null without a "
        "trace or untraced steps to compare with",
        "trace_window_epoch": "the epoch that held the trace window (counted from 1)",
        "fit_s": "first step start to last epoch end",
        "startup_s": "command to first step: the run's launch (the command's start for the first run of a command, "
        "the run's own start for a later one, e.g. the multi run of perfkit compare) to the earliest first step",
        "steady_samples_per_s": "median training samples/s "
        "over the epochs after the first", "samples": "training samples (all workers, all epochs)",
        "steady_epoch_samples": "median samples of the epochs after the first (all workers); 0 when no batch was read",
        "cpu_s": "CPU-seconds of every worker process over the training window (launcher left out)",
        "cpu_s_per_1k_samples": "cpu_s per 1,000 training samples", "rss_peak_max_bytes": "largest peak RSS "
        "of any worker (memory per replica; a run without steps: over the command's whole life)",
        "command_wall_s": "command wall time: run.json's started to ended (the workers' start to the last one's "
        "exit, with the launcher's own share; parts: the earliest start to the latest end), every run",
        "command_cpu_s": "CPU-seconds of every worker process over every sample of the run (launcher left out)",
        "steps_note": "null when the run recorded steps; else why every figure built on steps is null (\"the "
        "launched command recorded no steps: ...\")", "val_loss": "validation loss after the last epoch",
        "val_accuracy": "validation accuracy after the last epoch", "val_auc": "validation AUC after the last epoch",
        "split_source": '"trace", "estimate" (from CPU-seconds per step) or null (no split: one worker, no trace)',
        "split_note": "how the compute/transfer/wait split was obtained, and for an estimate why no trace was used "
        "(a run without steps: steps_note)", "steps_compared": "steps recorded by every worker that the split compares",
        "straggler_cost": "total wait / total worker step time",
        "flagged_workers": "space-separated worker indices with speed score < 0.75",
        "slowest_worker": "the worker that was the straggler in most steps", "slowest_host": "its host",
        "slowest_straggler_share": "fraction of steps it was the straggler", "slowest_speed_score": "its speed score",
        "others_wait_share": "the other workers' total wait / their total step time",
        "equal_step_ratio": "sum over the compared steps of the old step model (median busy + the run's own "
        "transfer + median input) / actual, kept for comparison",
        "equal_epoch_s": "what-if steady epoch with every worker at the median worker's speed: steps per epoch x "
        "mean predicted step (the median worker's compute x the step's slowest-of-N variation x the trace "
        "correction + transfer + input) + time outside steps + validation scaled like a step (analysis/whatif.py)",
        "equal_epoch_lo_s": "lower end of its 95% interval (from the step-to-step spread)",
        "equal_epoch_hi_s": "upper end", "equal_step_s": "mean predicted step",
        "equal_compute_s": "compute per step the what-if gives every worker (the median worker's median, traced)",
        "equal_epoch_per_compute": "seconds of steady epoch per second of compute per step (both what-ifs: the "
        "epoch is linear in the compute level)",
        "equal_transfer_s": "all-reduce seconds per step a balanced cluster would pay",
        "equal_transfer_source": "calibration (the workers' all-reduce calibration after training), scaled run "
        "(the run's own, scaled by the what-if's compute over the slowest worker's, "
        "which ran under a CPU budget of at most a core) or run (the run's own, as measured: real hosts, "
        "shaped links)",
        "equal_val_s": "predicted validation seconds per epoch",
        "equal_budgets": "per host, the CPU budget (cores) that would give its workers the median speed",
        "equal_assumptions": "the what-if's assumptions in one line", "placement_hosts": "hosts, ':'-separated",
        "placement_now": "workers per host now, ':'-separated", "placement_proposed": "workers per host by measured "
        "speed", "compute_now_s": "slowest worker's compute per step, placement model, now",
        "compute_proposed_s": "the same with the proposed placement",
        "placement_epoch_s": "what-if steady epoch with the proposed placement (only when it moves a worker): the "
        "equal-workers model at compute_proposed_s", "placement_epoch_lo_s": "lower end of its 95% interval",
        "placement_epoch_hi_s": "upper end", "placement_assumptions": "its assumptions in one line",
        "largest_term": "the largest of compute, transfer, wait and input in the workers' mean step",
        "transfer_share": "mean transfer per step / mean step time, over the workers",
        "links": "the emulated hosts' shaped links as applied (host rate/delay/loss, ', '-separated); null: "
        "none shaped", "speedup": "baseline steady_epoch_s / steady_epoch_s x work_ratio (per sample)",
        "speedup_fit": "baseline fit_s / fit_s x samples / baseline samples",
        "work_ratio": "steady_epoch_samples / the baseline's; 1 where either is unknown",
        "efficiency": "speedup / workers", "efficiency_fit": "speedup_fit / workers",
        "command_speedup": "baseline command_wall_s / command_wall_s: the whole command, for any pair (with "
        "steps or without)", "cpu_cost_vs_baseline": "cpu_s_per_1k_samples / the baseline's",
        "val_accuracy_gap": "val_accuracy - the baseline's", "val_auc_gap": "val_auc - the baseline's",
        "val_loss_gap": "val_loss - the baseline's",
        "equal_speedup": "baseline steady_epoch_s / equal_epoch_s x work_ratio",
        "goodput": "the goodput ledger's productive seconds over its span seconds, summed over the workers",
        "ideal_speedup": "the compute the run's workers were given over the baseline's (wf_cores / the baseline's): "
        "the top of the waterfall", "wf_cores": "cores given to the run's workers: the sum over their hosts of "
        "each host's CPU budget (applied, else requested), else its declared cores",
        "wf_steps_s": "the steady epochs' steps (each step's mean over the workers), seconds per 1,000 samples",
        **{f"wf_{t}_s": f"this run's {t.replace('_', ' ')} part of a steady epoch, seconds per 1,000 samples "
           "(waterfall[] sets it against the baseline's)" for t in ("compute", "framework", "cpu_contention",
                                                                   "input", "allreduce", "wait", "outside_steps",
                                                                   "trace_window", "restart")},
    },
    "epochs": {
        "run_id": "run id", "epoch": "1-based epoch", "epoch_s": "train_s + val_s (worker 0)",
        "train_s": "training time", "val_s": "validation time", "samples": "training samples (all workers)",
        "samples_per_s": "samples / train_s", "end_s": "epoch end, seconds since the first step",
        **{m: f"{m.replace('_', ' ')} after this epoch" for m in (
            "val_accuracy", "val_auc", "val_loss", "val_precision", "val_recall", "loss", "accuracy", "auc")},
    },
    "workers": {
        "run_id": "run id", "worker": "worker index", "host": "host", "steps": "training steps recorded",
        "step_share": "its share of all workers' steps", "steps_per_s": "its steps per second of the fit",
        "step_mean_s": "mean step time", "step_min_s": "shortest step", "step_max_s": "longest step",
        "step_q1_s": "step time, first quartile", "step_median_s": "median step time",
        "step_q3_s": "step time, third quartile", "step_p95_s": "step time, 95th percentile",
        "step_lo_s": "lowest step time within 1.5 IQR of q1", "step_hi_s": "highest step time within 1.5 IQR of q3",
        "cpu_mean": "CPU% of the worker's processes (summed per sample), mean over the training window (a run "
        "without steps: over the command's whole life, as every CPU figure of such a run)",
        "cpu_p95": "the same, 95th percentile", "rss_peak_bytes": "peak RSS (memory per replica)",
        "threads_max": "most threads", "cpu_s": "CPU-seconds over the training window",
        "cpu_s_per_step": "cpu_s / steps",
        "exit_code": "its process's exit status as run.json records it (null: not recorded, e.g. single mode's "
        "in-process trainer)", "split_source": '"trace" or "estimate"',
        "steps_compared": "steps in the split", "compute_s": f"compute (busy) time {_STEP}",
        "transfer_s": f"transfer time (min exposed collective over workers) {_STEP}",
        "wait_s": f"waiting for peers in collectives (exposed collective - transfer) {_STEP}",
        "input_s": f"input time {_STEP} (null: estimate)",
        "collective_total_s": f"all collective op time, exposed or hidden under compute, {_STEP} (null: estimate "
        "or a trace from an older parser)",
        "overlap_s": f"collective time hidden under compute {_STEP} (null: as collective_total_s)",
        "overlap_share": "sum of overlap_s / sum of collective_total_s over the compared steps: the share of "
        "communication hidden under compute (null: unknown, or no collective)",
        "compute_median_s": "median compute time per step", "wait_share": "total wait / total step time",
        "straggler_share": "fraction of steps this worker was the straggler (largest compute)",
        "speed_score": "median over steps of the fastest worker's compute / this worker's median compute",
        "flagged": "speed_score < 0.75",
    },
    "processes": {
        "run_id": "run id", "worker": "worker index (-1: launcher)", "host": "host", "pid": "process id",
        "role": "trainer, worker, launcher, ...", "samples": "CPU samples in the training window (a run "
        "without steps: every sample)",
        "cpu_mean": "CPU% mean (100 = one core)", "cpu_p95": "CPU% 95th percentile",
        "budget_share_mean": "cpu_mean / (its host's budget_cores * 100); null for a host without a budget",
        "cpu_s": "CPU-seconds",
        "rss_peak_bytes": "peak RSS", "threads_max": "most threads",
    },
    "hosts": {
        "run_id": "run id", "host": "host", "workers": "workers on it", "budget_cores": "cores it was given, "
        "read back from its workers (cgroup quota capped by affinity), else its requested budget or cores",
        "budget_requested_cores": "the emulated budget asked for (scaled to this machine), else its cores",
        "budget_enforced": "false when the run was made with --allow-unenforced and no mechanism could hold "
        "the hosts to their budgets: every budget_* figure is then only what was asked",
        "cpu_mean": "its workers' CPU% summed, mean", "cpu_p95": "the same, 95th percentile",
        "budget_share_mean": "cpu_mean / (budget_cores * 100)", "budget_share_p95": "cpu_p95 / (budget_cores * 100)",
    },
    "placement": {
        "run_id": "run id", "host": "host", "capacity_share": "share of the measured compute capacity",
        "workers_now": "workers placed there", "workers_proportional": "workers in proportion to capacity",
        "workers_proposed": "whole workers minimising the slowest worker's compute",
    },
    "ops": {"run_id": "run id", "name": "op name", "count": "occurrences (all workers)",
            "total_s": "self time, all workers"},
    "excluded": {"run_id": "run id", "path": "its directory (parts comma-separated)", "reason": "why it was left out"},
    "verifications": {
        "run_id": "the run whose what-if was verified", "verified_by": "the run that realised it",
        "what": "which what-if (equal workers, or placement)",
        "budgets": "per host, the CPU budget the verification ran with",
        "placement": "workers per host it ran with, for a placement what-if (null: as the verified run)",
        "predicted_epoch_s": "the steady epoch predicted (recorded before the verification ran)",
        "predicted_lo_s": "its 95% interval, lower end", "predicted_hi_s": "upper end",
        "measured_epoch_s": "the verification run's steady epoch", "error": "(predicted - measured) / measured",
        "held": f"|error| <= {HELD_WITHIN:.0%}",
        "transfer_source": "where the prediction's transfer came from (as equal_transfer_source)",
        "compute_assumed_s": "compute per step the what-if assumes of every worker (traced, median worker)",
        "compute_measured_s": "compute per step the verification's workers took (median over workers of their "
                              "median): when it differs from the assumed, the budgets did not realise the what-if",
        "predicted_at_realised_s": "the prediction moved to compute_measured_s (the epoch is linear in the compute "
                                   "per step): what the model predicts for the configuration that really ran",
        "error_at_realised": "(predicted_at_realised_s - measured) / measured: the model's own error"},
    "modes": {
        "mode": "single, multi or ps", "strategy": "its tf.distribute strategy", "run_id": "the mode's latest "
        "run (verification runs left out)", "workers": "workers", "ps": "parameter servers",
        "steady_epoch_s": "steady epoch time", "steady_samples_per_s": "steady samples/s",
        "speedup": "baseline steady epoch / this one, per sample", "efficiency": "speedup / workers",
        "step_shares": "each worker's share of the steps", "min_step_share": "the smallest share",
        "val_accuracy": "validation accuracy after the last epoch", "val_auc": "validation AUC after the last epoch",
        "val_accuracy_gap": "minus the baseline's", "epoch_ratio_vs_multi": "the multi run's steady epoch / this "
        "one (> 1: faster than synchronous training)", "val_accuracy_vs_multi": "this minus the multi run's",
        "val_auc_vs_multi": "this minus the multi run's"},
    "advice": {
        "run_id": "the run (several synchronous workers with a split)", "rank": "1: the largest cost",
        "kind": "the cause, one of metric_reductions, framework, gradient_allreduce, straggler, input, validation, "
        "oversubscribed, trace_window", "cause": "what loses speed, in words",
        "detail": "the cause's own figure (metric_reductions: collectives a step besides the longest; "
        "oversubscribed: the hosts' threads and cores; trace_window: traced steps; straggler: the host budgets "
        "that would equal the workers; else null)",
        "cost_s": "its time per step, traced (validation and the trace window: seconds per steady epoch)",
        "cost_share": "its share of a steady epoch", "option": "the perfkit option that acts on it (a knob of "
        "run's, or profile_steps; null: none, or a launched script: change its code)", "value": "the option's "
        "value", "knob": "option and value as the flag (\"--metrics minimal\"); the straggler's host budgets",
        "api": "the TensorFlow line that does it", "predicted_speedup": "steady epoch "
        "speedup of that change alone, the middle of its range", "predicted_lo": "the range's low end",
        "predicted_hi": "its high end", "basis": "what the prediction assumes",
        "tried": "not yet (perfkit tune runs it), not tried (a launched script, or the trace window), or not a "
        "perfkit option"},
    "step_timeline": {
        "run_id": "the run (several synchronous workers with a split)",
        "kind": '"run" (a worker\'s recorded step) or "equal workers" (the same step as the equal-workers what-if '
        'would run it, the trace\'s cost left in)',
        "worker": "worker index; -1 for the what-if row", "epoch": "epoch", "step": "step within the epoch",
        "start_s": "its start, seconds since the window's first step (the step records' clock)",
        "step_s": "its recorded duration (the what-if: predicted)",
        "input_s": "input, scaled to the recorded step (the split's input x step_s / the split's step)",
        "compute_s": "compute and framework time (busy), scaled likewise", "wait_s": "exposed all-reduce spent "
        "waiting for the slowest worker, scaled likewise", "transfer_s": "exposed all-reduce every worker paid, "
        "scaled likewise", "overlap_s": "all-reduce hidden under compute, scaled likewise (null: unknown)",
        "straggler": "this worker computed longest in this step"},
    "waterfall": {
        "run_id": "the run (every synchronous run but the baseline)", "level": "steady: a steady epoch (the "
        "verdict's speedup), its terms the step split's parts, time outside the steps, the trace window and a "
        "restart's first step; "
        "command: the whole command, its terms the goodput ledger's buckets (goodput[] term names), per 1,000 "
        "samples trained", "order": "0 for the largest loss; the last "
        "row is not_explained", "term": "steady: compute, framework, cpu_contention, input, allreduce, "
        "wait, outside_steps, trace_window, restart; command: the goodput buckets; both end with not_explained "
        "(docs/figures.md)", "words": "the term in words",
        "run_s": "the run's part, seconds per 1,000 samples of a steady epoch (null for not_explained)",
        "ideal_s": "the baseline's part / ideal_speedup: the part if the baseline's work were spread perfectly "
        "over the run's compute", "lost_s": "run_s - ideal_s; not_explained: the measured time - the ideal - "
        "every other term, so lost_s sums to the measured gap", "share": "lost_s / the measured gap in time",
        "speedup_lost": "share x (ideal_speedup - speedup): the term's part of the lost speedup (negative: it "
        "gained)", "speedup_after": "the speedup left after this term and the ones above it; the last row's is "
        "the measured speedup", "checked_by": "the runs made to remove this term: the equal-workers "
        "run of compare --verify (wait), perfkit tune's runs of one piece of advice (the term its cause is part "
        "of: --metrics minimal the all-reduce); null for the others", "predicted_speedup": "the speedup "
        "predicted with the change (the what-if's, or the advice's over the advised run)", "measured_speedup": "the "
        "speedup checked_by measured (their mean)"},
    "goodput": {
        "run_id": "the run", "worker": "worker index", "span_s": "the command's start to its end (run.json's "
        "ended), seconds; every bucket below adds up to it", "startup_s": "the command's start to this worker's "
        "first step", "compile_s": "its first step over the median step of that epoch (tracing and compiling the "
        "step function)", "productive_s": "its steps, less compile, input and the trace window: productive "
        "training", "input_s": "the split's mean input per step x its steps (0 without a traced input)",
        "trace_window_s": "what perfkit's trace window added (trace_window_s of the run), its capture's "
        "stop in a validation included", "between_steps_s":
        "its epochs' training time beyond their steps: callbacks, the recorder, the iterator",
        "validation_s": "its epochs' validation, less the trace window's capture stopped in one",
        "between_epochs_s": "the rest of its first step to its last epoch's end: between epochs, earlier "
        "attempts of a restarted epoch and a restart's first step over its epoch's median",
        "end_s": "its last epoch's end to the command's end: waiting for the others, teardown",
        "checkpoint_s": "its checkpoint saves (tf.train checkpoints, Keras ModelCheckpoint and "
        "BackupAndRestore), taken out of between_epochs, then between_steps; null: not timed (a run recorded "
        "before perfkit timed them)", "goodput": "productive_s / span_s"},
    "startup": {
        "run_id": "the run", "worker": "worker index", "phase": 'launcher (the command\'s start to the process\'s), '
        'python (the process\'s start to its first state: the interpreter and perfkit\'s imports), then each state '
        'it reported (starting, loading-data, connecting, joined, training...) until the next; the last until its '
        'first step', "start_s": "the phase's start, seconds since the command's",
        "wall_s": "its length in seconds", "cpu_s": "the worker process's CPU seconds in it, every thread's (null: "
        "the launcher's phase, and the last, which ends at the first step)"},
}
TABLES = ("runs", "epochs", "workers", "processes", "hosts", "placement", "ops", "excluded", "verifications", "modes",
          "step_timeline", "advice", "startup", "waterfall", "goodput")


def keys_markdown() -> str:
    """The JSON keys as Markdown (docs/analysis-json.md)."""
    out = []
    for section, keys in KEYS.items():
        out.append("Top-level keys:" if section == "top" else f"`{section}[]` rows:")
        out += [f"- `{k}`: {v}" for k, v in keys.items()] + [""]
    return "\n".join(out)
