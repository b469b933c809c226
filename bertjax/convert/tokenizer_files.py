"""The tokenizer files of an exported model, so that transformers tokenizes as the run did.

tokenizer.json (the Hugging Face `tokenizers` format) states every rule of the
original tokenization.py, and tokenizer_config.json has `AutoTokenizer` load it
as written (PreTrainedTokenizerFast). transformers' BertTokenizer class would
rebuild the rules from its own defaults, one of which differs: the original
makes a word [UNK] above 200 characters (`max_input_chars_per_word=200` in its
WordpieceTokenizer), transformers' BertTokenizer above 100. The rules are the original's: text cleaning (control
characters dropped, whitespace made spaces), a space around each CJK character,
lowercasing with accent stripping for an uncased model, splitting on whitespace
and punctuation, then greedy longest-match WordPiece with "##" continuations; the
pair template is [CLS] A [SEP] B [SEP] with segment 1 from B on.
tokenizer_config.json also names the special tokens and the model's inputs;
vocab.txt, written beside them, serves code that builds a BertTokenizer itself.
"""

from data_pipeline.vocab import Vocab


def hf_tokenizer_files(
    vocab: Vocab, *, do_lower_case: bool, max_chars_per_word: int, max_length: int
) -> dict[str, dict]:
    """File name -> JSON content: tokenizer.json and tokenizer_config.json for `vocab`."""
    specials = {
        "pad_token": vocab.pad_id,
        "unk_token": vocab.unk_id,
        "cls_token": vocab.cls_id,
        "sep_token": vocab.sep_id,
        "mask_token": vocab.mask_id,
    }
    token = {role: vocab.tokens[i] for role, i in specials.items()}
    cls, sep = token["cls_token"], token["sep_token"]

    def special(piece: str, type_id: int) -> dict:
        return {"SpecialToken": {"id": piece, "type_id": type_id}}

    def sequence(name: str, type_id: int) -> dict:
        return {"Sequence": {"id": name, "type_id": type_id}}

    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": i,
                "content": vocab.tokens[i],
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for i in sorted(set(specials.values()))
        ],
        "normalizer": {
            "type": "BertNormalizer",
            "clean_text": True,
            "handle_chinese_chars": True,
            # None: strip accents exactly when lowercasing, as the original does.
            "strip_accents": None,
            "lowercase": do_lower_case,
        },
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [special(cls, 0), sequence("A", 0), special(sep, 0)],
            "pair": [
                special(cls, 0),
                sequence("A", 0),
                special(sep, 0),
                sequence("B", 1),
                special(sep, 1),
            ],
            "special_tokens": {
                piece: {"id": piece, "ids": [vocab.token_to_id(piece)], "tokens": [piece]}
                for piece in (cls, sep)
            },
        },
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {
            "type": "WordPiece",
            "unk_token": token["unk_token"],
            "continuing_subword_prefix": "##",
            "max_input_chars_per_word": max_chars_per_word,
            "vocab": {piece: i for i, piece in enumerate(vocab.tokens)},
        },
    }
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_input_names": ["input_ids", "token_type_ids", "attention_mask"],
        "do_lower_case": do_lower_case,
        "strip_accents": None,
        "tokenize_chinese_chars": True,
        "model_max_length": max_length,
        **token,
    }
    return {"tokenizer.json": tokenizer, "tokenizer_config.json": tokenizer_config}


def bpe_tokenizer_files(vocab: Vocab, tokenizer: dict, *, max_length: int) -> dict[str, dict]:
    """File name -> JSON content for a byte-level BPE `vocab` read from the tokenizer.json
    `tokenizer` (ModernBERT's kind): that file with the run's template, [CLS] A [SEP] and
    [CLS] A [SEP] B [SEP], and a tokenizer_config.json without token type ids, which a
    model without token type embeddings does not take."""
    cls, sep = vocab.tokens[vocab.cls_id], vocab.tokens[vocab.sep_id]

    def special(piece: str) -> dict:
        return {"SpecialToken": {"id": piece, "type_id": 0}}

    def sequence(name: str) -> dict:
        return {"Sequence": {"id": name, "type_id": 0}}

    template = {
        "type": "TemplateProcessing",
        "single": [special(cls), sequence("A"), special(sep)],
        "pair": [special(cls), sequence("A"), special(sep), sequence("B"), special(sep)],
        "special_tokens": {
            piece: {"id": piece, "ids": [vocab.token_to_id(piece)], "tokens": [piece]}
            for piece in (cls, sep)
        },
    }
    roles = ("pad", "unk", "cls", "sep", "mask")
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": max_length,
        **{f"{role}_token": vocab.tokens[getattr(vocab, f"{role}_id")] for role in roles},
    }
    return {
        "tokenizer.json": {**tokenizer, "post_processor": template},
        "tokenizer_config.json": tokenizer_config,
    }
