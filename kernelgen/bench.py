"""`kernelgen bench`: time variants per token count on a GPU against the copy roofline and the
empty-kernel floor measured in the same run, beside the PyTorch reference (eager and compiled)."""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from .codegen.render import members
from .layout.layout import Layout, layout_of
from .layout.pages import head_slots, split_slots
from .measure import reference
from .measure.inputs import call_inputs, group_workload_inputs, member_inputs
from .measure.timing import rotated_graph_us, rotation_sets
from .runtime.op import Op
from .spec.group import Group
from .spec.pages import SLOT_SOURCES
from .spec.variant import Variant

DEFAULT_TOKENS = (1, 32, 128, 1024, 4096, 65536, 262144, 1048576)
BYTES_NOTE = ("compulsory bytes = x rows read + positions/out_loc read + every distinct 32-byte sector of the cache "
              "written (a scattered 4-byte scale write costs a whole sector) + freqs rows read only where the "
              "freqs table does not fit in L2")


@dataclass(frozen=True)
class Row:
    variant: str
    workload: str
    tokens: int
    us: float
    bytes: int
    tbps: float
    roofline_pct: float
    launch: str
    eager_us: float | None = None
    eager_extra_mb: float | None = None
    compiled_us: float | None = None
    compiled_extra_mb: float | None = None
    floor_us: float | None = None  # the empty-kernel floor measured just before this row (the GPU's clocks drift)


def written_sectors(layout: Layout, out_loc: Any, num_pages: int) -> int:
    """Distinct 32-byte sectors of the cache that the writes of these slots touch."""
    import torch

    valid, page, off = split_slots(layout, head_slots(out_loc, layout.heads), num_pages)
    page, off = page[valid], off[valid]
    sectors = []
    for f in layout.fields:
        start = page * layout.page_bytes + f.base + off * f.stride
        first, last = start // 32, (start + f.size - 1) // 32
        span = int((last - first).max()) + 1 if page.numel() else 1
        steps = torch.arange(span, device=page.device)
        cover = first[:, None] + steps[None, :]
        sectors.append(cover[cover <= last[:, None]])
    return int(torch.unique(torch.cat(sectors)).numel()) if page.numel() else 0


def compulsory_bytes(k: Variant | Group, inputs: dict[str, Any], l2_bytes: int) -> int:
    """A kernel's compulsory bytes (inputs under its symbol's names, as group_workload_inputs makes them): every
    member's rows and written sectors, the shared indices once (a variant is a launch group of one member)."""
    ms = members(k)
    per = {m.role: member_inputs(k, m.role, inputs) for m in ms}
    shared = dict(per[ms[0].role], out_loc=inputs.get("out_loc"), positions=inputs.get("positions"),
                  freqs=inputs.get("freqs"))
    return sum(_row_bytes(m.variant, per[m.role]) for m in ms) + _index_bytes([m.variant for m in ms], shared,
                                                                              l2_bytes)


def _row_bytes(v: Variant, inputs: dict[str, Any]) -> int:
    """x's rows read and the cache sectors written (slots: token outputs are dense rows, out_loc = arange)."""
    n = inputs["x"].shape[0]
    return n * v.heads * v.head_dim * v.elem_bytes + 32 * written_sectors(layout_of(v), inputs["out_loc"],
                                                                           inputs["kvcache"].shape[0])


def _index_bytes(variants: list[Variant], inputs: dict[str, Any], l2_bytes: int) -> int:
    """positions and out_loc read once per token by whichever of the variants read them (one launch shares
    them), and the freqs rows read where the table does not fit in L2."""
    total = 0
    if any(SLOT_SOURCES[v.slots].reads_out_loc for v in variants):
        total += inputs["out_loc"].numel() * inputs["out_loc"].element_size()
    rope_dim = max(v.rope_dim for v in variants)
    if rope_dim:
        total += inputs["positions"].numel() * inputs["positions"].element_size()
        if inputs["freqs"].numel() * 4 > l2_bytes:
            total += int(inputs["positions"].unique().numel()) * rope_dim * 4
    return total


def copy_roofline_gbs(size_bytes: int = 1 << 30) -> float:
    """Device-to-device copy bandwidth (bytes read + written per second), median of 10."""
    import torch

    src = torch.empty(size_bytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    times = []
    for _ in range(10):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3)
    del src, dst
    return 2 * size_bytes / statistics.median(times) / 1e9


def empty_kernel_floor_us() -> float:
    """Graph-replay cost of a kernel that does nothing (torch's spin kernel for 0 cycles)."""
    import torch

    return rotated_graph_us([lambda: torch.cuda._sleep(0)])


def _extra_memory_mb(call: Callable[[], None]) -> float:
    import torch

    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    call()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def _event_us(call: Callable[[], None], reps: int = 10) -> float:
    import torch

    call()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        call()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


def reference_call(k: Variant | Group, inputs: dict[str, Any], compiled: bool) -> Callable[[], None]:
    """The PyTorch reference of every member of a kernel, one after another (the baseline); inputs under the
    kernel symbol's names, as group_workload_inputs makes them."""
    import torch

    calls = [_reference_store(m.variant, member_inputs(k, m.role, inputs)) for m in members(k)]

    def run() -> None:
        for call in calls:
            call()

    if not compiled:
        return run
    # Every baseline closure shares run's code object, so dynamo would count each (kernel, N) as a
    # recompile of one function and fall back to eager past its limit (8): start each one afresh.
    torch._dynamo.reset()
    return torch.compile(run, dynamic=False)


def _reference_store(v: Variant, inputs: dict[str, Any]) -> Callable[[], None]:
    """One member's reference store into its output (inputs under the family's names)."""
    # Timing inputs write every row (valid slots, positions inside freqs): the baseline skips the row
    # mask, as a serving engineer's own torch code would, so it compiles into one graph with no sync.
    keep = reference.written_rows(v, inputs["out_loc"], inputs["positions"], inputs["freqs"], inputs["kvcache"])
    if not bool(keep.all()):
        raise ValueError(f"{v.name}: benchmark inputs must write every row (the baseline store has no row mask)")

    def run() -> None:
        reference.store(v, inputs["x"], inputs["weight"], inputs["freqs"], inputs["positions"], inputs["out_loc"],
                        inputs["kvcache"], 1e-6, inputs["bias"], all_valid=True, scale=inputs.get("scale"))
    return run


def rotated_us(op: Op, n: int, workload: str, l2: int) -> tuple[float, int, dict[str, Any]]:
    """(GPU us per call, compulsory bytes, the first input set) for n tokens of the workload: graph replay
    over enough independent input sets that every call reads from DRAM from 4096 tokens (rotation_sets)."""
    first = group_workload_inputs(op.variant, n, workload, seed=1)
    moved = compulsory_bytes(op.variant, first, l2)
    sets = [first] + [group_workload_inputs(op.variant, n, workload, seed=s)
                      for s in range(2, 1 + rotation_sets(moved, n, l2))]
    return rotated_graph_us([lambda a=op.tensors(call_inputs(s)): op.launch(a, 1e-6) for s in sets]), moved, first


def bench(op: Op, tokens: tuple[int, ...], workload: str, roofline_gbs: float, baselines: tuple[str, ...],
          say: Callable[[str], None] = lambda _: None) -> list[Row]:
    """One row per token count for a variant or a launch group (one launch writes every member; bytes are all
    members', compulsory_bytes), and each baseline's time and extra memory on the row's first input set."""
    import torch

    name = op.variant.name
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    rows = []
    for n in tokens:
        floor = empty_kernel_floor_us()  # beside the row: within one run it was seen to rise 0.75 -> 0.93 us
        us, moved, first = rotated_us(op, n, workload, l2)
        extra: dict[str, Any] = {}
        for kind in baselines:
            try:
                call = reference_call(op.variant, first, kind == "compile")
                key = "eager" if kind == "eager" else "compiled"
                extra[f"{key}_us"] = _event_us(call, reps=5 if n >= 262144 else 10)
                extra[f"{key}_extra_mb"] = round(_extra_memory_mb(call), 1)
            except Exception as exc:  # a baseline that cannot run is reported, not fatal
                say(f"{name} N={n}: {kind} baseline failed: {str(exc).splitlines()[0][:120]}")
        tbps = moved / (us * 1e-6) / 1e12
        rows.append(Row(name, workload, n, round(us, 3), moved, round(tbps, 3),
                        round(100 * tbps * 1e3 / roofline_gbs, 1), op.plan.launch_for(n).id, **extra,
                        floor_us=round(floor, 3)))
        del first
        torch.cuda.empty_cache()
        say(f"{name} {workload} N={n}: {us:.2f} us (empty kernel {floor:.2f} us)")
    return rows


bench_variant = bench_group = bench  # by their earlier names (the CLI's)


def to_json(rows: list[Row], meta: dict[str, Any]) -> dict[str, Any]:
    return {**meta, "bytes": BYTES_NOTE, "rows": [asdict(r) for r in rows]}


def plot(rows: list[Row], path: str, meta: dict[str, Any]) -> None:
    """Time per call and % of the copy roofline vs tokens: one line per variant and workload, a dashed line per
    baseline it was timed beside (eager and compiled PyTorch references, in the variant's colour), the copy
    roofline's time for the same bytes (dotted) and the empty-kernel floor."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    series: dict[tuple[str, str], list[Row]] = {}
    for r in rows:
        series.setdefault((r.variant, r.workload), []).append(r)
    for (name, workload), rs in series.items():
        xs = [r.tokens for r in rs]
        line, = left.plot(xs, [r.us for r in rs], marker="o", label=f"{name} ({workload})")
        right.plot(xs, [r.roofline_pct for r in rs], marker="o", label=f"{name} ({workload})")
        for what, style, times in (("eager", "--", [r.eager_us for r in rs]), ("compiled", "-.", [r.compiled_us for r in rs])):
            pts = [(x, t) for x, t in zip(xs, times) if t is not None]
            if pts:
                left.plot(*zip(*pts), style, marker="x", color=line.get_color(), label=f"{name}: PyTorch {what}")
                right.plot(*zip(*[(x, 100 * r.bytes / (t * 1e-6) / 1e9 / meta["roofline_gbs"])
                                  for x, t, r in zip(xs, times, rs) if t is not None]),
                           style, marker="x", color=line.get_color(), label=f"{name}: PyTorch {what}")
        left.plot(xs, [r.bytes / (meta["roofline_gbs"] * 1e9) * 1e6 for r in rs], ":", color=line.get_color(),
                  label=f"{name}: copy roofline")
    left.axhline(meta["floor_us"], color="grey", linestyle="--", label="empty kernel")
    for ax, title in ((left, "us per call (graph replay)"), (right, "% of copy roofline")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tokens")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
    left.set_yscale("log")
    right.axhline(100, color="grey", linestyle=":", label="copy roofline")
    left.legend(fontsize=6)
    right.legend(fontsize=6)
    fig.suptitle(f"kernelgen bench on {meta['gpu']}: copy {meta['roofline_gbs']:.0f} GB/s")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
