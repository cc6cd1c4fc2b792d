"""One class per kind of source, behind the :class:`~jaxload._src.pipelines.base.Pipeline`
Protocol: Grain ``MapDataset``, ``IterDataset`` and ``DataLoader``, a ``tf.data.Dataset`` and the
tf.data service. Each imports its backend only when it is built."""
