"""Load benchmark of the rating app: concurrent annotators against the real server, on SQLite or PostgreSQL.

Starts ``maxbench serve`` (gunicorn) on 127.0.0.1 over a fresh SQLite database, creates a
study whose design gives every annotator the same number of pages, and runs one thread per
annotator: open the link, consent, pass the check, then for each page GET it, "read" for
a random think time, and POST the ratings. Requests are bounded: each annotator makes
exactly (pages + 6) requests. It prints the submit (POST) latency percentiles, the page
(GET) latency, and the number of acknowledged ratings missing from the database afterwards
("lost"), which must be 0. Target: submit p99 <= 100 ms.

The clients run on the same machine as the server and take CPU from it; the numbers are an
upper bound on what the server alone would show. Nothing leaves 127.0.0.1.

    .venv/bin/python benchmarks/rating_load.py                 # 50 annotators x 20 pages
    .venv/bin/python benchmarks/rating_load.py --think-ms 0    # closed loop: a stress test
    .venv/bin/python benchmarks/rating_load.py --db postgresql --annotators 200 --workers 4
        # on a throwaway PostgreSQL 15 cluster (human_eval/testing/postgres.py), private unix socket
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path

import harness

harness.require_checkout()
from sqlalchemy import select  # noqa: E402

from maxbench.human_eval.store.db import dispose_engines, session_for  # noqa: E402
from maxbench.human_eval.store.models import Assignment  # noqa: E402
from maxbench.human_eval.studies.rubrics import load_rubric  # noqa: E402
from maxbench.human_eval.testing.participants import ScriptedAnnotator, make_study, start_server  # noqa: E402

SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")  # SQLite's PRAGMA synchronous settings


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, int(round(q / 100 * len(ordered) + 0.5)) - 1))  # nearest rank
    return ordered[k]


def run_once(args, synchronous: str, db_url: str | None = None) -> dict:
    rubric = load_rubric("graphmax")
    raters = 2
    # texts x raters = annotators x pages, with 2 systems in a paired design
    n_prompts = max(1, args.annotators * args.pages // (2 * raters))
    with tempfile.TemporaryDirectory(prefix="rating-load-") as tmp:
        tmp_path = Path(tmp)
        url, created, _ = make_study(
            tmp_path,
            rubric="graphmax",
            n_prompts=n_prompts,
            items_per_system=n_prompts,
            raters_per_item=raters,
            annotators=args.annotators,
            attention_rate=0.0,
            seed=args.seed,
            db_url=db_url,
        )
        env = {
            "MAXBENCH_HOME": str(tmp_path / "home"),
            "MAXBENCH_SECRET_KEY": "load",
            "MAXBENCH_SQLITE_SYNCHRONOUS": synchronous if db_url is None else "FULL",
        }
        server = start_server(
            url, workers=args.workers, threads=args.threads, env=env, log_path=tmp_path / "server.log"
        )
        answer = rubric.comprehension_check().answer
        annotators = [
            ScriptedAnnotator(server.base_url, link, answer, timeout=60) for _, link in created.links(server.base_url)
        ]
        errors: list[str] = []
        rng = random.Random(args.seed)
        think = [[rng.uniform(0.5, 1.5) * args.think_ms / 1000 for _ in range(args.pages + 1)] for _ in annotators]
        start_delay = [rng.uniform(0, max(args.think_ms, 200) / 1000) for _ in annotators]

        def work(i: int, annotator: ScriptedAnnotator) -> None:
            time.sleep(start_delay[i])  # annotators arrive over a short while, not in lockstep
            try:
                path = annotator.start()
                step = 0
                while path:
                    path = annotator.rate_page(path, lambda p, f: 1 + hash((p, f)) % 5, think_s=think[i][step])
                    step += 1
            except Exception as exc:  # counted and reported, never hidden
                errors.append(f"{type(exc).__name__}: {exc}")
            finally:
                annotator.close()

        load_before = os.getloadavg()[0]
        t0 = time.perf_counter()
        threads = [threading.Thread(target=work, args=(i, a)) for i, a in enumerate(annotators)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        server.stop()

        acks = [ack for a in annotators for ack in a.acks]
        dispose_engines()
        with session_for(url) as s:
            stored = {
                a.public_id: {r.criterion: r.value for r in a.ratings}
                for a in s.scalars(select(Assignment).where(Assignment.completed_at.is_not(None)))
            }
        dispose_engines()
    lost = sum(1 for ack in acks if stored.get(ack.public_id) != ack.values)
    return {
        "synchronous": synchronous,
        "acks": acks,
        "errors": errors,
        "wall": wall,
        "lost": lost,
        "load_before": load_before,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--annotators", type=harness.positive_int, default=50)
    parser.add_argument("--pages", type=harness.positive_int, default=20, help="rated texts per annotator (default 20)")
    parser.add_argument(
        "--think-ms",
        type=harness.nonnegative_float,
        default=1000,
        help="mean reading time per page, uniform in [0.5, 1.5] x mean (default 1000; "
        "real annotators take 10-60 s, so this is ~20x denser than a real study)",
    )
    parser.add_argument("--workers", type=harness.positive_int, default=2)
    parser.add_argument("--threads", type=harness.positive_int, default=8)
    parser.add_argument(
        "--synchronous",
        default="FULL,NORMAL",
        help="SQLite synchronous modes to run, one after the other (default FULL,NORMAL; FULL is the app's default)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--db", choices=("sqlite", "postgresql"), default="sqlite", help="database (default %(default)s)"
    )
    args = parser.parse_args()
    modes = [m.strip().upper() for m in args.synchronous.split(",") if m.strip()]
    bad = [m for m in modes if m not in SYNCHRONOUS] or ([] if modes else [args.synchronous])
    if bad:
        parser.error(f"--synchronous: unknown mode {bad[0]!r}; choose from {', '.join(SYNCHRONOUS)}")
    cluster = None
    if args.db == "postgresql":
        from maxbench.human_eval.testing.postgres import PostgresCluster

        cluster = PostgresCluster().start()
        modes = ["postgresql"]

    print(
        f"rating_load: {args.annotators} concurrent annotators x {args.pages} pages on 127.0.0.1, "
        f"gunicorn {args.workers} workers x {args.threads} threads, "
        f"{'PostgreSQL 15' if cluster else 'SQLite WAL'}, "
        f"think time {args.think_ms:.0f} ms mean; {os.cpu_count()} CPUs shared with the clients"
    )
    ok = True
    for mode in modes:
        try:
            r = run_once(args, mode, cluster.new_database("load") if cluster else None)
        finally:
            if cluster and mode == modes[-1]:
                cluster.stop()
        submit_ms = [a.latency_s * 1000 for a in r["acks"]]
        page_ms = [a.page_latency_s * 1000 for a in r["acks"]]
        p99 = percentile(submit_ms, 99)
        label = mode if cluster else f"synchronous={mode}"
        print(f"\n{label} (load average before {r['load_before']:.2f})")
        print(
            f"  submits acknowledged: {len(r['acks'])} of {args.annotators * args.pages} in {r['wall']:.1f} s "
            f"({len(r['acks']) / r['wall']:.1f}/s); client errors: {len(r['errors'])}"
        )
        print(
            f"  submit latency ms: p50 {percentile(submit_ms, 50):.1f}  p90 {percentile(submit_ms, 90):.1f}  "
            f"p99 {p99:.1f}  max {max(submit_ms, default=float('nan')):.1f}"
        )
        print(
            f"  page latency ms:   p50 {percentile(page_ms, 50):.1f}  p90 {percentile(page_ms, 90):.1f}  "
            f"p99 {percentile(page_ms, 99):.1f}  mean {statistics.fmean(page_ms) if page_ms else float('nan'):.1f}"
        )
        print(f"  lost ratings (acknowledged but not stored): {r['lost']}")
        print(
            f"  target p99 <= 100 ms: {'met' if p99 <= 100 else 'NOT met'}; "
            f"0 lost: {'met' if r['lost'] == 0 else 'NOT met'}"
        )
        for e in r["errors"][:5]:
            print("  error:", e)
        ok = ok and r["lost"] == 0 and not r["errors"]
    return 0 if ok else 1


if __name__ == "__main__":
    harness.run(main)
