"""``maxbench suites``: the prompt suites, their sizes and hashes."""

from __future__ import annotations

import json


def register(sub) -> None:
    p = sub.add_parser(
        "suites",
        help="list prompt suites with sizes and hashes",
        description="List built-in prompt suites (and any suite manifests given) with sizes and hashes.",
    )
    p.add_argument("manifests", nargs="*", help="user suite .toml manifests to check and list too")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_suites)


def cmd_suites(args) -> int:
    from maxbench.benchmark.data.suites import builtin_suites, load_suite

    rows = [load_suite(name).describe() | {"builtin": True} for name in builtin_suites()]
    rows += [load_suite(m).describe() | {"builtin": False} for m in args.manifests]
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(f"{'suite':<16} {'version':<8} {'items':>6}  sha256")
        for r in rows:
            print(f"{r['name']:<16} {r['version']:<8} {r['n_items']:>6}  {r['sha256']}")
    return 0
