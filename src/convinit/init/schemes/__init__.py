"""One file per init scheme; each registers its entry point with `convinit.init.registry`.

The registry imports every public module here on its first lookup, so a module in this package is a
scheme. What several schemes use (filters, targets, the closed form, attention sites, measurement,
positions, the paper's optimiser) stays in `convinit.init`.
"""
