"""training: one run from a validated config to a finished run directory: its life cycle
(run), the loop (trainer), the order of its batches, its optimizers, the live line
(progress), checkpoints and diagnostics.

Owns: torch at training time. May import: core, data, layers, experiment, store, trackers
(TensorBoard, only when log.tensorboard is set).
"""
