"""One reader per on-disk dataset format; each registers itself with the dataset registry."""
