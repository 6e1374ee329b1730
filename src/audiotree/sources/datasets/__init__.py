"""Dataset builders: files, named groups, windows of long files, duration-bucketed batches, their options."""
