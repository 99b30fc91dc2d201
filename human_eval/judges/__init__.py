"""Model judges: a language model rating a study's units as one more rater (``Annotator.kind ==
"model"``), from the label probabilities of its next tokens (``template``, ``scoring``, ``judge``)."""
