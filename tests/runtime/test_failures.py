"""autotune.runtime.failures: the failure kind of an exception or a signal, and its hint."""

from __future__ import annotations

import json
import signal

import pytest

from autotune.errors import UsageError
from autotune.runtime.failures import Failure, FailureKind, classify, classify_signal


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), "cuda_oom"),
        (
            RuntimeError(
                "DataLoader worker (pid 12) is killed by signal: Bus error. It is possible "
                "that dataloader's workers are out of shared memory."
            ),
            "shm_exhausted",
        ),
        (RuntimeError("DataLoader worker (pid(s) 7) exited unexpectedly"), "worker_died"),
        (MemoryError(), "host_oom"),
        (OSError("image file is truncated (3 bytes not processed)"), "corrupt_data"),
        (UsageError("unknown model 'resnet7'"), "invalid_config"),
        (ValueError("something else"), "error"),
    ],
)
def test_classify(exc: BaseException, kind: str) -> None:
    assert classify(exc) == kind


@pytest.mark.parametrize(
    ("signum", "kind"),
    [(signal.SIGKILL, "host_oom"), (signal.SIGBUS, "shm_exhausted"), (signal.SIGSEGV, "error")],
)
def test_classify_signal(signum: int, kind: str) -> None:
    failure = classify_signal(signum)
    assert failure.kind == kind
    assert signal.Signals(signum).name in failure.message


def test_every_kind_has_a_hint_and_an_unknown_one_gets_the_generic() -> None:
    assert all(kind.hint for kind in FailureKind)
    assert Failure("cuda_oom", "x").kind is FailureKind.CUDA_OOM  # a child's plain string
    assert Failure("no_such_kind", "x").kind is FailureKind.ERROR
    assert Failure(FailureKind.TIMEOUT, "late").to_dict() == {
        "kind": "timeout",
        "message": "late",
        "hint": FailureKind.TIMEOUT.hint,
    }


def test_a_kind_reads_and_stores_as_its_plain_name() -> None:
    kind = FailureKind.RANK_DIED
    assert f"{kind}" == str(kind) == "rank_died" and json.dumps(kind) == '"rank_died"'
    assert {"rank_died", "host_lost", "interrupted"} <= {k.value for k in FailureKind}
