"""One reader per on-disk dataset format; each registers its datasets with the dataset registry.

The registry (`convinit.data.datasets`) imports every public module here on its first lookup, so a
module in this package is a reader, and a new format is one new file. Readers import torch inside
their functions: `convinit datasets` imports them all and must stay quick.
"""
