"""bfloat16 linear layers with oneDNN-prepacked weights, for decoding on CPU.

A plain `F.linear` on a bfloat16 CPU tensor hands oneDNN a weight in PyTorch's row-major layout,
which oneDNN re-lays-out into its blocked format on every call. At decoding sizes (a few to a few
dozen rows) that re-layout costs as much as the product itself. Packing each weight once per
weight version (`torch.ops.mkldnn._reorder_linear_weight`, what `torch.compile`'s CPU freezing
pass does) and calling `torch.ops.mkldnn._linear_pointwise` on the packed weight gives bit-equal
outputs in about half the time. Measured on the 2-core machine, 30 distinct weights to defeat the
caches, bf16: 1536 x 576 at 16 rows 138 -> 68 us, 576 x 576 55 -> 28 us, the 49152 x 576
vocabulary projection 3.75 -> 1.67 ms; packing the bundled model's 135M parameters ~0.1 s.

Only the generator's private bfloat16 copy of the policy uses this (`HFGenerator`): it has no
gradients, and it is re-packed whenever the learner's weights change. Where the operators are
missing (a PyTorch build without oneDNN bf16 support) nothing is replaced. The gain above was
measured on one CPU (AVX512-BF16); on others the generator times a decoding step with and
without the packed weights when it makes its copy and keeps the faster
(`backends/fast_paths.py`; a `PackedLinear` whose `packed` is None runs `F.linear`).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

BF16_FLAGS = ("avx512_bf16", "amx_bf16")
"""/proc/cpuinfo flags of native bfloat16 dot products (AVX512-BF16, AMX); without them oneDNN
emulates bfloat16 matmuls with float32 FMAs and conversions."""


def cpu_flags() -> set[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        pass
    return set()


def native_bf16(flags: set[str] | None = None) -> bool:
    """Does this CPU compute bfloat16 dot products natively (any of BF16_FLAGS)?"""
    return any(flag in (cpu_flags() if flags is None else flags) for flag in BF16_FLAGS)


def packing_available() -> bool:
    """oneDNN with bfloat16 support and the two private operators this module calls."""
    mkldnn = torch.backends.mkldnn
    if not mkldnn.is_available():
        return False
    ops = torch.ops.mkldnn
    try:
        return (
            bool(ops._is_mkldnn_bf16_supported())
            and hasattr(ops, "_reorder_linear_weight")
            and hasattr(ops, "_linear_pointwise")
        )
    except (AttributeError, RuntimeError):
        return False


@torch.library.custom_op("agentic_rl::packed_linear", mutates_args=())
def packed_linear(
    x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None, out_features: int
) -> torch.Tensor:
    """x @ W^T + b on a oneDNN-packed weight (`PackedLinear.packed`): x [..., in] bfloat16,
    returns [..., out_features].

    A custom operator so that `torch.compile` can call it: inductor cannot lower
    `mkldnn._linear_pointwise` on an opaque packed tensor whose shapes are dynamic, but it
    calls a custom operator as it is (backends/compiled.py's decoding step)."""
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), packed, bias, "none", [], "")


@packed_linear.register_fake
def _packed_linear_shape(
    x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None, out_features: int
) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], out_features))


class PackedLinear(nn.Module):
    """`nn.Linear` whose forward runs on a oneDNN-packed copy of its bfloat16 weight.

    Keeps the original `weight` / `bias` parameters (same names, same objects: tied weights
    stay tied and `parameters()` keeps its order), so the owner can copy new values into them;
    `repack()` must follow every such change. Inputs other than CPU bfloat16 take `F.linear`."""

    def __init__(self, linear: nn.Linear, batch_hint: int) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        self.bias = linear.bias
        self.batch_hint = batch_hint
        self.packed: torch.Tensor | None = None
        # Hooks on the replaced layer (deep-copied with the policy) keep firing.
        for name in ("_forward_pre_hooks", "_forward_hooks", "_forward_hooks_with_kwargs"):
            getattr(self, name).update(getattr(linear, name, {}))
        self.repack()

    def repack(self) -> None:
        with torch.no_grad():
            self.packed = torch.ops.mkldnn._reorder_linear_weight(
                self.weight.detach(), self.batch_hint
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is None or x.dtype != torch.bfloat16 or x.device.type != "cpu":
            return F.linear(x, self.weight, self.bias)
        # the operator itself: the custom operator's dispatch costs microseconds a call,
        # ~200 calls a decoding step, and eager code does not need it
        return torch.ops.mkldnn._linear_pointwise(
            x.contiguous(), self.packed, self.bias, "none", [], ""
        )

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, packed"


def pack_linears(model: nn.Module, batch_hint: int) -> list[PackedLinear]:
    """Replace every plain `nn.Linear` of `model` whose weight is a CPU bfloat16 tensor by a
    `PackedLinear` (in place) and return the new layers; [] when packing is unavailable.
    Subclasses of nn.Linear (e.g. LoRA layers) are left alone; their plain inner layers are
    replaced like any other."""
    if not packing_available():
        return []
    targets = [
        (parent, name, child)
        for parent in model.modules()
        for name, child in parent.named_children()
        if type(child) is nn.Linear
        and child.weight.dtype == torch.bfloat16
        and child.weight.device.type == "cpu"
    ]
    packed: dict[int, PackedLinear] = {}  # a layer used in two places is packed once
    for parent, name, child in targets:
        layer = packed.setdefault(id(child), PackedLinear(child, batch_hint))
        setattr(parent, name, layer)
    return list(packed.values())
