"""Softmax: the base model's own distribution. Scores are the logits themselves, so decoding
through maxbench's loop equals ``transformers``' ``generate`` token for token."""

from maxbench.systems.layers.base import OutputLayer


class SoftmaxLayer(OutputLayer):
    name = "softmax"

    def scores(self, logits, hidden):
        return logits
