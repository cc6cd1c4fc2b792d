"""tf.data pipelines: read the graph, split it over the loading groups, pair each batch with a
position (see docs/architecture.md)."""
