"""The one word tokeniser shared by every metric that does not bring its own.

sacreBLEU (13a), rouge-score and BERTScore tokenise internally, as their authors define;
everything else (Texygen BLEU-n, Self-BLEU, METEOR, Rep, seq-rep, Distinct, Uniq, KLD,
MS-Jaccard) counts the tokens returned here, so their numbers are comparable.

NLTK's ``word_tokenize`` needs the trained Punkt model (``punkt_tab``), which no registry
ships here; with ``preserve_line=True`` it skips sentence splitting and then leaves every
sentence-final period glued to its word ("sales."), except the last one. Punkt with its
default parameters (no training data) splits sentences well enough for that, and
NLTK's own word tokeniser then runs on each sentence, which is what ``word_tokenize``
does with the trained model. Case is kept.
"""

from __future__ import annotations

from functools import lru_cache

TOKENIZER_ID = "nltk-word(untrained-punkt)+cased"


@lru_cache(maxsize=1)
def _tokenizers():
    from nltk.tokenize import NLTKWordTokenizer, PunktSentenceTokenizer

    return PunktSentenceTokenizer(), NLTKWordTokenizer()


def word_tokens(text: str) -> list[str]:
    """Split ``text`` into words and punctuation (Penn Treebank conventions, case kept)."""
    sentences, words = _tokenizers()
    return [token for sentence in sentences.tokenize(text) for token in words.tokenize(sentence)]
