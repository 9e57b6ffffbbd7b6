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
from ..spec.norms import NORMS
from ..spec.pages import POOL_SHARES, SLOT_SOURCES
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
    "pool_half": "strides",  # one half of a joint K/V pool: pages `value` bytes apart, each contiguous
    "same_rows": "description",  # a launch group's member input: as many rows as the first member's
    "same_device": "description",  # ... and on the first member's device
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
    elem: int = 0  # rows: the argument's element bytes (0: x's)
    other: str = ""  # same_rows / same_device: the argument whose row count / device this one must have

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
            message: str = "", n: Callable[[str], str] = str) -> list[Check]:
    """dtype and shape, then contiguity (x: row contiguity, every row `align`-byte aligned), device and
    alignment checks of one argument. n: the name each family argument goes by in the symbol."""
    out = [Check(n(arg), "dtype_shape", message or f"{n(arg)} must be {_want(dtypes, shape)}", dtypes, shape)]
    if arg == "x":
        out.append(Check(n(arg), "rows", f"{n('x')} rows must be contiguous, each starting {align}-byte aligned "
                                         f"(row stride a multiple of {align} bytes)", value=align))
    else:
        out.append(Check(n(arg), "contiguous", f"{n(arg)} must be contiguous"))
        out.append(Check(n(arg), "device", f"{n(arg)} must be on {n('x')}'s device"))
    if align:
        out.append(Check(n(arg), "aligned",
                         f"{n(arg)} must start at a {align}-byte aligned address (a fresh tensor does)", value=align))
    return out


def _dense_out(v: Variant, layout: Layout, n: Callable[[str], str]) -> list[Check]:
    """The output of a slots: token variant: row t holds token t's records, rows may be strided (so a Q output
    may be written in place, into the Q columns of the packed qkv viewed as uint8)."""
    out, page, align = n("kvcache"), layout.page_bytes, layout.store_align
    return [
        Check(out, "dtype_shape", f"{out} must be a 2-D uint8 tensor [N, {page}] (row t: token t's {v.heads} "
                                  f"record(s), {layout.describe()}; e.g. a [N, {v.heads * v.head_dim}] tensor viewed "
                                  "as uint8, or op.layout.allocate(N))", ("uint8",), ("N", "page_bytes")),
        Check(out, "page_bytes", f"{out} rows are {{got}} bytes but {v.name} writes {page}-byte rows "
                                 f"({layout.describe()})", value=page),
        Check(out, "rows", f"{out} rows must be contiguous, each starting {align}-byte aligned "
                           f"(row stride a multiple of {align} bytes)", value=align, elem=1),
        Check(out, "device", f"{out} must be on {n('x')}'s device"),
        Check(out, "aligned", f"{out} must start at a {align}-byte aligned address (a fresh tensor does)", value=align),
    ]


def table(v: Variant, layout: Layout, x_align: int, names: dict[str, str] | None = None) -> tuple[Check, ...]:
    """The checks of variant v's symbol, in the order both languages apply them (the first failure is reported).

    v must be resolved; x_align is the x alignment every compiled configuration accepts. names: what the
    symbol calls each family argument (a launch group's member takes k, k_weight, k_cache...), default ARGS."""
    def n(arg: str) -> str:
        return (names or {}).get(arg, arg)

    checks = _tensor("x", (TORCH_DTYPES[v.input_dtype],), ("N", v.x_width), x_align, n=n)
    if SLOT_SOURCES[v.slots].reads_out_loc:
        checks += _tensor("out_loc", INDEX_DTYPES, ("N",), n=n)
    if NORMS[v.norm].weight:
        checks += _tensor("weight", (TORCH_DTYPES[v.weight_dtype],), (v.norm_width,), PARAM_ALIGN, n=n)
    if v.norm_bias:
        checks += _tensor("bias", (TORCH_DTYPES[v.weight_dtype],), (v.norm_width,), PARAM_ALIGN, n=n)
    if v.rope_dim:
        checks += _tensor("freqs", ("float32",), ("max_pos", v.rope_dim), PARAM_ALIGN, n=n)
    if v.reads_positions:
        if v.position_streams > 1:  # M-RoPE: a row of positions per stream
            checks += _tensor("positions", INDEX_DTYPES, (3, "N"), n=n,
                              message=f"{n('positions')} must be {_want(INDEX_DTYPES, (3, 'N'))} (M-RoPE: each "
                                      "token's temporal, height and width positions, vLLM's [3, num_tokens])")
        else:
            checks += _tensor("positions", INDEX_DTYPES, ("N",), n=n)
    page = layout.page_bytes
    if SLOT_SOURCES[v.slots].dense:
        cache = _dense_out(v, layout, n)
    else:
        cache = _tensor("kvcache", ("uint8",), ("num_pages", "page_bytes"), layout.store_align, n=n,
                        message=f"{n('kvcache')} must be a 2-D uint8 tensor [num_pages, {page}] "
                                "(allocate it with op.layout.allocate(num_pages))")
        cache.insert(1, Check(n("kvcache"), "page_bytes",
                              f"{n('kvcache')} rows are {{got}} bytes but {v.name} writes {page}-byte "
                              f"pages ({layout.describe()}); allocate the pool with this variant's "
                              "layout or pick the variant matching the pool", value=page))
        if layout.joint and POOL_SHARES[layout.pool].packed:  # a view of [num_pages, stride]: records alternate
            cache[2] = Check(n("kvcache"), "pool_half",
                             f"{n('kvcache')} must be one half of a packed K/V pool uint8 [num_pages, "
                             f"{layout.page_stride}] (op.layout.halves(pool): {page} bytes of each "
                             f"{layout.page_stride}-byte page, the V half {layout.pool_record} bytes after the K half; "
                             "op.layout.allocate(num_pages) makes the pool)", value=layout.page_stride)
        elif layout.joint:  # a half of [num_pages, 2, page]: pages 2 * page bytes apart, not contiguous
            cache[2] = Check(n("kvcache"), "pool_half",
                             f"{n('kvcache')} must be one half of a joint K/V pool uint8 [num_pages, 2, {page}] "
                             f"(pool[:, 0] or pool[:, 1]: pages {layout.page_stride} bytes apart, each contiguous; "
                             "op.layout.allocate(num_pages) makes the pool)", value=layout.page_stride)
    if format_of(v).global_scale:
        cache += _tensor("scale", ("float32",), (1,), 4, n=n,
                         message=f"{n('scale')} must be float32 [1], {format_of(v).scale_words} of {v.store}")
    # last, so a CPU caller (a test, a dry run) first hears about shapes, dtypes and layouts
    device = [Check(n("x"), "cuda", f"{n('x')} must be on a CUDA device")]
    return tuple(checks + cache + device)


def group_blocks(members: list[tuple[str, Variant, Layout, int, dict[str, str]]]) -> list[tuple[str, tuple[Check, ...]]]:
    """A launch group's checks as (member role, checks) blocks in the order both languages apply them: every
    member's shapes, dtypes and layouts first (each member after the first also has as many rows as the first,
    right after its input's shape), then where the tensors are (each member's input on a CUDA device, on the
    first's device), so a CPU caller hears about every shape first. members: (role, resolved variant, layout,
    x alignment, its names in the group's symbol)."""
    first = members[0][4]["x"]
    shapes, places = [], []
    for role, v, layout, xa, names in members:
        own = table(v, layout, xa, names)
        *rest, cuda = own
        if names["x"] != first:
            rows = Check(names["x"], "same_rows", f"{names['x']} must have as many rows (tokens) as {first}", other=first)
            rest = [rest[0], rows, *rest[1:]]
            cuda_checks: tuple[Check, ...] = (cuda, Check(names["x"], "same_device", f"{names['x']} must be on "
                                                                                    f"{first}'s device", other=first))
        else:
            cuda_checks = (cuda,)
        shapes.append((role, tuple(rest)))
        places.append((role, cuda_checks))
    return shapes + places


def symbol_args(table: tuple[Check, ...]) -> tuple[str, ...]:
    """The tensor arguments a variant's symbol takes (those its checks name), in ARGS order; then eps."""
    named = {c.arg for c in table}
    return tuple(a for a in ARGS if a in named)


def used_args(v: Variant) -> tuple[str, ...]:
    """The family arguments variant v reads (its symbol's, in ARGS order): they do not depend on alignment."""
    from ..layout.layout import layout_of

    return symbol_args(table(v, layout_of(v), PARAM_ALIGN))


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
    "pool_half": "kernelgen::pool_half({t}, {v})",
    "same_rows": "{t}.size(0) == {o}.size(0)",
    "same_device": "kernelgen::same_device({t}, {o})",
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
    return _CPP[c.kind].format(t=c.arg, v=c.value, e=c.elem or elem_bytes, o=c.other)


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
