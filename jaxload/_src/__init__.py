"""jaxload's private core: nothing here is public API (the public names are re-exported from
``jaxload`` and its public modules)."""
