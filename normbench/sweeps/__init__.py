"""sweeps: grids of runs. A sweep from request to exit code (flow: run_sweep), expansion of
presets and overrides (grid), the plan and the sweep's record (plan), the live view (live), the
launchers that train runs (launchers picks one; local, the worker pool; cluster, submitit;
jobs, what they share), and seeds until decided (adaptive).

Owns: running many runs. May import: core, data, layers, experiment, store, trackers
(a log.tensorboard destination, checked before a sweep starts, and the note for runs that
reached none), training, report.
"""
