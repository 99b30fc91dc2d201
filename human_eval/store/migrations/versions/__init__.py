"""One module per schema revision, oldest first: r0001 (the first release), r0002 (page_text),
r0003 (enrolment)."""
