"""``maxbench judge``: a model as a rater of kind "model" (tiny-random, in this process)."""

import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
import torch
from sqlalchemy import func, select, text, update

from maxbench.cli import main
from maxbench.human_eval.judges.judge import identity, judge_study
from maxbench.human_eval.judges.scoring import InProcessJudge
from maxbench.human_eval.judges.template import questions, render
from maxbench.human_eval.store.db import session_for
from maxbench.human_eval.store.models import Annotator, Item, Judgment, Study, utcnow
from maxbench.human_eval.studies.create import create_study
from maxbench.human_eval.studies.export import long_format_rows, participant_rows
from maxbench.human_eval.studies.options import StudyOptions
from maxbench.human_eval.studies.rubrics import load_rubric
from maxbench.human_eval.testing.participants import SYSTEMS, write_run

THREE = [*SYSTEMS, "tiny/sparsemax/top_p=0.9"]


def make(sqlite_url, tmp_path, rubric, systems=SYSTEMS, items=3, **options):
    run = write_run(tmp_path / "run", systems, 8, text_for=lambda s, i: f" and {s.split('/')[1][:5]} said {i} things.")
    opts = {"items_per_system": items, "raters_per_item": 1, "attention_rate": 0.0, "seed": 2} | options
    with session_for(sqlite_url, create=True) as s:
        return create_study(s, run, load_rubric(rubric), StudyOptions(**opts)).slug


def judgments(sqlite_url):
    with session_for(sqlite_url) as s:
        return s.scalars(select(Judgment).order_by(Judgment.id)).all()


def test_expected_likert_score_is_the_hand_computed_expectation_over_label_token_probabilities(
    sqlite_url, tmp_path, tiny
):
    slug = make(sqlite_url, tmp_path, "fluency")
    with session_for(sqlite_url) as s:
        summary = judge_study(s, slug, InProcessJudge(tiny), log=None)
        item = s.get(Item, judgments(sqlite_url)[0].item_id)
        rubric = load_rubric("fluency")
    assert summary.judged == 6 and summary.scoring == {"single-token"}
    row = judgments(sqlite_url)[0]
    page = questions(rubric, item.prompt, [item.text])[0].page
    # By hand: tiny-random's tokenizer is byte-level, so the label "3" is the vocabulary entry "3".
    context = tiny.tokenizer(render(page, tiny.tokenizer)[0])["input_ids"]
    with torch.inference_mode():
        probs = torch.softmax(tiny.model(torch.tensor([context])).logits[0, -1].double(), dim=-1)
    vocab = tiny.tokenizer.get_vocab()
    p = {v: float(probs[vocab[str(v)]]) for v in range(1, 6)}
    mass = sum(p.values())
    # float32 logits: the judge computes the last position's alone, so they agree to float32 rounding
    assert row.scoring == "single-token"
    assert row.label_mass == pytest.approx(mass, rel=1e-6)
    assert row.expected == pytest.approx(sum(v * q / mass for v, q in p.items()), rel=1e-6)
    assert row.value == max(p, key=p.get)
    assert row.probabilities == pytest.approx({str(v): q / mass for v, q in p.items()}, rel=1e-6)


def test_direct_assessment_scores_multi_token_labels_as_sequences(sqlite_url, tmp_path, tiny):
    slug = make(sqlite_url, tmp_path, "direct-quality", items=1)
    with session_for(sqlite_url) as s:
        summary = judge_study(s, slug, InProcessJudge(tiny), log=None)
    rows = judgments(sqlite_url)
    assert summary.scoring == {"sequence"} and {r.scoring for r in rows} == {"sequence"}
    for r in rows:
        assert list(r.probabilities) == [str(v) for v in range(0, 101, 10)]
        assert sum(r.probabilities.values()) == pytest.approx(1.0)
        assert 0 <= r.expected <= 100 and r.value % 10 == 0
        assert r.expected == pytest.approx(sum(int(k) * p for k, p in r.probabilities.items()))


def test_sequence_scores_are_the_hand_computed_products_of_each_label_tokens_probabilities(sqlite_url, tmp_path, tiny):
    """ "100" is three tokens of tiny-random: p("100") = p("1") p("0" | "1") p("0" | "10"), each
    from its own forward pass here (the judge runs the page once and each label's later tokens on its cache)."""
    slug = make(sqlite_url, tmp_path, "direct-quality", items=1)
    with session_for(sqlite_url) as s:
        judge_study(s, slug, InProcessJudge(tiny), log=None, limit=1)
        row = judgments(sqlite_url)[0]
        item = s.get(Item, row.item_id)
    page = questions(load_rubric("direct-quality"), item.prompt, [item.text])[0].page
    context = tiny.tokenizer(render(page, tiny.tokenizer)[0])["input_ids"]
    vocab = tiny.tokenizer.get_vocab()
    p = {}
    for label in [str(v) for v in range(0, 101, 10)]:
        prob, seen = 1.0, list(context)
        for ch in label:
            with torch.inference_mode():
                logits = tiny.model(torch.tensor([seen])).logits[0, -1].double()
            prob *= float(torch.softmax(logits, dim=-1)[vocab[ch]])
            seen.append(vocab[ch])
        p[label] = prob
    mass = sum(p.values())
    assert row.scoring == "sequence" and row.label_mass == pytest.approx(mass, rel=1e-6)
    assert row.probabilities == pytest.approx({k: v / mass for k, v in p.items()}, rel=1e-6)
    assert row.expected == pytest.approx(sum(int(k) * v / mass for k, v in p.items()), rel=1e-6)


def test_pairwise_units_are_judged_in_both_orders_and_counted(sqlite_url, tmp_path, tiny):
    slug = make(sqlite_url, tmp_path, "pairwise-quality", systems=THREE, items=2)
    with session_for(sqlite_url) as s:
        summary = judge_study(s, slug, InProcessJudge(tiny), log=None)
        codes = {i.id: i.code for i in s.scalars(select(Item))}
    rows = judgments(sqlite_url)
    # 2 prompts x 3 pairs of systems x 2 orders, one criterion
    assert summary.units == summary.judged == len(rows) == 12
    shown = Counter(tuple(r.items) for r in rows)
    assert all(n == 1 for n in shown.values())
    assert all((b, a) in shown for a, b in shown)
    assert all(codes[a] == codes[b] for a, b in shown)
    assert {r.value for r in rows} <= {0, 1, 2} and all(set(r.probabilities) == {"A", "B", "T"} for r in rows)


def test_best_worst_tuples_are_the_pages_and_best_differs_from_worst(sqlite_url, tmp_path, tiny):
    slug = make(sqlite_url, tmp_path, "best-worst-quality", systems=THREE, items=2)
    with session_for(sqlite_url) as s:
        judge_study(s, slug, InProcessJudge(tiny), log=None)
    by_unit = {}
    for r in judgments(sqlite_url):
        by_unit.setdefault(r.unit, {})[r.criterion] = r.value
    assert by_unit and all(set(v) == {"overall_best", "overall_worst"} for v in by_unit.values())
    assert all(v["overall_best"] != v["overall_worst"] for v in by_unit.values())


def test_a_judge_is_a_model_rater_left_out_of_every_human_export(sqlite_url, tmp_path, tiny, capsys):
    slug = make(sqlite_url, tmp_path, "posg-lm")
    with session_for(sqlite_url) as s:
        before_rows = long_format_rows(s, slug)
        before_people = participant_rows(s, slug)
    assert main(["judge", slug, "--judge", "tiny-random", "--threads", "1", "--db", sqlite_url]) == 0
    out = capsys.readouterr().out
    assert "12 units judged now" not in out and "6 units judged now, 0 before, of 6" in out
    with session_for(sqlite_url) as s:
        rater = s.scalar(select(Annotator).where(Annotator.kind == "model"))
        assert rater.judge["weights"] == tiny.hash and rater.judge["tokenizer"] == tiny.tokenizer_hash
        assert set(rater.judge) == {"model", "weights", "tokenizer", "template", "decoding", "key"}
        assert rater.judge["decoding"]["method"] == "label-probabilities"
        assert rater.label == f"judge-tiny-random-{identity(InProcessJudge(tiny))['key'][:8]}"
        assert long_format_rows(s, slug) == before_rows
        assert participant_rows(s, slug) == before_people
    assert len(judgments(sqlite_url)) == 12  # 6 texts x 2 criteria
    from maxbench.human_eval.app.admin import annotator_summaries
    from maxbench.human_eval.app.enrolment import _free_block

    with session_for(sqlite_url) as s:
        study = s.scalar(select(Study))
        assert "judge" not in " ".join(a["label"] for a in annotator_summaries(study))
        for a in study.annotators:  # every person's block taken: open enrolment must not hand out the judge's
            if a.kind == "human":
                a.consented_at = utcnow()
        s.flush()
        assert _free_block(s, study, utcnow()) is None
        s.rollback()
    # again: nothing left to judge, nothing judged twice
    assert main(["judge", slug, "--judge", "tiny-random", "--threads", "1", "--db", sqlite_url]) == 0
    assert "0 units judged now, 6 before" in capsys.readouterr().out
    assert len(judgments(sqlite_url)) == 12


def test_kill_9_during_judging_then_resume_stores_each_judgment_once(sqlite_url, tmp_path, capsys):
    slug = make(sqlite_url, tmp_path, "direct-quality", items=4)  # 8 texts, scored as sequences: seconds to judge
    cmd = [
        sys.executable,
        "-m",
        "maxbench",
        "judge",
        slug,
        "--judge",
        "tiny-random",
        "--threads",
        "1",
        "--db",
        sqlite_url,
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            with session_for(sqlite_url) as s:
                n = s.scalar(select(func.count(Judgment.id)))
            if n and n >= 2:
                break
            assert proc.poll() is None, "the judge ended before it could be killed"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    killed_at = len(judgments(sqlite_url))
    assert 2 <= killed_at < 8
    capsys.readouterr()
    assert main(cmd[3:]) == 0  # the resume runs in this process: only the killed judge needs its own
    assert f"{8 - killed_at} units judged now, {killed_at} before, of 8" in capsys.readouterr().out
    rows = judgments(sqlite_url)
    assert len(rows) == 8 and len({(r.annotator_id, r.unit, r.criterion) for r in rows}) == 8
    with session_for(sqlite_url) as s:
        assert sorted(int(r.unit) for r in rows) == sorted(s.scalars(select(Item.id)))


def one_line_exit_2(capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


def test_a_rater_id_of_a_person_is_refused_and_nothing_is_judged(sqlite_url, tmp_path, capsys):
    slug = make(sqlite_url, tmp_path, "fluency")
    with session_for(sqlite_url) as s:
        person = s.scalar(select(Annotator.label))
    err = one_line_exit_2(capsys, ["judge", slug, "--judge", "tiny-random", "--rater-id", person, "--db", sqlite_url])
    assert f"rater id {person!r} is a human rater's" in err
    assert judgments(sqlite_url) == []
    with session_for(sqlite_url) as s:
        assert s.scalar(select(func.count()).where(Annotator.kind == "model")) == 0


def test_a_study_without_a_rubric_is_refused(sqlite_url, tmp_path, capsys):
    slug = make(sqlite_url, tmp_path, "fluency")
    with session_for(sqlite_url) as s:
        s.execute(update(Study).values(rubric={}))
        s.commit()
    err = one_line_exit_2(capsys, ["judge", slug, "--judge", "tiny-random", "--db", sqlite_url])
    assert "has no rubric" in err and judgments(sqlite_url) == []


def _model_dir_with(tmp_path, tokenizer_core):
    from transformers import PreTrainedTokenizerFast

    from maxbench.systems.models import tiny_random_model

    model, _, _ = tiny_random_model()
    folder = tmp_path / "odd-judge"
    model.save_pretrained(folder)
    tok = PreTrainedTokenizerFast(tokenizer_object=tokenizer_core, eos_token="<e>", pad_token="<e>", unk_token="<u>")
    tok.save_pretrained(folder)
    return folder


def test_labels_a_tokenizer_merges_or_drops_are_refused_before_anything_is_judged(sqlite_url, tmp_path, capsys):
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers

    slug = make(sqlite_url, tmp_path, "fluency")
    vocab = {"<e>": 0, "<u>": 1, "text": 2}
    merging = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<u>"))  # every digit is <u>
    merging.pre_tokenizer = pre_tokenizers.Whitespace()
    folder = _model_dir_with(tmp_path, merging)
    err = one_line_exit_2(capsys, ["judge", slug, "--judge", str(folder), "--db", sqlite_url])
    assert "into the same tokens" in err and "'1' and '2'" in err
    dropping = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<u>"))
    dropping.normalizer = normalizers.Replace(Regex("[0-9]"), "")  # digits vanish
    dropping.pre_tokenizer = pre_tokenizers.Whitespace()
    folder = _model_dir_with(tmp_path / "b", dropping)
    err = one_line_exit_2(capsys, ["judge", slug, "--judge", str(folder), "--db", sqlite_url])
    assert "into no token" in err
    assert judgments(sqlite_url) == []
    with session_for(sqlite_url) as s:
        assert s.scalar(select(func.count()).where(Annotator.kind == "model")) == 0
        assert s.execute(text("SELECT count(*) FROM rating")).scalar() == 0


def test_an_adapted_judge_is_the_adapted_model_with_the_adapters_identity(sqlite_url, tmp_path, tiny, capsys):
    from maxbench.systems.adapters.pretrained import folder_sha256
    from tests.support.peft import save_adapter

    folder = save_adapter(tmp_path / "judge-lora")
    slug = make(sqlite_url, tmp_path, "fluency")
    adapted = f"tiny-random+peft(path={folder})"
    for judge in ("tiny-random", adapted):
        assert main(["judge", slug, "--judge", judge, "--threads", "1", "--db", sqlite_url]) == 0
    assert "6 units judged now, 0 before, of 6" in capsys.readouterr().out
    with session_for(sqlite_url) as s:
        base, lora = s.scalars(select(Annotator).where(Annotator.kind == "model").order_by(Annotator.id)).all()
        assert lora.judge["model"] == "tiny-random+peft" and lora.label.startswith("judge-tiny-random-peft-")
        assert lora.judge["adapter"]["name"] == "peft" and lora.judge["adapter"]["sha256"] == folder_sha256(folder)
        assert lora.judge["adapter"]["base_hash"] == tiny.hash == base.judge["weights"] != lora.judge["weights"]
        assert "adapter" not in base.judge
        scores = {
            a.id: [j.expected for j in s.scalars(select(Judgment).where(Judgment.annotator_id == a.id))]
            for a in (base, lora)
        }
    # the merged LoRA changes the logits, so the adapted judge's scores are its own
    assert len(scores[lora.id]) == 6 and scores[lora.id] != pytest.approx(scores[base.id], abs=1e-6)
    # the adapter's content is the judge: the same folder moved is the same judge, resumed
    moved = tmp_path / "elsewhere"
    folder.rename(moved)
    assert main(["judge", slug, "--judge", f"tiny-random+peft(path={moved})", "--db", sqlite_url]) == 0
    assert "0 units judged now, 6 before" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("judge", "words"),
    [
        ("tiny-random+lora(r=2)", "needs no training"),
        ("tiny-random+peft(path=/nonexistent/adapter)", "does not exist"),
        ("tiny-random+nosuch", "nosuch"),
    ],
)
def test_an_adapter_a_judge_cannot_load_is_refused_before_anything_is_judged(
    sqlite_url, tmp_path, capsys, judge, words
):
    slug = make(sqlite_url, tmp_path, "fluency")
    err = one_line_exit_2(capsys, ["judge", slug, "--judge", judge, "--db", sqlite_url])
    assert words in err and judgments(sqlite_url) == []
    with session_for(sqlite_url) as s:
        assert s.scalar(select(func.count()).where(Annotator.kind == "model")) == 0


def test_study_export_leaves_judges_out_unless_asked_and_then_marks_each_row_by_rater_kind(
    sqlite_url, tmp_path, tiny, capsys
):
    import csv
    import json

    from maxbench.human_eval.store.models import Assignment, Rating
    from maxbench.human_eval.studies.export import COLUMNS, JUDGE_COLUMNS

    slug = make(sqlite_url, tmp_path, "pairwise-quality", systems=THREE, items=2)
    with session_for(sqlite_url) as s:
        for k, page in enumerate(s.scalars(select(Assignment))):
            page.completed_at = utcnow()
            s.add(Rating(assignment_id=page.id, criterion="overall", value=1 + k % 2))
        s.commit()

    def export(*extra):
        out = tmp_path / f"export-{len(list(tmp_path.glob('export-*')))}"
        assert main(["study", "export", slug, "--db", sqlite_url, "--out", str(out), *extra]) == 0
        return out.read_bytes()

    before = {fmt: export("--format", fmt) for fmt in ("csv", "json")}
    with session_for(sqlite_url) as s:
        judge_study(s, slug, InProcessJudge(tiny), log=None)
    for fmt, body in before.items():  # the default export is byte-identical with a judge in the study
        assert export("--format", fmt) == body
    people = list(csv.DictReader(before["csv"].decode().splitlines()))
    rows = list(csv.DictReader(export("--judges").decode().splitlines()))
    assert list(rows[0]) == COLUMNS + JUDGE_COLUMNS
    humans, models = [r for r in rows if r["rater_kind"] == "human"], [r for r in rows if r["rater_kind"] == "model"]
    assert [{k: r[k] for k in COLUMNS} for r in humans] == people and len(humans) + len(models) == len(rows)
    with session_for(sqlite_url) as s:
        stored = [j for j in s.scalars(select(Judgment)) if not s.get(Item, j.item_id).system.name.startswith("gold")]
    assert len(models) == len(stored) == 12  # 3 pairs x 2 prompts, both orders
    for r in models:
        first, second = r["shown"].split(";")
        assert r["system"] == first != second and r["annotator"].startswith("judge-tiny-random-")
        assert r["value"] in ("0", "1", "2") and r["position"] == "" and r["scoring"] == "single-token"
    as_text = [
        {k: "" if v is None else str(v) for k, v in r.items()}
        for r in json.loads(export("--judges", "--format", "json"))
    ]
    assert as_text == rows
    blind = export("--judges", "--blind").decode()
    assert not any(system in blind for system in THREE) and "model" in blind
    capsys.readouterr()
    err = one_line_exit_2(capsys, ["study", "export", slug, "--db", sqlite_url, "--format", "explorer", "--judges"])
    assert "--judges goes with --format csv or json" in err
