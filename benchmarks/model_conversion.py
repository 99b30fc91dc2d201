"""Converting a GGUF model to fp32 safetensors: transformers' loaders called plainly against the
same calls with the file parsed once (maxbench.systems.models.parsed_once), side by side.

A cold main job converts the embedded model before anything else can run: the set-up's
``maxbench assets fetch`` does it beside the bytecode compile. transformers' config, tokenizer and
model loaders each parse the whole GGUF again (the space check a fourth time), and rebuild gguf's
tensor-name map for every tensor. Each --repeats run converts the file both ways into temporary
folders, alternating their order; the script prints the median seconds of each, how many times
each parsed the file, their ratio, and whether both wrote the same bytes; then the load average.

    .venv/bin/python benchmarks/model_conversion.py                       # the embedded SmolLM2
    .venv/bin/python benchmarks/model_conversion.py --model gemma3-270m
    .venv/bin/python benchmarks/model_conversion.py --gguf path/to/any.gguf
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import tempfile
from pathlib import Path

import torch
from harness import alternate, load_average, positive_int, run


def main() -> int:
    from maxbench.systems import models

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--model", choices=sorted(models.GGUF_MODELS), default="smollm2-135m")
    which.add_argument("--gguf", type=Path, help="a GGUF file instead of a built-in model's")
    ap.add_argument("--threads", type=positive_int, default=1, help="torch CPU threads (set deliberately)")
    ap.add_argument("--repeats", type=positive_int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import gguf

    from maxbench.errors import MaxbenchError

    if args.gguf is None:
        spec = models.GGUF_MODELS[args.model]
        src = models.fetch(spec.asset)
        path = (src if src.is_dir() else src.parent) / spec.gguf
    else:
        path = args.gguf
        if not path.is_file():
            raise MaxbenchError(f"{path} is not a file")
        try:
            gguf.GGUFReader(path)
        except (ValueError, OSError) as exc:
            raise MaxbenchError(f"{path} is not a GGUF file ({exc})") from None
    print(f"{path.name}, {path.stat().st_size / 2**20:.1f} MiB, threads {args.threads}; {load_average()}")
    reader, parses = gguf.GGUFReader, {}
    work = Path(tempfile.mkdtemp(prefix="maxbench-conversion-"))

    def convert(label: str, once: bool) -> dict[str, bytes]:
        def counting(*a, **k):
            parses[label] = parses.get(label, 0) + 1
            return reader(*a, **k)

        folder = work / label.replace(" ", "-")
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        parses[label] = 0
        gguf.GGUFReader = counting
        try:
            with models.parsed_once() if once else contextlib.nullcontext():
                models.fp32_bytes(path)  # the space check gguf_cache makes first
                models.convert_gguf(path, folder)
        finally:
            gguf.GGUFReader = reader
        return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}

    try:
        medians, written = alternate(
            {"plain": lambda: convert("plain", False), "parsed once": lambda: convert("parsed once", True)},
            args.repeats,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for label, seconds in medians.items():
        n = parses[label]
        print(f"  {label:<12} {seconds:7.1f} s, {n} parse{'s' if n != 1 else ''} of the file")
    same = written["plain"] == written["parsed once"]
    print(
        f"ratio {medians['plain'] / medians['parsed once']:.2f}x; same files "
        f"({', '.join(written['plain'])}): {'yes' if same else 'NO'}"
    )
    print(load_average())
    return 0 if same else 1


if __name__ == "__main__":
    run(main)
