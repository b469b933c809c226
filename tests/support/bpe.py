"""A byte-level BPE tokenizer.json built the way ModernBERT's is (answerdotai/ModernBERT-base:
a ByteLevel pre-tokenizer without a prefix space, a BPE model, BERT's specials added after
the learned entries, [unusedN] fillers, the [CLS] $A [SEP] template), trained on lines of
Python's docs: no ModernBERT file ships offline."""

from pydoc_data.topics import topics

import tokenizers
from tokenizers import AddedToken, decoders, models, pre_tokenizers, processors, trainers

MODERNBERT_SPECIALS = ("[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]")


def corpus_lines(count=3000):
    return [line for text in topics.values() for line in text.splitlines() if line.strip()][:count]


def modernbert_like(*, lowercase=False, size=800) -> tokenizers.Tokenizer:
    tokenizer = tokenizers.Tokenizer(models.BPE())
    if lowercase:
        tokenizer.normalizer = tokenizers.normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=size,
        special_tokens=["<|endoftext|>", "<|padding|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus_lines(), trainer=trainer)
    # A non-special added token, matched in text before the byte-level step.
    tokenizer.add_tokens([AddedToken("  ", normalized=False)])
    tokenizer.add_special_tokens([*MODERNBERT_SPECIALS, "[unused0]", "[unused1]"])
    ids = {t: tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]")}
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=list(ids.items()),
    )
    return tokenizer
