"""What a loader says about itself: :meth:`Explained.explain`, the plan's tables and how its
pipeline is split over the loading groups, with what each process reads."""

from __future__ import annotations

from typing import Any

from jaxload._src.plan import Plan


class Explained:
    """``explain()`` for a loader, which supplies ``plan`` and ``_pipeline``."""

    plan: Plan
    _pipeline: Any

    def explain(self, *, max_processes: int = 16) -> str:
        """The plan's tables (:meth:`jaxload.Plan.explain`, needs ``rich``), then the input:
        how the pipeline is split over the loading groups and what each process reads, and
        for tf.data what a resume does (what the position holds and costs).

        Example:
          >>> import tensorflow as tf
          >>> loader = jaxload.from_tf_data(tf.data.Dataset.range(64), jaxload.data_parallel(),
          ...                               global_batch_size=16)
          >>> lines = loader.explain().splitlines()
          >>> lines[-2]
          'input: tf.data by elements: each process reads every element and keeps 1/1 of them'
          >>> lines[-1]
          'resume: skips to its position in memory (nothing is saved as a pass runs)'
        """
        resume = getattr(self._pipeline, "positioning", None)
        return (self.plan.explain(max_processes=max_processes)
                + f"input: {input_text(self._pipeline, self.plan)}\n"
                + (f"resume: {resume}\n" if resume else ""))


def input_text(pipeline: Any, plan: Plan) -> str:
    """How ``pipeline`` is split and what each process reads, in a line."""
    sharding = getattr(pipeline, "sharding", None)
    if sharding is None:
        return f"{pipeline.backend}: each loading group reads its own rows"
    if getattr(pipeline, "in_memory", None) is not None:  # (pipelines/tf/in_memory.py)
        line = (f"tf.data by elements, arrays in memory read by index: each process gathers its "
                f"own rows (1/{plan.shard_count}), in the pipeline's order")
    else:
        line = f"tf.data by {sharding.mode}: {sharding.reads(plan)}"
    if sharding.fallback:
        line += f" (not by files: {sharding.fallback})"
    return line
