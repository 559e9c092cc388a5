"""The ground floor: what convinit needs from the operating system and the installed packages.

Files written atomically and folders swapped whole, files read back with a cap on their size, decoding
workers that die with their parent, and the torch / torchvision pair. Nothing here knows about models,
data or runs; every other layer may build on it.
"""
