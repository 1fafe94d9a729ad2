"""preflight_facts' clock reading: the kernel's answer (adjtimex), as timedatectl's NTPSynchronized gives it."""

from __future__ import annotations

import ctypes

import pytest

from ansible_collections.vllm_omni.serve.plugins.modules import preflight_facts


class FakeLibc:
    """adjtimex(2) as the kernel answers it: a return code and the maximum error it writes (microseconds)."""

    def __init__(self, rc: int, maxerror: int = 0):
        self.rc, self.maxerror = rc, maxerror

    def adjtimex(self, pointer) -> int:
        timex = ctypes.cast(pointer, ctypes.POINTER(preflight_facts._Timex)).contents
        assert timex.modes == 0  # read only: the module never sets the clock
        timex.maxerror = self.maxerror
        return self.rc


@pytest.fixture
def kernel(monkeypatch):
    def answer(libc) -> bool | None:
        monkeypatch.setattr(preflight_facts.os.path, "exists", lambda path: False)  # no timesyncd flag file
        monkeypatch.setattr(preflight_facts.ctypes, "CDLL", lambda *args, **kwargs: libc)
        return preflight_facts.kernel_clock_synchronized()
    return answer


def test_a_disciplined_clock_is_synchronised_and_the_16_second_maximum_error_is_not(kernel):
    assert kernel(FakeLibc(0, maxerror=1_500)) is True
    assert kernel(FakeLibc(0, maxerror=15_999_999)) is True
    assert kernel(FakeLibc(5, maxerror=16_000_000)) is False  # TIME_ERROR, the kernel's "never synchronised"


def test_a_kernel_that_refuses_the_call_gives_unknown_not_a_verdict(kernel):
    assert kernel(FakeLibc(-1, maxerror=0)) is None  # seccomp in a container: EPERM


def test_timesyncds_flag_file_is_enough(monkeypatch):
    monkeypatch.setattr(preflight_facts.os.path, "exists", lambda path: path == "/run/systemd/timesync/synchronized")
    monkeypatch.setattr(preflight_facts.ctypes, "CDLL", lambda *args, **kwargs: pytest.fail("adjtimex was called"))
    assert preflight_facts.kernel_clock_synchronized() is True
