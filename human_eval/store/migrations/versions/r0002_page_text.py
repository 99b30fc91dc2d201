"""page_text: the texts of a page that shows several (pairwise, best-worst; commit bac748d).

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "page_text",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("assignment_id", sa.Integer(), sa.ForeignKey("assignment.id"), nullable=False, index=True),
        sa.Column("place", sa.Integer(), nullable=False),
        sa.Column("item_id", sa.Integer(), sa.ForeignKey("item.id"), nullable=False),
        sa.UniqueConstraint("assignment_id", "place"),
    )


def downgrade() -> None:
    op.drop_table("page_text")
