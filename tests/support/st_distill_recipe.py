"""Embedding distillation's `mse` recipe in sentence-transformers, the oracle for
docs/distillation.md: a layer-reduced copy of the teacher (its layers 0, 2 and 4, as
sentence-transformers' layer-reduction example keeps them), trained with MSELoss onto the
teacher's vectors of a BEIR directory's training texts (each judged query and its
relevant passage: the texts bertjax's retrieval task reads), with the epochs, batch,
learning rate, warmup, weight decay and clipping of experiments/distill/minilm_l3.py.

    PYTHONPATH=.venv/test-extras python tests/support/st_distill_recipe.py \
        --teacher_dir MINILM_DIR --data_dir builtin_tasks/retrieval --out runs/st_student \
        --layers 0,2,4 --epochs 1 --batch_size 32 --learning_rate 1e-4

A batch is --batch_size (query, passage) rows, so 2 x --batch_size texts, each cut to
--max_length tokens. It saves the trained student, which `python -m bertjax.convert
import --format hf OUT W` and `python -m bertjax.retrieval evaluate --workdir W` then
score exactly as bertjax's own student is scored.
"""

import argparse

import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.losses import MSELoss
from st_retrieval_recipe import fit, training_pairs  # beside this script


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("teacher_dir", "data_dir", "out"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--layers", default="0,2,4")
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--batch_size", type=int, default=32)  # rows of two texts
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--warmup_proportion", type=float, default=0.1)
    parser.add_argument("--weight_decay", type=float, default=0.01)
    parser.add_argument("--max_length", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    teacher = SentenceTransformer(args.teacher_dir, device="cpu")
    student = SentenceTransformer(args.teacher_dir, device="cpu")
    kept = [int(i) for i in args.layers.split(",")]
    encoder = student[0].auto_model
    encoder.encoder.layer = torch.nn.ModuleList([encoder.encoder.layer[i] for i in kept])
    encoder.config.num_hidden_layers = len(kept)
    for model in (teacher, student):
        model.max_seq_length = args.max_length
    rows = training_pairs(args.data_dir)
    texts = [text for row in rows for text in row]
    targets = dict(zip(texts, teacher.encode(texts, convert_to_tensor=True), strict=True))
    loss = MSELoss(student)

    def batch_loss(batch):
        texts = [text for row in batch for text in row]
        return loss([student.tokenize(texts)], torch.stack([targets[t] for t in texts]))

    steps = fit(student, rows, batch_loss, args)
    student.save(args.out)
    print(f"saved {args.out} after {steps} steps of {args.batch_size} rows")


if __name__ == "__main__":
    main()
