"""A norm that breaks one rank of a data-parallel run on purpose, for the fault tests of
tests/training/test_distributed.py: LayerNorm, except that the rank named by the environment
variable FAULT_RANK, at its FAULT_AT-th training forward, does what FAULT says (raise, hang,
kill itself with SIGKILL, press Ctrl-C on its process group, or SIGTERM its launcher). Every
rank writes its process id into the directory FAULT_PIDS (when set), for the orphan check.
The fault lives in the environment, not the config, so that the faulted run and the run that
resumes it are one run."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import torch.nn.functional as F
from torch import nn


class FaultyRank(nn.Module):
    def __init__(self, num_features, layout):
        super().__init__()
        self.num_features = num_features
        self.layout = layout
        self.forwards = 0

    def forward(self, x, mask=None, cond=None):
        if os.environ.get("FAULT_PIDS"):
            (Path(os.environ["FAULT_PIDS"]) / str(os.getpid())).touch()
        if self.training:
            self.forwards += 1
            rank = int(os.environ.get("RANK", "0"))
            fault = os.environ.get("FAULT")
            at = int(os.environ.get("FAULT_AT", "0"))
            if fault and rank == int(os.environ["FAULT_RANK"]) and self.forwards == at:
                act(fault)
        h = x.transpose(1, -1) if self.layout == "channels" else x
        y = F.layer_norm(h, (self.num_features,))
        return y.transpose(1, -1) if self.layout == "channels" else y


FIRED: list[str] = []  # the fault acts once per process (a model has several of these norms)


def act(fault: str) -> None:
    if FIRED:
        return
    FIRED.append(fault)
    if fault == "raise":
        raise RuntimeError("an injected fault")
    if fault == "hang":
        time.sleep(3600)
    elif fault == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault == "ctrl-c":
        os.killpg(os.getpgid(0), signal.SIGINT)
    elif fault == "sigterm":
        os.kill(os.getppid(), signal.SIGTERM)  # the launcher: the ranks' parent
