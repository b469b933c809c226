"""Task.serving of the workdirs that embed: a retrieval task's, and a pretraining or
imported one's (an imported sentence-transformers model records its pooling). The
SavedModel's `embedding` is `bertjax.embed`'s vector: the text cut to the embedder's
max_seq_length, its pooling and normalization."""

import tensorflow as tf

from bertjax.embedding import BertForEmbedding
from bertjax.tasks.contract import Serving
from data_pipeline.finetune import classification_input

INPUTS = ("input_ids", "input_mask")


def serving(restored) -> Serving:
    pooling = restored.pooling
    length = min(
        pooling.max_seq_length or restored.max_seq_length,
        restored.config.max_position_embeddings,
    )
    vocab = restored.tokenizer.vocab
    module = BertForEmbedding(restored.config, pooling)

    def preprocess(texts: dict) -> dict:
        text = texts["text"]
        features = classification_input.encode_texts(
            restored.tokenizer,
            text,
            tf.fill(tf.shape(text), ""),
            max_seq_length=length,
            cls_id=vocab.cls_id,
            sep_id=vocab.sep_id,
            pad_id=vocab.pad_id,
        )
        return {name: tf.cast(features[name], tf.int32) for name in INPUTS}

    def forward(params, inputs: dict):
        return module.apply(
            {"params": {"bert": params["bert"]}},
            inputs["input_ids"],
            inputs["input_mask"],
            deterministic=True,
            method=BertForEmbedding.embed,
        )

    return Serving(
        texts=("text",),
        preprocess=preprocess,
        inputs=dict.fromkeys(INPUTS, "(b, l)"),
        length=length,
        forward=forward,
        postprocess=lambda vectors, features: {"embedding": vectors},
    )
