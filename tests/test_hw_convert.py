"""Blackwell's e2m1 conversion as a tuner candidate (launch.hw_convert): cvt.rn.satfinite.e2m1x2.f32 rounds to
nearest even and saturates at 6, the software rounding of the NVFP4, V4.1 fp4 and MXFP4 stores. It is a launch
table entry bound to the GPUs that have it: the tuner offers it only there (where it checks the candidate's bytes
against the reference before timing it, as it checks every candidate) and never on sm_90; the sm_100a and sm_120a
builds hold the instruction, the sm_90a build of the same configuration the software path."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from kernelgen.codegen.guards import precheck
from kernelgen.codegen.launch import resolve, resolve_group
from kernelgen.codegen.render import render_variant
from kernelgen.errors import TuningError
from kernelgen.spec.launchparams import BY_NAME, HW_E2M1_CAPABILITIES
from kernelgen.spec.parse import load_spec
from kernelgen.spec.variant import Launch
from kernelgen.tune.space import candidates, default_space, group_candidates, group_space

from sass_ops import sass_ops
from simulated_flag import simulated_search

NVFP4 = load_spec("example").variant("example_nvfp4")
FP4_INDEXER = load_spec("dsv4_indexer").variant("dsv4_indexer_fp4_p64")
MXFP4_GROUP = load_spec("attention_prep").group("qwen3_8b_mxfp4")
HW_CAPABLE = ("nvfp4", "nvfp4_kv", "nvfp4_dsv4", "fp4_v41", "fp4_v41_interleaved", "mxfp4")


@pytest.mark.pure
def test_the_table_binds_hw_convert_to_blackwell_and_to_ties_even_codes() -> None:
    p = BY_NAME["hw_convert"]
    assert p.capabilities == HW_E2M1_CAPABILITIES == ("10.0", "10.3", "12.0", "12.1") and p.compiled
    assert p.values(NVFP4) == (False, True) and p.values(FP4_INDEXER) == (False,)
    from kernelgen.spec.formats import FORMATS

    assert sorted(f.name for f in FORMATS.values() if f.e2m1_ties_even) == sorted(HW_CAPABLE)
    precheck(FP4_INDEXER.with_launch(resolve(FP4_INDEXER).launch.__class__(  # a no-op there: no guard refuses it
        **{**resolve(FP4_INDEXER).launch.__dict__, "hw_convert": True})))


@pytest.mark.pure
@pytest.mark.parametrize("capability, offered", [("9.0", False), (None, False), ("8.9", False), ("10.0", True),
                                                 ("12.0", True), ("12.1", True)])
def test_the_space_offers_it_only_on_the_gpus_that_have_it(capability: str | None, offered: bool) -> None:
    valid, _ = candidates(NVFP4, default_space(NVFP4, capability=capability))
    assert any(c.hw_convert for c in valid) == offered
    assert not any(c.hw_convert for c in candidates(FP4_INDEXER, default_space(FP4_INDEXER, capability=capability))[0])
    g = resolve_group(MXFP4_GROUP)
    grouped, _ = group_candidates(g, group_space(g, capability=capability))
    assert any(c.hw_convert for c in grouped) == offered


@pytest.mark.pure
def test_a_spec_asking_for_it_on_hopper_is_refused_in_one_line() -> None:
    with pytest.raises(TuningError, match=r"^tune: hw_convert \[False, True\]: its other values need a GPU of compute "
                                          r"capability 10.0, 10.3, 12.0, 12.1; this one is 9.0: give hw_convert: "
                                          r"\[false\] or tune on such a GPU$"):
        default_space(NVFP4, {"hw_convert": (False, True)}, capability="9.0")
    assert default_space(NVFP4, {"hw_convert": (False,)}, capability="9.0").get("hw_convert") == (False,)


@pytest.mark.pure
def test_a_simulated_blackwell_tuning_run_chooses_it_and_a_hopper_run_never_sees_it() -> None:
    """The tuner's simulated timer: on a fake sm_120 GPU the hardware conversion is 20% faster, so it wins every
    bucket; the same search on sm_90 has no such candidate to time."""
    runs = simulated_search(NVFP4, "hw_convert", ("12.0", "9.0"), 0.8)
    assert all(c.hw_convert for c in runs["12.0"][1]) and not any(c.hw_convert for c in runs["9.0"][1])
    assert any(lid.endswith(".hw") for lid in runs["12.0"][0]) and not any(".hw" in lid for lid in runs["9.0"][0])
    assert Launch.from_id("t8.b8.v8.pdl.hw").hw_convert and Launch.from_id("t8.b8.v8.pdl.hw").pdl


def _ptx(source: str, arch: str, tmp: Path) -> str:
    from kernelgen import resources
    from kernelgen.build import toolchain
    from kernelgen.build.buildplan import CUDA_FLAGS

    tc = toolchain.detect()
    src = tmp / f"k_{arch}.cu"
    src.write_text(source)
    out = tmp / f"k_{arch}.ptx"
    includes = [f"-I{d}" for d in (str(resources.include_dir()), *tc.include_dirs)]
    cmd = [tc.nvcc, *CUDA_FLAGS, *includes, f"-arch={arch}", "-ptx", str(src), "-o", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return out.read_text()


@pytest.mark.build
@pytest.mark.parametrize("variant", [NVFP4, load_spec("attention_prep").variant("qwen3_8b_mxfp4_k")],
                         ids=lambda v: v.name)
def test_blackwell_builds_hold_the_instruction_and_hopper_builds_the_software_path(variant, tmp_path: Path) -> None:
    hw = resolve(variant).launch.__class__(**{**resolve(variant).launch.__dict__, "hw_convert": True})
    source = render_variant(variant.with_launch(hw))
    cvt = re.compile(r"cvt\.rn\.satfinite\.e2m1x2\.f32")
    counts = {arch: len(cvt.findall(_ptx(source, arch, tmp_path))) for arch in ("sm_100a", "sm_120a", "sm_90a")}
    per_call = resolve(variant).head_dim // (2 * hw.threads_per_token)  # one per pair of a thread's dims
    assert counts["sm_100a"] >= per_call and counts["sm_120a"] >= per_call, counts
    assert counts["sm_90a"] == 0, counts
    plain = _ptx(render_variant(variant), "sm_100a", tmp_path)  # hw_convert off: the software rounding
    assert not cvt.search(plain)


@pytest.mark.pure
def test_a_task_whose_gpu_is_not_known_yet_keeps_it_and_each_gpu_drops_what_it_may_not_time() -> None:
    """The Ray path: the submitter builds the space for any GPU (ANY_GPU); the task's GPU keeps only the launches
    it may time (offered_on). Run through the simulated executor on a fake sm_120 and a fake sm_90."""
    from kernelgen.tune.distributed import SearchTask, offered
    from kernelgen.tune.gpu import GpuInfo
    from kernelgen.tune.simulate import replay_execute
    from kernelgen.tune.space import ANY_GPU

    ids = [c.id for c in candidates(NVFP4, default_space(NVFP4, capability=ANY_GPU))[0]]
    assert any(i.endswith(".hw") for i in ids)
    timings = {i: {"1": 8.0 if i.endswith(".hw") else 10.0, "4096": 80.0 if i.endswith(".hw") else 100.0}
               for i in ids}
    choices = {}
    for gpu in (GpuInfo("Fake RTX PRO 6000", "12.0", 188, 95, 1792), GpuInfo("Fake H200", "9.0", 132, 140, 4800)):
        task = SearchTask("example", NVFP4.name, NVFP4.content_key(), tuple(ids), resolve(NVFP4).launch.id, (1, 4096),
                          known={"replay": {"timings": timings}, "gpu": gpu.as_dict()})
        kept = offered(task, gpu.capability)
        assert all(".hw" not in i for i in kept) == (gpu.capability == "9.0") and kept
        choices[gpu.capability] = [lid for _, lid in replay_execute(task)["outcome"]["choice"]]
    assert all(lid.endswith(".hw") for lid in choices["12.0"]) and not any(".hw" in lid for lid in choices["9.0"])


@pytest.mark.build
@pytest.mark.skipif(__import__("kernelgen.knobs", fromlist=["cuobjdump"]).cuobjdump() is None,
                    reason="needs cuobjdump to read the SASS (the test extra's nvidia-cuda-cuobjdump, CUDA's, or "
                           "KERNELGEN_CUOBJDUMP=path)")
@pytest.mark.parametrize("spec, name, lid", [("example", "example_nvfp4", "t4.b16.v8.hw"),
                                             ("attention_prep", "qwen3_8b_mxfp4_k", "t4.b16.v8.hw"),
                                             ("dsv4_mainkv", "dsv4_mainkv_v41_fp4_p64", "t16.b4.v8.hw")])
def test_the_sass_holds_the_conversion_on_blackwell_and_never_on_hopper(spec: str, name: str, lid: str) -> None:
    """What the GPU runs: one F2FP.SATFINITE.E2M1 per pair of a thread's quantized dims in the sm_100a and sm_120a
    machine code of the hw_convert build, none in its sm_90a build nor in the software build for sm_100a (whose
    rounding is integer and float arithmetic: no conversion instruction)."""
    v = resolve(load_spec(spec).variant(name))
    pairs = (v.head_dim if v.store != "fp4_v41" else 512) // (2 * Launch.from_id(lid).threads_per_token)

    def e2m1(arch: str, *launches: str) -> list[int]:  # one compile per arch, every launch in it
        got = sass_ops(spec, name, list(launches), arch)
        return [sum(n for op, n in got[lid].items() if op.startswith("F2FP") and "E2M1" in op) for lid in launches]

    assert e2m1("sm_100a", lid, lid.removesuffix(".hw")) == [pairs, 0] and e2m1("sm_120a", lid) == [pairs]
    assert e2m1("sm_90a", lid) == [0]
