"""A Prolific participant in headless Chromium against the real server: arrives by the public
study URL, passes the comprehension check on the second attempt, rates pairwise, slider and
best-worst pages with the keyboard only, leaves, comes back with the same id to the same page,
and ends on the redirect to Prolific with the completion code. axe-core (axe-playwright-python) audits
every annotator page: no serious or critical violation."""

import os

import pytest

from maxbench.human_eval.store.db import dispose_engines, session_for
from maxbench.human_eval.studies.create import create_study
from maxbench.human_eval.studies.options import StudyOptions
from maxbench.human_eval.studies.rubrics import load_rubric
from maxbench.human_eval.testing.participants import SYSTEMS, axe_serious, free_port, start_server, write_run

CHROMIUM = "/usr/bin/chromium"
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
PID = "5f3c2a1b9d8e7f6a5b4c3d2e"
CODE = "C7XK2P"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is absent: run scripts/browser_setup.sh"),
]


def rate_by_keyboard(page, kind):
    """Rate the page with the keyboard only and press Enter; waits for the next page."""
    from playwright.sync_api import Error as PlaywrightError

    before = page.url
    if kind == "pairwise":
        page.keyboard.press("2")  # B is better
        assert page.locator("input[name='c_overall'][value='2']").is_checked()
    elif kind == "best-worst":
        page.keyboard.press("3")  # C is the best; the focus moves on to the worst question
        page.keyboard.press("1")  # A is the worst
        assert page.locator("input[name='c_overall_best'][value='3']").is_checked()
        assert page.locator("input[name='c_overall_worst'][value='1']").is_checked()
    else:
        page.locator("input[type=range]").focus()
        for key in ("PageUp", "PageUp", "ArrowRight", "ArrowRight", "ArrowRight"):
            page.keyboard.press(key)
        assert page.locator("input[type=range]").input_value() == "73"
        assert page.locator("output").inner_text() == "73"
    page.keyboard.press("Enter")
    try:
        page.wait_for_url(lambda url: url != before)
    except PlaywrightError:  # the last page redirects to Prolific, which this machine cannot reach
        pass


def test_prolific_participant_by_keyboard_in_chromium(tmp_path, artifacts_dir):
    from axe_playwright_python.sync_playwright import Axe
    from playwright.sync_api import sync_playwright

    run = write_run(tmp_path / "run", [*SYSTEMS, "tiny/sparsemax/top_p=0.9"], 4)
    url = f"sqlite:///{tmp_path / 'ratings.sqlite3'}"
    slugs = {}
    with session_for(url, create=True) as s:
        for rubric in ("pairwise-quality", "direct-quality", "best-worst-quality"):
            options = StudyOptions(
                items_per_system=4 if rubric == "best-worst-quality" else 2,
                raters_per_item=1,
                annotators=2 if rubric == "pairwise-quality" else 1,
                attention_rate=0,
                completion_code=CODE,
                open_enrolment=True,
                check_attempts=2,
            )
            slugs[rubric] = create_study(s, run, load_rubric(rubric), options).slug
    server = start_server(
        url,
        port=free_port(),
        workers=1,
        threads=4,
        log_path=tmp_path / "server.log",
        env={"MAXBENCH_HOME": str(tmp_path / "home")},
    )
    axe, seen, violations, finals = Axe(), [], [], {}
    try:
        with sync_playwright() as p:
            for rubric_name, slug in slugs.items():
                rubric = load_rubric(rubric_name)
                public = f"{server.base_url}/s/{slug}?PROLIFIC_PID={PID}&STUDY_ID=st-1&SESSION_ID=se-1"
                browser = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
                context = browser.new_context()
                page = context.new_page()
                page.goto(public)
                assert page.url.endswith("/welcome") and PID not in page.content()
                violations += axe_serious(page, axe, seen)
                page.get_by_label("I have read the information above").check()
                page.keyboard.press("Enter")  # the consent form: Enter in a checkbox submits
                page.wait_for_url("**/check")
                violations += axe_serious(page, axe, seen)
                wrong = (rubric.check.answer + 1) % len(rubric.check.options)
                page.get_by_label(rubric.check.options[wrong], exact=True).check()
                page.get_by_role("button", name="Continue").click()
                assert page.url.endswith("/check")  # first attempt wrong: instructions again
                page.get_by_label(rubric.check.options[rubric.check.answer], exact=True).check()
                page.get_by_role("button", name="Continue").click()
                assert "/item/" in page.url
                violations += axe_serious(page, axe, seen)
                page.screenshot(path=str(artifacts_dir / f"crowd_{rubric.kind}_page.png"), full_page=True)

                first = page.locator(".progress-text").inner_text()
                rate_by_keyboard(page, rubric.kind)
                second = page.locator(".progress-text").inner_text()
                assert first != second
                page.get_by_role("link", name="Leave and continue later").click()
                violations += axe_serious(page, axe, seen)
                page.close()

                # another browser that knows the participant id is refused: the block is this browser's
                other = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
                intruder = other.new_page()
                response = intruder.goto(public)
                assert response.status == 409 and "another browser" in intruder.content()
                other.close()

                page = context.new_page()  # the participant comes back in their own browser
                requested = []
                page.on("request", lambda request, seen=requested: seen.append(request.url))
                page.goto(public)  # the same id: the same block, at the first unrated page
                assert page.locator(".progress-text").inner_text() == second
                while "/item/" in page.url and not any("prolific.com" in u for u in requested):
                    rate_by_keyboard(page, rubric.kind)
                finals[rubric.kind] = requested[-1]  # where the last submit's redirects ended
                browser.close()
    finally:
        server.stop()
        dispose_engines()
    assert finals == {
        k: f"https://app.prolific.com/submissions/complete?cc={CODE}" for k in ("pairwise", "direct", "best-worst")
    }
    (artifacts_dir / "axe_crowd.txt").write_text(
        "\n".join(seen) + "\nserious/critical: " + repr(violations) + "\n", encoding="utf-8"
    )
    assert violations == []
