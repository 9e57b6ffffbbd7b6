"""A record's key is the device code it timed: pure tests of the cubin reader, and compile-only tests (nvcc, no
GPU) that a header refactor keeps every key and a kernel edit changes exactly the keys of the kernels it touches."""
from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest

from kernelgen import resources
from kernelgen.build import devicecode
from kernelgen.build import toolchain as tc
from kernelgen.build.lifecycle import device_code
from kernelgen.codegen.launch import ALL_TOKENS, default_plan, plan_routes, resolve
from kernelgen.spec.parse import load_spec
from kernelgen.spec.variant import Launch

V = load_spec("dsv4_indexer").variant("dsv4_indexer_bf16_p64")
GROUP = load_spec("attention_prep").group("llama3_8b_bf16")
NUMERIC = "numeric.cuh"


@pytest.mark.pure
def test_names_of_generated_structs_leave_a_kernels_name() -> None:
    one = "_ZN9kernelgen28fused_norm_rope_store_kernelIN19kernelgen_generated26dsv4_indexer_bf16_p64_cfg0EEEvNS_6ParamsE"
    other = "_ZN9kernelgen28fused_norm_rope_store_kernelIN19kernelgen_generated18zz_other_name_cfg7EEEvNS_6ParamsE"
    assert devicecode.neutral(one) == devicecode.neutral(other) != one
    assert "CFG" in devicecode.neutral(one) and "dsv4" not in devicecode.neutral(one)
    assert devicecode.config_of(one) == 0 and devicecode.config_of(other) == 7
    group = ("_ZN9kernelgen18fused_group_kernelIN19kernelgen_generated8g_q_cfg2EJNS1_8g_k_cfg2ENS1_8g_v_cfg2EEEEvNS_11"
             "GroupParamsE")
    assert devicecode.config_of(group) == 2
    assert "_cfg" not in devicecode.neutral(group), "a member struct after a substitution (NS1_) is named too"
    with pytest.raises(devicecode.DeviceCodeError, match="mixes configurations"):
        devicecode.config_of(group.replace("g_v_cfg2", "g_v_cfg3"))


def _fatbin(entry_flags: int, payload: bytes) -> bytes:
    entry = struct.pack("<HHIQ", 2, 0x101, 64, len(payload)) + bytes(24) + struct.pack("<Q", entry_flags) + bytes(16)
    body = entry + payload
    return b"host bytes" + struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body + b"more host bytes"


@pytest.mark.pure
def test_a_compressed_or_foreign_payload_is_refused_in_words() -> None:
    with pytest.raises(devicecode.DeviceCodeError, match="compressed"):
        devicecode.fatbin_payloads(_fatbin(0x2000 | 0x11, b"\x7fELF" + bytes(60)))
    [payload] = devicecode.fatbin_payloads(_fatbin(0x11, b"\x7fELF\x02" + bytes(59)))
    with pytest.raises(devicecode.DeviceCodeError, match="not CUDA"):
        devicecode.read_cubin(payload)
    assert devicecode.fatbin_payloads(b"no fatbin here") == []


@pytest.mark.pure
def test_an_instance_key_holds_its_launch_geometry_beside_its_kernel() -> None:
    base = resolve(V).launch
    key = devicecode.instance_key("d" * 16, base)
    assert devicecode.instance_key("d" * 16, Launch(base.threads_per_token, base.tokens_per_block, base.vec,
                                                    pdl=True)) == key, "PDL is a route's attribute, not the instance's"
    assert devicecode.instance_key("e" * 16, base) != key
    assert devicecode.instance_key("d" * 16, Launch(base.threads_per_token, base.tokens_per_block, base.vec,
                                                    loop=True)) != key, "one wave walking the tokens is another grid"


def _headers(tmp_path: Path, name: str) -> Path:
    root = tmp_path / name
    shutil.copytree(resources.include_dir() / "kernelgen", root / "kernelgen")
    return root


def _edit(root: Path, old: str, new: str, header: str | None = None) -> None:
    """Replace the one occurrence of `old` in the kernel headers (in `header` where given)."""
    found = [p for p in sorted((root / "kernelgen").glob(header or "*.cuh")) if old in p.read_text()]
    assert len(found) == 1 and found[0].read_text().count(old) == 1, f"{old!r} is not once in the headers"
    found[0].write_text(found[0].read_text().replace(old, new))


@pytest.mark.build
def test_a_header_refactor_keeps_every_key_and_a_kernel_edit_changes_only_its_kernels(tmp_path: Path) -> None:
    """Comments, whitespace, a host-only edit and a device function moved to another header keep every instance's
    key (no tool, no record rewritten); an edit to the prefetch path changes the key of the prefetching instance
    only. The keys of a library built alone and of one built among other configurations are the same."""
    default = resolve(V).launch
    prefetch = Launch(default.threads_per_token, default.tokens_per_block, default.vec, prefetch=True)
    two = plan_routes(V, [(64, prefetch), (ALL_TOKENS, default)])
    targets = [(V, two), (V, default_plan(V)), (GROUP, default_plan(GROUP))]

    moved = _headers(tmp_path, "moved")
    pdl = ("__device__ __forceinline__ void pdl_wait_then_release() {\n#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900\n"
           '  asm volatile("griddepcontrol.wait;" ::: "memory");\n  asm volatile("griddepcontrol.launch_dependents;" :::);\n'
           "#endif\n}\n")
    _edit(moved, pdl, "// pdl_wait_then_release() lives in numeric.cuh now\n\n\n")
    _edit(moved, "\n}  // namespace kernelgen", "\n/* moved here */\n" + pdl + "\n}  // namespace kernelgen", NUMERIC)
    _edit(moved, "// ---- the kernel ---", "/* a block\n   comment */\n\n   // ---- the kernel, reworded ---")
    _edit(moved, '<< name << ": launch failed: "', '<< name << ": the launch failed: "')  # host code only

    touched = _headers(tmp_path, "touched")
    prefetch_path = "    if (!dry) load_weights(o, r, p);\n    if (!Cfg::kEarlyReads && pos_ok) load_freqs(o, r, freqs_row);\n"
    _edit(touched, prefetch_path, prefetch_path.replace("\n", "\n    __threadfence_block();\n", 1))

    toolchain = tc.detect()
    as_shipped = device_code(targets, toolchain, ("sm_90a",), jobs=2)
    assert as_shipped[0]["sm_90a"][default.id] == as_shipped[1]["sm_90a"][default.id], "alone or among others"
    assert device_code(targets, toolchain, ("sm_90a",), jobs=2, include_dir=moved) == as_shipped
    [after] = device_code(targets[:1], toolchain, ("sm_90a",), jobs=2, include_dir=touched)
    assert after["sm_90a"][default.id] == as_shipped[0]["sm_90a"][default.id]
    assert after["sm_90a"][prefetch.id] != as_shipped[0]["sm_90a"][prefetch.id]


@pytest.mark.build
def test_the_release_check_says_which_records_hold_which_are_stale_and_which_are_missing(tmp_path: Path) -> None:
    """kernelgen tune --verify: a record whose chosen instance builds to the key it timed holds; one whose key
    differs is stale (naming the instance); a kernel without a record for that GPU model is missing."""
    from kernelgen.tune import records
    from kernelgen.tune.gpu import GpuInfo
    from kernelgen.tune.verify import verify

    h200 = GpuInfo("NVIDIA H200", "9.0", 132, 140, 4800)
    fresh, changed = V, load_spec("dsv4_indexer").variant("dsv4_indexer_bf16_p16")
    missing = load_spec("dsv4_indexer").variant("dsv4_indexer_bf16_p1")
    [code] = device_code([(fresh, default_plan(fresh))], tc.detect(), ("sm_90a",), jobs=2)
    launch = resolve(fresh).launch.id
    for v, key in ((fresh, code["sm_90a"][launch]), (changed, "timed-other-code")):
        lid = resolve(v).launch.id
        records.write(tmp_path, records.Record(v.name, v.content_key(), {lid: key}, h200, (1,), {lid: {1: 1.0}}, {},
                                               ((1, lid),)))
    verdicts = {v.kernel: v for v in verify([fresh, changed, missing], tc.detect(), [tmp_path], jobs=2)}
    assert [verdicts[k.name].status for k in (fresh, changed, missing)] == ["holds", "stale", "missing"]
    assert resolve(changed).launch.id in verdicts[changed.name].detail and "sm_90a" in verdicts[changed.name].detail
    assert {v.gpu for v in verdicts.values()} == {h200.slug}
