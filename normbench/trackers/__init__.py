"""trackers: runs in the trackers people already use. A run as a tracker sees it (runs),
TensorBoard event files written from a run directory or live while training (tensorboard), and
MLflow runs kept in step with the run store (mlflow).

Owns: everything normbench writes outside the runs directory for a tracker. May import: core,
experiment, store. Never imported by report, nor by a command that does not ask for a tracker;
the trackers themselves are optional (``pip install 'normbench[tracking]'``). No torch.
"""
