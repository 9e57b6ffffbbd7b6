"""The argument checks of a variant's exported symbol, as one table.

The table is rendered into the C++ entry points (the symbol refuses bad tensors before it launches,
also when called from C++ with no Python around) and interpreted by the Python op (which explains
a refusal, and checks fake tensors under torch.compile). Both walk the same checks in the same
order and say the same words: `<variant>: <message>, got <what was passed>`. The dtype names in
those words come from one table too (DTYPE_NAMES: DLPack code and bits -> torch's name).

Pure: no torch, no files. The Python interpreter of the table is runtime/op.py's InputChecker."""
from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Callable

from ..layout.layout import Layout
from ..spec.formats import format_of
from ..spec.variant import TORCH_DTYPES, Variant

# Every tensor argument of the family, in the order a variant's symbol takes the ones it uses (symbol_args).
ARGS = ("x", "weight", "bias", "freqs", "positions", "out_loc", "kvcache", "scale")
PARAM_ALIGN = 16  # weight, bias and freqs are read with 16-byte loads
INDEX_DTYPES = ("int32", "int64")

# torch's dtype names by DLPack (type code, bits): the C++ symbol names a passed dtype from this table
# (rendered into it), so its words match Python's for every dtype torch can hand over through DLPack.
DTYPE_NAMES = {
    (0, 8): "int8", (0, 16): "int16", (0, 32): "int32", (0, 64): "int64",
    (1, 8): "uint8", (1, 16): "uint16", (1, 32): "uint32", (1, 64): "uint64",
    (2, 16): "float16", (2, 32): "float32", (2, 64): "float64", (4, 16): "bfloat16",
    (5, 64): "complex64", (5, 128): "complex128", (6, 8): "bool",
    (10, 8): "float8_e4m3fn", (11, 8): "float8_e4m3fnuz", (12, 8): "float8_e5m2", (13, 8): "float8_e5m2fnuz",
    (14, 8): "float8_e8m0fnu",
}
DLPACK = {name: code_bits for code_bits, name in DTYPE_NAMES.items()}

# What a message's "got" part shows, per kind of check (the same in both languages).
GOT = {
    "dtype_shape": "description",  # "float32 [4, 128] on cuda:0"
    "cuda": "description",
    "device": "description",
    "rows": "strides",  # "strides [256, 1]"
    "contiguous": "strides",
    "aligned": "address",  # "an address 4 bytes past a 16-byte boundary"
    "page_bytes": "row_bytes",  # the size of dim 1, inside the message
}


@dataclass(frozen=True)
class Check:
    """One condition on one argument. shape entries: an int (that size), "N" (x's row count), or another
    name (any size; the name is what the message shows, e.g. "max_pos")."""

    arg: str
    kind: str  # a key of GOT
    message: str  # what must hold; "{got}" marks where the passed value goes, else ", got ..." follows
    dtypes: tuple[str, ...] = ()  # dtype_shape: accepted torch dtype names
    shape: tuple[int | str, ...] = ()  # dtype_shape
    value: int = 0  # rows / aligned: bytes of alignment; page_bytes: bytes per page

    def parts(self, variant: str) -> tuple[str, str]:
        """The text before and after the passed value, as both languages print it (no variant: no prefix)."""
        prefix = f"{variant}: " if variant else ""
        before, marker, after = self.message.partition("{got}")
        return (prefix + before, after) if marker else (f"{prefix}{self.message}, got ", "")

    def text(self, variant: str, got: str) -> str:
        """The whole message."""
        before, after = self.parts(variant)
        return before + got + after


def _want(dtypes: tuple[str, ...], shape: tuple[int | str, ...]) -> str:
    return f"{'/'.join(dtypes)} [{', '.join(str(s) for s in shape)}]"


def _tensor(arg: str, dtypes: tuple[str, ...], shape: tuple[int | str, ...], align: int = 0,
            message: str = "") -> list[Check]:
    """dtype and shape, then contiguity (x: row contiguity, every row `align`-byte aligned), device and
    alignment checks of one argument."""
    out = [Check(arg, "dtype_shape", message or f"{arg} must be {_want(dtypes, shape)}", dtypes, shape)]
    if arg == "x":
        out.append(Check(arg, "rows", f"x rows must be contiguous, each starting {align}-byte aligned "
                                      f"(row stride a multiple of {align} bytes)", value=align))
    else:
        out.append(Check(arg, "contiguous", f"{arg} must be contiguous"))
        out.append(Check(arg, "device", f"{arg} must be on x's device"))
    if align:
        out.append(Check(arg, "aligned", f"{arg} must start at a {align}-byte aligned address (a fresh tensor does)",
                         value=align))
    return out


def table(v: Variant, layout: Layout, x_align: int) -> tuple[Check, ...]:
    """The checks of variant v's symbol, in the order both languages apply them (the first failure is reported).

    v must be resolved; x_align is the x alignment every compiled configuration accepts."""
    checks = _tensor("x", (TORCH_DTYPES[v.input_dtype],), ("N", v.heads * v.head_dim), x_align)
    checks += _tensor("out_loc", INDEX_DTYPES, ("N",))
    if v.norm != "none":
        checks += _tensor("weight", (TORCH_DTYPES[v.weight_dtype],), (v.head_dim,), PARAM_ALIGN)
    if v.norm_bias:
        checks += _tensor("bias", (TORCH_DTYPES[v.weight_dtype],), (v.head_dim,), PARAM_ALIGN)
    if v.rope_dim:
        checks += _tensor("freqs", ("float32",), ("max_pos", v.rope_dim), PARAM_ALIGN)
        checks += _tensor("positions", INDEX_DTYPES, ("N",))
    page = layout.page_bytes
    cache = _tensor("kvcache", ("uint8",), ("num_pages", "page_bytes"), layout.store_align,
                    message=f"kvcache must be a 2-D uint8 tensor [num_pages, {page}] "
                            "(allocate it with op.layout.allocate(num_pages))")
    cache.insert(1, Check("kvcache", "page_bytes", f"kvcache rows are {{got}} bytes but {v.name} writes {page}-byte "
                                                   f"pages ({layout.describe()}); allocate the pool with this variant's "
                                                   "layout or pick the variant matching the pool", value=page))
    if format_of(v).global_scale:
        cache += _tensor("scale", ("float32",), (1,), 4,
                         message=f"scale must be float32 [1], the global scale g of {v.store} (codes are of v * g)")
    # last, so a CPU caller (a test, a dry run) first hears about shapes, dtypes and layouts
    device = [Check("x", "cuda", "x must be on a CUDA device")]
    return tuple(checks + cache + device)


def symbol_args(table: tuple[Check, ...]) -> tuple[str, ...]:
    """The tensor arguments a variant's symbol takes (those its checks name), in ARGS order; then eps."""
    named = {c.arg for c in table}
    return tuple(a for a in ARGS if a in named)


def symbol_picker(args: tuple[str, ...]) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    """A C-level getter from the family's tensors (in ARGS order) to a symbol's parameters (symbol_args)."""
    getter = itemgetter(*(ARGS.index(a) for a in args))
    return getter if len(args) > 1 else (lambda tensors: (getter(tensors),))


def requirements(checks: tuple[Check, ...]) -> list[str]:
    """The checks as plain requirements (for the export manifest): the passed value shown as '<passed>'."""
    return [c.text("", "<passed>") for c in checks]


# ---- C++ -----------------------------------------------------------------------------------------

def _cpp_dims(c: Check) -> list[str]:
    t = c.arg
    out = [f"{t}.ndim() == {len(c.shape)}"]
    for i, s in enumerate(c.shape):
        if s == "N":
            if t != "x":
                out.append(f"{t}.size({i}) == x.size(0)")
        elif isinstance(s, int):
            out.append(f"{t}.size({i}) == {s}")
    return out


# C++ conditions per kind: {t} the argument, {v} the check's value, {e} x's element bytes.
_CPP = {
    "cuda": "{t}.device().device_type == kDLCUDA",
    "device": "kernelgen::same_device({t}, x)",
    "contiguous": "{t}.IsContiguous()",
    "rows": "kernelgen::rows_aligned({t}, {e}, {v})",
    "aligned": "kernelgen::address_offset({t}, {v}) == 0",
    "page_bytes": "{t}.size(1) == {v}",
}

# C++ expressions that print a check's "got" part, per GOT entry.
_CPP_GOT = {"description": "kernelgen::describe({t})", "strides": "kernelgen::describe_strides({t})",
            "address": "kernelgen::describe_address({t}, {v})", "row_bytes": "{t}.size(1)"}


def cpp_condition(c: Check, elem_bytes: int) -> str:
    """The C++ expression (over tvm::ffi::TensorView arguments) that holds when the check passes."""
    if c.kind == "dtype_shape":
        kinds = " || ".join(f"kernelgen::has_dtype({c.arg}, {DLPACK[d][0]}, {DLPACK[d][1]})" for d in c.dtypes)
        return " && ".join([f"({kinds})", *_cpp_dims(c)])
    if c.kind not in _CPP:
        raise ValueError(f"unknown check kind '{c.kind}'")
    return _CPP[c.kind].format(t=c.arg, v=c.value, e=elem_bytes)


def _cpp_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def cpp_message(c: Check, variant: str) -> str:
    """The C++ stream operands that print the check's message (the same text as Check.text)."""
    before, after = c.parts(variant)
    got = _CPP_GOT[GOT[c.kind]].format(t=c.arg, v=c.value)
    return " << ".join([_cpp_string(before), got] + ([_cpp_string(after)] if after else []))


def cpp_checks(v: Variant, layout: Layout, x_align: int) -> list[dict[str, str]]:
    """Template context: each check as a C++ condition and message (see templates' check function)."""
    return [{"arg": c.arg, "condition": cpp_condition(c, v.elem_bytes), "message": cpp_message(c, v.name)}
            for c in table(v, layout, x_align)]


def cpp_dtype_names() -> list[dict[str, object]]:
    """Template context: DTYPE_NAMES for the symbol's descriptions of passed tensors."""
    return [{"code": code, "bits": bits, "name": name} for (code, bits), name in DTYPE_NAMES.items()]
