"""store: the runs directory. Run ids, run directories and their files (rundir), the code
that made a run (provenance), the index and the rows a report or `runs list` reads (catalog),
and listing, comparing and deleting runs (manage).

Owns: everything on disk under runs/. May import: core, experiment (a run id hashes the
experiment's config). No torch.
"""
