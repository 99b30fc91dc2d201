"""The first release's tables (commit d915693): study, study_system, item, annotator,
assignment, rating.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "study",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("slug", sa.String(64), nullable=False, unique=True),
        sa.Column("title", sa.String(200), nullable=False),
        sa.Column("rubric", sa.JSON(), nullable=False),
        sa.Column("consent_text", sa.Text(), nullable=False),
        sa.Column("admin_token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("run_dir", sa.Text(), nullable=False),
        sa.Column("run_id", sa.String(200), nullable=False),
        sa.Column("design", sa.JSON(), nullable=False),
        sa.Column("attention_rate", sa.Float(), nullable=False),
        sa.Column("attention_fail_limit", sa.Integer(), nullable=False),
        sa.Column("completion_code", sa.String(100), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("closed_at", sa.DateTime(), nullable=True),
    )
    op.create_table(
        "study_system",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("study_id", sa.Integer(), sa.ForeignKey("study.id"), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("code", sa.String(32), nullable=False),
        sa.UniqueConstraint("study_id", "name"),
        sa.UniqueConstraint("study_id", "code"),
    )
    op.create_table(
        "item",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("study_id", sa.Integer(), sa.ForeignKey("study.id"), nullable=False, index=True),
        sa.Column("code", sa.String(32), nullable=False),
        sa.Column("system_id", sa.Integer(), sa.ForeignKey("study_system.id"), nullable=False),
        sa.Column("prompt_id", sa.String(200), nullable=False),
        sa.Column("sample", sa.Integer(), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.UniqueConstraint("study_id", "code", "system_id"),
    )
    op.create_table(
        "annotator",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("study_id", sa.Integer(), sa.ForeignKey("study.id"), nullable=False, index=True),
        sa.Column("label", sa.String(64), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("revoked_at", sa.DateTime(), nullable=True),
        sa.Column("consented_at", sa.DateTime(), nullable=True),
        sa.Column("check_attempts", sa.Integer(), nullable=False),
        sa.Column("check_passed_at", sa.DateTime(), nullable=True),
        sa.Column("attention_failures", sa.Integer(), nullable=False),
        sa.Column("excluded_at", sa.DateTime(), nullable=True),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.Column("last_seen_at", sa.DateTime(), nullable=True),
        sa.UniqueConstraint("study_id", "label"),
    )
    op.create_table(
        "assignment",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("public_id", sa.String(32), nullable=False, unique=True),
        sa.Column("annotator_id", sa.Integer(), sa.ForeignKey("annotator.id"), nullable=False, index=True),
        sa.Column("item_id", sa.Integer(), sa.ForeignKey("item.id"), nullable=True),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("attention", sa.JSON(), nullable=True),
        sa.Column("attention_passed", sa.Boolean(), nullable=True),
        sa.Column("completed_at", sa.DateTime(), nullable=True),
        sa.Column("seconds", sa.Float(), nullable=True),
        sa.UniqueConstraint("annotator_id", "position"),
    )
    op.create_table(
        "rating",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("assignment_id", sa.Integer(), sa.ForeignKey("assignment.id"), nullable=False, index=True),
        sa.Column("criterion", sa.String(40), nullable=False),
        sa.Column("value", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.UniqueConstraint("assignment_id", "criterion"),
    )


def downgrade() -> None:
    for table in ("rating", "assignment", "annotator", "item", "study_system", "study"):
        op.drop_table(table)
