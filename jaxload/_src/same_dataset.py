"""Every process shards the same dataset: compared in a pass's first round, refused otherwise.

jaxload's sharding gives loading group ``k`` of ``K`` its ``k``-th share of one global order, so
the groups' shares make up the dataset exactly once only where every process holds the same
dataset (the same length, elements and order). A seed drawn from ``jax.process_index()``, a file
list from an unsorted glob or a source of another length each give every process a different
dataset, and each group then takes its share of another order: records twice or never, with no
error. So each process describes what it shards (:class:`Described`: a few hundred bytes, see the
pipelines), sends it in its first round's report, and the leader compares the descriptions
(:func:`verdict`): a difference ends the pass before its first step, and every process raises
the same ValueError naming the processes and what differs.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from jaxload._src.protocol import Decision, Report
from jaxload._src.whereabouts import ranges

ALL, GROUP = "all", "group"  # compared between every process, or within a loading group only
MAX_VALUES = 4  # distinct values named per field in a message (the others counted)
MAX_MESSAGE = 2000  # characters of the refusal every process reads from the store
LABELS = {"split": "how jaxload splits it (by files, by elements or at a shard(SHARD_HINT), as "
                   "each process decided from its own pipeline and files)",
          "local files": "the sizes of the first files the pipeline names, on each host's "
                         "disk (other files under the same names on each host's disk show here "
                         "where their sizes differ)",
          "elements": "the hash of a few elements at the same indices",
          "yielded": "the hash of a few elements as the pipeline yields them (after its maps) at "
                     "the same indices",
          "first elements": "the hash of the first elements the pipeline yields (tf.data: under "
                            "its last maps; a list shuffled in Python without a seed differs by "
                            "process, e.g. Keras's *_dataset_from_directory with seed=None: pass "
                            "seed=)",
          "sampler": "the sampler (without its shard options)",
          "source_length": "the source's length", "records": "the hash of a few source records",
          "produced": "the hash of what the operations make of a few source records",
          "source rows": "the arrays under the pipeline (from_tensor_slices, from_tensors, a "
                         "reader's file names: a list shuffled in Python without a seed differs by "
                         "process, e.g. Keras's *_dataset_from_directory or split_dataset with "
                         "seed=None: pass seed=; file names from glob.glob or os.listdir come in "
                         "another order on each host: sort them)"}
_FIX = ("Every process must pass the same dataset (the same source and order, its random "
        "operations seeded alike, e.g. not by jax.process_index()); jaxload splits it between the "
        "loading groups.")


@dataclasses.dataclass(frozen=True)
class Described:
    """What one process says of the dataset it shards (JSON in its first round's report).

    Attributes:
      same: fields every process of the scope must report alike (``{"length": 64,
        "elements": "<hash>"}``); a None value is not compared (unknown on that process).
      scope: ``"all"``: compared between every process (jaxload shards the dataset);
        ``"group"``: the user split it (``shard=False``): its fields are not compared (a loading
        group's processes compare their rows every step), only its seeds between groups.
      group, groups: this process's ``shard_index`` and the ``shard_count``.
      split: ``[start, step]`` of a slice the user took of the dataset, where one is seen (it
        names the fix when the processes differ).
      seeds: the seeds of random operations after the user's own split (``shard=False``): equal
        in two loading groups, both draw the same random sequence.
      files: split by files, ``[meant, read]``: the names the pipeline's reads are given
        unsharded and those this group's reads are given, each ``"<count>:<sum of hashes>"``
        (:func:`~jaxload._src.pipelines.tf.multisets.names_read`). The groups' ``read`` must add
        up to ``meant``: every file the pipeline reads, read by one group, once.

    Example:
      >>> Described({"length": 64}, group=1, groups=2).to_json()["same"]
      {'length': 64}
    """

    same: dict[str, Any]
    group: int
    groups: int
    scope: str = ALL
    split: list[int] | None = None
    seeds: list[int] | None = None
    files: list[str | None] | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def verdict(decision: Decision, reports: dict[int, Report]) -> Decision:
    """``decision``, ended and refused where the processes described different datasets.

    A failure or stop of a process stays the decision (its cause comes first).

    Example:
      >>> same = {"same": {"length": 64}, "group": 0, "groups": 1}
      >>> verdict(Decision(count=1), {0: Report(dataset=same), 1: Report(dataset=same)}).refused
      >>> other = {**same, "same": {"length": 68}}
      >>> print(verdict(Decision(count=1), {0: Report(dataset=same),
      ...                                   1: Report(dataset=other)}).refused)
      the processes shard different datasets: length 64 on process [0], 68 on process [1]. ...
    """
    if decision.error is not None or decision.stopped is not None or (
            decision.mismatch is not None):  # the batches' own shapes name the difference best
        return decision
    described = {p: r.dataset for p, r in reports.items() if r.dataset is not None}
    why = differences(described) if len(described) > 1 else None
    if why is None:
        return decision
    return Decision(refused=why[:MAX_MESSAGE])


def raise_if_refused(decision: Decision) -> None:
    """Raises the refusal of ``decision`` (the same ValueError on every process)."""
    if decision.refused is not None:
        raise ValueError(decision.refused)


def differences(described: dict[int, dict[str, Any]]) -> str | None:
    """The message naming what differs between the processes' descriptions, or None.

    Example:
      >>> one = {"same": {"length": 32, "elements": "ab"}, "group": 0, "groups": 2,
      ...        "split": [0, 2]}
      >>> two = {**one, "same": {"length": 32, "elements": "cd"}, "group": 1, "split": [1, 2]}
      >>> print(differences({0: one, 1: two}))
      the processes shard different datasets: the hash of a few elements at the same indices "ab" \
on process [0], "cd" on process [1]. ... pass the whole dataset, or keep your split and pass shard=False.
    """
    found = _differing(_compared(described), described)
    seeds = _shared_seeds(described)
    if not found:
        seeds = " ".join(filter(None, (seeds, _files_read(described))))
    if not found and not seeds:
        return None
    lines = [f"{key} {text}" for key, text in found]
    hints = _hint(described) + _unsorted(described)
    message = (f"the processes shard different datasets: {'; '.join(lines)}. {_FIX}"
               f"{hints or _own_files(found)}" if found else "")
    return " ".join(filter(None, (message, seeds)))


def _files_read(described: dict[int, dict[str, Any]]) -> str | None:
    """Why the loading groups' files, split by files, are not the pipeline's (their names
    reaching the reads do not add up to the unsharded pipeline's), or None. Not compared where
    the processes' unsharded names differ (random ops on the names, unseeded: each run reads
    other files anyway) or a process could not count them.

    Example:
      >>> def of(group, read):
      ...     return {"same": {}, "group": group, "groups": 2, "files": ["2:0000000000000003", read]}
      >>> _files_read({0: of(0, "1:0000000000000001"), 1: of(1, "1:0000000000000002")}) is None
      True
      >>> print(_files_read({0: of(0, "2:0000000000000001"), 1: of(1, "1:0000000000000002")}))
      the loading groups would read other files than the pipeline reads: ... given 3 names in all, ...
    """
    files: list[list[str]] = [d.get("files") or [] for d in described.values()]
    if not files or any(len(f) != 2 or None in f for f in files) or len({f[0] for f in files}) > 1:
        return None
    shares = {d["group"]: d["files"][1] for d in described.values()}
    if len(shares) != next(iter(described.values()))["groups"]:
        return None
    count, total = 0, 0
    for share in shares.values():
        n, digest = share.split(":")
        count, total = count + int(n), (total + int(digest, 16)) % 2**64
    meant = files[0][0]
    if f"{count}:{total:016x}" == meant:
        return None
    return (f"the loading groups would read other files than the pipeline reads: split by "
            f"TensorFlow's file sharding, its file reads are given {count} names in all, with "
            f"what comes with each (hashes summed: {total:016x}), where unsharded they are given "
            f"{meant.split(':')[0]} ({meant.split(':')[1]}). An op on the file names changes "
            "under the split, such as one that picks or numbers them after a shuffle, which the "
            "split moves below it. "
            "Pass shard='elements' (every process reads every record and keeps 1/K), or choose "
            "the files in Python and list them with from_tensor_slices.")


def _compared(described: dict[int, dict[str, Any]]) -> list[int]:
    """The processes compared: those whose dataset jaxload splits. The processes of a loading
    group the user split (``shard=False``) are not compared here: they compare the rows they
    read at every step (:mod:`~jaxload._src.group_proof`, a :class:`~jaxload.ReplicationError`
    naming the step and processes)."""
    return [p for p, d in sorted(described.items()) if d.get("scope") != GROUP]


def _differing(processes: list[int], described: dict[int, dict[str, Any]]
               ) -> list[tuple[str, str]]:
    """``(field, "value on processes [...], ...")`` for each field that differs among them."""
    keys = list(dict.fromkeys(k for p in processes for k in (described[p].get("same") or {})))
    found = []
    for key in keys:
        values: dict[str, list[int]] = {}
        for p in processes:
            value = (described[p].get("same") or {}).get(key)
            if value is not None:
                values.setdefault(json.dumps(value, sort_keys=True), []).append(p)
        if len(values) > 1:
            shown = [f"{text} on process{'es' if len(ps) > 1 else ''} [{ranges(ps)}]"
                     for text, ps in list(values.items())[:MAX_VALUES]]
            if len(values) > MAX_VALUES:
                shown.append(f"and {len(values) - MAX_VALUES} other values")
            found.append((LABELS.get(key, key), ", ".join(shown)))
    return found


def _hint(described: dict[int, dict[str, Any]]) -> str:
    """The fix where the processes look as if each had split the dataset by loading group
    itself (``ds[plan.shard_index::plan.shard_count]``) under jaxload's default sharding."""
    if not all(d.get("scope", ALL) == ALL for d in described.values()):
        return ""
    by_slice = all((s := d.get("split")) is not None and s[1] > 1 and list(s) in
                   ([d["group"], d["groups"]], [p, len(described)]) for p, d in described.items())
    if not (by_slice or _lengths_as_sliced(described)):
        return ""
    return (" Each process seems to hold its own share already (like ds[plan.shard_index::"
            "plan.shard_count]), which jaxload would split again: pass the whole dataset, or "
            "keep your split and pass shard=False.")


def _unsorted(described: dict[int, dict[str, Any]]) -> str:
    """The fix where every process lists the same file names (as a multiset: the unsharded
    names' hash), in another order."""
    names = {(d.get("same") or {}).get("file names") for d in described.values()}
    meant = {(d.get("files") or [None])[0] for d in described.values()}
    if len(names) < 2 or None in names or len(meant) != 1 or None in meant:
        return ""
    return (" Every process lists the same file names, in another order (as glob.glob or "
            "os.listdir may): sort them (sorted(...)), as Dataset.list_files does.")


def _own_files(found: list[tuple[str, str]]) -> str:
    """The fix where the processes' file names or source rows differ: each may list its own
    host's files on purpose."""
    if not {key for key, _ in found} & {"file names", LABELS["source rows"], LABELS["split"],
                                        LABELS["local files"]}:
        return ""
    return (" If each process lists only its own files on purpose (its host's), its pipeline is "
            "its loading group's share already: pass shard=False, or a dataset_fn that builds "
            "each group's share.")


def _lengths_as_sliced(described: dict[int, dict[str, Any]]) -> bool:
    """Whether the loading groups' lengths differ as ``len(ds[k::K])`` of one dataset would."""
    lengths: dict[int, int] = {}
    for d in described.values():
        length = (d.get("same") or {}).get("length")
        if not isinstance(length, int) or lengths.setdefault(d["group"], length) != length:
            return False
    groups = next(iter(described.values()))["groups"]
    total = sum(lengths.values())
    return (len(set(lengths.values())) > 1 and len(lengths) == groups
            and all(n == len(range(k, total, groups)) for k, n in lengths.items()))


def _shared_seeds(described: dict[int, dict[str, Any]]) -> str | None:
    """Why loading groups that draw the same random sequence are refused, or None."""
    by_seeds: dict[str, set[int]] = {}
    for d in described.values():
        if d.get("seeds"):
            by_seeds.setdefault(json.dumps(d["seeds"]), set()).add(d["group"])
    shared = {seeds: groups for seeds, groups in by_seeds.items() if len(groups) > 1}
    if not shared:
        return None
    seeds, groups = next(iter(shared.items()))
    return (f"loading groups [{ranges(sorted(groups))}] draw the same random sequence: their "
            f"datasets, split by the user (shard=False), apply random operations with the same "
            f"seeds {seeds} after the split, so the element at each position of every group gets "
            "the same random draws (the same crops, noise, ...). Apply the random operation on "
            "the whole MapDataset before the split (it then draws by the element's global "
            "index), or seed it by group: seed=seed + plan.shard_index.")
