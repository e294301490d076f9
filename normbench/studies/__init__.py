"""studies: the literature, reproduced with normbench's own machinery. One module per question
(batch size, placement, no normalization, precision, LayerNorm's claimed benefits), each a
sweep and a findings section whose every number and verdict comes from the runs; findings
runs them all and writes docs/findings.md (`normbench findings`).

Owns: the studies and the findings document. May import: core, layers.numerics, store, report,
sweeps (each study runs its sweep through the sweep's own session). No torch at import: the
sweeps train in their own processes.
"""
