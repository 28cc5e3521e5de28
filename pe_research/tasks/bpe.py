"""Byte-level BPE subwords (Hugging Face ``tokenizers``), learned from a task's training text.

The papers that measure length extrapolation by perplexity train subword language models (GPT-2's
byte-level BPE in ALiBi's and Kerple's). Here the merges are learned from the training text of
the run itself, to ``vocab_size`` tokens: the 256 byte symbols, then merges in the order learned.
Learning is deterministic, so a run's tokenizer is learned again from the same text when the run
is reloaded and checked against its stored vocabulary (the token strings in id order), which
therefore needs no second file. Token strings are GPT-2's byte-to-unicode symbols ('Ġ' for a
space, 'Ċ' for a line break); decoding maps them back to text.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

BYTE_SYMBOLS = 256


def learn_bpe(texts: Sequence[str], vocab_size: int) -> Tokenizer:
    """A byte-level BPE of at most ``vocab_size`` tokens learned from ``texts`` (fewer when the
    text runs out of pairs to merge)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def bpe_symbols(tokenizer: Tokenizer) -> list[str]:
    """The tokenizer's token strings in id order (id k is ``symbols[k]``)."""
    vocabulary = tokenizer.get_vocab()
    return sorted(vocabulary, key=vocabulary.__getitem__)


def bpe_ids(tokenizer: Tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """Each text as the tokenizer's ids (its own numbering, from 0)."""
    return [encoding.ids for encoding in tokenizer.encode_batch(list(texts))]


def bpe_text(tokens: Sequence[str]) -> str:
    """Token strings back to the text they encode."""
    return decoders.ByteLevel().decode(list(tokens))
