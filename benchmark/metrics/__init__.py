"""Automatic metrics: quality against references, diversity, perplexity, and their statistics.

- ``base``: the Metric / MetricResult / Score objects, TextBatch (what a metric is given) and the
  registry of metric names, ``METRICS`` (``get_metric``, ``metric_names``; ``core/registry.py``).
- ``reference``: sacrebleu, bleu-n, rouge-l, meteor, bertscore, kld, ms-jaccard.
- ``diversity``: self-bleu, rep, seq-rep, distinct, uniq.
- ``attributes``: attr-acc (a classifier trained on the fitting split judges whether a text has the
  attribute a conditional suite asked for), its ceiling and the flipped-attribute check (``flip_check``).
- ``perplexity``: ppl (evaluator LM) and ``reference_perplexity`` / ref-ppl (a system's own).
- ``paper_variants``: the papers' own definitions: texygen-bleu, texygen-self-bleu (Texygen as shipped),
  posg-bleu, posg-self-bleu, posg-kld, posg-ms-jaccard, posg-distinct, posg-rep (the POSG authors' code), posg-distinct-pos (its n-POS).
- ``sentence_bleu``: exact fast nltk sentence_bleu against a shared pool, the other texts or each
  text's own reference (BLEU-n, Self-BLEU, the papers' variants).
- ``stats``: bootstrap intervals over prompts and paired permutation tests.
- ``scoring`` / ``cli``: ``maxbench score``.

Nothing is imported here so that ``maxbench --help`` stays fast.
"""
