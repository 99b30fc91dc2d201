"""model raters: ``annotator.kind`` ("human" or "model"), ``annotator.judge`` (a judge's identity)
and ``judgment`` (a model rater's judgments, one per unit and criterion).

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # batch mode: SQLite cannot add a NOT NULL column in place; every annotator so far is a person
    with op.batch_alter_table("annotator") as batch:
        batch.add_column(sa.Column("kind", sa.String(16), nullable=False, server_default="human"))
        batch.add_column(sa.Column("judge", sa.JSON(), nullable=True))
    op.create_table(
        "judgment",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("annotator_id", sa.Integer(), sa.ForeignKey("annotator.id"), nullable=False, index=True),
        sa.Column("item_id", sa.Integer(), sa.ForeignKey("item.id"), nullable=False),
        sa.Column("unit", sa.String(200), nullable=False),
        sa.Column("items", sa.JSON(), nullable=False),
        sa.Column("criterion", sa.String(40), nullable=False),
        sa.Column("value", sa.Integer(), nullable=False),
        sa.Column("expected", sa.Float(), nullable=True),
        sa.Column("probabilities", sa.JSON(), nullable=False),
        sa.Column("label_mass", sa.Float(), nullable=False),
        sa.Column("scoring", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.UniqueConstraint("annotator_id", "unit", "criterion"),
    )


def downgrade() -> None:
    op.drop_table("judgment")
    with op.batch_alter_table("annotator") as batch:
        batch.drop_column("judge")
        batch.drop_column("kind")
