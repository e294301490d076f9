"""studies: the literature, reproduced with normbench's own machinery. One module per question
(batch size, placement, no normalization, precision, LayerNorm's claimed benefits), each a
sweep and a findings section whose every number and verdict comes from the runs; findings
runs them all and writes docs/findings.md (`normbench findings`).

Owns: the studies and the findings document. May import: every role below it (report, store,
sweeps through the command line it runs). No torch at import: the sweeps train in their own
processes.
"""
