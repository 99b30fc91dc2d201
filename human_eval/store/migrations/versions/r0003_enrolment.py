"""enrolment: crowd participants (Prolific, MTurk) holding a block of a study (commit 10c2781).

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "enrolment",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("study_id", sa.Integer(), sa.ForeignKey("study.id"), nullable=False, index=True),
        sa.Column("platform", sa.String(16), nullable=False),
        sa.Column("participant_id", sa.String(64), nullable=False),
        sa.Column("platform_session", sa.String(64), nullable=True),
        sa.Column("annotator_id", sa.Integer(), sa.ForeignKey("annotator.id"), nullable=True, unique=True),
        sa.Column("claimed_at", sa.DateTime(), nullable=False),
        sa.Column("released_at", sa.DateTime(), nullable=True),
        sa.UniqueConstraint("study_id", "participant_id"),
    )


def downgrade() -> None:
    op.drop_table("enrolment")
