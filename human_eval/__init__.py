"""The human study: the rating app, study design and the statistics of the reports."""

#: where serving the app in production is written up: the documentation, which every install can
#: reach (the source tree's README files are not in the wheel)
PRODUCTION_DOCS = "the section 'Production' of docs/human-evaluation.md in maxbench's documentation"
