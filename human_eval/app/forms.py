"""Flask-WTF forms: every POST in the app carries and checks a CSRF token."""

from __future__ import annotations

from flask_wtf import FlaskForm
from wtforms import BooleanField, IntegerField, PasswordField, RadioField
from wtforms.fields.choices import SelectChoice
from wtforms.validators import DataRequired, InputRequired, NumberRange

from maxbench.human_eval.studies.rubrics import Rubric

# Field names get a prefix so that a criterion called e.g. "data" or "meta" cannot
# shadow an attribute of the form class.
FIELD_PREFIX = "c_"


class ConsentForm(FlaskForm):
    consent = BooleanField(
        "I have read the information above and agree to take part.",
        validators=[DataRequired(message="Please tick the box to take part.")],
    )


class ActionForm(FlaskForm):
    """A button-only form (close, revoke, reissue, log out): just the CSRF token."""


class AdminLoginForm(FlaskForm):
    token = PasswordField("Admin token", validators=[DataRequired()])


def check_form(options: list[str]) -> FlaskForm:
    class CheckForm(FlaskForm):
        answer = RadioField(
            "Answer",
            choices=[SelectChoice(i, text) for i, text in enumerate(options)],
            coerce=int,
            validators=[InputRequired(message="Please choose an answer.")],
        )

    return CheckForm()


def rating_form(rubric: Rubric, places: int | None = None) -> FlaskForm:
    """One radio group per criterion (a slider for direct assessment; a best and a worst group
    over the page's ``places`` texts for best-worst); a value outside the scale is not a valid choice."""

    class RatingForm(FlaskForm):
        pass

    if rubric.kind == "best-worst":
        choices = rubric.choices[:places] if places else rubric.choices
        for name in rubric.stored_criteria:
            side = "best" if name.endswith("_best") else "worst"
            setattr(
                RatingForm,
                FIELD_PREFIX + name,
                RadioField(
                    name,
                    choices=[SelectChoice(v, str(v)) for v in choices],
                    coerce=int,
                    validators=[InputRequired(message=f"Please choose the {side} text.")],
                ),
            )
        return RatingForm()

    for criterion in rubric.criteria:
        if rubric.kind == "direct":
            message = f"Please give a whole number from {rubric.scale_min} to {rubric.scale_max}."
            setattr(
                RatingForm,
                FIELD_PREFIX + criterion.name,
                IntegerField(
                    criterion.label,
                    validators=[
                        InputRequired(message=message),
                        NumberRange(rubric.scale_min, rubric.scale_max, message=message),
                    ],
                ),
            )
            continue
        setattr(
            RatingForm,
            FIELD_PREFIX + criterion.name,
            RadioField(
                criterion.label,
                choices=[SelectChoice(v, str(v)) for v in rubric.choices],
                coerce=int,
                validators=[InputRequired(message="Please choose a value.")],
            ),
        )
    return RatingForm()


def expected_fields(rubric: Rubric) -> set[str]:
    return {FIELD_PREFIX + name for name in rubric.stored_criteria} | {"csrf_token"}
