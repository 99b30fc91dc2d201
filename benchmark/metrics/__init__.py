"""Automatic metrics: quality against references, diversity, perplexity, and their statistics.

- ``base``: the Metric / MetricResult / Score objects, TextBatch (what a metric is given) and the
  registry of metric names, ``METRICS`` (``get_metric``, ``metric_names``; ``core/registry.py``).
- ``reference``: sacrebleu, bleu-n, rouge-l, meteor, bertscore, kld, ms-jaccard.
- ``diversity``: self-bleu, rep, seq-rep, distinct, uniq.
- ``perplexity``: ppl (evaluator LM) and ``reference_perplexity`` / ref-ppl (a system's own).
- ``sentence_bleu``: exact fast nltk sentence_bleu against a shared pool (BLEU-n, Self-BLEU).
- ``stats``: bootstrap intervals over prompts and paired permutation tests.
- ``scoring`` / ``cli``: ``maxbench score``.

Nothing is imported here so that ``maxbench --help`` stays fast.
"""
