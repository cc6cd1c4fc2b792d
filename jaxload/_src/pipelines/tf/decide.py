"""How a tf.data pipeline is split over the loading groups, decided from what its graph shows:
plain functions of a :class:`Shown` (no TensorFlow runs here), and every message that explains
or refuses the choice, an order that can differ between processes included
(:mod:`~jaxload._src.pipelines.tf.order` finds what makes it so).
:mod:`~jaxload._src.pipelines.tf.split` reads the facts and builds the share; this module
decides.

The facts come in stages, each read only where the ones before leave the choice open: what the
graph read at the build shows (hints, file reads, what follows them), then TensorFlow's file
rewrite of it (where it fails), then the file names it deals out.

Example:
  >>> shown = Shown(readers=("TFRecordDataset",), files=3)
  >>> start(shown, "auto", groups=4)
  'try files'
  >>> print(why_not_files(shown, groups=4))  # doctest: +ELLIPSIS
  it reads 3 files for 4 loading groups, and each group needs at least one. ...
"""

from __future__ import annotations

import dataclasses
import re

from jaxload._src.pipelines.tf.graph import READERS

FILES, ELEMENTS, HINT = "files", "elements", "hint"
ONE_GROUP, TRY_FILES = "one group", "try files"  # every file read by one group; rewrite next


@dataclasses.dataclass(frozen=True)
class Shown:
    """What a pipeline's graph shows, as far as it has been read.

    Attributes:
      hints: it holds a ``shard(SHARD_HINT, SHARD_HINT)``.
      readers: the ops that read files.
      unsplittable: the file reads that TensorFlow's file sharding cannot split.
      sources: its sources, to name where it reads no files.
      blocked: the first op after the reads whose meaning file sharding would change, in
        words, and ``fix``: how to keep file sharding all the same.
      cannot_find: TensorFlow's message where its file rewrite failed.
      names_read: the file names were looked for (after the rewrite); ``files``: how many it
        deals out, None where they cannot be found before reading.
      padding: where the global batch is padded so that some loading groups hold only padding
        at every step, ``(those groups, global_batch_size, its padded size)``.
    """

    hints: bool = False
    readers: tuple[str, ...] = ()
    unsplittable: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    blocked: str | None = None
    fix: str | None = None
    cannot_find: str | None = None
    names_read: bool = True
    files: int | None = None
    padding: tuple[int, int, int] | None = None


def start(shown: Shown, shard: str, groups: int) -> str:
    """The split the first facts decide: ``HINT``, ``ELEMENTS``, ``ONE_GROUP`` (one loading
    group reads every file) or ``TRY_FILES`` (by files, where the rewrite and the names allow:
    :func:`why_not_files`). A ValueError where ``shard="elements"`` meets a hint."""
    if shown.hints and shard == ELEMENTS:
        raise ValueError("shard='elements' splits the whole pipeline, but it holds a "
                         "shard(SHARD_HINT, SHARD_HINT), which only a split at the hint fills "
                         "in: remove the hint, or leave shard='auto' to split there")
    if shown.hints:
        return HINT
    if shard == ELEMENTS or (shard == "auto" and not shown.readers and not shown.unsplittable):
        return ELEMENTS
    return ONE_GROUP if groups == 1 and shown.readers else TRY_FILES


def why_not_files(shown: Shown, groups: int) -> str | None:
    """Why the pipeline cannot be split by files, from the facts read so far; None where they
    allow it (the caller reads the next ones, or builds the share)."""
    if shown.unsplittable:
        return (f"it reads files through {', '.join(shown.unsplittable)}, which TensorFlow's "
                "file sharding cannot split. To read only each loading group's share, write "
                "the data as TFRecord (or text) files, or pass dataset_fn to build each "
                "group's share")
    if shown.padding is not None:
        idle, size, padded = shown.padding
        holds = "holds" if idle == 1 else "hold"
        return (f"global_batch_size={size} is padded to {padded}, so {idle} of the {groups} "
                f"loading groups {holds} only padding at every step and would never read the "
                f"files dealt to them. To read only each loading group's share, use a "
                f"global_batch_size above {padded - padded // groups}")
    if not shown.readers:
        return (f"it reads no files (no {', '.join(sorted(READERS)[:4])}, ... op; its sources are "
                f"{', '.join(sorted(shown.sources))})")
    if shown.blocked is not None:
        return (f"{shown.blocked}. To keep file sharding, {shown.fix}, or pass dataset_fn to "
                "build each loading group's share")
    if shown.cannot_find is not None:
        found = re.search(r'op: "(\w+)"', shown.cannot_find)
        where = f" (a {found.group(1)} op, which reads no files)" if found else ""
        return (f"TensorFlow's file sharding cannot find where all of its records come from "
                f"files{where}: some input of the pipeline reads no files, and every group "
                f"would read all of it. To read only each loading group's share, pass "
                f"dataset_fn to build it")
    if not shown.names_read:
        return None
    if shown.files is None:
        return (f"the file names its {', '.join(shown.readers)} read cannot be found before "
                "reading")
    if shown.files < groups:
        return (f"it reads {shown.files} file{'s' * (shown.files != 1)} for {groups} loading "
                f"groups, and each group needs at least one. To read only each loading "
                f"group's share, write the data into at least {groups} files (a multiple of "
                f"{groups} evens out the groups), or pass dataset_fn to build each group's "
                "share")
    return None


def fallback(why_not: str, shard: str, groups: int) -> str:
    """Where a pipeline that reads files cannot be split by files: the warning that says it is
    split by elements instead (``shard="auto"``), or a ValueError (``shard="files"``)."""
    if shard == FILES:
        raise ValueError(f"shard='files' cannot shard this pipeline by files: {why_not}. Use "
                         "shard='elements' (every process reads every element and keeps 1/K), "
                         "or pass dataset_fn to build each loading group's share")
    return (f"from_tf_data(shard='auto') shards this pipeline by elements, so that it keeps "
            f"its meaning: each process reads and parses all of its records and keeps "
            f"1/{groups} of them. Not by files: {why_not}. shard='elements' says reading "
            "everything is meant (and silences this warning)")



def order_refusal(mode: str, groups: int, reasons: list[str]) -> str:
    """Why a split in ``mode`` is refused where the order it splits can differ between
    processes (``reasons``: what in the graph makes it so)."""
    where = {ELEMENTS: f"by elements (each process keeps 1 element in {groups} of its own "
                       "order)",
             FILES: "by files (each loading group keeps its share of the file names in their "
                    "order on its own processes)",
             HINT: "at your shard(SHARD_HINT) (each loading group keeps its share of the "
                   "elements before it, in their order on its own processes)"}
    return (f"from_tf_data shards this pipeline {where[mode]}, but that order can differ "
            "between processes, which would deliver some records twice and others never: "
            f"{'; '.join(reasons)}")


def group_refusal(group: list[int], reasons: list[str]) -> str:
    """Why a pipeline is refused where the processes of one loading group must read identical
    rows and it can give each of them others (``reasons``)."""
    return (f"processes {group} form one loading group and must read identical rows, but this "
            f"pipeline can give each of them other rows: {'; '.join(reasons)}")
