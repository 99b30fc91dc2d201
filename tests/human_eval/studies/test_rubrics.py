"""Rubric presets from the papers and validation of custom rubric TOML files."""

import pytest

from maxbench.errors import MaxbenchError
from maxbench.human_eval.studies.rubrics import PRESET_ALIASES, Rubric, load_rubric, preset_names

PAPER_PRESETS = {
    # name: (scale, criteria) as the papers define them
    "graphmax": ((1, 5), ["text_style", "word_choice", "word_order_variation", "story_line"]),
    "posg-lm": ((1, 5), ["diversity", "quality"]),
    "posg-paraphrase": ((1, 5), ["lexical_diversity", "syntactic_diversity", "fluency", "relevance"]),
    "kerbs-dialogue": ((0, 2), ["response"]),
    "fluency": ((1, 5), ["fluency"]),
}


@pytest.mark.parametrize("name", sorted(PAPER_PRESETS))
def test_preset_matches_the_paper_and_round_trips(name):
    rubric = load_rubric(name)
    (lo, hi), criteria = PAPER_PRESETS[name]
    assert (rubric.scale_min, rubric.scale_max) == (lo, hi)
    assert rubric.criterion_names == criteria
    assert rubric.instructions and rubric.examples, "every preset has instructions and worked examples"
    for example in rubric.examples:
        assert set(example.scores) <= set(criteria)
    check = rubric.comprehension_check()
    assert 0 <= check.answer < len(check.options)
    assert Rubric.from_json(rubric.to_json()) == rubric


def test_kerbs_preset_defines_each_score_as_in_appendix_b():
    labels = load_rubric("kerbs-dialogue").scale_labels
    assert labels[0].startswith("neither") and "not both" in labels[1] and labels[2].startswith("fluent and")


def test_presets_are_listed():
    assert set(PAPER_PRESETS) <= set(preset_names())


def test_a_renamed_preset_still_loads_by_its_old_name_as_the_new_one():
    assert load_rubric("bestworst-quality") == load_rubric("best-worst-quality")
    assert load_rubric("bestworst-quality").name == "best-worst-quality"
    for old, new in PRESET_ALIASES.items():
        assert new in preset_names() and old not in preset_names()


GOOD = """
name = "mine"
title = "My study"
instructions = "Rate it."
[scale]
min = 1
max = 7
labels = {"1" = "bad", "7" = "good"}
[[criteria]]
name = "clarity"
label = "Clarity"
question = "How clear is it?"
[[examples]]
text = "Clear text."
scores = {clarity = 7}
explanation = "Very clear."
"""


def write(tmp_path, text):
    path = tmp_path / "rubric.toml"
    path.write_text(text)
    return path


def test_custom_rubric_loads_and_gets_a_default_check(tmp_path):
    rubric = load_rubric(write(tmp_path, GOOD))
    assert rubric.values == list(range(1, 8))
    check = rubric.comprehension_check()
    assert check.options[check.answer] == "7"


@pytest.mark.parametrize(
    "old,new,message",
    [
        ("min = 1\nmax = 7", "min = 5\nmax = 5", "must be below"),
        ("min = 1\nmax = 7", "min = 1\nmax = 40", "at most"),
        ("min = 1\nmax = 7", "min = 1.5\nmax = 7", "integer"),
        ("min = 1\nmax = 7", "min = true\nmax = 7", "integer"),
        ('[scale]\nmin = 1\nmax = 7\nlabels = {"1" = "bad", "7" = "good"}\n', "", "[scale]"),
        ('labels = {"1" = "bad", "7" = "good"}', 'labels = {"9" = "bad"}', "outside the scale"),
        ('name = "clarity"', 'name = "Clarity!"', "must start with a-z"),
        ("scores = {clarity = 7}", "scores = {clarity = 8}", "outside the scale"),
        ("scores = {clarity = 7}", "scores = {fluency = 3}", "unknown criterion"),
        ('title = "My study"', 'title = "My study"\ncolour = "red"', "unknown key"),
        ('[[criteria]]\nname = "clarity"\nlabel = "Clarity"\nquestion = "How clear is it?"\n', "", "at least one"),
    ],
)
def test_bad_rubric_files_say_what_to_fix(tmp_path, old, new, message):
    assert old in GOOD
    with pytest.raises(MaxbenchError, match=message.replace("[", r"\[")):
        load_rubric(write(tmp_path, GOOD.replace(old, new)))


def test_duplicate_criteria_and_bad_check_are_rejected(tmp_path):
    dup = GOOD + '[[criteria]]\nname = "clarity"\nlabel = "Again"\n'
    with pytest.raises(MaxbenchError, match="appears twice"):
        load_rubric(write(tmp_path, dup))
    check = GOOD + '[check]\nquestion = "Q?"\noptions = ["a", "b"]\nanswer = 2\n'
    with pytest.raises(MaxbenchError, match="not an index"):
        load_rubric(write(tmp_path, check))


def test_not_toml_and_unknown_names(tmp_path):
    with pytest.raises(MaxbenchError, match="not valid TOML"):
        load_rubric(write(tmp_path, "name = = 1"))
    with pytest.raises(MaxbenchError, match="unknown rubric 'nosuch'"):
        load_rubric("nosuch")
    with pytest.raises(MaxbenchError, match="does not exist"):
        load_rubric(tmp_path / "missing.toml")


def test_cli_rubric_command(cli, tmp_path):
    rc, out, _ = cli("study", "rubric")
    assert rc == 0 and "kerbs-dialogue\t0..2" in out
    rc, out, err = cli("study", "rubric", write(tmp_path, GOOD.replace("max = 7", "max = 0")))
    assert rc == 2 and "maxbench: error: rubric" in err and "Traceback" not in err


def test_rubric_name_and_title_fit_the_study_columns(tmp_path):
    # The name starts every study's slug (64 characters); the title is shown as the study's (200).
    fits = GOOD.replace('name = "mine"', f'name = "{"n" * 48}"')
    assert load_rubric(write(tmp_path, fits)).name == "n" * 48
    with pytest.raises(MaxbenchError, match="at most 48"):
        load_rubric(write(tmp_path, GOOD.replace('name = "mine"', f'name = "{"n" * 49}"')))
    with pytest.raises(MaxbenchError, match="at most 200"):
        load_rubric(write(tmp_path, GOOD.replace('title = "My study"', f'title = "{"t" * 201}"')))
