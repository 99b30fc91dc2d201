"""The metric names the command line scores by default, and the papers' own variants scored only when
named. Kept apart from the metrics themselves so that ``--help`` imports no scipy."""

# The command-line metric names, in the order results are listed; ref-ppl joins by itself
# when a run's rows carry the systems' reference log-probabilities, and attr-acc when the run's suite
# is a conditional one whose corpus labels its attribute (docs/conditional.md).
DEFAULT_METRICS = (
    "sacrebleu",
    "bleu-n",
    "rouge-l",
    "meteor",
    "bertscore",
    "mauve",
    "coherence",
    "ppl",
    "self-bleu",
    "rep",
    "seq-rep",
    "distinct",
    "diversity",
    "uniq",
    "kld",
    "ms-jaccard",
)
# The papers' own definitions (paper_variants): scored only when named in
# --metrics, as `maxbench reproduce` does, beside the defaults above.
PAPER_METRICS = (
    "texygen-bleu",
    "texygen-self-bleu",
    "posg-bleu",
    "posg-self-bleu",
    "posg-kld",
    "posg-ms-jaccard",
    "posg-distinct",
    "posg-distinct-pos",
    "posg-rep",
)
# ppl under a fixed evaluator, beside a run's own ppl (a reproduction's cross-evaluation): scored only
# when named.
FIXED_EVALUATOR_METRICS = ("ppl-smollm2-135m", "ppl-gemma3-270m")
