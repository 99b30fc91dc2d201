"""Study design (balance, rater cap, order) and `maxbench study` commands on a small run."""

import json
import os
import random
import stat
from collections import Counter

import pytest
from sqlalchemy import select

from maxbench.errors import MaxbenchError
from maxbench.human_eval.store.db import session_for
from maxbench.human_eval.store.models import Annotator, Assignment, Item, StudySystem
from maxbench.human_eval.studies.design import build_design, paired_sequence
from maxbench.human_eval.studies.export import COLUMNS, long_format_rows
from maxbench.human_eval.testing.participants import SYSTEMS, make_study, write_run


@pytest.mark.parametrize(
    "n_prompts,n_systems,k,m", [(6, 2, 2, 2), (6, 2, 2, 4), (5, 3, 2, 7), (10, 2, 3, 5), (4, 4, 1, 3)]
)
def test_paired_design_caps_raters_and_balances(n_prompts, n_systems, k, m):
    rng = random.Random(1)
    grid = paired_sequence(n_prompts, n_systems, rng)
    assert sorted(grid) == [(p, s) for p in range(n_prompts) for s in range(n_systems)]
    index = {ps: i for i, ps in enumerate(sorted(grid))}
    design = build_design(
        [index[ps] for ps in grid], len(grid), k, m, seed=3, attention_rate=0.0, scale=[1, 2, 3, 4, 5]
    )
    assert design.ratings_per_text() == [k] * len(grid)  # exactly K raters per text, the cap
    loads = [len(p) for p in design.pages]
    assert max(loads) - min(loads) <= 1
    text_of = {i: ps for ps, i in index.items()}
    for pages in design.pages:
        texts = [text_of[p.text_index] for p in pages]
        assert len(set(texts)) == len(texts)  # never the same text twice
        per_system = Counter(s for _, s in texts)
        # Balanced over systems: counts differ by at most one (two for blocks spanning rounds).
        assert max(per_system.values()) - min(per_system.get(s, 0) for s in range(n_systems)) <= 2
        if len(texts) <= n_prompts:  # a block no longer than a round never repeats a prompt
            assert len({p for p, _ in texts}) == len(texts)


def test_design_is_seeded_and_attention_checks_are_spread():
    args = (list(range(20)), 20, 2, 2)
    one = build_design(*args, seed=7, attention_rate=0.2, scale=[1, 2, 3, 4, 5])
    two = build_design(*args, seed=7, attention_rate=0.2, scale=[1, 2, 3, 4, 5])
    other = build_design(*args, seed=8, attention_rate=0.2, scale=[1, 2, 3, 4, 5])
    assert one.pages == two.pages and one.pages != other.pages
    for pages in one.pages:
        checks = [i for i, p in enumerate(pages) if p.text_index is None]
        assert len(checks) == 4  # 0.2 x 20 rated texts
        assert checks[0] > 0  # never the first page
        assert all(b - a > 1 for a, b in zip(checks, checks[1:]))  # never two in a row
        assert all(pages[i].attention_value in range(1, 6) for i in checks)


def test_too_few_annotators_for_the_rater_cap():
    with pytest.raises(MaxbenchError, match="--annotators 3 or more"):
        build_design(list(range(4)), 4, 3, 2, seed=0, attention_rate=0, scale=[1, 2])


def test_study_hides_systems_and_records_order(tmp_path):
    url, created, run_dir = make_study(
        tmp_path, n_prompts=6, items_per_system=4, raters_per_item=2, annotators=3, attention_rate=0.25
    )
    with session_for(url) as s:
        systems = s.scalars(select(StudySystem)).all()
        assert sorted(x.name for x in systems) == sorted(SYSTEMS)
        assert all(x.code.startswith("sys-") and x.name not in x.code for x in systems)
        items = s.scalars(select(Item)).all()
        assert len(items) == 8
        # Paired design: each of the 4 sampled prompts is rated under both systems, same item code.
        by_code = Counter(i.code for i in items)
        assert len(by_code) == 4 and set(by_code.values()) == {2}
        annotators = s.scalars(select(Annotator)).all()
        assert len(annotators) == 3
        for a in annotators:
            positions = [x.position for x in a.assignments]
            assert positions == list(range(1, len(positions) + 1))
            assert any(x.attention for x in a.assignments)
        counts = Counter(x.item_id for x in s.scalars(select(Assignment)) if x.item_id)
        assert set(counts.values()) == {2}


def test_independent_design_and_run_with_too_few_items(tmp_path):
    run = write_run(tmp_path / "r", SYSTEMS, 3)
    url = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    from maxbench.human_eval.studies.create import create_study
    from maxbench.human_eval.studies.options import StudyOptions
    from maxbench.human_eval.studies.rubrics import load_rubric

    with session_for(url, create=True) as s:
        with pytest.raises(MaxbenchError, match="fewer than --items-per-system 5"):
            create_study(s, run, load_rubric("fluency"), StudyOptions(items_per_system=5, raters_per_item=1))
        with pytest.raises(MaxbenchError, match="not in"):
            create_study(
                s, run, load_rubric("fluency"), StudyOptions(systems=["nope"], items_per_system=1, raters_per_item=1)
            )
        created = create_study(
            s,
            run,
            load_rubric("fluency"),
            StudyOptions(items_per_system=2, raters_per_item=1, paired=False, attention_rate=0),
        )
        assert created.n_items == 4 and sum(created.n_pages) == 4


def test_export_contract_keys(tmp_path):
    url, created, _ = make_study(tmp_path, raters_per_item=1, annotators=1, attention_rate=0)
    with session_for(url) as s:
        a = s.scalars(select(Assignment).order_by(Assignment.position)).first()
        from maxbench.human_eval.store.models import Rating

        s.add(Rating(assignment_id=a.id, criterion="story_line", value=4))
        s.add(Rating(assignment_id=a.id, criterion="text_style", value=2))
        a.seconds = 3.25
        s.commit()
        rows = long_format_rows(s, created.slug)
        blind = long_format_rows(s, created.slug, blind=True)
    assert COLUMNS == [
        "study",
        "item",
        "system",
        "annotator",
        "criterion",
        "value",
        "position",
        "seconds",
        "flags",
        "scale_min",
        "scale_max",
    ]
    assert [list(r) for r in rows] == [COLUMNS, COLUMNS]
    # Sorted in the rubric's criterion order, not insertion order.
    assert [r["criterion"] for r in rows] == ["text_style", "story_line"]
    row = rows[1]
    assert row["study"] == created.slug and row["value"] == 4 and row["position"] == 1
    assert row["seconds"] == 3.25 and row["flags"] == "" and (row["scale_min"], row["scale_max"]) == (1, 5)
    assert row["system"] in SYSTEMS and blind[1]["system"].startswith("sys-")


def test_cli_study_create_list_export_close(cli, tmp_path):
    run = write_run(tmp_path / "runs" / "r1", SYSTEMS, 5)
    db = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    links = tmp_path / "links.csv"
    rc, out, err = cli(
        "study",
        "create",
        run,
        "--systems",
        *SYSTEMS,
        "--items-per-system",
        3,
        "--raters-per-item",
        2,
        "--annotators",
        3,
        "--rubric",
        "posg-lm",
        "--db",
        db,
        "--base-url",
        "https://rate.example.org/",
        "--links-out",
        links,
        "--completion-code",
        "C0DE",
    )
    assert rc == 0, err
    slug = out.split("study: ")[1].split()[0]
    assert "adm-" in out and out.count("https://rate.example.org/a/") == 3
    assert stat.S_IMODE(os.stat(links).st_mode) == 0o600
    assert len(links.read_text().splitlines()) == 4
    rc, out, _ = cli("study", "list", "--db", db)
    assert rc == 0 and slug in out and "open" in out and "0/12 rated" in out
    rc, out, _ = cli("study", "export", slug, "--format", "json", "--db", db)
    assert rc == 0 and json.loads(out) == []
    rc, out, _ = cli("study", "close", slug, "--db", db)
    assert rc == 0 and "closed" in out


@pytest.mark.parametrize(
    "args,message",
    [
        (["--items-per-system", "9"], "fewer than --items-per-system 9"),
        (["--rubric", "nosuch"], "unknown rubric"),
        (["--raters-per-item", "3", "--annotators", "2"], "--annotators 3 or more"),
    ],
)
def test_cli_study_create_bad_input_exits_2(cli, tmp_path, args, message):
    run = write_run(tmp_path / "runs" / "r1", SYSTEMS, 5)
    base = {"--items-per-system": "2", "--raters-per-item": "1", "--rubric": "fluency"}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = value
    argv = ["study", "create", run, "--db", f"sqlite:///{tmp_path / 'db.sqlite3'}"]
    for flag, value in base.items():
        argv += [flag, value]
    rc, out, err = cli(*argv)
    assert rc == 2 and message in err and "Traceback" not in err


def test_cli_errors_for_missing_run_database_and_study(cli, tmp_path):
    rc, _, err = cli(
        "study",
        "create",
        tmp_path / "none",
        "--items-per-system",
        1,
        "--raters-per-item",
        1,
        "--rubric",
        "fluency",
        "--db",
        f"sqlite:///{tmp_path / 'a.sqlite3'}",
    )
    assert rc == 2 and "not found" in err
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "generations.jsonl").write_text('{"system": "s", "prompt_id": "p"}\n')
    rc, _, err = cli(
        "study",
        "create",
        bad,
        "--items-per-system",
        1,
        "--raters-per-item",
        1,
        "--rubric",
        "fluency",
        "--db",
        f"sqlite:///{tmp_path / 'a.sqlite3'}",
    )
    assert rc == 2 and "generations.jsonl row 1 lacks field 'text'" in err  # the run folder's one rule of a row
    rc, _, err = cli("study", "list", "--db", f"sqlite:///{tmp_path / 'gone.sqlite3'}")
    assert rc == 2 and "no rating database" in err
    assert not (tmp_path / "gone.sqlite3").exists()
    rc, _, err = cli("study", "export", "nosuch", "--db", f"sqlite:///{tmp_path / 'a.sqlite3'}")
    assert rc == 2 and "no study 'nosuch'" in err


def _create_argv(tmp_path, *extra):
    run = write_run(tmp_path / "runs" / "r1", SYSTEMS, 5)
    db = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    return db, ["study", "create", run, "--items-per-system", 2, "--raters-per-item", 1, "--rubric", "fluency"] + [
        "--db",
        db,
        *extra,
    ]


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--base-url", "rate.example.org"], "--base-url 'rate.example.org' is not an http(s) address"),
        (["--base-url", "ftp://rate.example.org"], "is not an http(s) address"),
        (["--title", "t" * 201], "--title is 201 characters long"),
        (["--title", "  "], "--title is empty"),
        (["--completion-code", "c" * 101], "--completion-code must have 1 to 100 characters"),
    ],
)
def test_cli_study_create_checks_links_title_and_code_before_storing(cli, tmp_path, extra, message):
    db, argv = _create_argv(tmp_path, *extra)
    rc, out, err = cli(*argv)
    assert rc == 2 and message in err and "Traceback" not in err and "adm-" not in out
    if (tmp_path / "db.sqlite3").exists():
        rc, out, _ = cli("study", "list", "--db", db)
        assert "no studies yet" in out


def test_cli_links_file_that_cannot_be_written_stops_before_the_study(cli, tmp_path):
    (tmp_path / "afile").write_text("x")
    for target in (tmp_path / "afile" / "links.csv", tmp_path):
        db, argv = _create_argv(tmp_path, "--links-out", target)
        rc, out, err = cli(*argv)
        assert rc == 2 and "cannot write --links-out" in err and "adm-" not in out
    assert not (tmp_path / "db.sqlite3").exists()  # nothing was created: no links lost


def test_cli_links_file_is_kept_when_the_study_cannot_be_made(cli, tmp_path):
    links = tmp_path / "links.csv"
    links.write_text("annotator,link,pages\na01,https://x/a/earlier,3\n")
    db, argv = _create_argv(tmp_path, "--links-out", links, "--annotators", 99)
    rc, _, err = cli(*argv)
    assert rc == 2 and "leaves some with nothing" in err
    assert "earlier" in links.read_text()  # an earlier study's links are not wiped by a failed create
    (tmp_path / "fresh.csv").unlink(missing_ok=True)
    db, argv = _create_argv(tmp_path, "--links-out", tmp_path / "fresh.csv", "--annotators", 99)
    assert cli(*argv)[0] == 2 and not (tmp_path / "fresh.csv").exists()


def test_cli_export_to_an_unwritable_place_is_one_line(cli, tmp_path):
    db, argv = _create_argv(tmp_path)
    rc, out, _ = cli(*argv)
    slug = out.split("study: ")[1].split()[0]
    (tmp_path / "afile").write_text("x")
    for target in (tmp_path / "afile" / "ratings.csv", tmp_path):
        rc, _, err = cli("study", "export", slug, "--out", target, "--db", db)
        assert rc == 2 and "cannot write --out" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "content,message",
    [
        (b"\xff\xfe{}\n", "generations.jsonl:1 is not UTF-8"),
        (b"[1, 2]\n", "row 1 is not a JSON object"),
        (
            b'{"system": "s", "prompt_id": "p", "prompt": "x", "text": "y", "reference": "", "sample": "zero"}\n',
            "row 1 has a 'sample' that is not a whole number",
        ),
        (b'{"system": "s", "prompt_id": "p", "text": "y", "reference": ""}\n', "row 1 has no 'prompt'"),
    ],
)
def test_cli_study_create_on_a_malformed_run_is_one_line(cli, tmp_path, content, message):
    run = tmp_path / "run"
    run.mkdir()
    (run / "generations.jsonl").write_bytes(content)
    argv = ["study", "create", run, "--items-per-system", 1, "--raters-per-item", 1, "--rubric", "fluency"]
    rc, _, err = cli(*argv, "--db", f"sqlite:///{tmp_path / 'db.sqlite3'}")
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1


def test_cli_consent_file_that_is_not_text_is_one_line(cli, tmp_path):
    (tmp_path / "consent.txt").write_bytes(b"\xff\xfe\x00c")
    db, argv = _create_argv(tmp_path, "--consent-file", tmp_path / "consent.txt")
    rc, _, err = cli(*argv)
    assert rc == 2 and "not UTF-8 text" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "url", ["postgresql://maxbench:hunter2@127.0.0.1:1/ratings", "postgresql+nodriver://maxbench:hunter2@h/ratings"]
)
def test_database_errors_never_show_the_password_and_stay_one_line(cli, url):
    rc, _, err = cli("study", "list", "--db", url)
    assert rc == 2 and "hunter2" not in err and "maxbench:***@" in err
    assert len(err.strip().splitlines()) == 1
