"""The columns of a ratings file, for tests that write one."""

RATINGS_HEADER = ["study", "item", "system", "annotator", "criterion", "value"]
