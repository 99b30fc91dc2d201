"""What the user asks of a new study (``maxbench study create``'s options), validated once.

``create_study(session, run_dir, rubric, options)`` in ``human_eval/studies/create.py`` reads
them; the choices that shape the design are recorded with the study (``Study.design``), so an
export and a report can say how the study was made. The checks that need the rubric or the run
(a judgment kind's design, the systems and prompts the run has) are made there.
"""

from __future__ import annotations

from dataclasses import dataclass

from maxbench.errors import MaxbenchError
from maxbench.human_eval.store.models import COMPLETION_CODE_MAX, TITLE_MAX


@dataclass(frozen=True, kw_only=True)
class StudyOptions:
    """The choices of one study; invalid ones raise MaxbenchError naming the flag to fix.

    Attributes
    ----------
    items_per_system : int
        Prompts sampled per system (one text each: the lowest sample index of the prompt).
    raters_per_item : int
        Annotators who judge each text (each pairwise pair, each best-worst tuple).
    systems : tuple of str or None
        The run's systems to rate, in this order; None: every system of the run, by name.
    annotators : int or None
        Annotator links (blocks of pages) to make; None: ``raters_per_item``, every annotator
        then judging every text.
    paired : bool
        True: the same prompts for every system (as POSG; pairwise and best-worst need it);
        False: independent samples of prompts per system (as graphmax; ``--independent``).
    seed : int
        Seed of every random choice of the design (prompts, page order, attention checks, gold
        items), so the same run and options give the same study; tokens are random regardless.
    attention_rate : float
        Attention-check pages added to each annotator's block, per text page, in [0, 1].
    attention_fail_limit : int
        Failed attention checks after which an annotator's link stops working.
    completion_code : str or None
        The code shown when an annotator is done (a crowd platform's completion code).
    title : str or None
        The title the annotators see; None: the rubric's.
    consent_text : str or None
        The consent page's text; None: ``DEFAULT_CONSENT`` of ``human_eval/studies/create.py``.
    open_enrolment : bool
        Whether anyone with the study's public address may take a free block of pages (a crowd
        platform's participants) instead of only the holders of the annotator links.
    abandon_after_s : int
        Seconds after which an enrolled participant's unfinished block is given to the next one.
    check_attempts : int or None
        Tries an annotator has at the comprehension check; None: unlimited.
    gold_items : int
        Gold items: prompts whose suite reference is shown against a degraded copy of it, the
        reference expected to win, on every annotator's pages and in no other number of a
        report; 0: none.
    """

    items_per_system: int
    raters_per_item: int
    systems: tuple[str, ...] | None = None
    annotators: int | None = None
    paired: bool = True
    seed: int = 0
    attention_rate: float = 0.1
    attention_fail_limit: int = 2
    completion_code: str | None = None
    title: str | None = None
    consent_text: str | None = None
    open_enrolment: bool = False
    abandon_after_s: int = 3600
    check_attempts: int | None = None
    gold_items: int = 0

    def __post_init__(self):
        if self.systems is not None:
            object.__setattr__(self, "systems", tuple(self.systems))
        if self.items_per_system < 1:
            raise MaxbenchError("--items-per-system must be at least 1")
        if self.attention_fail_limit < 1:
            raise MaxbenchError("--attention-fail-limit must be at least 1")
        if self.title is not None and not self.title.strip():
            raise MaxbenchError("--title is empty: give a title, or leave --title out to use the rubric's")
        if self.title is not None and len(self.title) > TITLE_MAX:
            raise MaxbenchError(f"--title is {len(self.title)} characters long: shorten it to {TITLE_MAX} or fewer")
        if self.completion_code is not None and not (0 < len(self.completion_code.strip()) <= COMPLETION_CODE_MAX):
            raise MaxbenchError(f"--completion-code must have 1 to {COMPLETION_CODE_MAX} characters")
        if self.check_attempts is not None and self.check_attempts < 1:
            raise MaxbenchError("--check-attempts must be at least 1 (Prolific allows two)")
        if self.abandon_after_s < 60:
            raise MaxbenchError("--abandon-after-minutes must be at least 1")

    @property
    def n_annotators(self) -> int:
        """``annotators``, or ``raters_per_item`` when it is None."""
        return self.raters_per_item if self.annotators is None else self.annotators
