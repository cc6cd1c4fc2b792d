"""Backend adapters: each shards and batches a user's pipeline by the plan, then builds a Loader."""
