"""Pretraining as a task: masked LM plus next-sentence prediction (paper section 3.1).

    python -m bertjax.main --config experiments/pretrain/tiny_cpu.py --workdir DIR

The input is data_pipeline's pretraining stream (make_pretraining_dataset);
the loss is the mean MLM loss over the masked positions plus the mean NSP
loss over the examples (losses.py). With `config.data.pack_examples` a batch is
rows of several sequences each (data_pipeline/schema.py); the model reads each
sequence's NSP logits at its [CLS] (`cls_positions`) and the losses are those
of the sequences, as unpacked. With `config.data.next_sentence_prediction`
False it is masked LM alone (RoBERTa; ModernBERT, Warner et al. 2024, section
2.2): single-segment sequences, a model without the pooler and NSP head, the
MLM loss alone and no NSP metrics. `config.init_checkpoint` starts from
another pretraining run's parameters (phase 2 at length 512 from phase 1).
With `config.distill.teacher` (a pretraining workdir of the same tokenizer, of any
width or depth), the student also learns the teacher's masked-LM distributions,
softened by `config.distill.temperature` (losses.mlm_distillation_sums), weighted by
`config.distill.weight`, beside the MLM loss on the true tokens weighted by
`config.distill.mlm_weight` (docs/distillation.md).
"""

import dataclasses
import functools
import os

import jax.numpy as jnp

from bertjax import flops, losses, optim
from bertjax import model as model_lib
from bertjax import workdir as workdir_lib
from bertjax.model import BertForPreTraining
from bertjax.tasks import distillation, embedding_serving, pretraining_report, scores
from bertjax.tasks.contract import (
    Data,
    Description,
    Evaluation,
    HFClass,
    Initialization,
    Model,
    Objective,
    Setup,
    Task,
    check_keys,
)
from data_pipeline import config as data_config_lib
from data_pipeline import make_pretraining_dataset, pretraining_input, schema
from data_pipeline.errors import ConfigError
from data_pipeline.vocab import load_vocab, write_placeholder_vocab
from data_pipeline.vocab_learning import resolve_vocab_file

# The keys of a pretraining config besides the loop's (task.LOOP_KEYS).
CONFIG_KEYS = ("num_train_steps", "num_eval_steps", "eval_every_steps")
# config.distill of a pretraining config, which may have none: its teacher, the
# temperature of the soft targets, the weights of their loss and of the true tokens' loss.
DISTILL_KEYS = ("teacher", "temperature", "weight", "mlm_weight")
# Evaluation is scored by the same sums as training; the best evaluation is the lowest loss.
BEST_METRIC = scores.Metric("loss", None, higher_is_better=False)


def check_config(config) -> None:
    check_keys(
        config,
        (*CONFIG_KEYS, "distill"),
        optional=("task", "distill"),
        positive=("num_train_steps",),
    )
    if "distill" in config:
        if "cache" in config.distill:
            raise ConfigError(
                "config.distill.cache: a pretraining teacher reads inputs masked anew at every "
                "epoch, so its outputs cannot be stored; remove the key"
            )
        distillation.check_config(config, DISTILL_KEYS)
        if not config.distill.temperature > 0:
            raise ConfigError(
                f"config.distill.temperature={config.distill.temperature}: must be above 0"
            )
        for key in ("weight", "mlm_weight"):
            if not config.distill[key] >= 0:
                raise ConfigError(f"config.distill.{key}={config.distill[key]}: must be >= 0")
    data = data_config_lib.from_config(config.data)
    model_config = model_lib.from_config(config.model)
    data_config_lib.check_max_positions(data, model_config.max_position_embeddings)
    data_config_lib.check_predictions_fit(data)
    optim.learning_rate_schedule(config.optimizer, config.num_train_steps)  # warmup fits
    for key in ("num_eval_steps", "eval_every_steps", "checkpoint_every_steps"):
        if config[key] < 0:
            raise ConfigError(f"config.{key}={config[key]}: must be >= 0")


def check_hosts(config, hosts: int) -> None:
    if hosts > 1 and config.eval_every_steps and not config.num_eval_steps:
        # Every host must run the same number of eval steps (they are collective),
        # and hosts' shares of the held-out split differ in size.
        raise ConfigError(
            "config.num_eval_steps=0 (the whole split) works on one host only; "
            f"set it for this {hosts}-host run"
        )


def describe(data_config) -> Description:
    """task.json of a pretraining workdir: the tokenizer settings and sequence length."""
    data = data_config_lib.from_config(data_config)
    return Description(max_seq_length=data.max_seq_length, tokenizer_data=dataclasses.asdict(data))


def setup(config, workdir: str) -> Setup:
    check_config(config)
    data = data_config_lib.from_config(config.data)
    model_config = model_lib.from_config(config.model)
    init_scan_layers = _check_checkpoints(config, workdir, model_config)
    # Resuming keeps the workdir's copy; a new run takes the configured or learned one.
    vocab_file = workdir_lib.vocab_file(workdir) or resolve_vocab_file(data)
    vocab_size = len(load_vocab(vocab_file))
    if vocab_size != model_config.vocab_size:
        raise ConfigError(
            f"the vocabulary {vocab_file} has {vocab_size} entries but "
            f"config.model.vocab_size={model_config.vocab_size}"
        )
    data = data.replace(vocab_file=vocab_file)
    next_sentence = data.next_sentence_prediction
    features = schema.features(data.pack_examples, next_sentence)
    inputs = {
        "input_ids": data.max_seq_length,
        "input_mask": data.max_seq_length,
        "segment_ids": data.max_seq_length,
        "masked_lm_positions": data.max_predictions_per_seq,
        # Packed rows: the [CLS] of each of a row's sequences, for its NSP logits.
        **({"cls_positions": data.max_sequences_per_row} if "cls_positions" in features else {}),
    }
    console = (("mlm_accuracy", "mlm_acc"), ("nsp_accuracy", "nsp_acc"))
    teacher = _teacher(config, vocab_file, dataclasses.asdict(data), model_config)
    loss, summarize = _loss, losses.summarize
    if teacher is not None:
        weights = dict(distill_weight=config.distill.weight, hard_weight=config.distill.mlm_weight)
        loss = functools.partial(_distilled_loss, **weights)
        summarize = functools.partial(losses.summarize_distilled, **weights)
        console = (*console, ("distill_loss", "distill"))
    return Setup(
        teacher=teacher,
        model=Model(
            model_config, BertForPreTraining(model_config, next_sentence=next_sentence), inputs
        ),
        objective=Objective(
            num_train_steps=config.num_train_steps,
            optimizer=config.optimizer,
            features=features,
            sums=functools.partial(
                _sums, temperature=config.distill.temperature if teacher else 1.0
            ),
            denominators=functools.partial(_denominators, next_sentence=next_sentence),
            loss=loss,
            summarize=summarize,
            console=console if next_sentence else tuple(c for c in console if c[0][:3] != "nsp"),
        ),
        data=Data(
            vocab_file=vocab_file,
            train=functools.partial(make_pretraining_dataset, data, split="train"),
            eval=functools.partial(make_pretraining_dataset, data, split="eval"),
            position_fields=pretraining_input.position_fields(data),
            train_files=functools.partial(pretraining_input.train_files, data),
        ),
        evaluation=Evaluation(
            every_steps=config.eval_every_steps,
            num_steps=config.num_eval_steps,
            checkpoint_each=False,
            outputs=_sums,
            score=_score,
        ),
        description=describe(config.data),
        init=Initialization(
            checkpoint=config.init_checkpoint,
            # Phase 2 continues every parameter, heads included.
            keys=_init_keys(next_sentence) if config.init_checkpoint else (),
            scan_layers=init_scan_layers,
        ),
    )


def _init_keys(next_sentence: bool) -> tuple[str, ...]:
    """The parameters of a pretraining model (BertForPreTraining's submodules)."""
    return ("bert", "predictions", "seq_relationship") if next_sentence else ("bert", "predictions")


def _check_checkpoints(config, workdir: str, model_config) -> bool:
    """Checks the shapes of the workdir's model and of the init checkpoint's against the
    config; returns the init checkpoint's layer layout (scan_layers)."""
    saved = workdir_lib.read_model_config(workdir)
    if saved is not None:
        workdir_lib.check_same_shapes(saved, model_config, where=f"workdir {workdir}")
    if not config.init_checkpoint:
        return False
    init = workdir_lib.require_model_config(config.init_checkpoint, what="config.init_checkpoint")
    where = f"config.init_checkpoint={config.init_checkpoint!r}"
    workdir_lib.check_same_shapes(init, model_config, where=where)
    return init.scan_layers


def _score(outputs: list):
    total = functools.reduce(lambda a, b: {k: a[k] + b[k] for k in a}, outputs)
    return losses.summarize(total), None


def forward_flops(c, inputs: dict[str, int], description: Description) -> float:
    """The encoder, its last layer at the positions the heads read where the model trims
    it; the masked-LM head at the masked positions (dense and tied-embedding logits) and,
    unless it is masked LM alone, the next-sentence pooler and classifier at each
    sequence's [CLS]."""
    h = c.hidden_size
    predictions, pooled = inputs["masked_lm_positions"], inputs.get("cls_positions", 1)
    last = pooled + predictions if model_lib.queries_in_last_layer(c) else None
    heads = predictions * (2 * h * h + 2 * h * c.vocab_size)
    if next_sentence_prediction(description):
        heads += pooled * (flops.pooler_flops(c) + 2 * h * 2)
    return flops.encoder_flops(c, inputs["input_ids"], last) + heads


def next_sentence_prediction(description: Description) -> bool:
    """Whether a workdir's model has the NSP head: its data config's
    next_sentence_prediction."""
    if "next_sentence_prediction" not in description.tokenizer_data:
        raise workdir_lib.CheckpointError(
            f"{workdir_lib.TASK_FILE}: tokenizer_data has no next_sentence_prediction "
            "(written by an older bertjax, whose models all had the NSP head); add "
            '"next_sentence_prediction": true to it'
        )
    return description.tokenizer_data["next_sentence_prediction"]


def batch_shapes(setup: Setup, split: str, batch_size: int) -> dict[str, tuple]:
    """The batch schema's shapes (data_pipeline/schema.py) at the model's input lengths:
    no corpus needed."""
    del split  # train and eval batches are alike
    inputs = setup.model.inputs
    shapes = schema.feature_shapes(
        inputs["input_ids"], inputs["masked_lm_positions"], inputs.get("cls_positions", 0)
    )
    return {
        name: ((batch_size, *shapes[name]), schema.feature_dtype(name))
        for name in setup.objective.features
    }


def without_data(config, workdir: str):
    """The config with a placeholder vocabulary of the model's size in `workdir` and no
    init checkpoint: it builds on any host, with no corpus or learned vocabulary; a
    teacher named by its pretraining config stands for that run
    (distillation.without_teacher_checkpoint)."""
    config = config.copy_and_resolve_references()
    vocab_size = model_lib.from_config(config.model).vocab_size
    with config.unlocked():
        config.data.vocab_file = write_placeholder_vocab(
            os.path.join(workdir, "vocab.txt"), vocab_size
        )
        config.init_checkpoint = ""
    return distillation.without_teacher_checkpoint(config, workdir)


def _sums(outputs, batch, temperature: float = 1.0):
    """The MLM and NSP sums; with the teacher's outputs in the batch, the distillation
    loss's too."""
    mlm_logits, nsp_logits = outputs  # nsp_logits None: masked LM alone
    sums = losses.pretraining_sums(mlm_logits, nsp_logits, batch)
    if "teacher" not in batch:
        return sums
    weights = batch["masked_lm_weights"].astype(jnp.float32)
    teacher_logits, _ = batch["teacher"]
    distilled = losses.mlm_distillation_sums(
        mlm_logits, teacher_logits, weights=weights, temperature=temperature
    )
    return {**sums, **distilled}


def _teacher(config, vocab_file: str, tokenizer_data: dict, student):
    """The teacher of config.distill.teacher, if any: a pretraining model (its heads)."""
    if "distill" not in config:
        return None
    read = distillation.read(config, vocab_file, tokenizer_data, student="config.data")
    if read is None:
        return None
    if read.kind != TASK_NAME:
        raise ConfigError(
            f"{distillation.OPTION}={read.workdir!r}: a {read.kind} workdir; a pretraining "
            "student learns the masked-LM head of a pretraining workdir"
        )

    def make_module(model_config, read):
        return BertForPreTraining(
            model_config, next_sentence=next_sentence_prediction(read.description)
        )

    return distillation.teacher(read, student, make_module)


def _denominators(batch, *, next_sentence: bool):
    """The whole batch's masked positions and examples (sequences, packed or not; None
    of masked LM alone): what microbatch losses divide by."""
    mlm_weight = jnp.sum(batch["masked_lm_weights"].astype(jnp.float32))
    if not next_sentence:
        return mlm_weight, None
    return mlm_weight, jnp.sum(losses.nsp_weights(batch))


def _loss(sums, denominators):
    mlm_weight, nsp_count = denominators
    return losses.total_loss(sums, mlm_weight=mlm_weight, nsp_count=nsp_count)


def _distilled_loss(sums, denominators, **weights):
    mlm_weight, nsp_count = denominators
    return losses.distilled_total_loss(sums, mlm_weight=mlm_weight, nsp_count=nsp_count, **weights)


def _report(restored, config, results: dict, *, out, fill_mask_examples: int = 0) -> None:
    pretraining_report.print_report(
        restored,
        config,
        results.get("eval", {}),
        fill_mask_examples=fill_mask_examples,
        out=out,
    )


def hf_class(family: str, description: Description) -> HFClass:
    """The family's pretraining class; pretrained with masked LM alone (no pooler and no
    NSP head), BertForMaskedLM."""
    next_sentence = next_sentence_prediction(description)
    if family == "bert":
        return HFClass("BertForPreTraining" if next_sentence else "BertForMaskedLM")
    if next_sentence:
        raise ValueError(
            "pretrained with next-sentence prediction, which transformers' "
            "ModernBertForMaskedLM has no head for"
        )
    return HFClass("ModernBertForMaskedLM")


TASK_NAME = "pretraining"
TASK = Task(
    name=TASK_NAME,
    setup=setup,
    make_model=lambda model_config, description: BertForPreTraining(
        model_config, next_sentence=next_sentence_prediction(description)
    ),
    best_metric=lambda config: BEST_METRIC,
    forward_flops=forward_flops,
    batch_shapes=batch_shapes,
    check_config=check_config,
    check_hosts=check_hosts,
    without_data=without_data,
    report=_report,
    hf_class=hf_class,
    serving=embedding_serving.serving,
)
