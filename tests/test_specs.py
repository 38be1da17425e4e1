"""The GPU specs table: every GPU kevo supports, every figure with a source."""

from __future__ import annotations

import csv
import io

import pytest

from tests.conftest import ROOT

from platforms.specs import GPU_SPECS, SOURCES, lookup

# Device names as torch reports them (or would), and the entry each must find.
DEVICES = {
    "NVIDIA A100-SXM4-80GB": "a100",
    "NVIDIA H100 80GB HBM3": "h100",
    "NVIDIA H100 PCIe": "h100 pcie",
    "NVIDIA H200": "h200",
    "NVIDIA B200": "b200",
    "NVIDIA L40S": "l40s",
    "AMD Instinct MI250X": "mi250x",
    "AMD Instinct MI250X/MI250": "mi250x",
    "AMD Instinct MI250": "mi250",
    "AMD Instinct MI300X": "mi300x",
    "AMD Instinct MI300X VF": "mi300x",
    "AMD Instinct MI300A": "mi300a",
    "AMD Instinct MI325X": "mi325x",
    "AMD Instinct MI350X": "mi350x",
    "AMD Instinct MI355X": "mi355x",
}
FIGURES = ("units", "warp_size", "smem_per_unit_kb", "l2_mb", "mem_bw_gbs", "fp32_tflops", "bf16_tflops")


@pytest.mark.parametrize("device,entry", sorted(DEVICES.items()))
def test_every_supported_gpu_is_found_by_its_device_name(device, entry):
    assert lookup(device)["name"] == entry


@pytest.mark.parametrize("entry", sorted(GPU_SPECS))
def test_every_figure_has_a_source(entry):
    specs = GPU_SPECS[entry]
    for figure in FIGURES:
        assert specs[figure] > 0, figure
        assert specs["sources"][figure] in SOURCES, figure
    estimated = [f for f, s in specs["sources"].items() if s == "estimate"]
    for figure in estimated:  # an estimate says what it is in the note
        assert figure.split("_")[0] in specs["note"], (entry, figure)
    assert specs["bf16_tflops"] > specs["fp32_tflops"]
    vendor_warp = {"nvidia": 32, "amd": 64}[specs["vendor"]]
    assert specs["warp_size"] == vendor_warp
    if specs["vendor"] == "amd":
        assert specs["arch"] in ("gfx90a", "gfx942", "gfx950") and specs["xcds"] >= 1
        assert specs["fp32_matrix_tflops"] >= specs["fp32_tflops"]


def test_figures_agree_with_the_h200_that_ncu_measured():
    lines = (ROOT / "tests/fixtures/profilers/ncu_h200/h200_ncu_raw_metrics.csv").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    rows = list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))
    device = rows[1]  # rows[0] is the units row
    h200 = lookup(device["device__attribute_display_name"])
    assert h200["units"] == int(device["device__attribute_multiprocessor_count"])
    assert h200["l2_mb"] * 2**20 == int(device["device__attribute_l2_cache_size"].replace(",", ""))
    smem = int(device["device__attribute_max_shared_memory_per_multiprocessor"].replace(",", ""))
    assert h200["smem_per_unit_kb"] * 1024 == smem
    assert h200["warp_size"] == int(device["device__attribute_warp_size"])


def test_one_amd_gcd_is_half_its_package():
    mi250x = lookup("AMD Instinct MI250X")
    assert mi250x["units"] == 110 and mi250x["mem_bw_gbs"] == 1638.4  # 220 CUs, 3,276.8 GB/s a package
    assert "one GCD" in mi250x["note"]


def test_unknown_devices_have_no_specs():
    assert lookup("cpu (16 cores, Triton interpreter)") == {}
    assert lookup("NVIDIA GeForce GTX 1080") == {}
