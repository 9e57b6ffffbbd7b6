"""What may name a spec, a variant or a launch group: a C identifier that C++ does not reserve and that no
name of the generated code, or of the headers it includes, already takes (a variant's name becomes C++
functions, structs and exported symbols)."""
from __future__ import annotations

import re
from typing import Any

from .yamlsrc import quote

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_CPP_KEYWORDS = frozenset(
    "alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t class "
    "co_await co_return co_yield compl concept const const_cast consteval constexpr constinit continue decltype "
    "default delete do double dynamic_cast else enum explicit export extern false float for friend goto if inline "
    "int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected public register "
    "reinterpret_cast requires return short signed sizeof static static_assert static_cast struct switch template "
    "this thread_local throw true try typedef typeid typename union unsigned using virtual void volatile wchar_t "
    "while xor xor_eq".split())
_C_KEYWORDS = frozenset({"restrict"})  # C99's, which C++ lacks; nvcc's host compilers take it as an extension
# A variant named N becomes N, N_math, N_check, N_config and N_cfg<i> in namespace kernelgen_generated, and the
# exported symbols N and N_config (templates/fused_norm_rope_store.cu.j2). Each suffix, with what it names.
_GENERATED_SUFFIXES = (("_config", "the config symbol exported"), ("_math", "the math struct generated"),
                       ("_check", "the argument-check function generated"))
_CFG_SUFFIX = re.compile(r"_cfg(?:0|[1-9][0-9]*)\Z")  # N_cfg0, N_cfg1, ...: one per launch configuration
# Namespaces the generated code names, and global names it uses without `::` inside kernelgen_generated, where
# a variant's function of the same name would hide them (tests/test_spec.py reads them off rendered sources).
_GENERATED_CODE_NAMES = frozenset({"kernelgen", "kernelgen_generated", "tvm", "std", "int64_t", "kDLCUDA",
                                   "DLDataType"})
# The global names (macros among them) of the headers every generated file includes: tvm-ffi (TVMFFI...,
# TVM_FFI_...), DLPack (DLTensor, kDLCUDA, DLPACK_...) and CUDA (cudaMalloc, cuLaunchKernel, CUDA_VERSION, CUresult).
_LIBRARY_PREFIX = re.compile(r"TVM|DLPACK|DL[A-Z][a-z]|kDL[A-Z]|cuda[A-Z]|cu[A-Z]|CUDA|CU[a-z_]")
# Lower-case names C defines as macros (a function of that name would be expanded) and CUDA's built-in variables.
_MACROS_AND_BUILTINS = frozenset("assert errno offsetof setjmp va_arg va_copy va_end va_start stdin stdout stderr "
                                 "threadIdx blockIdx blockDim gridDim warpSize".split())
# Names stay well inside the 255-byte file-name limit once the build adds its prefixes and hashes.
MAX_NAME_LENGTH = 100  # characters of a spec or variant name


def _identifier_problem(name: object, fix: str) -> str | None:
    """Why name can name neither a spec nor a variant, with a fix (`fix` where renaming is it); None if it can."""
    if not isinstance(name, str):
        return f"must be a string, got {quote(name)}"
    if len(name) > MAX_NAME_LENGTH:
        return (f"{quote(name)} is {len(name)} characters, over the limit of {MAX_NAME_LENGTH} "
                "(MAX_NAME_LENGTH); shorten it")
    if not _IDENT.match(name):
        return f"{quote(name)} must be a C identifier (letters, digits, _; not starting with a digit)"
    reason = _reserved_reason(name)
    return f"{quote(name)} {reason}; {fix}" if reason else None


def _reserved_reason(name: str) -> str | None:
    if name in _CPP_KEYWORDS or name in _C_KEYWORDS:
        return f"is a {'C++' if name in _CPP_KEYWORDS else 'C'} keyword"
    if name.startswith("_"):
        return "starts with an underscore, which C++ reserves for the implementation at global scope"
    if "__" in name:
        return "contains a double underscore, which C++ reserves for the implementation"
    return None


def _symbol_reason(name: str) -> str | None:
    """Why an identifier cannot name a variant, whose name becomes C++ functions, structs and exported symbols."""
    if name == "main":
        return "would export a symbol named main, the name of a program's entry point"
    if name.endswith("_"):
        return (f"ends with an underscore, so its generated names ({name}_config, {name}_math) hold a double "
                "underscore, which C++ reserves")
    if name in _GENERATED_CODE_NAMES:
        return "is a name the generated code uses (in namespace kernelgen_generated)"
    if _LIBRARY_PREFIX.match(name):
        return "starts like the global names of tvm-ffi, DLPack and CUDA, which the generated code includes"
    if name in _MACROS_AND_BUILTINS:
        return "is a standard C macro or CUDA built-in"
    return None


def _generated_by(name: str) -> tuple[str, str] | None:
    """(base, what) when name is a name generated for a variant named base (x_config: ('x', 'the config ...'))."""
    cfg = _CFG_SUFFIX.search(name)
    if cfg:
        return name[:cfg.start()], "the launch-configuration struct generated"
    return next(((name[:-len(suffix)], what) for suffix, what in _GENERATED_SUFFIXES if name.endswith(suffix)), None)


def _symbol_name_problem(name: Any, fix: str) -> str | None:
    """Why name cannot name a variant or a group (their names become C++ structs and exported symbols), else None."""
    problem = _identifier_problem(name, fix)
    if problem is None and _symbol_reason(name):
        problem = f"{quote(name)} {_symbol_reason(name)}; {fix}"
    return problem
