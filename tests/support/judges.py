"""The small study the HTTP judge's tests judge (against the local OpenAI-shaped server and the real one)."""

from __future__ import annotations

from maxbench.human_eval.store.db import session_for
from maxbench.human_eval.studies.create import create_study
from maxbench.human_eval.studies.options import StudyOptions
from maxbench.human_eval.studies.rubrics import load_rubric
from maxbench.human_eval.testing.participants import SYSTEMS, write_run


def fluency_study(tmp_path) -> tuple[str, str]:
    """A Likert study (rubric ``fluency``) of 6 texts, 3 prompts x 2 systems, one rater each, in a
    SQLite file under ``tmp_path``: (database URL, study slug)."""
    url = f"sqlite:///{tmp_path / 'ratings.sqlite3'}"
    run = write_run(tmp_path / "run", SYSTEMS, 6)
    with session_for(url, create=True) as s:
        slug = create_study(
            s, run, load_rubric("fluency"), StudyOptions(items_per_system=3, raters_per_item=1, attention_rate=0)
        ).slug
    return url, slug
