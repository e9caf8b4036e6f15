"""Units the project counts in, defined once."""

GIB = 2**30  # bytes in a GiB: every memory figure (tables, predictions, meters) is in GiB
