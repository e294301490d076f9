"""layers: the norms, the residual unit that places them, the models, and the checks of a
norm's contract (check-norm) and its numerics.

Owns: what runs inside a model. May import: core, data. ``keys`` (the norm table: each norm's
class, the keys it reads, its own keys) imports no torch, so the command line, the experiment
and the report can read it; every other module here is torch.
"""
