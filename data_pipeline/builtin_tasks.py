"""Four small fine-tuning tasks made from the built-in corpus, so fine-tuning can be shown here.

    python -m data_pipeline.builtin_tasks --out_dir DIR

writes, in the formats the fine-tuning readers take:

  topics_train.tsv, topics_eval.tsv
      sentence classification: did a sentence come from the reference manual's
      pdb (debugger) topic or from its string-methods topic? Columns `text`
      and `label`; the held-out sentences are chosen by a hash of their text.
  cloze_train.json, cloze_eval.json
      SQuAD 1.1 format: the context is three consecutive sentences of a
      document, the question is one of them with a word replaced by "what",
      and the answer is that word in the context. Held-out questions come from
      held-out documents (corpus.is_eval_document), so they are about text the
      model never fine-tuned on.
  code_train.txt, code_eval.txt
      token tagging in CoNLL format (IOB2): which words of a reference-manual
      sentence are code? The manual puts code in double quotes ("x.name",
      "__getattr__()"); the quotes are taken out and their words tagged B-CODE,
      I-CODE, the others O. Held-out sentences come from held-out documents.
  retrieval/
      a BEIR-layout collection (corpus.jsonl, queries.jsonl, qrels/train.tsv,
      dev.tsv, test.tsv): each window of three sentences of a document is a
      passage, with one of its sentences taken out to be its query (the inverse
      cloze task). Train queries come from the training documents, dev and test
      (alternately) from the held-out ones; all search the whole corpus.

All are deterministic for a Python version (the corpus is its documentation).
"""

from absl import flags

from data_pipeline import cli


def define_flags() -> None:
    flags.DEFINE_string("out_dir", None, "Directory for the task files.", required=True)


if __name__ == "__main__":
    cli.run("data_pipeline.builtin_task_files:main", define_flags)
