"""The explorer in headless Chromium (Debian's, driven by Playwright), opened from file://: sort by a
metric, switch the view, search a prompt, filter by a flag, open a token's tooltip; hostile text
shows as text and runs nothing. Screenshots go to the test artefacts (explorer-*.png)."""

import json
import os

import pytest

from maxbench.benchmark.present.explorer import write_explorer
from tests.support.explorer_fixtures import SYSTEMS, make_scored_run, make_study_export
from tests.support.paths import ROOT

CHROMIUM = "/usr/bin/chromium"
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is absent: run scripts/browser_setup.sh"),
]


@pytest.fixture(scope="module")
def scored_run(tmp_path_factory):
    """One small scored run for the file's tests (made once: a run and a scoring, each a process);
    a test that changes it works on a copy."""
    return make_scored_run(tmp_path_factory.mktemp("scored"))


def test_explorer_in_chromium(scored_run, tmp_path, artifacts_dir):
    from playwright.sync_api import sync_playwright

    run = scored_run
    index = write_explorer([run], tmp_path / "explorer", study=make_study_export(tmp_path, run))
    errors = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        page = browser.new_page(viewport={"width": 1366, "height": 800})
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.goto(index.as_uri())
        page.wait_for_selector("body[data-ready]")
        # the compact view fits 1366 px and holds at most 10 score columns
        assert page.locator("#board thead tr:nth-child(2) th").count() <= 11
        assert page.evaluate("document.querySelector('#board').getBoundingClientRect().width") <= 1366
        page.screenshot(path=str(artifacts_dir / "explorer-leaderboard.png"), full_page=True)
        # a system name wraps only after '/' or ',' (never inside "tiny-random"), and reads whole when copied
        names = page.evaluate(
            "[...document.querySelectorAll('#board td.sys')].map(td => [td.textContent, td.getClientRects()[0].height,"
            " [...td.querySelectorAll('.nw')].map(s => [s.textContent, s.getClientRects().length])])"
        )
        assert {n for n, _, _ in names} == set(SYSTEMS) | {"human (references)"}  # the human row leads
        assert any(h > 30 for _, h, _ in names), "a long system name should wrap in the compact view"
        for name, _, parts in names:
            assert "".join(t for t, _ in parts) == name and all(t.endswith(("/", ",")) for t, _ in parts[:-1])
            assert all(lines == 1 for _, lines in parts), parts

        # sort by Self-BLEU-4 (closest to the human row is better: nearest first, the human row kept on
        # top), then the other way
        page.locator("th[data-col='self-bleu-4'] button").click()
        values = [
            float(t)
            for t in page.locator("#board tbody td[data-col='self-bleu-4']").all_inner_texts()
            if t[:1].isdigit()
            for t in [t.split()[0].rstrip("*")]
        ]
        human, rest = values[0], values[1:]
        assert (
            rest == sorted(rest, key=lambda v: abs(v - human))
            and page.locator("th[data-col='self-bleu-4']").get_attribute("aria-sort") == "ascending"
        )
        page.locator("th[data-col='self-bleu-4'] button").click()
        assert page.locator("th[data-col='self-bleu-4']").get_attribute("aria-sort") == "descending"

        # every metric one click away
        page.locator("button[data-columns='all']").click()
        n_all = page.locator("#board thead tr:nth-child(2) th").count()
        assert n_all > 11 and page.locator("th[data-col='distinct-2-corpus']").count() == 1
        page.locator("button[data-columns='diversity']").click()
        assert page.locator("th[data-col='bleu-4']").count() == 0 and page.locator("th[data-col='rep']").count() == 1

        # switch to the prompts; search one; its texts side by side with the reference
        page.locator("#views button[data-view='prompts']").click()
        page.wait_for_selector(".card")
        page.locator("#search").fill("Review 5:")
        page.wait_for_function("document.querySelector('#prompt-count').textContent.startsWith('1 of')")
        page.locator("#prompt-list li").first.click()
        page.wait_for_function("document.querySelector('#prompt-head .prompt').textContent.includes('Review 5')")
        assert page.locator(".card").count() == 3 and "sadly 5" in page.locator("#prompt-head .ref").inner_text()
        assert page.locator(".card .ratings").count() >= 1  # the study's ratings beside each rated text

        # filter by a flag: sparsemax gives reference tokens probability zero on every prompt
        page.locator("#search").fill("")
        page.locator("#flag-filter").select_option("ref-zero")
        assert page.locator("#prompt-count").inner_text().startswith("8 of 8")
        page.locator("#flag-filter").select_option("empty")
        assert page.locator("#prompt-count").inner_text().startswith("0 of 8")
        page.locator("#flag-filter").select_option("")

        # a token's tooltip
        page.locator("#prompt-list li[data-key='p01']").click()
        page.wait_for_function("document.querySelector('#prompt-head .prompt').textContent.includes('Review 1')")
        tok = page.locator(".card[data-system$='greedy,max_new_tokens=16'] .tok").first
        tok.hover()
        tip = page.locator("#tip")
        assert tip.is_visible() and "p(chosen)" in tip.inner_text() and "step 1" in tip.inner_text()
        page.locator("#shade").select_option("h")
        assert "entropy" in page.locator("#legend").inner_text()
        page.screenshot(path=str(artifacts_dir / "explorer-prompts.png"), full_page=True)

        # hostile text: shown as text, nothing runs, no template evaluated
        page.locator("#prompt-list li[data-key='p03']").click()
        page.wait_for_function("document.querySelector('#prompt-head .prompt').textContent.includes('onerror')")
        shown = page.locator("#prompt-head .prompt").inner_text()
        assert "<script>window.pwned=1</script>" in shown and "{{7*7}}" in shown and "49" not in shown
        page.locator("#prompt-list li[data-key='p00']").click()
        page.wait_for_function("document.querySelector('#cards').textContent.includes('onerror')")
        assert "<img src=x" in page.locator("#cards").inner_text()
        assert page.evaluate("window.pwned") is None and page.locator("#cards img, #prompt-head img").count() == 0

        # plots and the metrics-vs-humans view
        page.locator("#views button[data-view='plots']").click()
        assert page.locator("#plots figure").count() >= 3 and page.locator("#plots svg circle").count() == 3
        # axis ticks are round numbers, evenly spaced (1, 2 or 5 x 10^k apart)
        for anchor in ("middle", "end"):
            ticks = [
                float(t)
                for t in page.locator(
                    f"#plots figure:first-of-type svg text.tick[text-anchor='{anchor}']"
                ).all_text_contents()
            ]
            steps = {round(b - a, 9) for a, b in zip(ticks, ticks[1:])}
            assert len(ticks) >= 3 and len(steps) == 1, ticks
            mantissa = f"{steps.pop():e}".split("e")[0]
            assert float(mantissa) in (1.0, 2.0, 5.0), ticks
        # the per-step curves' legend: a swatch of each line's colour, below the curves, never over them
        legends = page.evaluate(
            "[...document.querySelectorAll('#plots svg')].filter(s => s.querySelector('text.legend')).map(s => ["
            " Math.max(...[...s.querySelectorAll('polyline')].map(p => p.getBBox().y + p.getBBox().height)),"
            " Math.min(...[...s.querySelectorAll('text.legend')].map(t => t.getBBox().y)),"
            " [...s.querySelectorAll('line.swatch')].map(l => l.getAttribute('stroke')).join(),"
            " [...s.querySelectorAll('polyline')].map(p => p.getAttribute('stroke')).join()])"
        )
        assert legends, "the per-step curves have a legend"
        for curves_bottom, legend_top, swatches, lines in legends:
            assert legend_top > curves_bottom and swatches == lines
        page.screenshot(path=str(artifacts_dir / "explorer-plots.png"), full_page=True)
        page.locator("#views button[data-view='humans']").click()
        assert page.locator("#correlations tbody tr").count() >= 10
        page.locator("#corr-aspect").select_option("story_line")
        assert set(page.locator("#correlations tbody td:nth-child(2)").all_inner_texts()) == {"story_line"}
        page.screenshot(path=str(artifacts_dir / "explorer-humans.png"), full_page=True)
        browser.close()
    assert errors == []


def test_cards_name_the_model_when_the_systems_differ_in_it(tmp_path):
    # the committed conditional run: one base model with and without adapters

    from playwright.sync_api import sync_playwright

    run = ROOT / "results" / "conditional" / "runs" / "conditional-food-attrs"
    index = write_explorer([run], tmp_path / "explorer")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        page = browser.new_page(viewport={"width": 1366, "height": 800})
        page.goto(index.as_uri())
        page.wait_for_selector("body[data-ready]")
        page.locator("#views button[data-view='prompts']").click()
        page.wait_for_selector(".card h3")
        labels = page.locator(".card h3").all_inner_texts()
        browser.close()
    n = len(json.loads((run / "scores.json").read_text())["systems"])  # the run's systems (5 since issue 51)
    assert n >= 4 and len(labels) == n and len(set(labels)) == n, labels
    assert any(label.startswith("smollm2-135m+fctg / softmax") for label in labels), labels


RLO = "\u202e"


@pytest.mark.browser
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is absent: run scripts/browser_setup.sh")
def test_an_open_right_to_left_override_in_a_prompt_keeps_its_labels_in_order(scored_run, tmp_path):
    import shutil

    from playwright.sync_api import sync_playwright

    from maxbench.benchmark.present.explorer import write_explorer

    run = shutil.copytree(scored_run, tmp_path / "runs" / scored_run.name)
    gen = run / "generations.jsonl"
    lines = [json.loads(x) for x in gen.read_text(encoding="utf-8").split("\n") if x.strip()]
    for line in lines:
        if line.get("prompt", "").startswith("Review 5:"):
            line["prompt"] = f"Review 5: {RLO}evil"
    gen.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    import hashlib

    scores = json.loads((run / "scores.json").read_text(encoding="utf-8"))  # only the prompt's text changed
    scores["generations_sha256"] = hashlib.sha256(gen.read_bytes()).hexdigest()
    (run / "scores.json").write_text(json.dumps(scores), encoding="utf-8")
    index = write_explorer([run], tmp_path / "explorer")
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
        )
        page = browser.new_page(viewport={"width": 1366, "height": 800})
        page.goto(index.as_uri())
        page.wait_for_selector("body[data-ready]")
        page.locator("#views button[data-view='prompts']").click()
        page.wait_for_selector(".card")
        page.locator("#search").fill("Review 5:")
        page.wait_for_function("document.querySelector('#prompt-count').textContent.startsWith('1 of')")
        page.select_option("#diff-metric", index=1)  # every listed prompt gets a "Δ ..." badge after its head
        page.wait_for_selector("#prompt-list li .badge")
        # the badge after the head (whose override is never closed) stays to the right of the head's text
        text_right, badge_left, badge_text = page.evaluate(
            """() => { const li = document.querySelector('#prompt-list li');
                 const walk = document.createTreeWalker(li, NodeFilter.SHOW_TEXT);
                 let node; while ((node = walk.nextNode()) && !node.data.includes('evil'));
                 const range = document.createRange(); range.selectNodeContents(node);
                 const badge = [...li.querySelectorAll('.badge')].pop();
                 return [range.getBoundingClientRect().right, badge.getBoundingClientRect().left, badge.textContent]; }"""
        )
        assert badge_text.startswith("Δ") and badge_left >= text_right - 1, (text_right, badge_left)
        # the prompt box: its label "prompt p05" is above, whole; the override stays inside the prompt's text
        page.locator("#prompt-list li").first.click()
        page.wait_for_function("document.querySelector('#prompt-head .prompt').textContent.includes('evil')")
        assert page.locator("#prompt-head .prompt .label").inner_text().startswith("prompt p05")
        browser.close()
