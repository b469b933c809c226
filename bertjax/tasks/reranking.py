r"""Reranking: a cross-encoder reads a query and a passage together and scores the pair with
one logit; a first stage's candidates are reordered by it.

    python -m bertjax.main --config experiments/finetune/reranking.py --workdir DIR \
        --config.init_checkpoint=PRETRAINED_CONVERTED_EMBEDDER_OR_RERANKER_WORKDIR \
        --config.data.beir_dir=BEIR_DIR --config.data.negatives_file=NEGATIVES.jsonl \
        --config.data.eval_negatives_file=DEV_NEGATIVES.jsonl

The input is data_pipeline/finetune/reranking_input.py (groups of a query, its relevant
passage and hard negatives; or pairs with a label); the model, model.py's
BertForReranking (BertForSequenceClassification's pooled [CLS] to one logit, over each
group's pairs); the loss, losses.reranking_sums's `config.loss.name` on the logit itself.
After every epoch the held-out queries' candidates are scored and reranked, and the
ranking scored as trec_eval scores it (bertjax/retrieval_metrics.py); the best
checkpoint is kept by nDCG@10. A trained workdir scores new pairs with
`bertjax.rerank(restore(workdir), query, passages)`.
"""

import dataclasses
import functools
import json
import os
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from bertjax import flops, losses, retrieval_metrics
from bertjax import workdir as workdir_lib
from bertjax.model import BertForReranking
from bertjax.tasks import finetune, scores
from bertjax.tasks.contract import (
    Data,
    Description,
    Evaluation,
    HFClass,
    Initialization,
    Model,
    Objective,
    Serving,
    Setup,
    Task,
    longest_batch_shapes,
    weighted_mean_loss,
)
from data_pipeline.errors import ConfigError
from data_pipeline.finetune import records, reranking_config, reranking_input, retrieval_input
from data_pipeline.finetune.reranking_input import MODEL_INPUTS
from data_pipeline.progress import Progress

# The keys of a reranking config besides a fine-tuning config's.
TASK_KEYS = ("loss",)
# The tasks whose workdirs have no pooler: a reranker grown from one starts it fresh.
WITHOUT_POOLER = ("retrieval",)


def check_options(config) -> None:
    """The loss and its positive weight, against the data's groups."""
    name = config.loss.name
    if name not in losses.RERANKING_LOSSES:
        raise ConfigError(
            f"config.loss.name={name!r}: use one of {', '.join(losses.RERANKING_LOSSES)}"
        )
    if config.loss.pos_weight < 0:
        raise ConfigError(
            f"config.loss.pos_weight={config.loss.pos_weight}: must be at least 0 (0: the "
            "negatives of a group per positive)"
        )
    data = reranking_config.from_config(config.data)
    if name != "bce" and data.group_size < 2:
        raise ConfigError(
            f"config.loss.name={name!r}: a listwise loss ranks a group's candidates; rows of "
            "pairs (config.data.passage) are groups of one: use 'bce', or rows of a positive "
            "and negatives"
        )


def check_config(config) -> None:
    finetune.config_checker(reranking_config.from_config, TASK_KEYS)(config)
    check_options(config)


def pos_weight(config) -> float:
    """config.loss.pos_weight, 0 resolved to the negatives per positive of a group
    (sentence-transformers' recipe for BinaryCrossEntropyLoss on hard negatives)."""
    if config.loss.pos_weight > 0:
        return float(config.loss.pos_weight)
    return float(max(1, reranking_config.from_config(config.data).group_size - 1))


def _load_data(config) -> reranking_input.RerankingTask:
    data = reranking_input.load_reranking_task(config.data)
    if data.train is None:
        raise ConfigError("config.data: no training groups (train_file or train_split)")
    return data


def setup(config, workdir: str) -> Setup:
    pretrained = finetune.load_pretrained(config, workdir, TASK_KEYS)
    check_config(config)
    data = _load_data(config)
    width, length = data.config.group_size, data.config.max_seq_length
    loss = config.loss.name

    def make_dataset(split, position=None, **kwargs):
        dataset, info = reranking_input.make_reranking_dataset(
            data, pretrained.tokenizer, split=split, position=position, **kwargs
        )
        return dataset, info.num_batches

    num_train_steps = finetune.train_steps(config, make_dataset)
    epoch = max(1, round(num_train_steps / config.num_train_epochs))
    grown_from = workdir_lib.read_task(config.init_checkpoint)[0]
    fresh = pretrained.without_pooler or grown_from in WITHOUT_POOLER
    # A reranker trains on with its own head; from any other workdir the head is new.
    keys = ("bert", "classifier") if grown_from == TASK.name else ("bert",)
    return Setup(
        model=Model(
            pretrained.model_config,
            BertForReranking(pretrained.model_config, width),
            dict.fromkeys(MODEL_INPUTS, width * length),
        ),
        objective=Objective(
            num_train_steps=num_train_steps,
            optimizer=finetune.optimizer_values(config, num_train_steps),
            features=(*MODEL_INPUTS, "labels", "candidate_weight", "example_weight"),
            sums=functools.partial(losses.reranking_sums, loss=loss, pos_weight=pos_weight(config)),
            denominators=functools.partial(losses.reranking_weight, loss=loss),
            loss=weighted_mean_loss,
            summarize=losses.summarize_reranking,
            console=(("accuracy", "acc"),),
        ),
        data=Data(
            vocab_file=pretrained.vocab_file,
            train=functools.partial(
                finetune.dataset, make_dataset, "train", config.num_train_epochs
            ),
            eval=functools.partial(finetune.dataset, make_dataset, "eval", 1),
            position_fields=records.POSITION_FIELDS,
            train_files=functools.partial(retrieval_input.train_files, data.config),
        ),
        evaluation=Evaluation(
            every_steps=epoch if data.eval else 0,
            num_steps=0,
            checkpoint_each=True,
            outputs=_eval_outputs,
            score=functools.partial(_score, data.eval),
            write_predictions=_write_run,
        ),
        description=Description(
            max_seq_length=length,
            tokenizer_data=pretrained.tokenizer_data,
            num_labels=1,
            metrics=retrieval_metrics.MEASURES,
            data=config.data.to_dict(),
            init_checkpoint=config.init_checkpoint,
        ),
        init=Initialization(
            checkpoint=config.init_checkpoint,
            keys=() if config.random_init else keys,
            scan_layers=pretrained.scan_layers,
            fresh=("bert/pooler",) if fresh else (),
        ),
    )


def _eval_outputs(logits, batch):
    """A held-out batch's scores, with the query and passage of each."""
    return logits, batch["query_index"], batch["passage_index"]


# What write_predictions writes: the held-out queries' reranked candidates.
EVAL_RUN_FILE = "eval_run.trec"


def _score(candidates: reranking_input.Candidates, outputs: list):
    """The held-out queries' candidates ranked by their scores: trec_eval's measures, and
    the run."""
    logits, query_index, passage_index = (
        np.concatenate(parts).reshape(-1) for parts in zip(*outputs, strict=True)
    )
    run = ranked_run(candidates, logits, query_index, passage_index)
    return retrieval_metrics.evaluate(candidates.qrels, run), run


def ranked_run(candidates, scores_, query_index, passage_index) -> dict[str, dict[str, float]]:
    """{query id: {passage id: score}} of the pairs that were there (index >= 0)."""
    run: dict[str, dict[str, float]] = {}
    kept = query_index >= 0
    for q, d, score in zip(query_index[kept], passage_index[kept], scores_[kept], strict=True):
        run.setdefault(candidates.query_ids[q], {})[candidates.passage_ids[d]] = float(score)
    return run


def _write_run(run, workdir: str) -> None:
    retrieval_metrics.write_trec_run(os.path.join(workdir, EVAL_RUN_FILE), run)


def best_metric(config) -> scores.Metric:
    del config
    return scores.Metric(retrieval_metrics.MEASURES[0], None)


def group_size(description: Description) -> int:
    """The pairs of a training row; 1 for an imported reranker's workdir (no data)."""
    data = description.data or {}
    if not any(data.get(source) for source in ("beir_dir", "train_file", "eval_file")):
        return 1
    return reranking_config.from_config(data).group_size


def imported(tokenizer_data: dict, max_seq_length: int) -> Description:
    """task.json of a reranker imported from elsewhere (a sentence-transformers CrossEncoder):
    pairs cut to `max_seq_length` tokens, the query first only when it leaves the passage
    nothing (so that a pair is cut as transformers' longest-first truncation cuts it,
    the longer side first)."""
    return Description(
        max_seq_length=max_seq_length,
        tokenizer_data=tokenizer_data,
        num_labels=1,
        metrics=retrieval_metrics.MEASURES,
        data={"max_query_length": max_seq_length - 4, "max_seq_length": max_seq_length},
    )


def forward_flops(c, inputs: dict[str, int], description: Description) -> float:
    """The encoder, the pooler and the one-logit classifier over each of a row's pairs."""
    pairs = group_size(description)
    head = flops.pooler_flops(c) + 2 * c.hidden_size
    return pairs * (flops.encoder_flops(c, inputs["input_ids"] // pairs) + head)


def make_model(model_config, description: Description) -> BertForReranking:
    """A restored reranker scores pairs one to a row (group_size 1)."""
    del description
    return BertForReranking(model_config)


def without_data(config, workdir: str):
    """The config reading placeholder rows in WORKDIR (as many as the larger batch, every
    column its groups have, each text its own) instead of its data; and, where its init
    checkpoint is a pretraining config, that run's placeholder (finetune.without_checkpoint):
    it builds and compiles on any host, for `bertjax.tpu.aot` and the benchmarks."""
    config = finetune.without_checkpoint(config, workdir)
    data = reranking_config.from_config(config.data)
    path = os.path.join(workdir, "placeholder_groups.jsonl")
    if data.pairs:  # two pairs a query, one relevant, so that it reranks
        columns = {data.query: "query", data.passage: "passage"}
    else:
        columns = {data.query: "query", data.positive: "positive"}
        columns |= {f"negative_{k}": "negative" for k in range(data.group_size - 1)}
    rows = max(config.train_batch_size, config.eval_batch_size)
    with open(path, "w", encoding="utf-8") as f:
        for row in range(rows):
            texts = {column: f"{what} {row}" for column, what in columns.items()}
            if data.pairs:
                texts[data.query] = f"query {row // 2}"
                texts[data.label] = 1 - row % 2
            f.write(json.dumps(texts) + "\n")
    with config.unlocked():
        config.data.beir_dir = config.data.negatives_file = config.data.eval_negatives_file = ""
        config.data.train_file = config.data.eval_file = path
        if not data.pairs:
            config.data.negatives = tuple(c for c in columns if c.startswith("negative_"))
    return config


# ----------------------------------------------------------------------------- notebooks


def rerank(restored, query: str, passages: Sequence[str], *, batch_size: int = 64) -> np.ndarray:
    """The reranker's score of (query, passage) for each passage, float32 [N]: its logit,
    higher is more relevant (score_pairs of the query with each passage)."""
    if isinstance(passages, str):
        raise TypeError("pass a list of passages, not one string")
    return score_pairs(restored, [query] * len(passages), passages, batch_size=batch_size)


def score_pairs(
    restored,
    queries: Sequence[str],
    passages: Sequence[str],
    *,
    batch_size: int = 64,
    progress: Progress | None = None,
) -> np.ndarray:
    """The reranker's score of each (queries[i], passages[i]), float32 [N]. Pairs are laid
    out and cut as the task trained; pairs of similar length are batched together and
    padded to a few widths (and a batch of fewer pairs to a power of two rows), so any
    number of pairs compiles a handful of times. `progress` counts the batches."""
    restored.require("reranking", "rerank")
    if len(queries) != len(passages):
        raise ValueError(f"{len(queries)} queries and {len(passages)} passages: one each a pair")
    if not passages:
        return np.zeros(0, np.float32)
    features = {
        name: value.numpy()
        for name, value in _encode(
            restored, tf.constant(list(queries)), tf.constant(list(passages))
        ).items()
    }
    tokens = features["input_mask"].sum(axis=1)
    order = np.argsort(tokens, kind="stable")
    out = np.zeros(len(passages), np.float32)
    for begin in range(0, len(order), batch_size):
        rows = order[begin : begin + batch_size]
        width = records.power_of_two_width(int(tokens[rows].max()), restored.max_seq_length)
        padded = min(batch_size, 1 << (len(rows) - 1).bit_length())
        batch = {}
        for name, value in features.items():
            batch[name] = np.zeros((padded, width), np.int32)
            batch[name][: len(rows)] = value[rows, :width]
        out[rows] = np.asarray(restored.apply(batch))[: len(rows), 0]
        if progress is not None:
            progress.advance()
    return out


def _encode(restored, queries: tf.Tensor, passages: tf.Tensor) -> dict[str, tf.Tensor]:
    """reranking_input.encode_pairs with the restored reranker's tokenizer and lengths."""
    max_query_length = (restored.task.data or {}).get(
        "max_query_length", reranking_config.RerankingConfig.max_query_length
    )
    return reranking_input.encode_pairs(
        restored.tokenizer, queries, passages, max_query_length=max_query_length,
        max_seq_length=restored.max_seq_length,
    )  # fmt: skip


def serving(restored) -> Serving:
    """The SavedModel's: `query` and `passage` (tf.string [B]) in, `score` float32 [B] out,
    bertjax.rerank's: the pair laid out and cut in the graph as the task trains."""

    def preprocess(texts: dict) -> dict:
        features = _encode(restored, texts["query"], texts["passage"])
        return {name: tf.cast(features[name], tf.int32) for name in MODEL_INPUTS}

    def forward(params, inputs: dict):
        model_inputs = (inputs[name] for name in MODEL_INPUTS)
        return restored.model.apply({"params": params}, *model_inputs, deterministic=True)

    return Serving(
        texts=("query", "passage"),
        preprocess=preprocess,
        inputs=dict.fromkeys(MODEL_INPUTS, "(b, l)"),
        length=restored.max_seq_length,
        forward=forward,
        postprocess=lambda scores, features: {"score": scores[:, 0]},
    )


# A reranker in each model family as transformers holds it: a sequence classifier of one
# label (what a sentence-transformers CrossEncoder loads).
HF_CLASSES = {
    "bert": HFClass("BertForSequenceClassification", {"classifier": "classifier"}),
    "modernbert": HFClass("ModernBertForSequenceClassification", {"classifier": "classifier"}),
}


def hf_config(description: Description) -> dict:
    """config.json's head: one label, the relevance logit, and the activation a
    sentence-transformers CrossEncoder (4 and 5) then applies to it: none."""
    labels = finetune.hf_labels(dataclasses.replace(description, label_names=()))
    return {**labels, "sentence_transformers": {"activation_fn": IDENTITY_ACTIVATION}}


# sentence-transformers' name of the identity, which a CrossEncoder applies to the logit.
IDENTITY_ACTIVATION = "torch.nn.modules.linear.Identity"


TASK = Task(
    name="reranking",
    setup=setup,
    make_model=make_model,
    best_metric=best_metric,
    forward_flops=forward_flops,
    batch_shapes=longest_batch_shapes,
    check_config=check_config,
    without_data=without_data,
    report=finetune.report,
    serving=serving,
    hf_class=finetune.hf_classes(HF_CLASSES, config=hf_config),
    reranks=True,
)
