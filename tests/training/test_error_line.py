"""A failed run's error is one line (normbench.training.run.error_line): the exception's first
line, with torch's future-callback wrappers taken off. A gloo timeout under DDP's
communication hooks (normbench's AllReduceClock around torch's allreduce_hook) arrives
wrapped once per callback, each wrapper followed by its callback's Python stack."""

from __future__ import annotations

import torch

from normbench.training.run import error_line

TIMEOUT = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] "
    "Timed out waiting 30000ms for recv operation to complete"
)


def test_a_wrapped_gloo_timeout_reads_as_the_timeout_in_one_line():
    inner = f"RuntimeError: {TIMEOUT}\n\nAt:\n  default_hooks.py(31): <lambda>\n"
    middle = f"Got the following error when running the callback: {inner}"
    wrapped = RuntimeError(
        f"Got the following error when running the callback: RuntimeError: {middle}"
        "\n\nAt:\n  distributed.py(180): completed\n"
    )
    assert error_line(wrapped) == f"RuntimeError: {TIMEOUT}"


def test_a_plain_error_keeps_its_type_and_first_line():
    assert error_line(ValueError("bad value\nmore detail")) == "ValueError: bad value"
    assert error_line(KeyError("x")) == "KeyError: 'x'"


def test_a_real_callback_error_of_a_torch_future_comes_back_as_its_cause():
    """Not a hand-made string: torch's own wrapping, from a callback of a failed future."""
    future = torch.futures.Future()
    chained = future.then(lambda done: done.value()).then(lambda done: done.value())
    future.set_exception(RuntimeError(TIMEOUT))
    try:
        chained.wait()
    except RuntimeError as err:
        assert str(err).startswith("Got the following error when running the callback: ")
        assert error_line(err) == f"RuntimeError: {TIMEOUT}"
    else:
        raise AssertionError("the chained future did not fail")
