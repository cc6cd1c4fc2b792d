"""How a tf.data pipeline is split, decided from what its graph shows, with no pipeline run
(jaxload/_src/pipelines/tf/decide.py): each fact's say, in the order they are read, and the
messages."""

from __future__ import annotations

import pytest

from jaxload._src.pipelines.tf.decide import (
    ELEMENTS,
    HINT,
    ONE_GROUP,
    TRY_FILES,
    Shown,
    fallback,
    group_refusal,
    order_refusal,
    start,
    why_not_files,
)

READS = Shown(readers=("TFRecordDataset",), names_read=False)


def test_the_first_facts_choose_hint_elements_one_group_or_files():
    hinted = Shown(hints=True, readers=("TFRecordDataset",))
    assert [start(hinted, shard, 2) for shard in ("auto", "files")] == [HINT, HINT]
    with pytest.raises(ValueError, match=r"shard='elements' splits the whole pipeline, but it "
                                         r"holds a shard\(SHARD_HINT, SHARD_HINT\)"):
        start(hinted, "elements", 2)
    in_memory = Shown(sources=("TensorSliceDataset",))
    assert start(in_memory, "auto", 4) == ELEMENTS
    assert start(READS, "elements", 4) == ELEMENTS
    assert start(READS, "auto", 1) == ONE_GROUP
    assert start(READS, "auto", 4) == TRY_FILES
    assert start(in_memory, "files", 4) == TRY_FILES  # then refused: it reads no files
    assert start(Shown(unsplittable=("ParquetDataset",)), "auto", 4) == TRY_FILES


def test_why_not_by_files_in_the_order_the_facts_are_read():
    groups = 4
    assert why_not_files(READS, groups) is None  # the rewrite and the names are read next
    cases = [
        (Shown(unsplittable=("ParquetDataset",), readers=("TFRecordDataset",)),
         "it reads files through ParquetDataset, which TensorFlow's file sharding cannot split"),
        (Shown(sources=("TensorSliceDataset", "RangeDataset")),
         "it reads no files (no ArrayRecordDataset, FixedLengthRecordDataset, "
         "FixedLengthRecordDatasetV2, RecordIODataset, ... op; its sources are RangeDataset, "
         "TensorSliceDataset)"),
        (Shown(readers=("TFRecordDataset",), blocked="a take(5) after the reads",
               fix="take after the split", cannot_find='op: "RangeDataset"'),
         "a take(5) after the reads. To keep file sharding, take after the split, or pass "
         "dataset_fn"),
        (Shown(readers=("TFRecordDataset",), names_read=False,
               cannot_find='... op: "RangeDataset" ...'),
         "TensorFlow's file sharding cannot find where all of its records come from files (a "
         "RangeDataset op, which reads no files)"),
        (Shown(readers=("TFRecordDataset",), cannot_find="no op named"),
         "cannot find where all of its records come from files: some input"),
        (Shown(readers=("TFRecordDataset",), files=None),
         "the file names its TFRecordDataset read cannot be found before reading"),
        (Shown(readers=("TFRecordDataset",), files=1),
         "it reads 1 file for 4 loading groups, and each group needs at least one. To read "
         "only each loading group's share, write the data into at least 4 files"),
        (Shown(readers=("TFRecordDataset",), files=3), "it reads 3 files for 4 loading groups"),
        (Shown(readers=("TFRecordDataset",), files=8, padding=(2, 3, 8)),
         "global_batch_size=3 is padded to 8, so 2 of the 4 loading groups hold only padding at "
         "every step and would never read the files dealt to them. To read only each loading "
         "group's share, use a global_batch_size above 6"),
    ]
    for shown, said in cases:
        why = why_not_files(shown, groups)
        assert why is not None and why.startswith(said) or said in (why or ""), (shown, why)
    assert why_not_files(Shown(readers=("TFRecordDataset",), files=4), groups) is None


def test_a_pipeline_that_cannot_be_split_by_files_is_refused_or_warned_of():
    why = "it reads 3 files for 4 loading groups"
    with pytest.raises(ValueError, match="shard='files' cannot shard this pipeline by files: "
                                         "it reads 3 files for 4 loading groups. Use "
                                         "shard='elements'"):
        fallback(why, "files", 4)
    warning = fallback(why, "auto", 4)
    assert warning.startswith("from_tf_data(shard='auto') shards this pipeline by elements")
    assert "keeps 1/4 of them. Not by files: it reads 3 files" in warning


def test_an_order_that_can_differ_is_refused_naming_the_split_and_the_reasons():
    assert order_refusal(ELEMENTS, 2, ["a shuffle without a seed", "a generator"]) == (
        "from_tf_data shards this pipeline by elements (each process keeps 1 element in 2 of "
        "its own order), but that order can differ between processes, which would deliver some "
        "records twice and others never: a shuffle without a seed; a generator")
    assert "at your shard(SHARD_HINT)" in order_refusal(HINT, 2, ["x"])
    assert group_refusal([0, 1], ["a random op"]) == (
        "processes [0, 1] form one loading group and must read identical rows, but this "
        "pipeline can give each of them other rows: a random op")


def test_the_decision_imports_no_tensorflow():
    import ast

    import jaxload._src.pipelines.tf.decide as decide

    tree = ast.parse(open(decide.__file__).read())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names} | {
        f"{node.module}.{alias.name}" for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module for alias in node.names}
    assert not {name for name in imported if "tensorflow" in name or "compat" in name}, imported
