"""One file per tracker; each registers a per-epoch tracker with `convinit.analysis.register_tracker`.

The tracker registry imports every public module here on its first lookup, so a module in this package
is a tracker and a new tracker is one new file. What a tracker measures lives in `convinit.analysis`
(`locality`, `gates`, `init_quality`), where reports and figures use it too; the file here only says
which batch it runs on and what its metric keys are.
"""
