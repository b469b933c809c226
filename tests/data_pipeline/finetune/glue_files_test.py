"""GLUE's files as its download lays them out: every task's train, dev and test files in
their own columns, and the errors of a data directory a user may have."""

import numpy as np
import pytest

from data_pipeline.finetune import glue_files
from data_pipeline.finetune.classification_config import GLUE_TASKS
from data_pipeline.finetune.glue_sample import SENTENCES
from data_pipeline.finetune.glue_sample import write as write_glue_dir
from data_pipeline.finetune.records import TaskDataError


@pytest.fixture(scope="module")
def glue_dir(tmp_path_factory):
    return write_glue_dir(str(tmp_path_factory.mktemp("glue")))


def test_every_task_has_a_layout_whose_labels_follow_the_tfds_label_names():
    assert set(glue_files.LAYOUTS) == {*GLUE_TASKS, "ax"}
    for task, glue_task in GLUE_TASKS.items():
        assert len(glue_files.LAYOUTS[task].label_values) == len(glue_task.label_names), task


@pytest.mark.parametrize("task", sorted(glue_files.LAYOUTS))
def test_every_split_of_every_task_reads(glue_dir, task):
    layout = glue_files.LAYOUTS[task]
    glue_files.check_data_dir(glue_dir, [task])
    for split in layout.splits:
        data = glue_files.read_split(glue_dir, task, split)
        assert len(data) == 8
        assert set(data.text_a) <= set(SENTENCES)
        assert (set(data.text_b) <= set(SENTENCES)) if layout.text_b else set(data.text_b) == {""}
        if glue_files.is_test(task, split):
            assert data.labels is None
            assert list(data.index) == [str(i) for i in range(8)]
        else:
            assert data.index is None
            assert len(data.labels) == 8


def test_labels_are_read_as_the_files_spell_them(glue_dir):
    cola = glue_files.read_split(glue_dir, "cola", "train")  # headerless, four columns
    assert cola.text_a[1] == SENTENCES[1] and list(cola.labels[:4]) == [0, 1, 0, 1]
    mnli = glue_files.read_split(glue_dir, "mnli", "dev_mismatched")  # gold_label, last
    assert list(mnli.labels[:3]) == [0, 1, 2]  # entailment, neutral, contradiction
    stsb = glue_files.read_split(glue_dir, "stsb", "dev")
    assert stsb.labels.dtype == np.float32 and stsb.labels[3] == pytest.approx(3.3)
    # A quote is text, never a delimiter.
    sst2 = glue_files.read_split(glue_dir, "sst2", "train")
    assert sst2.text_a[2] == 'The "with" statement closes the file.'


def test_a_missing_directory_folder_or_file_is_one_line_naming_it(glue_dir, tmp_path):
    with pytest.raises(TaskDataError, match=r"--data_dir=\S+/nowhere: no such directory; "):
        glue_files.check_data_dir(str(tmp_path / "nowhere"), ["rte"])
    partial = write_glue_dir(str(tmp_path / "partial"))
    import shutil

    shutil.rmtree(f"{partial}/QNLI")
    with pytest.raises(TaskDataError, match=r"/QNLI: missing, for the task qnli; the GLUE"):
        glue_files.check_data_dir(partial, ["rte", "qnli"])
    (tmp_path / "partial/MNLI/test_mismatched.tsv").unlink()
    with pytest.raises(TaskDataError, match=r"MNLI/test_mismatched.tsv: missing, for the task"):
        glue_files.check_data_dir(partial, ["mnli"])
    glue_files.check_data_dir(partial, ["mnli"], splits_of=lambda task: ("train",))


def test_bad_rows_name_the_file_and_line(tmp_path):
    root = write_glue_dir(str(tmp_path / "glue"))
    with open(f"{root}/RTE/dev.tsv", "a", encoding="utf-8") as f:
        f.write("8\tA sentence.\tAnother.\tmaybe\n")
    with pytest.raises(TaskDataError, match=r"RTE/dev.tsv: line 10: the label 'maybe' is none"):
        glue_files.read_split(root, "rte", "dev")
    with open(f"{root}/STS-B/train.tsv", "a", encoding="utf-8") as f:
        f.write("\t".join(["8", *["x"] * 8, "high"]) + "\n")
    with pytest.raises(TaskDataError, match=r"STS-B/train.tsv: line 10: the score 'high' is not"):
        glue_files.read_split(root, "stsb", "train")
    with open(f"{root}/QQP/train.tsv", "a", encoding="utf-8") as f:
        f.write("8\t16\t17\tOnly one question.\n")
    with pytest.raises(TaskDataError, match=r"QQP/train.tsv: line 10 has 4 fields; the header"):
        glue_files.read_split(root, "qqp", "train")
    with pytest.raises(TaskDataError, match=r"GLUE mnli has no split 'dev'; it has \['train'"):
        glue_files.read_split(root, "mnli", "dev")
    with pytest.raises(TaskDataError, match=r"unknown GLUE task 'sst'; the tasks: cola, sst2"):
        glue_files.read_split(root, "sst", "train")
