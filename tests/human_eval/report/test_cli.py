"""``maxbench report`` end to end: files written, reproducibility, escaping, bad input."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from maxbench import cli as cli_module
from maxbench.cli import main
from tests.support.paths import DATA, ROOT
from tests.support.ratings import RATINGS_HEADER

PAIRED = DATA / "ratings_paired.csv"
FAST = ["--n-boot", "200"]


def run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def write_csv(path: Path, rows: list[dict]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return path


def grid(
    systems=("A", "B"),
    items=4,
    annotators=("x", "y"),
    criteria=("q",),
    value=lambda s, i, a, c: 1 + (i + len(a) + (s == "B")) % 5,
    **extra,
) -> list[dict]:
    return [
        dict(
            study="s",
            item=f"p{i}",
            system=s,
            annotator=a,
            criterion=c,
            value=value(s, i, a, c),
            scale_min=1,
            scale_max=5,
            **extra,
        )
        for a in annotators
        for s in systems
        for i in range(items)
        for c in criteria
    ]


def test_report_is_registered_in_the_cli():
    assert cli_module.report_cli in cli_module.COMMAND_MODULES


def test_report_writes_every_file(tmp_path, capsys):
    rc, out, err = run(
        capsys, "report", "--ratings", PAIRED, "--reference", "graphmax", "--out", tmp_path, "--min-seconds", "3", *FAST
    )
    assert rc == 0, err
    folder = tmp_path / "demo"  # named after the study
    names = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert names == [
        "figures/likert-01-fluency.png",
        "figures/likert-01-fluency.svg",
        "figures/likert-02-diversity.png",
        "figures/likert-02-diversity.svg",
        "report.html",
        "report.json",
        "report.md",
    ]
    md = (folder / "report.md").read_text()
    # graphmax Table 9 layout: mean (sd), stars against the reference
    assert "| Aspect | graphmax | softmax | sparsemax |" in md
    assert "| fluency | 3.93 (0.98) | 2.90 (1.08)* | 2.90 (0.94)* |" in md
    assert "| softmax | 2.90* | 2.93* |" in md  # POSG Table 4 layout
    assert "Krippendorff's α (ordinal)" in md
    assert "paired: all 10 items were rated for both 'graphmax' and 'softmax'" in md
    assert "| faster than 3 s on the item | 10 |" in md
    html = (folder / "report.html").read_text()
    assert html.count('src="data:image/png;base64,') == 2
    assert "http://" not in html and "https://" not in html and "<script" not in html
    report = json.loads((folder / "report.json").read_text())
    assert report["sha256"] == "661c21639f2a5bdfb0190656386df7410d442a44121b7b4270d2f6ad8908e005"
    assert report["versions"]["scipy"] and report["options"]["min_seconds"] == 3
    assert report["exclusions"]["rows_in"] == 186 and report["exclusions"]["rows_kept"] == 176
    comparison = report["comparisons"][0]
    assert comparison["primary"] == "wilcoxon" and comparison["wilcoxon"]["pvalue_holm"] < 0.05
    assert (folder / "figures/likert-01-fluency.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_same_input_gives_byte_identical_files(tmp_path):
    """Two processes with different hash seeds write the same bytes; so does a rerun in place."""

    def report(out: Path, seed: str):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "maxbench",
                "report",
                "--ratings",
                str(PAIRED),
                "--out",
                str(out),
                "--reference",
                "graphmax",
                "--n-boot",
                "300",
            ],
            check=True,
            cwd=ROOT,
            env=env,
            capture_output=True,
        )
        return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}

    first = report(tmp_path / "one", "1")
    second = report(tmp_path / "two", "2")
    assert len(first) == 7
    assert first == second
    assert report(tmp_path / "one", "3") == first


def test_stale_figures_of_an_earlier_report_are_removed(tmp_path, capsys):
    assert run(capsys, "report", "--ratings", PAIRED, "--out", tmp_path, "--name", "r", *FAST)[0] == 0
    rows = [r for r in grid(criteria=("only",))]
    assert (
        run(
            capsys, "report", "--ratings", write_csv(tmp_path / "x.csv", rows), "--out", tmp_path, "--name", "r", *FAST
        )[0]
        == 0
    )
    assert sorted(p.name for p in (tmp_path / "r" / "figures").iterdir()) == [
        "likert-01-only.png",
        "likert-01-only.svg",
    ]


def test_user_data_is_escaped(tmp_path, capsys):
    evil_system = "<script>alert(1)</script>"
    evil_aspect = "a|b *c* [x](javascript:y)"
    rows = grid(systems=("ok", evil_system), criteria=(evil_aspect,), annotators=("<b>x</b>", "y"))
    rc, _, err = run(
        capsys,
        "report",
        "--ratings",
        write_csv(tmp_path / "evil.csv", rows),
        "--out",
        tmp_path,
        "--reference",
        evil_system,
        "--alternative",
        "greater",
        *FAST,
    )
    assert rc == 0, err
    html = (tmp_path / "s" / "report.html").read_text()
    assert "<script" not in html and "<b>x</b>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    md = (tmp_path / "s" / "report.md").read_text()
    assert "a\\|b \\*c\\* \\[x\\](javascript:y)" in md
    assert "<script>" not in md


def test_json_input_gives_the_same_statistics_as_csv(tmp_path, capsys):
    with open(PAIRED, newline="") as f:
        records = list(csv.DictReader(f))
    for r in records:  # a JSON export has numbers, not strings
        r["value"] = int(r["value"])
    (tmp_path / "r.json").write_text(json.dumps({"ratings": records}))
    assert run(capsys, "report", "--ratings", PAIRED, "--out", tmp_path, "--name", "c", *FAST)[0] == 0
    assert run(capsys, "report", "--ratings", tmp_path / "r.json", "--out", tmp_path, "--name", "j", *FAST)[0] == 0
    from_csv = json.loads((tmp_path / "c" / "report.json").read_text())
    from_json = json.loads((tmp_path / "j" / "report.json").read_text())
    for key in ("comparisons", "agreement", "descriptives", "annotators", "exclusions"):
        assert from_csv[key] == from_json[key]
    assert from_csv["sha256"] != from_json["sha256"]


# --------------------------------------------------------------------------- stated warnings (exit 0)


def test_one_annotator_alpha_undefined_is_said(tmp_path, capsys):
    rows = grid(annotators=("solo",))
    rc, _, err = run(
        capsys,
        "report",
        "--ratings",
        write_csv(tmp_path / "solo.csv", rows),
        "--out",
        tmp_path,
        "--reference",
        "A",
        *FAST,
    )
    assert rc == 0, err
    md = (tmp_path / "s" / "report.md").read_text()
    assert "undefined: only one annotator (solo) rated this aspect; alpha needs two or more" in md
    assert json.loads((tmp_path / "s" / "report.json").read_text())["agreement"][0]["ordinal"] is None


def test_system_without_ratings_on_an_aspect_is_warned(tmp_path, capsys):
    rows = [r for r in grid(criteria=("q", "r")) if not (r["system"] == "B" and r["criterion"] == "r")]
    rc, _, err = run(
        capsys,
        "report",
        "--ratings",
        write_csv(tmp_path / "gap.csv", rows),
        "--out",
        tmp_path,
        "--reference",
        "A",
        *FAST,
    )
    assert rc == 0, err
    md = (tmp_path / "s" / "report.md").read_text()
    assert "system 'B' has no ratings for aspect 'r'" in md
    assert "no comparison of 'B' with 'A' on 'r'" in md


def test_defaults_are_stated(tmp_path, capsys):
    rows = [{k: v for k, v in r.items() if k not in ("scale_min", "scale_max")} for r in grid()]
    rc, _, err = run(capsys, "report", "--ratings", write_csv(tmp_path / "plain.csv", rows), "--out", tmp_path, *FAST)
    assert rc == 0, err
    md = (tmp_path / "s" / "report.md").read_text()
    assert "no --reference given: comparing against 'A', the first system by name" in md
    assert "no scale given for 'q': using the observed range 1-5" in md


def test_flags_that_are_not_excluded_are_stated(tmp_path, capsys):
    rows = grid(flags="revoked")
    rc, _, err = run(capsys, "report", "--ratings", write_csv(tmp_path / "f.csv", rows), "--out", tmp_path, *FAST)
    assert rc == 0, err
    assert "carry the flag 'revoked', which is not excluded" in (tmp_path / "s" / "report.md").read_text()
    rc, _, err = run(
        capsys, "report", "--ratings", tmp_path / "f.csv", "--out", tmp_path, "--exclude-flag", "revoked", *FAST
    )
    assert rc == 2 and "no ratings are left after the exclusions (flag revoked: 16)" in err


def test_several_studies_need_a_choice(tmp_path, capsys):
    rows = grid() + [dict(r, study="t") for r in grid()]
    path = write_csv(tmp_path / "two.csv", rows)
    rc, _, err = run(capsys, "report", "--ratings", path, "--out", tmp_path, *FAST)
    assert rc == 2 and "holds 2 studies (s, t); pick one with --select-study ID" in err
    rc, _, err = run(capsys, "report", "--ratings", path, "--out", tmp_path, "--select-study", "t", *FAST)
    assert rc == 0 and (tmp_path / "t" / "report.md").exists()


# --------------------------------------------------------------------------- errors (exit 2, one line)


def bad_cases(tmp: Path) -> list[tuple[list, str]]:
    good = grid()
    cases = []
    no_value = [{k: v for k, v in r.items() if k != "criterion"} for r in good]
    cases.append(([write_csv(tmp / "nocol.csv", no_value)], "lacks required column(s) criterion"))
    latin1 = tmp / "latin1.csv"
    latin1.write_bytes("study,item,system,annotator,criterion,value\ns,p1,caf\xe9,x,q,3\n".encode("latin-1"))
    cases.append(([latin1], "latin1.csv is not UTF-8 (byte 0xe9 at offset 52); re-save it as UTF-8"))
    outside = [dict(r, value=7) if i == 3 else r for i, r in enumerate(good)]
    cases.append(
        (
            [write_csv(tmp / "outside.csv", outside)],
            "1 rating(s) in outside.csv lie outside the scale (first: line 5, 'q' = 7, scale 1-5",
        )
    )
    cases.append(([write_csv(tmp / "outside2.csv", good), "--scale", "1:4"], "lie outside the scale"))
    mixed = [dict(r, scale_max=7) if r["annotator"] == "y" else r for r in good]
    cases.append(([write_csv(tmp / "mixed.csv", mixed)], "aspect 'q' mixes scales 1-5, 1-7"))
    cases.append(
        (
            [write_csv(tmp / "ref.csv", good), "--reference", "C"],
            "reference system 'C' has no ratings in ref.csv; systems present: A, B",
        )
    )
    cases.append(([tmp / "missing.csv"], "does not exist"))
    cases.append(
        (
            [write_csv(tmp / "fast.csv", grid(seconds=2)), "--min-seconds", "5"],
            "no ratings are left after the exclusions (faster than 5 s on the item: 16)",
        )
    )
    dup = good + [good[0]]
    cases.append(([write_csv(tmp / "dup.csv", dup)], "rated item 'p0' of system 'A' on 'q' twice"))
    word = [dict(r, value="good") if i == 0 else r for i, r in enumerate(good)]
    cases.append(([write_csv(tmp / "word.csv", word)], "line 2: value is 'good', not a number"))
    cases.append(([write_csv(tmp / "scale.csv", good), "--scale", "5:1"], "--scale '5:1' is empty"))
    cases.append(([write_csv(tmp / "name.csv", good), "--name", "../x"], "--name '../x' is not a plain folder name"))
    (tmp / "empty.csv").write_text("")
    cases.append(([tmp / "empty.csv"], "empty.csv is empty"))
    (tmp / "header.csv").write_text("study,item,system,annotator,criterion,value\n")
    cases.append(([tmp / "header.csv"], "holds no ratings"))
    (tmp / "bad.json").write_text("{not json")
    cases.append(([tmp / "bad.json"], "bad.json is not valid JSON"))
    return cases


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    for extra, message in bad_cases(tmp_path):
        rc, out, err = run(capsys, "report", "--ratings", *extra, "--out", tmp_path / "out", *FAST)
        assert rc == 2, (extra, err)
        assert err.startswith("maxbench: error: ") and err.count("\n") == 1, err
        assert message in err, (message, err)
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("report.md"))


def test_bad_options_are_rejected(tmp_path, capsys):
    for extra, message in [
        (["--alpha", "1.5"], "--alpha 1.5 is not a significance level"),
        (["--n-boot", "10"], "--n-boot 10 is too few"),
        (["--scale", "a:b"], "--scale 'a:b' is not MIN:MAX"),
        (["--select-study", "s", "--study", "s"], "not allowed with"),
    ]:
        try:
            rc, _, err = run(capsys, "report", "--ratings", PAIRED, "--out", tmp_path, *extra)
        except SystemExit as exc:  # argparse's own usage errors exit 2 too
            rc, err = exc.code, capsys.readouterr().err
        assert rc == 2 and message in err, err


# --------------------------------------------------------------------------- from the rating database


def test_report_from_a_study_in_the_database(tmp_path, capsys):
    pytest.importorskip("maxbench.human_eval.studies.export")
    from maxbench.human_eval.store.db import dispose_engines, session_for
    from maxbench.human_eval.store.models import Assignment, Rating
    from maxbench.human_eval.studies.create import create_study
    from maxbench.human_eval.studies.export import long_format_rows, rows_to_csv
    from maxbench.human_eval.studies.options import StudyOptions
    from maxbench.human_eval.studies.rubrics import load_rubric

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with open(run_dir / "generations.jsonl", "w") as f:
        for system in ("m/softmax", "m/graphmax"):
            for p in range(6):
                f.write(
                    json.dumps(
                        {
                            "system": system,
                            "prompt_id": f"food-{p:04d}",
                            "sample": 0,
                            "prompt": f"Prompt {p}",
                            "text": f" text {p} by {system}",
                            "reference": f" reference {p}",
                        }
                    )
                    + "\n"
                )
    url = f"sqlite:///{tmp_path / 'ratings.sqlite3'}"
    try:
        with session_for(url, create=True) as session:
            created = create_study(
                session,
                run_dir,
                load_rubric("fluency"),
                StudyOptions(items_per_system=6, raters_per_item=3, attention_rate=0.0),
            )
            for n, assignment in enumerate(session.query(Assignment).order_by(Assignment.id).all()):
                graphmax = "graphmax" in assignment.item.system.name
                assignment.seconds = 10.0 + n
                session.add(
                    Rating(assignment_id=assignment.id, criterion="fluency", value=min(5, 2 + graphmax * 2 + n % 2))
                )
            session.commit()
            export = rows_to_csv(long_format_rows(session, created.slug))
        rc, _, err = run(
            capsys,
            "report",
            "--study",
            created.slug,
            "--db",
            url,
            "--out",
            tmp_path,
            "--reference",
            "m/graphmax",
            *FAST,
        )
        assert rc == 0, err
        from_db = json.loads((tmp_path / created.slug / "report.json").read_text())
        (tmp_path / "export.csv").write_text(export)
        assert (
            run(
                capsys,
                "report",
                "--ratings",
                tmp_path / "export.csv",
                "--out",
                tmp_path,
                "--name",
                "csv",
                "--reference",
                "m/graphmax",
                *FAST,
            )[0]
            == 0
        )
        from_csv = json.loads((tmp_path / "csv" / "report.json").read_text())
        for key in ("comparisons", "agreement", "descriptives", "annotators"):
            assert from_db[key] == from_csv[key]
        assert from_db["comparisons"][0]["design"]["kind"] == "paired"
        assert from_db["agreement"][0]["n_annotators"] == 3
        rc, _, err = run(capsys, "report", "--study", "nope", "--db", url, "--out", tmp_path, *FAST)
        assert rc == 2 and "no study 'nope'" in err
    finally:
        dispose_engines()


def test_options_reach_the_tests_and_are_stated(tmp_path, capsys):
    rc, _, err = run(
        capsys,
        "report",
        "--ratings",
        PAIRED,
        "--reference",
        "graphmax",
        "--out",
        tmp_path,
        "--alternative",
        "greater",
        "--alpha",
        "0.1",
        "--design",
        "unpaired",
        *FAST,
    )
    assert rc == 0, err
    report = json.loads((tmp_path / "demo" / "report.json").read_text())
    comparison = report["comparisons"][0]
    assert comparison["primary"] == "mannwhitneyu" and comparison["wilcoxon"] is None
    assert comparison["mannwhitney"]["alternative"] == "greater"
    assert "unpaired (forced by --design)" in comparison["design"]["statement"]
    md = (tmp_path / "demo" / "report.md").read_text()
    assert "Holm-adjusted p < 0.1 (one-sided, H1: reference rated higher)" in md


def test_a_report_over_one_item_says_n_a_with_the_reason(tmp_path, capsys):
    ratings = write_csv(tmp_path / "r.csv", grid(items=1, annotators=("x", "y", "z")))
    rc, out, err = run(
        capsys,
        "report",
        "--ratings",
        ratings,
        "--reference",
        "A",
        "--out",
        tmp_path / "rep",
        "--min-seconds",
        "0",
        *FAST,
    )
    assert rc == 0, err
    (md,) = (tmp_path / "rep").rglob("report.md")
    text = md.read_text()
    assert "n/a" in text and "fewer than two items to resample" in text
    assert "[-0.19, -0.19]" not in text


def test_report_with_a_semicolon_ratings_csv_is_one_line(tmp_path, cli):
    f = tmp_path / "ratings.csv"
    f.write_text(";".join(RATINGS_HEADER) + "\n" + ";".join(["s", "p1", "a", "r1", "fluency", "3"]) + "\n")
    rc, _, err = cli("report", "--ratings", str(f))
    assert rc == 2 and "Traceback" not in err
    assert "seems to use ';' as its delimiter" in err
