"""The human study: the rating app, study design and the statistics of the reports."""
