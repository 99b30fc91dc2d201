"""A human study on the conditional lineup (issue 40): the `conditional` rubric, raters shown the
requested attributes (escaped) and asked whether the text keeps to them, on the committed run."""

import html
import json
import re
from urllib.parse import urlsplit

import pytest
from sqlalchemy import select

from maxbench.errors import MaxbenchError
from maxbench.human_eval.app.factory import create_app
from maxbench.human_eval.store.db import dispose_engines, session_for
from maxbench.human_eval.store.models import Assignment, Item
from maxbench.human_eval.studies.create import create_study
from maxbench.human_eval.studies.export import long_format_rows
from maxbench.human_eval.studies.options import StudyOptions
from maxbench.human_eval.studies.rubrics import Rubric, load_rubric, parse_rubric, preset_names
from maxbench.human_eval.testing.participants import csrf_token, enter_with_client
from tests.support.paths import ROOT

RUN = ROOT / "results" / "conditional" / "runs" / "conditional-food-attrs"
FOOD_PROMPTS = {"Rating: 5 stars. Review:", "Rating: 1 to 4 stars. Review:"}
PROMPT_BOX = re.compile(r'<div class="label">([^<]*)</div>\s*<div class="textbox prompt" id="prompt">(.*?)</div>', re.S)
EVIL_PROMPT = "Rating: <script>alert(1)</script> stars. Review:"


def test_conditional_rubric_loads_with_fluency_and_attributes():
    assert "conditional" in preset_names()
    rubric = load_rubric("conditional")
    assert rubric.criterion_names == ["fluency", "attributes"]
    assert (rubric.scale_min, rubric.scale_max) == (1, 5)
    attributes = rubric.criteria[1]
    assert "keep to the requested attributes" in attributes.question
    assert attributes.anchors == {1: "contradicts them", 3: "partly / cannot tell", 5: "keeps to them fully"}
    assert rubric.prompt_label == "Requested attributes"
    assert rubric.examples and all(set(e.scores) == {"fluency", "attributes"} for e in rubric.examples)
    check = rubric.comprehension_check()
    assert rubric.check is not None and "contradicts" in check.options[check.answer]
    assert Rubric.from_json(rubric.to_json()) == rubric


def test_prompt_label_defaults_to_prompt_and_is_validated():
    assert load_rubric("fluency").prompt_label == "Prompt"
    stored = load_rubric("conditional").to_json()
    del stored["prompt_label"]  # a study stored before the key existed
    assert Rubric.from_json(stored).prompt_label == "Prompt"
    base = {
        "name": "x",
        "title": "X",
        "instructions": "Rate.",
        "scale": {"min": 1, "max": 5},
        "criteria": [{"name": "q", "label": "Q"}],
    }
    assert parse_rubric({**base, "prompt_label": "Topic"}).prompt_label == "Topic"
    with pytest.raises(MaxbenchError, match="'prompt_label' must be a string"):
        parse_rubric({**base, "prompt_label": 3})
    with pytest.raises(MaxbenchError, match="prompt_label is 41 characters long"):
        parse_rubric({**base, "prompt_label": "x" * 41})


def _study(tmp_path, run_dir, items_per_system):
    url = f"sqlite:///{tmp_path / 'ratings.sqlite3'}"
    with session_for(url, create=True) as session:
        created = create_study(
            session,
            run_dir,
            load_rubric("conditional"),
            StudyOptions(items_per_system=items_per_system, raters_per_item=1, attention_rate=0),
        )
    return url, created, create_app({"DB_URL": url, "SECRET_KEY": "test"})


@pytest.fixture
def conditional_study(tmp_path):
    yield _study(tmp_path, RUN, items_per_system=8)
    dispose_engines()


def test_raters_see_the_requested_attributes_and_rate_keeping_to_them(conditional_study):
    url, created, app = conditional_study
    n_systems = len(json.loads((RUN / "scores.json").read_text())["systems"])  # the conditional lineup's
    assert n_systems >= 4 and created.n_items == n_systems * 8
    client = app.test_client()
    answer = load_rubric("conditional").comprehension_check().answer
    path = enter_with_client(client, created, 0, answer)
    shown = []
    while path.startswith("/item/"):
        page = client.get(path)
        assert page.status_code == 200, page.text
        label, prompt = PROMPT_BOX.search(page.text).groups()
        assert label == "Requested attributes"
        with session_for(url) as s:
            item = s.scalar(
                select(Item).join(Assignment, Assignment.item_id == Item.id).where(Assignment.public_id == path[6:])
            )
            assert html.unescape(prompt) == item.prompt  # the item's own attributes
        shown.append(html.unescape(prompt))
        assert "Does the text keep to the requested attributes" in page.text
        assert "contradicts them" in page.text and "keeps to them fully" in page.text
        for criterion in ("fluency", "attributes"):
            assert len(re.findall(rf'name="c_{criterion}" value="[1-5]"', page.text)) == 5
        r = client.post(path, data={"csrf_token": csrf_token(page.text), "c_fluency": "4", "c_attributes": "2"})
        assert r.status_code == 303
        path = r.location
    assert path == "/finish" and len(shown) == n_systems * 8
    # Both ratings the run asked for were shown (with seed 0: 8 prompts of 80, 40 of each), e.g. "5 stars".
    assert set(shown) == FOOD_PROMPTS
    with session_for(url) as s:
        rows = long_format_rows(s, created.slug)
    assert {(r["criterion"], r["value"]) for r in rows} == {("fluency", 4), ("attributes", 2)}
    assert len(rows) == 2 * n_systems * 8


def test_requested_attributes_are_escaped(tmp_path):
    """A prompt is untrusted run data: its markup is shown as text, on a run made of the committed rows."""
    run_dir = tmp_path / "runs" / "conditional-evil"
    run_dir.mkdir(parents=True)
    rows = [json.loads(line) for line in (RUN / "generations.jsonl").read_text().splitlines() if line.strip()]
    keep = sorted({r["prompt_id"] for r in rows})[:3]
    with open(run_dir / "generations.jsonl", "w", encoding="utf-8") as f:
        for r in rows:
            if r["prompt_id"] in keep:
                f.write(json.dumps({**r, "prompt": EVIL_PROMPT}) + "\n")
    (run_dir / "manifest.json").write_text((RUN / "manifest.json").read_text())
    try:
        _, created, app = _study(tmp_path, run_dir, items_per_system=2)
        client = app.test_client()
        path = enter_with_client(client, created, 0, load_rubric("conditional").comprehension_check().answer)
        assert urlsplit(path).path.startswith("/item/")
        page = client.get(path).text
    finally:
        dispose_engines()
    assert "Rating: &lt;script&gt;alert(1)&lt;/script&gt; stars. Review:" in page
    assert "<script>alert" not in page
    assert re.findall(r"<script[^>]*>", page) == ['<script src="/static/rating.js">']
    assert "Does the text keep to the requested attributes" in page
