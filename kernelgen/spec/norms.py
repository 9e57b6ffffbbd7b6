"""The norm table: one declarative entry per value of the `norm` axis.

Every stage reads the axis from here: the spec language (the values and their other spellings, e.g. a model
config's `rmsnorm`), generated variant names, the guards and the argument checks (whether it takes a weight or
a bias), the renderer (the device enum and the header's words), and the PyTorch reference and the float64
oracle (by the entry's properties, so two kinds that share a rule share its code). Adding a kind is an entry
here plus, where it brings a new rule, the device code that reads its enum (templates/kernelgen/norm.cuh) and
the reference's and oracle's handling of the new property; tests/test_axis_tables.py holds every stage to
the table.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NormKind:
    name: str  # the spec value
    enum: str  # kernelgen::Norm's enumerator (templates/kernelgen/params.cuh), in this table's order
    short: str  # its part of a generated variant name
    title: str  # how the generated source's header names it ("" when there is no norm)
    aliases: tuple[str, ...] = ()  # other spellings a spec or model config may use (lower case, '_' for '-')
    weight: bool = True  # takes a weight of head_dim values (the symbol's `weight`)
    normalizes: bool = True  # False only for "none": the row passes unnormalized
    centered: bool = False  # subtracts the row's mean first (LayerNorm); else scales by the root mean square
    unit_offset: bool = False  # multiplies by (1 + w), the sum rounded to float32 (Gemma), not by w
    takes_bias: bool = False  # may add a bias (norm_bias: true)


NORMS: dict[str, NormKind] = {k.name: k for k in (
    NormKind("rms", "kRms", "rms", "RMSNorm", aliases=("rmsnorm", "rms_norm")),
    NormKind("layer", "kLayer", "ln", "LayerNorm", aliases=("layernorm", "layer_norm", "ln"), centered=True,
             takes_bias=True),
    NormKind("none", "kNone", "nonorm", "", weight=False, normalizes=False),
    NormKind("rms_gemma", "kRmsGemma", "gemma", "RMSNorm x (1 + w)",
             aliases=("gemma", "gemma_rms", "gemma_rmsnorm", "rms_1p"), unit_offset=True),
    # Llama-4's QK norm (HF Llama4TextL2Norm, vLLM's RMSNorm(has_weight=False)): x / sqrt(mean(x^2) + eps)
    NormKind("rms_unweighted", "kRmsUnweighted", "rmsnow", "RMSNorm without weight",
             aliases=("l2", "l2norm", "l2_norm", "rms_no_weight", "rmsnorm_no_weight", "unweighted_rms"),
             weight=False),
)}
# The device enum's order (params.cuh `enum class Norm`); the table lists the kinds in the order messages name them.
NORM_ENUM_ORDER: tuple[str, ...] = ("kNone", "kRms", "kLayer", "kRmsGemma", "kRmsUnweighted")
