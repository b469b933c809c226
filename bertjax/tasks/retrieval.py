r"""Embedding fine-tuning for search: queries and passages to vectors whose cosine ranks
the relevant passages first.

    python -m bertjax.main --config experiments/finetune/retrieval.py --workdir DIR \
        --config.init_checkpoint=PRETRAINED_OR_CONVERTED_WORKDIR \
        --config.data.beir_dir=BEIR_DIR

The input is data_pipeline/finetune/retrieval_input.py (a BEIR directory, or files of
anchor, positive and hard-negative columns); the model, bertjax/embedding.py's
BertForEmbedding (the encoder and a pooling, no head); the loss, in-batch negatives
over the whole global batch (losses.in_batch_negatives_sums). After every epoch the
held-out collection is embedded and searched exactly (bertjax/search.py), and
scored as trec_eval scores (bertjax/retrieval_metrics.py); the best checkpoint is kept
by nDCG@10 (results.json's "best" names its step). With `config.distill.teacher` and
`config.loss.name` 'mse' or 'kl', the student learns a teacher embedder's vectors or
rankings instead (losses.embedding_distillation_sums; docs/distillation.md), the teacher
applied to each batch in the same step, or its outputs computed once and read with the
batches (config.distill.cache, bertjax/tasks/teacher_cache.py); 'mse' also learns
from texts without pairs (config.data.texts); with 'margin_mse', a teacher's margins
over each row's hard negatives, read with the data (a negatives file mined with a
reranker's scores, or margin columns). A fine-tuned workdir embeds with
`bertjax.embed(restore(workdir), texts)` as it trained, and `python -m bertjax.retrieval
evaluate` scores it on any collection.
"""

import functools
import json
import os

import numpy as np

from bertjax import flops, losses, retrieval_metrics, search
from bertjax.embedding import POOLINGS, BertForEmbedding, Pooling
from bertjax.tasks import (
    distillation,
    embedding_serving,
    finetune,
    reranking,
    scores,
    teacher_cache,
)
from bertjax.tasks.contract import (
    Data,
    Description,
    Evaluation,
    Initialization,
    Model,
    Objective,
    Setup,
    Task,
    longest_batch_shapes,
    weighted_mean_loss,
)
from data_pipeline.errors import ConfigError
from data_pipeline.finetune import records, retrieval_config, retrieval_input

# The keys of a retrieval config besides a fine-tuning config's.
TASK_KEYS = ("embedding", "loss", "distill")
# config.distill: a teacher workdir, and where its outputs are stored (teacher_cache.py).
DISTILL_KEYS = ("teacher", "cache")
# The losses that read a teacher embedder in the step (config.distill.teacher); Margin-MSE
# reads its teacher's margins with the data instead (retrieval_input.py).
TEACHER_LOSSES = ("mse", "kl")
MARGIN_MSE = "margin_mse"
MODEL_INPUTS = ("query_ids", "query_mask", "passage_ids", "passage_mask")


def check_options(config) -> None:
    """The loss and pooling options, and a batch that holds negatives."""
    if config.embedding.pooling not in POOLINGS:
        raise ConfigError(
            f"config.embedding.pooling={config.embedding.pooling!r}: use one of "
            f"{', '.join(POOLINGS)}"
        )
    for key in ("scale", "margin_scale"):
        if not config.loss[key] > 0:
            raise ConfigError(f"config.loss.{key}={config.loss[key]}: must be above 0")
    _check_distillation(config)
    dims = tuple(config.loss.matryoshka_dims)
    if any(d < 1 for d in dims) or list(dims) != sorted(set(dims), reverse=True):
        raise ConfigError(
            f"config.loss.matryoshka_dims={dims}: distinct widths, largest first (() is the "
            "whole vector)"
        )
    if config.train_batch_size < 2:
        raise ConfigError(
            f"config.train_batch_size={config.train_batch_size}: a batch of one pair has no "
            "in-batch negatives; use at least 2"
        )


def _check_distillation(config) -> None:
    """A loss that learns from a teacher, and a teacher only with one."""
    distillation.check_config(config, DISTILL_KEYS)
    name, teacher = config.loss.name, config.distill.teacher
    if config.distill.cache and not teacher:
        raise ConfigError(
            f"config.distill.cache={config.distill.cache!r}: stores a teacher's outputs; "
            "give the teacher, config.distill.teacher=WORKDIR"
        )
    if name not in losses.EMBEDDING_LOSSES:
        raise ConfigError(
            f"config.loss.name={name!r}: use one of {', '.join(losses.EMBEDDING_LOSSES)}"
        )
    for key in ("distill_weight", "in_batch_weight"):
        if not config.loss[key] >= 0:
            raise ConfigError(f"config.loss.{key}={config.loss[key]}: must be at least 0")
    if name in TEACHER_LOSSES and not teacher:
        raise ConfigError(
            f"config.loss.name={name!r}: learns from a teacher; give its workdir, "
            "config.distill.teacher=WORKDIR"
        )
    if name not in TEACHER_LOSSES and teacher:
        reads = "its teacher's margins with the data" if name == MARGIN_MSE else "no teacher"
        raise ConfigError(
            f"config.distill.teacher={teacher!r}: config.loss.name={name!r} reads {reads}; "
            "use 'mse' or 'kl' with a teacher"
        )
    _check_texts(config)
    if config.data.get("margins") and name != MARGIN_MSE:
        raise ConfigError(
            f"config.data.margins={tuple(config.data.margins)}: only "
            f"config.loss.name={MARGIN_MSE!r} reads them"
        )


def _check_texts(config) -> None:
    """Texts without pairs (config.data.texts) teach the vectors of 'mse' alone."""
    texts = config.data.get("texts")
    if not texts:
        return
    where = f"config.data.texts={texts!r}"
    if config.loss.name != "mse":
        raise ConfigError(
            f"{where}: texts without pairs teach a teacher's vectors; use config.loss.name='mse'"
        )
    if config.loss.in_batch_weight:
        raise ConfigError(
            f"{where}: texts have no pairs for the in-batch loss; set config.loss.in_batch_weight=0"
        )


def check_config(config) -> None:
    finetune.config_checker(retrieval_config.from_config, TASK_KEYS)(config)
    check_options(config)


def _load_data(config, pretrained) -> retrieval_input.RetrievalTask:
    """The run's pairs and held-out collection, checked against the checkpoint."""
    data = retrieval_input.load_retrieval_task(config.data, margins=config.loss.name == MARGIN_MSE)
    limit = pretrained.model_config.max_position_embeddings
    if data.config.max_query_length > limit:
        raise ConfigError(
            f"config.data.max_query_length={data.config.max_query_length}: above the "
            f"checkpoint's max_position_embeddings={limit}"
        )
    if data.train is None:
        raise ConfigError("config.data: no training pairs (train_file or train_split)")
    return data


def setup(config, workdir: str) -> Setup:
    pretrained = finetune.load_pretrained(config, workdir, TASK_KEYS)
    check_config(config)
    data = _load_data(config, pretrained)
    lengths = data.config.train_query_length, data.config.max_seq_length
    width = data.config.passages_per_row
    pooling = Pooling(
        config.embedding.pooling, config.embedding.normalize, data.config.max_seq_length
    )

    teacher = _teacher(config, pretrained, width)
    cache = None

    def make_dataset(split, position=None, in_order=False, **kwargs):
        # The stored outputs, once computed (train.fill_teacher_cache, before the stream).
        stored = split == "train" and not in_order and cache is not None and cache.complete
        dataset, info = retrieval_input.make_retrieval_dataset(
            data, pretrained.tokenizer, split=split, position=position, in_order=in_order,
            teacher=cache.read() if stored else None, **kwargs,
        )  # fmt: skip
        return dataset, info.num_batches

    if teacher is not None and config.distill.cache:
        rows = functools.partial(finetune.dataset, make_dataset, "train", 1, in_order=True)
        cache = _teacher_cache(config, data, teacher, lengths, rows)
        teacher = None  # the batches carry its outputs
    num_train_steps = finetune.train_steps(config, make_dataset)
    epoch = max(1, round(num_train_steps / config.num_train_epochs))
    return Setup(
        teacher=teacher,
        teacher_cache=cache,
        model=Model(
            pretrained.model_config,
            BertForEmbedding(pretrained.model_config, pooling, width),
            dict(
                zip(
                    MODEL_INPUTS,
                    (lengths[0], lengths[0], width * lengths[1], width * lengths[1]),
                    strict=True,
                )
            ),
            token_inputs=("query_ids", "passage_ids"),
        ),
        objective=_objective(config, num_train_steps, cached=cache is not None),
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
        ),
        description=Description(
            max_seq_length=lengths[1],
            tokenizer_data=pretrained.tokenizer_data,
            metrics=retrieval_metrics.MEASURES,
            data=config.data.to_dict(),
            init_checkpoint=config.init_checkpoint,
            embedding=pooling.to_json(),
        ),
        init=Initialization(
            checkpoint=config.init_checkpoint,
            keys=() if config.random_init else ("bert",),
            scan_layers=pretrained.scan_layers,
        ),
    )


def _objective(config, num_train_steps: int, *, cached: bool = False) -> Objective:
    """config.loss over whole global batches (microbatches encode; the loss sees every
    negative), with a distillation's losses on the train lines; `cached`: the teacher's
    outputs come with the batches."""
    alone = config.loss.name == "in_batch"
    teacher = ("teacher_margins",) if config.loss.name == MARGIN_MSE else ()
    teacher += ("teacher",) if cached else ()
    return Objective(
        num_train_steps=num_train_steps,
        optimizer=finetune.optimizer_values(config, num_train_steps),
        features=(*MODEL_INPUTS, "query_key", "passage_keys", "example_weight", *teacher),
        sums=_sums(config),
        denominators=finetune.example_weight,
        loss=weighted_mean_loss,
        summarize=losses.summarize_finetune if alone else losses.summarize_embedding_distillation,
        console=_console(config),
        whole_batch=True,
    )


def _console(config) -> tuple:
    """The train lines' metrics: a distillation's teacher loss and in-batch loss,
    unweighted; texts without pairs, the teacher's loss alone."""
    if config.loss.name == "in_batch":
        return (("accuracy", "acc"),)
    if config.data.get("texts"):
        return (("distill_loss", "distill"),)
    return (("accuracy", "acc"), ("distill_loss", "distill"), ("in_batch_loss", "in-batch"))


def _sums(config):
    """The loss of config.loss: in-batch negatives, or a teacher's outputs learned."""
    options = dict(
        scale=config.loss.scale,
        symmetric=config.loss.symmetric,
        dims=tuple(config.loss.matryoshka_dims),
    )
    if config.loss.name == "in_batch":
        return functools.partial(losses.in_batch_negatives_sums, **options)
    return functools.partial(
        losses.embedding_distillation_sums,
        loss=config.loss.name,
        distill_weight=config.loss.distill_weight,
        in_batch_weight=config.loss.in_batch_weight,
        margin_scale=config.loss.margin_scale,
        **options,
    )


def _teacher(config, pretrained, width: int):
    """The teacher embedder of config.distill.teacher, if any: its own pooling, on the
    student's batches."""
    read = distillation.read(
        config, pretrained.vocab_file, pretrained.tokenizer_data, student="config.init_checkpoint"
    )
    if read is None:
        return None
    where = f"{distillation.OPTION}={read.workdir!r}"
    if read.kind == reranking.TASK.name:
        raise ConfigError(f"{where}: a reranking workdir scores pairs; the teacher embeds texts")
    student_width = pretrained.model_config.hidden_size
    if config.loss.name == "mse" and read.model_config.hidden_size != student_width:
        raise ConfigError(
            f"{where}: its vectors have {read.model_config.hidden_size} dimensions, the "
            f"student's {student_width}; 'mse' compares them one to one (use 'kl', which "
            "compares rankings)"
        )

    normalized = Pooling.from_json(read.description.embedding).normalize
    if config.loss.name == "mse" and normalized != config.embedding.normalize:
        raise ConfigError(
            f"{where}: its vectors are {'' if normalized else 'not '}normalized, the "
            f"student's are{'' if config.embedding.normalize else ' not'}; 'mse' compares "
            f"them one to one (set config.embedding.normalize={normalized})"
        )

    def make_module(model_config, read):
        return BertForEmbedding(model_config, Pooling.from_json(read.description.embedding), width)

    return distillation.teacher(read, pretrained.model_config, make_module)


def _teacher_cache(config, data, teacher, lengths, rows_dataset) -> teacher_cache.TeacherCache:
    """config.distill.cache for this run's training rows: their texts, and what shapes the
    teacher's outputs of them (the lengths texts are cut to, the dtype it computes in)."""
    described = {
        "queries": data.train.queries,
        "passages": data.train.passages,
        "lengths": list(lengths),
        "dtype": str(teacher.module.config.dtype),
    }
    return teacher_cache.open_cache(
        config.distill.cache, teacher, rows_dataset, rows=len(data.train), data=described
    )


def without_data(config, workdir: str):
    """The config reading placeholder pairs in WORKDIR (as many as the larger batch, every
    column the config names, each text its own) instead of its data, and, where its init
    checkpoint is a pretraining config, that run's placeholder (finetune.without_checkpoint):
    it builds and compiles on any host, for `bertjax.tpu.aot` and the benchmarks."""
    config = finetune.without_checkpoint(config, workdir)
    config = distillation.without_teacher_checkpoint(config, workdir)
    data = retrieval_config.from_config(config.data)
    negatives = tuple(f"negative_{k}" for k in range(data.passages_per_row - 1))
    margins = ()
    if config.loss.name == MARGIN_MSE:  # the teacher's margin over each negative
        margins = tuple(f"margin_{k}" for k in range(len(negatives)))
    path = os.path.join(workdir, "placeholder_pairs.jsonl")
    rows = max(config.train_batch_size, config.eval_batch_size)
    with open(path, "w", encoding="utf-8") as f:
        for row in range(rows):
            texts = {column: f"{column} {row}" for column in ("anchor", "positive", *negatives)}
            f.write(json.dumps(texts | dict.fromkeys(margins, 1.0)) + "\n")
    texts_path = ""
    if data.texts:  # two to a row
        texts_path = os.path.join(workdir, "placeholder_texts.txt")
        with open(texts_path, "w", encoding="utf-8") as f:
            f.writelines(f"text {k}\n" for k in range(2 * rows))
    with config.unlocked():
        config.distill.cache = ""  # the teacher in the step: the larger program
        config.data.beir_dir = config.data.negatives_file = ""
        config.data.texts = texts_path
        config.data.train_file = "" if texts_path else path
        config.data.eval_file = path
        config.data.anchor, config.data.positive = "anchor", "positive"
        config.data.negatives = negatives
        config.data.margins = margins
    return config


def _eval_outputs(outputs, batch):
    """A held-out batch's query and passage vectors, with where each came from."""
    queries, passages = outputs
    return queries, passages, batch["query_index"], batch["passage_index"]


def _score(collection, outputs: list):
    """The held-out collection searched with the vectors of its batches: trec_eval's
    measures of the top retrieval_metrics.DEPTH passages per query."""
    queries, passages, query_index, passage_index = (
        np.concatenate(parts) for parts in zip(*outputs, strict=True)
    )
    passages, passage_index = passages.reshape(-1, passages.shape[-1]), passage_index.reshape(-1)
    query_vectors = queries[query_index >= 0][np.argsort(query_index[query_index >= 0])]
    passage_vectors = passages[passage_index >= 0][np.argsort(passage_index[passage_index >= 0])]
    run = search.ranked(
        collection.query_ids,
        collection.passage_ids,
        query_vectors,
        passage_vectors,
        retrieval_metrics.DEPTH,
    )
    return retrieval_metrics.evaluate(collection.qrels, run), None


def best_metric(config) -> scores.Metric:
    del config
    return scores.Metric(retrieval_metrics.MEASURES[0], None)


def forward_flops(c, inputs: dict[str, int], description: Description) -> float:
    """The encoder over a row's query and each of its passages, at the batch's lengths."""
    passages = _passages_per_row(description)
    return flops.encoder_flops(c, inputs["query_ids"]) + passages * flops.encoder_flops(
        c, inputs["passage_ids"] // passages
    )


def _passages_per_row(description: Description) -> int:
    """The positive and each hard negative."""
    return retrieval_config.passages_per_row(description.data)


def make_model(model_config, description: Description) -> BertForEmbedding:
    pooling = Pooling.from_json(description.embedding)
    return BertForEmbedding(model_config, pooling, _passages_per_row(description))


TASK = Task(
    name="retrieval",
    setup=setup,
    make_model=make_model,
    best_metric=best_metric,
    forward_flops=forward_flops,
    batch_shapes=longest_batch_shapes,
    check_config=check_config,
    without_data=without_data,
    report=finetune.report,
    serving=embedding_serving.serving,
)
