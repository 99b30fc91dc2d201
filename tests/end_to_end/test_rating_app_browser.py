"""Headless Chromium (Debian's, driven by Playwright) against the real server: an annotator
opens the link, consents, passes the check, rates every page, leaves, resumes and finishes;
axe-core audits every page on the way (welcome, check, a Likert page, an attention check,
leave, finish, the index): no serious or critical violation. A screenshot of the rating page
is saved as test-artifacts/rating_page.png.

Chromium comes from scripts/browser_setup.sh (apt-get install chromium)."""

import os
import re

import pytest
from sqlalchemy import func, select

from maxbench.human_eval.store.db import dispose_engines, session_for
from maxbench.human_eval.store.models import Assignment
from maxbench.human_eval.studies.rubrics import load_rubric
from maxbench.human_eval.testing.participants import axe_serious, make_study, start_server

CHROMIUM = "/usr/bin/chromium"
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not os.path.exists(CHROMIUM),
        reason=f"{CHROMIUM} is absent: run scripts/browser_setup.sh (apt-get install chromium)",
    ),
]


def rate_current_page(page, rubric):
    """Click one value per criterion (the instructed one on an attention check) and submit."""
    text = page.locator("#text").inner_text()
    instructed = re.search(r"select (\d)", text)
    for i, criterion in enumerate(rubric.criteria):
        value = int(instructed.group(1)) if instructed else 1 + (i + len(text)) % 5
        page.locator(f"input[name='c_{criterion.name}'][value='{value}']").check()
    page.get_by_role("button", name="Save and continue").click()
    page.wait_for_load_state("domcontentloaded")


def test_annotator_rates_leaves_resumes_in_chromium(tmp_path, artifacts_dir):
    from axe_playwright_python.sync_playwright import Axe
    from playwright.sync_api import sync_playwright

    rubric = load_rubric("graphmax")
    url, created, _ = make_study(
        tmp_path,
        n_prompts=4,
        items_per_system=3,
        raters_per_item=1,
        annotators=1,
        attention_rate=0.2,
        completion_code="THANKS-7",
        prompt_for=lambda i: "We stopped here for lunch on a rainy Sunday and",
        text_for=lambda s, i: (
            " the place was packed, but we got a table by the window. The staff were "
            "friendly and laid back. <b>Great</b> fries & sauce; will be back!"
        ),
    )
    server = start_server(
        url, workers=1, threads=4, log_path=tmp_path / "server.log", env={"MAXBENCH_HOME": str(tmp_path / "home")}
    )
    link = created.links(server.base_url)[0][1]
    total = created.n_pages[0]
    axe, seen, violations, attention_audited = Axe(), [], [], False

    def audit_attention_check(page, audited: bool) -> bool:
        """Audits the first attention-check page met; returns whether one has been audited."""
        if not audited and re.search(r"select \d", page.locator("#text").inner_text()):
            violations.extend(axe_serious(page, axe, seen))
            return True
        return audited

    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
            page = browser.new_page(viewport={"width": 1000, "height": 900})
            page.goto(link)
            assert page.url.endswith("/welcome")
            assert page.get_by_text("Worked examples").is_visible()
            violations += axe_serious(page, axe, seen)
            page.get_by_label("I have read the information above").check()
            page.get_by_role("button", name="Start").click()
            assert page.url.endswith("/check")
            violations += axe_serious(page, axe, seen)
            check = rubric.comprehension_check()
            page.get_by_label(check.options[check.answer]).check()
            page.get_by_role("button", name="Continue").click()
            assert "/item/" in page.url

            # The rating page as an annotator sees it, saved for the record.
            assert page.locator("legend").all_inner_texts() == [c.label for c in rubric.criteria]
            assert "<b>Great</b>" in page.locator("#text").inner_text()  # shown as text, not markup
            page.screenshot(path=str(artifacts_dir / "rating_page.png"), full_page=True)
            violations += axe_serious(page, axe, seen)

            half = total // 2
            for done in range(half):
                assert page.locator(".progress-text").inner_text() == f"Page {done + 1} of {total}"
                attention_audited = audit_attention_check(page, attention_audited)
                rate_current_page(page, rubric)
            page.get_by_role("link", name="Leave and continue later").click()
            assert page.get_by_text("Your ratings are saved").is_visible()
            violations += axe_serious(page, axe, seen)
            browser.close()

            # Later, in a fresh browser: the same link resumes at the first unrated page.
            browser = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
            page = browser.new_page()
            page.goto(link)
            assert page.locator(".progress-text").inner_text() == f"Page {half + 1} of {total}"
            for _ in range(half, total):
                attention_audited = audit_attention_check(page, attention_audited)
                rate_current_page(page, rubric)
            assert page.url.endswith("/finish")
            assert page.locator(".completion-code").inner_text() == "THANKS-7"
            violations += axe_serious(page, axe, seen)
            page.goto(server.base_url + "/")
            violations += axe_serious(page, axe, seen)
            browser.close()
    finally:
        server.stop()
    assert (artifacts_dir / "rating_page.png").stat().st_size > 10_000
    (artifacts_dir / "axe_likert.txt").write_text(
        "\n".join(seen) + "\nserious/critical: " + repr(violations) + "\n", encoding="utf-8"
    )
    assert len(seen) == 7 and violations == []
    dispose_engines()
    with session_for(url) as s:
        done = s.scalar(select(func.count(Assignment.id)).where(Assignment.completed_at.is_not(None)))
        positions = s.scalars(select(Assignment.position).order_by(Assignment.completed_at)).all()
    assert done == total and positions == list(range(1, total + 1))


ELEVEN_POINTS = """
name = "eleven"
title = "Eleven points"
instructions = "Rate how well the text reads."
[scale]
min = 0
max = 10
labels = {"0" = "not at all", "5" = "halfway", "10" = "completely"}
[[criteria]]
name = "readability"
label = "Readability"
question = "How well does it read?"
anchors = {"0" = "unreadable, incomprehensible", "10" = "effortless throughout"}
[[criteria]]
name = "coherence"
label = "Coherence"
question = "Does it hang together?"
"""

# Per criterion: the boxes of its scale points, in document order, and what the page overflows.
SCALE_LAYOUT = """() => ({
  rows: [...document.querySelectorAll('.choices')].map(group =>
    [...group.querySelectorAll('.choice')].map(choice => {
      const box = choice.getBoundingClientRect();
      const value = choice.querySelector('.value').getBoundingClientRect();
      return {text: choice.querySelector('.value').textContent, top: box.top, left: box.left, right: box.right,
              valueLeft: value.left, valueRight: value.right};
    })),
  scrollWidth: document.documentElement.scrollWidth,
  width: window.innerWidth,
})"""


@pytest.mark.parametrize("rubric_name", ["graphmax", "eleven-point"])
def test_rating_scale_is_one_row_in_order_on_a_390px_phone(tmp_path, artifacts_dir, rubric_name):
    from playwright.sync_api import sync_playwright

    if rubric_name == "eleven-point":
        source = tmp_path / "eleven.toml"
        source.write_text(ELEVEN_POINTS)
        rubric_name = str(source)
    rubric = load_rubric(rubric_name)
    url, created, _ = make_study(
        tmp_path, rubric=rubric_name, n_prompts=2, items_per_system=2, raters_per_item=1, annotators=1, attention_rate=0
    )
    server = start_server(
        url, workers=1, threads=2, log_path=tmp_path / "server.log", env={"MAXBENCH_HOME": str(tmp_path / "home")}
    )
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
            page = browser.new_page(viewport={"width": 390, "height": 844}, device_scale_factor=1)
            page.goto(created.links(server.base_url)[0][1])
            page.get_by_label("I have read the information above").check()
            page.get_by_role("button", name="Start").click()
            check = rubric.comprehension_check()
            page.get_by_label(check.options[check.answer], exact=True).check()
            page.get_by_role("button", name="Continue").click()
            page.wait_for_load_state("load")  # the stylesheet applied
            assert "/item/" in page.url
            layout = page.evaluate(SCALE_LAYOUT)
            page.screenshot(path=str(artifacts_dir / f"rating_page_390px_{rubric.name}.png"), full_page=True)
            browser.close()
    finally:
        server.stop()
    dispose_engines()
    assert layout["width"] == 390 and layout["scrollWidth"] <= 390  # nothing sticks out sideways
    assert len(layout["rows"]) == len(rubric.criteria)
    for row in layout["rows"]:
        assert [int(c["text"]) for c in row] == rubric.values  # every point, lowest first
        assert max(c["top"] for c in row) - min(c["top"] for c in row) < 1  # one row
        lefts = [c["left"] for c in row]
        assert lefts == sorted(lefts) and len(set(lefts)) == len(lefts)  # left to right
        assert row[-1]["right"] <= 390
        for c in row:  # each number is inside its own box
            assert c["left"] <= c["valueLeft"] and c["valueRight"] <= c["right"]
