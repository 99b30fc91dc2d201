"""``maxbench score``: score a run directory, or external files of generated texts."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import signal
import sys
import threading

from maxbench.benchmark.metrics.names import DEFAULT_METRICS, FIXED_EVALUATOR_METRICS, PAPER_METRICS
from maxbench.errors import MaxbenchError
from maxbench.fileio import check_output_file


def register(sub) -> None:
    p = sub.add_parser(
        "score",
        help="score generations: BLEU, ROUGE-L, METEOR, BERTScore, PPL, Self-BLEU, Rep, Distinct, ...",
        description="Score every system of a run directory and write RUN_DIR/scores.json (values, bootstrap "
        "intervals over prompts, paired tests against a baseline, metric signatures), or score "
        "external files with --generations [--references] and print the result.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="metrics: " + ", ".join(DEFAULT_METRICS) + " (default: all), and ref-ppl and attr-acc (each joining "
        "a run's by itself: ref-ppl when its rows carry reference log-probabilities, attr-acc on a conditional "
        "suite); on request, the papers' "
        "own definitions: " + ", ".join(PAPER_METRICS) + ", heldout-bleu (on a suite that names the held-out "
        "split its prompts came from), and ppl under a fixed evaluator beside the run's ppl (cross-evaluation): "
        + ", ".join(FIXED_EVALUATOR_METRICS)
        + ".\n"
        "files: .jsonl/.json = one JSON object per line with a string field 'text' (and optionally "
        "'prompt', used by ppl); any other name = one text per line.",
    )
    p.add_argument("run_dir", nargs="?", help="run directory (results/runs/<run-id>) holding generations.jsonl")
    p.add_argument("--generations", metavar="FILE", help="score this file of generated texts instead of a run")
    p.add_argument("--references", metavar="FILE", help="with --generations: one reference per generated text")
    p.add_argument("--metrics", metavar="LIST", help="comma-separated metric names (default: all)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument(
        "--bootstrap",
        type=int,
        default=1000,
        metavar="N",
        help="bootstrap resamples over prompts for intervals and paired tests (0: no intervals)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the resampling (default 0)")
    p.add_argument("--confidence", type=float, default=0.95, help="interval level (default 0.95)")
    p.add_argument(
        "--baseline",
        metavar="SYSTEM",
        help="system the others are tested against (default: the one the run was last scored against, "
        "else the run's one softmax system)",
    )
    add_evaluator_option(p)
    p.add_argument("--device", default=None, help="cpu, cuda or cuda:N for model-based metrics")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads for model-based metrics")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    from maxbench.rundir import add_drop_option

    add_drop_option(p)
    p.set_defaults(func=cmd_score)


def add_evaluator_option(p: argparse.ArgumentParser, default_text: str = "smollm2-135m") -> None:
    """``--evaluator`` (also ``--ppl-model``): the model under which the ppl metric scores texts; for
    ``maxbench score`` and ``maxbench run``. Texts of different base models are comparable only under
    one evaluator, which the metric's signature names (model and weights hash). Left out, the metric's
    own default applies (benchmark/metrics/perplexity.py: DEFAULT_EVALUATOR), which ``default_text``
    names for the help."""
    p.add_argument(
        "--evaluator",
        "--ppl-model",
        dest="evaluator",
        default=None,
        metavar="MODEL",
        help="evaluator model of the ppl metric: built-in name (e.g. gemma3-270m), local directory or hub id "
        f"(default: {default_text})",
    )


def _options(args):
    from maxbench import arguments
    from maxbench.benchmark.metrics.base import parse_metric_list
    from maxbench.benchmark.metrics.scoring import ScoringOptions

    arguments.resamples(args.bootstrap, "--bootstrap", minimum=0)
    arguments.level(args.confidence, "--confidence")
    if arguments.threads(args.threads, "--threads") is not None:
        import torch

        torch.set_num_threads(args.threads)
    names = parse_metric_list(args.metrics) if args.metrics else list(DEFAULT_METRICS)
    return ScoringOptions(
        metrics=names,
        n_resamples=args.bootstrap,
        seed=args.seed,
        level=args.confidence,
        evaluator=args.evaluator,
        device=args.device,
        threads=args.threads,
        progress=not args.quiet,
        defaults=not args.metrics,
    )


def unrequested_plugin_metrics(args) -> list[str]:
    """One note per registered plugin metric that this scoring leaves out: without ``--metrics`` the
    default set is scored, which holds no plugin metric (a plugin runs only when named), and saying
    nothing would look as if it had been scored."""
    if args.metrics:
        return []
    from maxbench.benchmark.metrics.base import METRICS
    from maxbench.registry import describe_origin

    return [
        f"plugin metric '{name}' (from {describe_origin(origin)}) is not scored: a plugin metric runs only when "
        f"named; ask for it with --metrics {name} (add the default metrics beside it to keep them, e.g. "
        f"--metrics {DEFAULT_METRICS[0]},{name})"
        for name, origin in METRICS.plugins().items()
        if name not in DEFAULT_METRICS
    ]


def _fmt(x) -> str:
    if x is None:
        return "-"
    return f"{x:.4g}" if abs(x) < 1e5 and not float(x).is_integer() else f"{x:.0f}"


def _table(scores: dict) -> str:
    lines = [f"{'score':<22} {'value':>10}  interval"]
    for name, s in scores.items():
        if s["value"] is None:
            lines.append(f"{name:<22} {'n/a':>10}  {s.get('reason') or ''}")
            continue
        ci = f"[{_fmt(s['ci_low'])}, {_fmt(s['ci_high'])}]" if s["ci_low"] is not None else ""
        arrow = "higher better" if s["higher_is_better"] else "lower better"
        lines.append(f"{name:<22} {_fmt(s['value']):>10}  {ci:<24} {arrow}")
    return "\n".join(lines)


def warning_lines(doc: dict) -> list[str]:
    """One line for the systems of a partial run, one for metrics that could not score the run."""
    out = []
    partial = [
        f"{s} has {e['n_prompts']} of {e['suite_prompts']} prompts ({e['n_texts']} texts)"
        for s, e in doc["systems"].items()
        if e["partial"]
    ]
    if partial:
        suite = (doc.get("suite") or {}).get("name")
        out.append(
            f"partial run of suite '{suite}': {'; '.join(partial)}; "
            f"its scores are not comparable with those of a complete run"
        )
    na = {}
    for entry in doc["systems"].values():
        for metric, why in entry["not_applicable"].items():
            na.setdefault(metric, why)
    if na:
        out.append("not applicable (n/a): " + "; ".join(f"{m} {why}" for m, why in na.items()))
    return out


@contextlib.contextmanager
def interrupts_not_lost():
    """Ctrl-C inside the block always ends the command as an interrupt (exit 130, ``run_guarded``).

    Python raises KeyboardInterrupt in whatever code runs when the signal is handled; when that is a
    destructor (``__del__`` of a zip file, a tokenizer, a thread pool being collected), the exception is
    only printed as "Exception ignored" and the work goes on as if no one had pressed Ctrl-C. The
    handler here records the signal as well, so an interrupt eaten that way is raised again when the
    block ends; what was written before (the score cache's entries, ``scores.json``) is kept."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    seen: list[int] = []

    def handler(signum, frame):
        seen.append(signum)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    except KeyboardInterrupt:
        raise
    except BaseException:
        if seen:  # the interrupt was eaten, and then something failed: the interrupt is the answer
            raise KeyboardInterrupt from None
        raise
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler if previous is None else previous)
    if seen:
        raise KeyboardInterrupt


def cmd_score(args) -> int:
    with interrupts_not_lost():
        return _score(args)


def _score(args) -> int:
    from pathlib import Path

    from maxbench.benchmark.metrics.scoring import score_files, score_run

    if (args.run_dir is None) == (args.generations is None):
        raise MaxbenchError("give either RUN_DIR or --generations FILE (not both)")
    if args.references and not args.generations:
        raise MaxbenchError("--references goes with --generations; a run's rows carry their references")
    options = _options(args)
    for line in unrequested_plugin_metrics(args):
        print(f"maxbench: note: {line}", file=sys.stderr)
    if args.generations:
        doc = score_files(args.generations, args.references, options)
        print(json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False) if args.json else _table(doc["scores"]))
        return 0
    from maxbench.rundir import drop_damaged, scores_path

    check_output_file(scores_path(args.run_dir), "scores file")  # refused before minutes of scoring

    drop_damaged(Path(args.run_dir), args.drop_damaged_lines)
    doc = score_run(Path(args.run_dir), options, baseline=args.baseline)
    for line in warning_lines(doc):
        print(f"maxbench: warning: {line}", file=sys.stderr)
    if args.json:
        print(json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False))
        return 0
    for system, entry in doc["systems"].items():
        of = f" of {entry['suite_prompts']}: partial" if entry["partial"] else ""
        print(f"{system}  ({entry['n_texts']} texts, {entry['n_prompts']} prompts{of})")
        print(_table(entry["scores"]))
        print()
    human = doc.get("human")
    if human:
        print(f"{human['label']}  ({human['n_prompts']} references, {human['signature']})")
        print(_table(human["scores"]))
        print()
    comp = doc.get("comparisons")
    if comp:
        against = comp["baseline"] or "each system's own base model's softmax"
        print(f"paired tests against {against}:")
        for system, rows in comp["systems"].items():
            sig = [
                f"{k} {_fmt(v['difference'])}"
                + (
                    " (distance to the human row: " + ("closer" if v["difference"] < 0 else "farther") + ")"
                    if v.get("test") == "closeness"
                    else ""
                )
                + f" (p={_fmt(v['p_value'])})"
                for k, v in rows.items()
                if v["p_value"] is not None and v["p_value"] < 0.05 and not math.isnan(v["difference"])
            ]
            print(f"  {system}: " + ("; ".join(sig) if sig else "no score differs at p < 0.05"))
    print(f"wrote {scores_path(args.run_dir)}")
    return 0
