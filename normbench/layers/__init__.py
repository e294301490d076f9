"""layers: the norms, the residual unit that places them, the models, and the checks of a
norm's contract (check-norm) and its numerics.

Owns: what runs inside a model. May import: core, data. ``keys`` (which norm.* keys each norm
reads) imports no torch, so the experiment and the report can read it; every other module
here is torch.
"""
