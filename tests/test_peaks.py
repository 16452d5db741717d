"""The datasheet peak table: name matching as nvidia-smi and torch spell the names, and the table's shape."""

from __future__ import annotations

import pytest

from gpucheckup.hardware.peaks import DTYPES, by_id, match_gpu, normalise, table

NAMES = {
    "NVIDIA H100 80GB HBM3": "H100-SXM",
    "NVIDIA H100 PCIe": "H100-PCIe",
    "NVIDIA H100 NVL": "H100-NVL",
    "NVIDIA H100 80GB HBM2e": "H100-PCIe",
    "NVIDIA H200": "H200-SXM",
    "NVIDIA H200 NVL": "H200-NVL",
    "NVIDIA H20": "H20",
    "NVIDIA L40S": "L40S",
    "NVIDIA L40": "L40",
    "NVIDIA L4": "L4",
    "NVIDIA A10G": "A10G",
    "NVIDIA A10": "A10",
    "NVIDIA A30": "A30",
    "NVIDIA A40": "A40",
    "NVIDIA A100-SXM4-80GB": "A100-SXM4-80GB",
    "NVIDIA A100-SXM4-40GB": "A100-SXM4-40GB",
    "NVIDIA A100-PCIE-40GB": "A100-PCIe-40GB",
    "NVIDIA A100 80GB PCIe": "A100-PCIe-80GB",
    "Tesla V100-SXM2-32GB": "V100-SXM2",
    "Tesla V100-PCIE-16GB": "V100-PCIe",
    "Tesla V100S-PCIE-32GB": "V100S-PCIe",
    "Tesla T4": "T4",
    "NVIDIA B200": "B200",
    "NVIDIA GB200": "GB200",
    "NVIDIA GeForce RTX 4090": "RTX-4090",
    "NVIDIA GeForce RTX 3090": "RTX-3090",
    "NVIDIA GeForce RTX 3090 Ti": "RTX-3090-Ti",
    "NVIDIA RTX A6000": "RTX-A6000",
    "NVIDIA RTX 6000 Ada Generation": "RTX-6000-Ada",
    "AMD Instinct MI300X": "MI300X",
    "AMD Instinct MI250X": "MI250X",
}


@pytest.mark.parametrize("name,gpu_id", sorted(NAMES.items()))
def test_device_names_match(name, gpu_id):
    g = match_gpu(name)
    assert g is not None and g.id == gpu_id


def test_l40s_is_never_l4_or_l40():
    assert match_gpu("NVIDIA L40S").peak("bf16") == 362.05
    assert normalise("NVIDIA L40S") == "l40s"
    for name in ("NVIDIA L40S", "L40S", "nvidia-l40s"):
        assert match_gpu(name).id == "L40S"


def test_unknown_gpus_are_not_guessed():
    for name in ("Quadro RTX 6000", "NVIDIA H800", "NVIDIA GeForce GTX 1080", "", "Intel Arc A770"):
        assert match_gpu(name) is None


def test_h200_and_h100_sxm_figures():
    h200 = match_gpu("NVIDIA H200")
    assert h200.peak("bf16") == 989.4 and h200.peak("fp8") == 1978.9 and h200.mem_bw_gb_s == 4800
    assert h200.ridge("bf16") == pytest.approx(989.4 / 4.8)
    assert match_gpu("NVIDIA H100 80GB HBM3").peak("bf16") == 989.4
    assert match_gpu("NVIDIA H100 PCIe").peak("bf16") == 756


def test_consumer_cards_bf16_is_the_fp32_accumulate_rate():
    """GeForce tensor cores run FP16/BF16 with FP32 accumulation at half the FP16-accumulate rate."""
    r4090, r3090 = match_gpu("NVIDIA GeForce RTX 4090"), match_gpu("NVIDIA GeForce RTX 3090")
    assert r4090.peak("bf16") == 165.2 and "330.3" in r4090.notes
    assert r3090.peak("bf16") == 71 and "142" in r3090.notes
    assert match_gpu("NVIDIA RTX A6000").peak("bf16") == 154.8  # professional card: full rate


def test_a10g_is_not_an_a10():
    assert match_gpu("NVIDIA A10G").peak("bf16") < match_gpu("NVIDIA A10").peak("bf16")


def test_every_entry_cites_a_source_and_is_dense():
    ids = [g.id for g in table()]
    assert len(ids) == len(set(ids))
    for g in table():
        assert g.source and g.mem_bw_gb_s > 0 and g.memory_gb > 0
        assert set(g.tflops) == set(DTYPES)
        assert g.peak("fp32") and g.peak("fp32") > 0
        if g.peak("bf16") and g.peak("tf32"):
            assert g.peak("tf32") <= g.peak("bf16")  # tensor-core tf32 runs at most at the bf16 rate
        if g.peak("fp8"):
            assert g.peak("fp8") == pytest.approx(2 * g.peak("bf16"), rel=0.02)
    assert by_id("h100-sxm").id == "H100-SXM"
