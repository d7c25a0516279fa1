"""History stores and what they keep beside the messages (token counts, originals,
summaries); the public names are re-exported by [`contextfold.stores`][contextfold.stores]."""
