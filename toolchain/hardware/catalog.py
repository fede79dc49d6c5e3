"""The GPUs the toolchain plans for and builds on.

Figures are dense (no 2:4 sparsity) tensor-core throughput and the HBM bandwidth of the
data-center SKU, from NVIDIA's public datasheets (cited per entry). Memory is the marketed
capacity in decimal GB; the usable amount NVML reports is slightly lower, which the planner
covers with its reserve.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from toolchain.errors import UnknownGPUError

# Weight precisions TensorRT-LLM can build per architecture (docs/trtllm-build.md, "What each GPU can
# build": support matrix, builder.py SM 100-119 rejections of INT8/INT4 weight-only and SmoothQuant).
_AMPERE = ("bf16", "fp16", "int8_sq", "int8_wo", "int4_awq")
_ADA_HOPPER = ("bf16", "fp16", "fp8", "int8_sq", "int8_wo", "int4_awq", "w4a8_awq")
_BLACKWELL = ("bf16", "fp16", "fp8", "nvfp4")


@dataclass(frozen=True)
class GPU:
    name: str  # catalog name used in specs
    nvml_name: str  # full name NVML reports; part of the engine key
    sm: int  # compute capability as major*10+minor (90 = 9.0)
    memory_gb: float  # decimal GB
    hbm_tb_s: float  # memory bandwidth, TB/s
    bf16_tflops: float  # dense
    fp8_tflops: float | None  # dense; None when the GPU has no FP8 tensor cores
    fp4_tflops: float | None = None
    precisions: tuple[str, ...] = field(default=_ADA_HOPPER)
    source: str = ""

    @property
    def compute_capability(self) -> str:
        return f"{self.sm // 10}.{self.sm % 10}"

    @property
    def gfd_product(self) -> str:
        """The ``nvidia.com/gpu.product`` node label GPU Feature Discovery sets for this GPU: the NVML name with
        spaces replaced by '-' (NVIDIA/k8s-device-plugin ``internal/lm/resource.go`` ``productLabel``; a
        time-sliced GPU adds ``-SHARED``, a MIG device ``-MIG-<profile>``; docs/deploy.md)."""
        return self.nvml_name.replace(" ", "-")

    @property
    def memory_bytes(self) -> float:
        return self.memory_gb * 1e9

    @property
    def hbm_bytes_s(self) -> float:
        return self.hbm_tb_s * 1e12

    def peak_flops(self, weights: str) -> float:
        """Dense FLOP/s of the math the given weight format runs on this GPU."""
        if weights == "nvfp4" and self.fp4_tflops:
            return self.fp4_tflops * 1e12
        if weights in ("fp8", "w4a8_awq", "nvfp4") and self.fp8_tflops:
            return self.fp8_tflops * 1e12
        if weights == "int8_sq" and self.fp8_tflops:  # INT8 TOPS equal FP8 TFLOPS on Ada/Hopper
            return self.fp8_tflops * 1e12
        return self.bf16_tflops * 1e12


CATALOG: dict[str, GPU] = {
    g.name: g
    for g in [
        # A100 datasheet (nvidia.com/en-us/data-center/a100): 312 TF BF16 dense;
        # 1,555 GB/s (40GB), 2,039 GB/s (80GB SXM)
        GPU(
            "A100-40GB-SXM",
            "NVIDIA A100-SXM4-40GB",
            80,
            40,
            1.555,
            312,
            None,
            precisions=_AMPERE,
            source="NVIDIA A100 datasheet",
        ),
        GPU(
            "A100-80GB-SXM",
            "NVIDIA A100-SXM4-80GB",
            80,
            80,
            2.039,
            312,
            None,
            precisions=_AMPERE,
            source="NVIDIA A100 datasheet",
        ),
        # A10G (AWS G5): 24 GB GDDR6, 600 GB/s, ~70 TF FP16/BF16 dense tensor (NVIDIA A10 class, AWS G5 page)
        GPU(
            "A10G",
            "NVIDIA A10G",
            86,
            24,
            0.600,
            70,
            None,
            precisions=_AMPERE,
            source="AWS EC2 G5 / NVIDIA A10 datasheet",
        ),
        # L4 datasheet: 24 GB, 300 GB/s, BF16 121 TF dense (242 sparse), FP8 242.5 TF dense (485 sparse)
        GPU("L4", "NVIDIA L4", 89, 24, 0.300, 121, 242.5, source="NVIDIA L4 datasheet"),
        # L40S datasheet: 48 GB, 864 GB/s, BF16 362 TF dense (733 sparse), FP8 733 TF dense (1,466 sparse)
        GPU("L40S", "NVIDIA L40S", 89, 48, 0.864, 362, 733, source="NVIDIA L40S datasheet"),
        # H100 datasheet: SXM 80 GB, 3.35 TB/s, BF16 989 TF dense, FP8 1,979 TF dense
        GPU("H100-SXM", "NVIDIA H100 80GB HBM3", 90, 80, 3.35, 989, 1979, source="NVIDIA H100 datasheet (SXM)"),
        # H100 PCIe: 80 GB, 2.0 TB/s, BF16 756 TF dense, FP8 1,513 TF dense
        GPU("H100-PCIe", "NVIDIA H100 PCIe", 90, 80, 2.0, 756, 1513, source="NVIDIA H100 datasheet (PCIe)"),
        # H100 NVL: 94 GB, 3.9 TB/s, BF16 835 TF dense, FP8 1,671 TF dense
        GPU("H100-NVL", "NVIDIA H100 NVL", 90, 94, 3.9, 835, 1671, source="NVIDIA H100 datasheet (NVL)"),
        # H200 datasheet: 141 GB HBM3e, 4.8 TB/s, same compute as H100 SXM
        GPU("H200-SXM", "NVIDIA H200", 90, 141, 4.8, 989, 1979, source="NVIDIA H200 datasheet"),
        # HGX B200: 180 GB HBM3e per GPU, 8 TB/s, BF16 2.25 PF dense, FP8 4.5 PF dense, FP4 9 PF dense
        GPU(
            "B200",
            "NVIDIA B200",
            100,
            180,
            8.0,
            2250,
            4500,
            9000,
            precisions=_BLACKWELL,
            source="NVIDIA HGX B200 datasheet",
        ),
        # GB200 NVL72, per GPU: 186 GB HBM3e, 8 TB/s, BF16 2.5 PF dense, FP8 5 PF dense, FP4 10 PF dense
        GPU(
            "GB200",
            "NVIDIA GB200",
            100,
            186,
            8.0,
            2500,
            5000,
            10000,
            precisions=_BLACKWELL,
            source="NVIDIA GB200 NVL72 datasheet (per GPU)",
        ),
    ]
}


def lookup_gpu(name: str) -> GPU:
    """Find a catalog GPU by catalog name (case-insensitive) or full NVML name."""
    for gpu in CATALOG.values():
        if name.lower() in (gpu.name.lower(), gpu.nvml_name.lower()):
            return gpu
    close = difflib.get_close_matches(name, list(CATALOG), n=1, cutoff=0.4)
    suggestion = f"; did you mean '{close[0]}'?" if close else ""
    raise UnknownGPUError(f"unknown GPU '{name}'{suggestion} (known: {', '.join(CATALOG)})")
