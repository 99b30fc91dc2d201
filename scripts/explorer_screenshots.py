"""Screenshots of an explorer in headless Chromium (Debian's, driven by Playwright, as in
tests/end_to_end/test_explorer_browser.py), at 1366 x 800: the leaderboard, one prompt's texts side by side,
the frontiers view (when a run has sweeps) and (when the explorer holds a study) the metrics-vs-humans view. The README's images come from

    python scripts/explorer_screenshots.py results/explorer/index.html --out docs \\
        --views leaderboard prompts --prompt "this coffee supposedly is premium"
    python scripts/explorer_screenshots.py /tmp/explorer/view/index.html --out docs --views humans

where /tmp/explorer/view is ``maxbench view results/runs/default-food-reviews --study FILE``
(docs/explorer-study.md has the commands).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
VIEWPORT = {"width": 1366, "height": 800}


VIEWS = ("leaderboard", "prompts", "plots", "frontiers", "humans")


def shoot(index: Path, out: Path, prompt: str | None, views=VIEWS) -> list[Path]:
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    written, errors = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        page = browser.new_page(viewport=VIEWPORT)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(index.resolve().as_uri())
        page.wait_for_selector("body[data-ready]")

        def save(name: str) -> None:
            if name not in views:
                return
            path = out / f"explorer-{name}.png"
            page.screenshot(path=str(path))
            written.append(path)

        save("leaderboard")
        page.locator("#views button[data-view='prompts']").click()
        page.wait_for_selector(".card")
        if prompt:
            page.locator("#search").fill(prompt)
            page.wait_for_function("!document.querySelector('#prompt-count').textContent.startsWith('0 of')")
            page.locator("#prompt-list li").first.click()
            page.wait_for_function(
                "t => document.querySelector('#prompt-head .prompt').textContent.toLowerCase().includes(t)",
                arg=prompt.lower(),
            )
        page.locator("#cards .tok").nth(3).hover()  # a token's tooltip
        save("prompts")
        page.mouse.move(0, 0)
        page.locator("#views button[data-view='plots']").click()
        save("plots")
        if page.locator("#views button[data-view='frontiers']").is_visible():
            page.locator("#views button[data-view='frontiers']").click()
            page.wait_for_selector("#frontiers svg")
            save("frontiers")
        if page.locator("#views button[data-view='humans']").is_visible():
            page.locator("#views button[data-view='humans']").click()
            save("humans")
        browser.close()
    if errors:
        raise SystemExit(f"the page reported errors: {errors}")
    return written


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("index", type=Path, help="the explorer's index.html")
    p.add_argument("--out", type=Path, default=Path("docs"), help="folder of the PNGs (default: %(default)s)")
    p.add_argument("--prompt", help="text of the prompt to show in the per-prompt view (default: the first)")
    p.add_argument("--views", nargs="+", choices=VIEWS, default=VIEWS, help="views to save (default: all there are)")
    args = p.parse_args(argv)
    for path in shoot(args.index, args.out, args.prompt, args.views):
        print(f"{path} ({path.stat().st_size // 1024} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
