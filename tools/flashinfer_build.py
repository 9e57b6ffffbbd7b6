"""FlashInfer 0.7.2's fused attention-prep kernels built standalone for sm_90a (H200), for side-by-side
benchmarks against kernelgen, without installing flashinfer (its package needs dependencies a lent GPU
machine lacks). The sources are the wheel's own, copied unchanged into .fi/ (git-ignored):

    .fi/csrc/cake_fused_qk_rope_append/       manifest + sm_90a kernel/binding pairs (4 builds, one per
                                              stage the host policy can pick on Hopper)
    .fi/csrc/cake_fused_qk_rope_fp8_append/   manifest + the sm_90a kernel/binding pair (one build)
    .fi/csrc/tvm_ffi_utils.h, .fi/include/flashinfer/layout.cuh    what the bindings include
    .fi/csrc/rope.cu, flashinfer_rope_binding.cu, include/flashinfer/{pos_enc,...}.cuh and the part of the
        vendored CCCL they reach (.fi/cccl/libcudacxx/include): the classic rope_quantize_fp8_append_paged_kv_cache
        (opt-in: --classic; it has no RMSNorm)

Each module is compiled as FlashInfer's JIT would (gen_jit_spec + the sm_90a flags of jit/core.py): nvcc
-std=c++17 -O3 -DNDEBUG -use_fast_math -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr
-static-global-template-stub=false, FlashInfer's -D defines, .fi/csrc and .fi/include, the vendored CCCL before
CUDA's, tvm-ffi's headers; one .so per module (every cake binding exports the same name, `run`), loaded with
tvm_ffi.load_module. Libraries are cached under CACHE_DIR by a hash of .fi/, the flags, nvcc's version and
tvm-ffi's version.

    pip download --no-deps flashinfer-python==0.7.2 -d /tmp/fi     # the wheel (65 MB), once
    python tools/flashinfer_build.py --extract /tmp/fi/flashinfer_python-0.7.2-py3-none-any.whl   # the cake sources -> .fi/
    python tools/flashinfer_build.py --compile-only [--classic]   # compile and link every module; no GPU
    python tools/flashinfer_build.py [--cache-dir DIR] [--classic] # build (cached) and load on the GPU

From Python (repo root on sys.path, or import by path):

    from tools.flashinfer_build import load
    fi = load(".fi_cache")                  # builds what is missing, loads
    q = fi.cake_fused_qk_rmsnorm_rope_append_paged_kv_cache(qkv, cos_sin, seq_lens, q_indptr, page_indices,
            k_cache, v_cache, num_q_heads=64, num_kv_heads=8, qk_norm_policy=2, q_norm_weight=wq, k_norm_weight=wk)
    q8, q_scale, flag = fi.cake_fused_qk_rmsnorm_rope_quantize_fp8_append_paged_kv_cache(qkv, cos_sin, seq_lens,
            q_indptr, page_indices, (k8, v8), is_prefill=False, k_scale=ks, v_scale=vs, quant_policy=1, ...)
    launch = fi.plan_bf16(...same arguments...)   # checks once; launch() only launches (for timing, graphs)

The functions take FlashInfer's arguments with FlashInfer's meaning (flashinfer/cake_fused_qk_rope_append.py,
flashinfer/cake_fused_qk_rope_fp8_append.py, flashinfer/rope.py); the host policy that picks a build from the
problem shape is FlashInfer's (flashinfer/jit/cake_fused_qk_rope_append.py, constants from the manifest).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

REPO = Path(__file__).resolve().parents[1]
FI_DIR = REPO / ".fi"
ARCH = "sm_90a"
HEAD_DIM = 128
FP8_MAX = 448.0
BF16_PKG = "cake_fused_qk_rope_append"
FP8_PKG = "cake_fused_qk_rope_fp8_append"
HEADS = ((8, 1), (64, 8))

# What FlashInfer's JIT puts on an sm_90a nvcc line besides include paths (jit/core.py gen_jit_spec, sm90a_nvcc_flags,
# jit/cpp_ext.py build_cuda_cflags), less what only changes the file (--threads, fatbin compression) or the host
# ABI of code we do not call (-DPy_LIMITED_API, -D_GLIBCXX_USE_CXX11_ABI). -use_fast_math is the one that changes
# the kernels' numbers: -ftz=true (subnormals flushed), rsqrtf -> rsqrt.approx.ftz.
NVCC_FLAGS = (
    "-std=c++17", "-O3", "-DNDEBUG", "-use_fast_math",
    "-gencode=arch=compute_90a,code=sm_90a", "--expt-relaxed-constexpr",
    "-static-global-template-stub=false",
    "-Xcompiler", "-fPIC",
    "-DFLASHINFER_ENABLE_F16", "-DFLASHINFER_ENABLE_BF16", "-DFLASHINFER_ENABLE_FP8_E4M3", "-DFLASHINFER_ENABLE_FP8_E5M2",
    "-DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED", "-DFLASHINFER_ENABLE_FP8_E8M0", "-DFLASHINFER_ENABLE_FP4_E2M1",
)


# ----------------------------------------------------------------------------------------------------------------
# toolchain and sources

def cuda_home() -> Path:
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            return Path(os.environ[var])
    nvcc = shutil.which("nvcc")
    if nvcc:
        # /usr/local/bin/nvcc may be a wrapper script; the real one sits in <home>/bin
        home = Path(nvcc).resolve().parent.parent
        if (home / "include" / "cuda_runtime.h").is_file():
            return home
    return Path("/usr/local/cuda")


def nvcc_version(nvcc: Path) -> str:
    out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, check=True).stdout
    return out.strip().splitlines()[-1]


def tvm_ffi_paths() -> tuple[list[str], str, str]:
    """tvm-ffi's include directories, its library directory and its version (as the wheel installs them)."""
    import tvm_ffi
    from tvm_ffi import libinfo

    includes = list(dict.fromkeys([libinfo.find_include_path(), libinfo.find_dlpack_include_path()]))
    return includes, str(Path(libinfo.find_libtvm_ffi()).parent), tvm_ffi.__version__


def manifest(pkg: str) -> dict[str, Any]:
    path = FI_DIR / "csrc" / pkg / f"{pkg}_manifest.json"
    if not path.is_file():
        raise SystemExit(f"{path} is missing: copy the sources out of the FlashInfer 0.7.2 wheel into .fi/ first")
    value = json.loads(path.read_text())
    if value.get("schema") != "cake.library_export.v5" or value.get("name") != pkg:
        raise SystemExit(f"{path}: not a cake.library_export.v5 manifest of {pkg}")
    return value


def checked(pkg: str, man: dict[str, Any], rel: str) -> Path:
    """A generated source named by the manifest (csrc/<pkg>/...), with its recorded sha256 checked."""
    receipts = {f["path"]: f for f in man["files"]}
    path = FI_DIR / rel
    if rel not in receipts or not path.is_file():
        raise SystemExit(f"{rel}: named by the {pkg} manifest but absent from .fi/")
    if hashlib.sha256(path.read_bytes()).hexdigest() != receipts[rel]["sha256"]:
        raise SystemExit(f"{rel}: sha256 differs from the {pkg} manifest")
    return path


@dataclass(frozen=True)
class Target:
    """One shared library: its sources, the tvm-ffi function it exports and, for a cake module, its manifest record."""

    name: str
    sources: tuple[Path, ...]
    entry: str
    record: Optional[dict[str, Any]] = None


def targets(classic: bool = False) -> list[Target]:
    out = []
    for pkg in (BF16_PKG, FP8_PKG):
        man = manifest(pkg)
        for rec in man["modules"]:
            if rec.get("arch") != ARCH:
                continue
            units = rec["translation_units"]
            out.append(Target(f"{rec['name']}_{ARCH}", (checked(pkg, man, units["device"]),
                                                        checked(pkg, man, units["binding"])),
                              str(rec["ffi_entry"]), rec))
    if classic:
        out.append(Target(f"rope_{ARCH}", (FI_DIR / "csrc" / "rope.cu", FI_DIR / "csrc" / "flashinfer_rope_binding.cu"),
                          "rope_quantize_append_paged_kv_cache"))
    return out


def include_flags(tvm_includes: list[str], home: Path) -> list[str]:
    flags = [f"-I{FI_DIR / 'csrc'}", f"-I{FI_DIR / 'include'}"]
    cccl = FI_DIR / "cccl" / "libcudacxx" / "include"
    if cccl.is_dir():
        flags.append(f"-I{cccl}")  # FlashInfer's vendored CCCL goes before CUDA's (-I, not -isystem), as in its JIT
    for d in tvm_includes:
        flags += ["-isystem", d]
    flags += ["-isystem", str(home / "include")]
    return flags


def fi_digest() -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in FI_DIR.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(FI_DIR)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


# ----------------------------------------------------------------------------------------------------------------
# build

def _run(cmd: list[str], verbose: bool) -> tuple[list[str], int, str, float]:
    if verbose:
        print(" ".join(cmd), flush=True)
    t0 = time.time()
    done = subprocess.run(cmd, capture_output=True, text=True)
    return cmd, done.returncode, done.stdout + done.stderr, time.time() - t0


def build(cache_dir: Path | str, classic: bool = False, jobs: Optional[int] = None, verbose: bool = False,
          link: bool = True) -> dict[str, Path]:
    """Compile (and link) every module not already in cache_dir; {target name: library (or first object) path}."""
    home = cuda_home()
    nvcc = home / "bin" / "nvcc"
    if not nvcc.is_file():
        raise SystemExit(f"nvcc not found under {home} (set CUDA_HOME)")
    tvm_includes, tvm_lib, tvm_version = tvm_ffi_paths()
    flags = [*NVCC_FLAGS, *include_flags(tvm_includes, home)]
    key = hashlib.sha256(json.dumps({"fi": fi_digest(), "flags": list(NVCC_FLAGS), "nvcc": nvcc_version(nvcc),
                                     "tvm_ffi": tvm_version, "link": link}).encode()).hexdigest()[:16]
    cache_dir = Path(cache_dir).resolve()
    cache_dir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Path] = {}
    todo: list[tuple[Target, Path]] = []
    for t in targets(classic):
        final = cache_dir / f"{t.name}-{key}"
        lib = final / f"{t.name}.so"
        if link and lib.is_file():
            result[t.name] = lib
        else:
            todo.append((t, final))
    if not todo:
        return result
    stage = Path(tempfile.mkdtemp(prefix="fi-build-", dir=cache_dir))
    try:
        compiles = []
        for t, _ in todo:
            (stage / t.name).mkdir()
            for src in t.sources:
                obj = stage / t.name / f"{src.stem}.o"
                compiles.append([str(nvcc), *flags, "-c", str(src), "-o", str(obj)])
        workers = max(1, min(len(compiles), jobs or os.cpu_count() or 1))
        t0 = time.time()
        with ThreadPoolExecutor(workers) as pool:
            done = list(pool.map(lambda c: _run(c, verbose), compiles))
        failed = [(c, log) for c, rc, log, _ in done if rc]
        for c, log in failed:
            print(f"FAILED: {c[-3]}\n{log}", file=sys.stderr)
        if failed:
            raise SystemExit(f"{len(failed)} of {len(compiles)} nvcc compiles failed")
        slowest = max(done, key=lambda d: d[3])
        print(f"compiled {len(compiles)} units with {workers} workers in {time.time() - t0:.1f} s "
              f"(slowest {Path(slowest[0][-3]).name}: {slowest[3]:.1f} s)", flush=True)
        for t, final in todo:
            objs = [str(stage / t.name / f"{src.stem}.o") for src in t.sources]
            if link:
                lib = stage / t.name / f"{t.name}.so"
                cmd = [str(nvcc), "-shared", *objs, "-o", str(lib), f"-L{tvm_lib}", "-ltvm_ffi",
                       f"-L{home / 'lib64'}", "-lcudart", f"-Xlinker=-rpath={tvm_lib}:{home / 'lib64'}"]
                _, rc, log, _ = _run(cmd, verbose)
                if rc:
                    raise SystemExit(f"link of {t.name} failed:\n{log}")
            shutil.rmtree(final, ignore_errors=True)
            os.replace(stage / t.name, final)  # whole directory at once: a crashed build leaves no half library
            result[t.name] = final / (f"{t.name}.so" if link else Path(objs[0]).name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return result


# ----------------------------------------------------------------------------------------------------------------
# FlashInfer's host logic, restated

def clear_units_per_request(page_size: int, num_kv_heads: int, unit_chunks: int = 256) -> int:
    """4 KiB clearing units of a request's last page, K and V counted apart (16-byte chunks, 256 to a unit)."""
    chunks = page_size * num_kv_heads * HEAD_DIM // 8
    return 2 * -(-chunks // unit_chunks)


def stage_for(num_q_heads: int, num_kv_heads: int, num_rows: int, num_requests: int, page_size: int, num_sms: int,
              constants: dict[str, int]) -> str:
    """The bf16 build FlashInfer's host policy picks on Hopper (policy_knobs + stage_name, hopper branch)."""
    if (num_q_heads, num_kv_heads) not in HEADS:
        raise ValueError(f"(num_q_heads, num_kv_heads) must be one of {HEADS}, got ({num_q_heads}, {num_kv_heads})")
    base = f"hq{num_q_heads}_hkv{num_kv_heads}"
    if num_kv_heads == 1:
        return f"{base}_vsub{constants['v_sub_base_8_1']}_d"  # on Hopper (8, 1) always reads its request directly
    clear_ctas = -(-num_requests * clear_units_per_request(page_size, num_kv_heads) // 4)
    free_sms = num_sms - num_rows
    if free_sms >= 0 and clear_ctas <= free_sms * constants["clear_ctas_per_free_sm"]:
        return f"{base}_w{constants['w20']}_vsub{constants['w20_v_sub_base']}_d"
    if num_requests >= constants["direct_min_requests"]:
        return f"{base}_d"
    return base


def bf16_grid(record: dict[str, Any], num_rows: int, num_requests: int, page_size: int, num_kv_heads: int
              ) -> tuple[int, int, int]:
    """(grid x, CTAs that do rows, clearing units per request): row CTAs first, then last-page clearing CTAs."""
    spec = record["route"]["specialization"]
    warps_per_row = int(spec.get("WARPS_PER_ROW", 1))
    units_per_warp = int(spec.get("CLEAR_UNITS_PER_WARP", 1))
    rows_per_cta = max(1, 4 // warps_per_row)
    row_ctas = -(-num_rows // rows_per_cta) * -(-warps_per_row // 4)
    units = clear_units_per_request(page_size, num_kv_heads)
    clear_ctas = -(-num_requests * -(-units // units_per_warp) // 4)
    return row_ctas + clear_ctas, row_ctas, units


def _need(cond: bool, message: str) -> None:
    if not cond:
        raise ValueError(message)


def _check_table_and_pages(cos_sin: Any, name: str, seq_lens: Any, q_indptr: Any, page_indices: Any) -> int:
    """The cos/sin table and the page table as both cake kernels take them; returns the request count B."""
    import torch

    _need(cos_sin.dtype == torch.float32 and cos_sin.dim() == 2 and int(cos_sin.shape[1]) == HEAD_DIM,
          f"{name} must be f32 [max_position, 128]")
    _need(all(t.dtype == torch.int32 for t in (seq_lens, q_indptr, page_indices)),
          "seq_lens, q_indptr, page_indices: int32")
    requests = int(seq_lens.shape[0])
    _need(seq_lens.dim() == 1 and q_indptr.dim() == 1 and int(q_indptr.shape[0]) == requests + 1,
          "q_indptr must be [B + 1] and seq_lens [B]")
    _need(page_indices.dim() == 2 and int(page_indices.shape[0]) == requests, "page_indices must be [B, max_pages]")
    return requests


def _norm_weights(qk_norm_policy: int, q_norm_weight: Any, k_norm_weight: Any, cos_sin: Any) -> tuple[Any, Any]:
    """The Q and K norm weights, required with a norm; without one FlashInfer hands the kernel a row of the
    cos/sin table in their place (never read), and so do we."""
    import torch

    if qk_norm_policy:
        _need(q_norm_weight is not None and k_norm_weight is not None, "norm weights are required with a norm")
    spare = cos_sin[0, :HEAD_DIM]
    q_norm_weight = spare if q_norm_weight is None else q_norm_weight
    k_norm_weight = spare if k_norm_weight is None else k_norm_weight
    for w in (q_norm_weight, k_norm_weight):
        _need(w.dtype == torch.float32 and tuple(w.shape) == (HEAD_DIM,), "norm weights must be f32 [128]")
    return q_norm_weight, k_norm_weight


class Launch:
    """One checked call: the module function and its arguments; calling it launches on torch's current stream."""

    def __init__(self, fn: Callable[..., Any], args: list[Any], result: Any, stage: str):
        import contextlib

        import tvm_ffi

        self.fn, self.args, self.result, self.stage = fn, args, result, stage
        # FlashInfer enters use_torch_stream() around every call; a tvm-ffi without it takes the environment
        # stream from the first torch CUDA tensor of the call (what kernelgen relies on)
        self._stream = getattr(tvm_ffi, "use_torch_stream", contextlib.nullcontext)

    def __call__(self) -> Any:
        with self._stream():
            self.fn(*self.args)
        return self.result


class FlashInferPrep:
    """The loaded modules and FlashInfer's two cake entry points (plus the classic one when built)."""

    def __init__(self, libraries: dict[str, Path], tgts: list[Target]):
        import tvm_ffi

        self._bf16: dict[str, tuple[Any, dict[str, Any]]] = {}
        self._fp8: Optional[tuple[Any, dict[str, Any]]] = None
        self._classic = None
        for t in tgts:
            mod = tvm_ffi.load_module(str(libraries[t.name]))
            fn = getattr(mod, t.entry)
            if t.record is None:
                self._classic = fn
            elif t.record["route"].get("template", "").startswith("fused_qk_rmsnorm_rope_paged_kv_append_bf16"):
                self._bf16[t.record["route"]["stage"]] = (fn, t.record)
            else:
                self._fp8 = (fn, t.record)
        man = manifest(BF16_PKG)
        self.policy_constants = dict(man["contract"]["stage_policy"]["constants"])
        shipped = set(man["contract"]["stages_by_arch"][ARCH])
        if shipped != set(self._bf16):
            raise RuntimeError(f"bf16 builds loaded {sorted(self._bf16)} differ from the manifest's {sorted(shipped)}")
        self._sms: dict[int, int] = {}

    def _num_sms(self, device: Any) -> int:
        import torch

        idx = device.index if device.index is not None else torch.cuda.current_device()
        if idx not in self._sms:
            _need(torch.cuda.get_device_capability(idx) == (9, 0), "these builds are sm_90a only (H100/H200)")
            self._sms[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
        return self._sms[idx]

    # -- bf16: cake_fused_qk_rmsnorm_rope_append_paged_kv_cache ------------------------------------------------
    def plan_bf16(self, qkv, cos_sin, seq_lens, q_indptr, page_indices, key_cache, value_cache, *, num_q_heads: int,
                  num_kv_heads: int, qk_norm_policy: int = 0, q_norm_weight=None, k_norm_weight=None, eps: float = 1e-6,
                  out_q=None, out_k=None, out_v=None, clear_unused_last_page_rows: bool = True) -> Launch:
        import torch

        bf16 = torch.bfloat16
        _need(qk_norm_policy in (0, 1, 2), "qk_norm_policy must be 0, 1 or 2")
        _need((num_q_heads, num_kv_heads) in HEADS, f"(num_q_heads, num_kv_heads) must be one of {HEADS}")
        _need(qkv.dim() == 2 and qkv.dtype == bf16 and qkv.is_cuda, "qkv must be a 2-D bf16 CUDA tensor")
        rows = int(qkv.shape[0])
        _need(int(qkv.shape[1]) == (num_q_heads + 2 * num_kv_heads) * HEAD_DIM,
              "qkv must be [T, (num_q_heads + 2 * num_kv_heads) * 128], Q | K | V")
        requests = _check_table_and_pages(cos_sin, "cos_sin", seq_lens, q_indptr, page_indices)
        for c in (key_cache, value_cache):
            _need(c.dtype == bf16 and c.dim() == 4 and tuple(c.shape[2:]) == (num_kv_heads, HEAD_DIM),
                  "caches must be bf16 [num_pages, page_size, num_kv_heads, 128] (NHD)")
        _need(key_cache.shape == value_cache.shape, "key_cache and value_cache must have equal shapes")
        page_size = int(key_cache.shape[1])
        if out_q is None:
            out_q = torch.empty((rows, num_q_heads, HEAD_DIM), dtype=bf16, device=qkv.device)
        _need(out_q.dtype == bf16 and tuple(out_q.shape) == (rows, num_q_heads, HEAD_DIM), "out_q: bf16 [T, Hq, 128]")
        for t in (out_k, out_v):
            _need(t is None or (t.dtype == bf16 and tuple(t.shape) == (rows, num_kv_heads, HEAD_DIM)),
                  "out_k / out_v: bf16 [T, Hkv, 128]")
        q_norm_weight, k_norm_weight = _norm_weights(qk_norm_policy, q_norm_weight, k_norm_weight, cos_sin)
        tensors = {"qkv": qkv, "cos_sin": cos_sin, "q_indptr": q_indptr, "seq_lens": seq_lens,
                   "page_table": page_indices, "k_cache": key_cache, "v_cache": value_cache, "out_q": out_q,
                   "out_k": key_cache if out_k is None else out_k, "out_v": value_cache if out_v is None else out_v,
                   "q_norm_weight": q_norm_weight, "k_norm_weight": k_norm_weight}
        for name, t in tensors.items():
            _need(t.is_contiguous() and t.device == qkv.device, f"{name} must be contiguous and on {qkv.device}")
        stage = stage_for(num_q_heads, num_kv_heads, rows, requests, page_size, self._num_sms(qkv.device),
                          self.policy_constants)
        fn, record = self._bf16[stage]
        grid, row_ctas, units = bf16_grid(record, rows, requests, page_size, num_kv_heads)
        scalars = {"num_rows": rows, "num_requests": requests, "max_pages": int(page_indices.shape[1]),
                   "page_size": page_size, "k_page_stride": int(key_cache.stride(0)),
                   "v_page_stride": int(value_cache.stride(0)), "num_row_ctas": row_ctas,
                   "clear_units_per_request": units, "qk_norm_policy": int(qk_norm_policy), "eps": float(eps),
                   "use_out_k": int(out_k is not None), "use_out_v": int(out_v is not None),
                   "clear_last_page": int(bool(clear_unused_last_page_rows)), "grid_x": grid, "grid_y": 1, "grid_z": 1}
        return Launch(fn, _arguments(record, tensors, scalars), out_q, stage)

    def cake_fused_qk_rmsnorm_rope_append_paged_kv_cache(self, *args, **kwargs):
        """FlashInfer's function of that name: returns out_q (bf16 [T, Hq, 128]); K/V written in place."""
        return self.plan_bf16(*args, **kwargs)()

    # -- fp8: cake_fused_qk_rmsnorm_rope_quantize_fp8_append_paged_kv_cache --------------------------------------
    def plan_fp8(self, qkv, cos_sin_cache, seq_lens, q_indptr, page_indices, paged_kv_cache, is_prefill: bool,
                 k_scale, v_scale, quant_policy: int, max_seqlen: int = 0, upper_max: float = FP8_MAX,
                 q_scale_inv=None, q_norm_weight=None, k_norm_weight=None, qk_norm_policy: int = 0, out_q=None,
                 out_k=None, out_v=None, q_scale=None, split_k_flag=None) -> Launch:
        import torch

        e4m3, f32, i32 = torch.float8_e4m3fn, torch.float32, torch.int32
        _need(len(paged_kv_cache) == 2, "paged_kv_cache must be (key_cache, value_cache)")
        key_cache, value_cache = paged_kv_cache
        _need(quant_policy in (1, 2), "quant_policy must be 1 (dynamic Q) or 2 (static Q)")
        _need(qk_norm_policy in (0, 1, 2), "qk_norm_policy must be 0, 1 or 2")
        _need(math.isfinite(upper_max) and 0.0 < upper_max <= FP8_MAX, "upper_max must be in (0, 448]")
        _need(qkv.dim() == 2 and qkv.dtype == torch.bfloat16 and qkv.is_cuda, "qkv must be a 2-D bf16 CUDA tensor")
        _need(key_cache.dim() == 4 and value_cache.dim() == 4, "caches must be NHD [num_pages, page_size, Hkv, 128]")
        num_kv_heads = int(key_cache.shape[2])
        width = int(qkv.shape[1])
        _need(width % HEAD_DIM == 0 and width // HEAD_DIM > 2 * num_kv_heads, "qkv must be [T, (Hq + 2 Hkv) * 128]")
        num_q_heads = width // HEAD_DIM - 2 * num_kv_heads  # heads come from qkv's width and the cache
        _need((num_q_heads, num_kv_heads) in HEADS, f"(num_q_heads, num_kv_heads) must be one of {HEADS}")
        rows = int(qkv.shape[0])
        dyn_prefill = quant_policy == 1 and bool(is_prefill)
        _need(not dyn_prefill or max_seqlen > 0, "max_seqlen must be positive for dynamic prefill quantization")
        requests = _check_table_and_pages(cos_sin_cache, "cos_sin_cache", seq_lens, q_indptr, page_indices)
        for c in (key_cache, value_cache):
            _need(c.dtype == e4m3 and int(c.shape[3]) == HEAD_DIM, "caches must be float8_e4m3fn [..., Hkv, 128]")
        _need(key_cache.shape == value_cache.shape, "key_cache and value_cache must have equal shapes")
        for s in (k_scale, v_scale):
            _need(s.dtype == f32 and s.numel() == 1, "k_scale / v_scale: one-element f32 tensors")
        if quant_policy == 2:
            _need(q_scale_inv is not None and q_scale_inv.dtype == f32 and q_scale_inv.numel() == 1,
                  "q_scale_inv (one-element f32) is required with quant_policy=2")
        else:
            q_scale_inv = k_scale  # not read under quant_policy=1
        q_norm_weight, k_norm_weight = _norm_weights(qk_norm_policy, q_norm_weight, k_norm_weight, cos_sin_cache)
        dev = qkv.device
        if out_q is None:
            out_q = torch.empty((rows, num_q_heads, HEAD_DIM), dtype=e4m3, device=dev)
        _need(out_q.dtype == e4m3 and tuple(out_q.shape) == (rows, num_q_heads, HEAD_DIM), "out_q: e4m3 [T, Hq, 128]")
        _need((out_k is None) == (out_v is None), "out_k and out_v must be given together")
        for t in (out_k, out_v):
            _need(t is None or (t.dtype == e4m3 and tuple(t.shape) == (rows, num_kv_heads, HEAD_DIM)),
                  "out_k / out_v: e4m3 [T, Hkv, 128]")
        aligned = -(-max_seqlen // 128) * 128 if dyn_prefill else 0
        shape = (requests, num_q_heads, aligned) if dyn_prefill else (rows, num_q_heads) if quant_policy == 1 else (0,)
        if q_scale is None:
            q_scale = torch.empty(shape, dtype=f32, device=dev)
        _need(q_scale.dtype == f32 and tuple(q_scale.shape) == shape, f"q_scale must be f32 {shape}")
        if split_k_flag is None:
            split_k_flag = torch.empty((requests, num_kv_heads), dtype=i32, device=dev)
        _need(split_k_flag.dtype == i32 and tuple(split_k_flag.shape) == (requests, num_kv_heads),
              "split_k_flag must be int32 [B, Hkv]")
        tensors = {"qkv": qkv, "cos_sin": cos_sin_cache, "seq_lens": seq_lens, "q_indptr": q_indptr,
                   "page_indices": page_indices, "q_norm_weight": q_norm_weight, "k_norm_weight": k_norm_weight,
                   "k_scale": k_scale, "v_scale": v_scale, "q_scale_inv": q_scale_inv, "out_q": out_q,
                   "key_cache": key_cache, "value_cache": value_cache,
                   "out_k": key_cache if out_k is None else out_k, "out_v": value_cache if out_v is None else out_v,
                   "q_scale": q_scale, "split_k_flag": split_k_flag}
        for name, t in tensors.items():
            _need(t.is_contiguous() and t.device == dev, f"{name} must be contiguous and on {dev}")
        self._num_sms(dev)  # refuses a GPU other than sm_90
        assert self._fp8 is not None
        fn, record = self._fp8
        scalars = {"num_rows": rows, "num_requests": requests, "num_q_heads": num_q_heads,
                   "num_kv_heads": num_kv_heads, "page_size": int(key_cache.shape[1]),
                   "max_pages_per_request": int(page_indices.shape[1]), "max_seqlen": int(max_seqlen),
                   "max_seqlen_aligned": aligned, "quant_policy": int(quant_policy), "norm_policy": int(qk_norm_policy),
                   "is_prefill": bool(is_prefill), "has_out_kv": out_k is not None, "upper_max": float(upper_max),
                   # one CTA per (row, kv head), then one per (request, kv head) for split_k_flag and the tail clear
                   "grid_x": rows + requests, "grid_y": num_kv_heads, "grid_z": 1}
        return Launch(fn, _arguments(record, tensors, scalars), (out_q, q_scale, split_k_flag), "fp8_e4m3")

    def cake_fused_qk_rmsnorm_rope_quantize_fp8_append_paged_kv_cache(self, *args, **kwargs):
        """FlashInfer's function of that name: returns (out_q, q_scale, split_k_flag); K/V written in place."""
        return self.plan_fp8(*args, **kwargs)()

    # -- classic: rope_quantize_fp8_append_paged_kv_cache (no RMSNorm) -------------------------------------------
    def plan_classic(self, q_rope, k_rope, q_nope, k_nope, v, cos_sin_cache, pos_ids, paged_kv_cache, kv_indices,
                     kv_indptr, batch_indices, positions, is_neox: bool = True, quantize_dtype=None,
                     quant_scale_q: float = 1.0, quant_scale_kv: float = 1.0, page_size: int = 16,
                     kv_layout: str = "NHD", q_rope_out=None, q_nope_out=None, enable_pdl: bool = False) -> Launch:
        import torch

        _need(self._classic is not None, "the classic module was not built: load(..., classic=True)")
        _need(cos_sin_cache.dtype == torch.float32, "cos_sin_cache should be float32")
        mla = k_rope.ndim == 2
        nnz, hq = int(q_rope.shape[0]), int(q_rope.shape[1])
        dev = q_rope.device
        if q_nope is None:
            q_nope = torch.empty(nnz, hq, 0, dtype=q_rope.dtype, device=dev)
        if k_nope is None:
            k_nope = torch.empty((nnz, 0) if mla else (nnz, int(k_rope.shape[1]), 0), dtype=k_rope.dtype, device=dev)
        if quantize_dtype is None:
            given = q_rope_out if q_rope_out is not None else q_nope_out
            quantize_dtype = given.dtype if given is not None else torch.float8_e4m3fn
        if q_rope_out is None:
            q_rope_out = torch.empty_like(q_rope, dtype=quantize_dtype)
        if q_nope_out is None:
            q_nope_out = torch.empty_like(q_nope, dtype=quantize_dtype)
        _need(len(paged_kv_cache) == 2, "paged_kv_cache must be a tuple of 2 tensors")
        first, second = paged_kv_cache
        _need(first.dtype == quantize_dtype and second.dtype == quantize_dtype, "cache dtype must be quantize_dtype")
        none = torch.empty(0, dtype=quantize_dtype, device=dev)
        if mla:
            _need(v is None, "MLA should not have V input (pass None)")
            _need(first.ndim == 3 and second.ndim == 3, "MLA caches must be (max_pages, page_size, dim)")
            k_rope, k_nope = k_rope.unsqueeze(1), (k_nope.unsqueeze(1) if k_nope.ndim == 2 else k_nope)
            v = torch.empty(0, dtype=q_rope.dtype, device=dev)
            k_cache, v_cache, ckv_cache, kpe_cache = none, none, first, second
        else:
            _need(v is not None, "GQA/MHA expects a V tensor")
            _need(first.ndim == 4 and second.ndim == 4, "GQA/MHA caches must be 4-D")
            k_cache, v_cache, ckv_cache, kpe_cache = first, second, none, none
        layout = {"NHD": 0, "HND": 1}[kv_layout]
        args = [q_rope, k_rope, q_nope, k_nope, v, q_rope_out, q_nope_out, cos_sin_cache, pos_ids, k_cache, v_cache,
                ckv_cache, kpe_cache, kv_indices.int(), kv_indptr.int(), batch_indices.int(), positions.int(), layout,
                page_size, float(quant_scale_q), float(quant_scale_kv), not is_neox, bool(enable_pdl)]
        return Launch(self._classic, args, (q_rope_out, q_nope_out), "classic")

    def rope_quantize_fp8_append_paged_kv_cache(self, *args, **kwargs):
        """FlashInfer's flashinfer.rope function of that name: returns (q_rope_out, q_nope_out)."""
        return self.plan_classic(*args, **kwargs)()


def _arguments(record: dict[str, Any], tensors: dict[str, Any], scalars: dict[str, Any]) -> list[Any]:
    """The module's positional arguments in the manifest's arg_plan order."""
    out = []
    for kind, name in record["arg_plan"]:
        pool = tensors if kind == "buffer" else scalars
        if name not in pool:
            raise RuntimeError(f"module {record['name']} expects {kind} {name!r}, which this wrapper does not supply")
        out.append(pool[name])
    return out


def default_cache_dir() -> Path:
    return Path(os.environ.get("FI_BUILD_CACHE", REPO / ".kgcache" / "flashinfer"))


def load(cache_dir: Path | str | None = None, classic: bool = False, jobs: Optional[int] = None) -> FlashInferPrep:
    """Build what is missing under cache_dir, load every module with tvm-ffi (in this process, beside torch)."""
    libraries = build(cache_dir or default_cache_dir(), classic=classic, jobs=jobs)
    return FlashInferPrep(libraries, targets(classic))


# What the two cake modules need from the wheel (under flashinfer/data/): their packages' sm_90a builds and
# manifests, the bindings' shared header, the one FlashInfer header they include, and the license.
WHEEL_DATA = "flashinfer/data/"
WHEEL_FILES = ("csrc/tvm_ffi_utils.h", "include/flashinfer/layout.cuh")


def extract(wheel: Path) -> int:
    """Copy the cake modules' sources out of a FlashInfer 0.7.2 wheel into .fi/ (not the classic module's)."""
    import zipfile

    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        wanted = [n for n in names if n.startswith(WHEEL_DATA) and (
            n[len(WHEEL_DATA):] in WHEEL_FILES or any(
                n[len(WHEEL_DATA):].startswith(f"csrc/{pkg}/") and ("/" not in n[len(WHEEL_DATA) + 6 + len(pkg):]
                                                                    or f"/{ARCH}/" in n) for pkg in (BF16_PKG, FP8_PKG)))]
        licence = next((n for n in names if n.endswith("licenses/LICENSE") or n.endswith("/LICENSE")), None)
        for n in wanted:
            target = FI_DIR / n[len(WHEEL_DATA):]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(z.read(n))
        if licence:
            (FI_DIR / "LICENSE").write_bytes(z.read(licence))
    targets()  # every source the manifests name is there, with its sha256
    print(f"extracted {len(wanted)} files into {FI_DIR} (sha256 of every source checked against its manifest)")
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--compile-only", action="store_true",
                    help="compile and link every module into a temporary folder, load nothing (no GPU needed)")
    ap.add_argument("--cache-dir", type=Path, default=None, help="where built libraries live (default .kgcache/flashinfer)")
    ap.add_argument("--classic", action="store_true", help="also build rope.cu (rope_quantize_fp8_append_paged_kv_cache)")
    ap.add_argument("--jobs", type=int, default=None, help="parallel nvcc processes (default: CPU count)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every nvcc command")
    ap.add_argument("--extract", type=Path, metavar="WHEEL",
                    help="first copy the cake modules' sources out of this wheel (pip download flashinfer-python==0.7.2)")
    a = ap.parse_args(argv)
    if a.extract:
        extract(a.extract)
    home = cuda_home()
    print(f"nvcc: {home / 'bin' / 'nvcc'} ({nvcc_version(home / 'bin' / 'nvcc')}); tvm-ffi {tvm_ffi_paths()[2]}; "
          f"flags: {' '.join(NVCC_FLAGS)}", flush=True)
    if a.compile_only:
        with tempfile.TemporaryDirectory(prefix="fi-compile-only-") as tmp:
            libs = build(a.cache_dir or tmp, classic=a.classic, jobs=a.jobs, verbose=a.verbose)
            for name, lib in libs.items():
                print(f"  {name}: {lib.name} {lib.stat().st_size} bytes")
        print(f"ok: {len(libs)} modules compiled and linked for {ARCH}")
        return 0
    fi = load(a.cache_dir, classic=a.classic, jobs=a.jobs)
    print(f"loaded: bf16 stages {sorted(fi._bf16)}, fp8 {'yes' if fi._fp8 else 'no'}, classic "
          f"{'yes' if fi._classic else 'no'}; policy constants {fi.policy_constants}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
