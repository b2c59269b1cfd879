"""Chapter 6: link arithmetic, overlap ratio, CPU-work calibration and early size checks.
The copies themselves need CUDA and run on the reference host; these parts run anywhere."""
import pytest
import torch

from datajourney import pcie
from datajourney.book.params import ParameterError

P = dict(sizes=[65536], repeats=3, warmup=1, ceiling_size=65536, overlap_sizes=[65536], cpu_work_ms=1.0)


def test_link_peaks():
    assert pcie.link_peak_gbps(4, 16) == pytest.approx(31.51, abs=0.01)  # the published L40S link
    assert pcie.link_peak_gbps(5, 16) == pytest.approx(63.02, abs=0.01)
    assert pcie.link_peak_gbps(3, 8) == pytest.approx(7.88, abs=0.01)
    assert pcie.link_peak_gbps(None, 16) is None


def test_overlap_ratio():
    assert pcie.overlap_ratio(5, 5, 5) == 1.0 and pcie.overlap_ratio(5, 5, 10) == 0.0
    assert pcie.overlap_ratio(2, 8, 9) == pytest.approx(0.5)
    assert pcie.verdict(0.9) == "overlaps" and pcie.verdict(0.1) == "serial"


def test_spin_calibration():
    n, ms = pcie.calibrate_spin(3.0)
    assert n > 0 and 0.5 < ms < 30  # calibrated on this machine, loosely: a shared CPU is noisy


@pytest.mark.parametrize("name,value", [("sizes", [0]), ("sizes", []), ("repeats", 0), ("cpu_work_ms", 0),
                                        ("overlap_sizes", [-1])])
def test_bad_parameters_are_named(name, value):
    with pytest.raises(ParameterError, match=repr(name)):
        pcie.check_parameters({**P, name: value})


def test_size_beyond_host_memory_fails_before_allocating():
    with pytest.raises(ParameterError, match="'sizes'.*free host memory"):
        pcie.preflight({**P, "sizes": [1 << 36]})  # 64 GiB, three buffers: more than this machine has free


def test_limits_are_read():
    lim = pcie.host_limits()
    assert lim["available_bytes"] > 0 and "memlock_bytes" in lim


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only path")
def test_without_cuda_the_chapter_says_so(tmp_path):
    res = pcie.run(**P, run_dir=tmp_path, progress=False)
    assert res.metadata["cuda"] is False and "no CUDA" in res.metadata["note"]
    assert "bandwidth" not in res.tables and pcie.key_metrics(res) == {}
