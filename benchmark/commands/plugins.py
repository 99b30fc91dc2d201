"""``maxbench plugins``: the plugins found and where each came from."""

from __future__ import annotations

import json


def register(sub) -> None:
    p = sub.add_parser(
        "plugins",
        help="list the plugin output layers, models, metrics and adapters found, and where each came from",
        description="List every plugin: entry points of installed distributions (groups maxbench.layers, "
        "maxbench.models, maxbench.metrics, maxbench.adapters) and what the files given with --include "
        "register (docs/plugins.md).",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_plugins)


def cmd_plugins(args) -> int:
    from maxbench.benchmark.metrics.base import METRICS
    from maxbench.registry import describe_origin
    from maxbench.systems.adapters import ADAPTERS
    from maxbench.systems.models import MODELS
    from maxbench.systems.system_strings import LAYERS

    found = {reg.group: reg.plugins() for reg in (LAYERS, MODELS, METRICS, ADAPTERS)}
    if args.json:
        print(json.dumps(found, indent=1))
        return 0
    for group, plugins in found.items():
        print(f"{group}: {len(plugins) or 'none'}")
        for name, origin in plugins.items():
            print(f"  {name:<20} {describe_origin(origin)}")
    return 0
