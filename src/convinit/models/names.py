"""The names of the shipped model presets, as a plain table: `convinit models` prints it without
importing torch or the architecture modules. tests/models/test_names.py checks it equals the registry,
so a preset added to a family module must be added here too (the test names it).
"""

MODEL_NAMES = (
    "convit_base",
    "convit_base_plus",
    "convit_small",
    "convit_small_plus",
    "convit_tiny",
    "convit_tiny_patch2_32",
    "convit_tiny_patch4_32",
    "convit_tiny_plus",
    "convmixer",
    "deit_base",
    "deit_small",
    "deit_tiny",
    "deit_tiny_patch2_32",
    "deit_tiny_patch4_32",
    "simplevit",
    "vit_tiny_patch2_32",
)
