"""Grain pipelines: a ``MapDataset``, an ``IterDataset``, a ``grain.DataLoader``, and what the
processes compare of each."""
