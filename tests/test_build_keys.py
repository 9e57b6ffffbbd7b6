"""Pure tier: build keys are a function of the generated code and the toolchain, nothing else.

Moving a module, renaming a function or reorganising the package must not change any key (a
changed key silently rebuilds every user's cache). The keys below were last updated when
the device code gained the NVFP4 and vLLM store formats (a new enum and branches: the header's text) (tools/golden_keys.py prints new keys);
update them only in a commit that changes generated code or the key recipe on purpose, and say so
in that commit."""
from __future__ import annotations

import pytest

from kernelgen.build.lifecycle import plan
from kernelgen.build.toolchain import Toolchain
from kernelgen.spec.parse import shipped_variants

pytestmark = pytest.mark.pure

FIXED_TOOLCHAIN = Toolchain("nvcc", "/usr/local/cuda", "release 13.0", "c++ 12", "0.1.15", ("/i",), "/l")

GOLDEN_KEYS = {
    "dsv32_indexer_fp8_p64": "0c9fd3d65686de1cf11787a3f64ab27f280eb9459cdd7f7fae6f2598bf32f59b",
    "dsv32_indexer_bf16_p64": "0b999783bdbea9f5c2f6cc5b8f2c4bf00bc5993b84cb61625ea4b5721dd3cf91",
    "dsv4_indexer_fp8_p1": "82a2294bc65b1feac6eeaafdd02429609bad8f91904cf4b8e57e7931799d2f74",
    "dsv4_indexer_fp8_p16": "a16670b9406c96fcd4e52042468e67642c86d590344d3ff23129ea7812b744d4",
    "dsv4_indexer_fp8_p64": "432665777eeafccb84247d693717470a1d85d8ae7828462fd3269e70c06b96ae",
    "dsv4_indexer_fp8_p256": "8beb7854fff96d47b3922b8b9420e9638d9d9713c44ed05b84df5f07b53c8fe9",
    "dsv4_indexer_bf16_p1": "4fbb16996dabb5708f72eb1c76f35e49fd48fdd6e41a666df6c7abce3ab64fdf",
    "dsv4_indexer_bf16_p16": "aae71f300b88476e777bc75f5475e7479d118f264a357649cd594bd52894b1e6",
    "dsv4_indexer_bf16_p64": "574615b5796fc9c07aa56ee0e7486cf55b0df1a4bbea6eee2d132d1b213cceca",
    "dsv4_indexer_bf16_p256": "999db05df760e35f742ee12a0cdbbe00048ead6be05b477cfcd5d626f93cc0c3",
    "dsv4_indexer_fp4_p1": "98a0325b4357520c32a03756eeacc12e7db571570d9b54d9ae17a971662fcb2f",
    "dsv4_indexer_fp4_p16": "eb57c425bce2020cd5f036ce2db8829afc2b82cf98c2c8f014cf369fd1301ce2",
    "dsv4_indexer_fp4_p64": "60677bdc2efcbb02a0bd1d18025a0244b6cfdcaee099b342f9541dff1673194b",
    "dsv4_indexer_fp4_p256": "afe08495dec4c21ba9ba76d363d7f3f3013bd4e6ea94afc87a91db698f4adbf7",
    "dsv4_mainkv_fp8mla_p1": "70e4bed914c170c875195961187e3426077bb34e9cb9de5814180623c4ef6959",
    "dsv4_mainkv_fp8mla_p64": "36bb603126cd5faabdcd6b244107d14d1490183155ef00c1ab8ce8d1f2429322",
    "dsv4_mainkv_bf16_p1": "af2f1e5654c9d34a530d72da012d6f665a2eede09059bd503e9b5262857d4b0e",
    "dsv4_mainkv_bf16_p64": "c133a68b59fd7e970c1f53121b7a2f254f45e20cbcd2171fc3dd71c7d760b7c3",
    "dsv4_mainkv_fp8mla_bfround_p64": "96115b61bf7566fcdb8c90e70ad131eb6446da0f47c8f31c2b77b8fccd7d92b0",
    "dsv4_mainkv_nvfp4_p64": "16399827be38cc84daa8dfa28efdaa06a6bead7cd35fd776179105ef25f0460e",
    "example_fp8_inbf16": "11723c10a4522b3c06744954f99362a9e5fce992bbed1d11c1b394ad115bed6f",
    "example_fp8_infp32": "ad76809264cf11aa9d35d4c5249acf7d444b81ed69e1e03d72fa6989389444b0",
    "example_fp4_inbf16": "6b6e0eb37fa8852d9299648e4f62e53e2c5af882f5528a23da42376f011b34e1",
    "example_fp4_infp32": "c3798c03d83006fab32cc59ec6abc2cddcd218fe6e717d588455ff8ad02abbf3",
    "example_ln_neox_head": "8f0118fc41f1e8987c8ab365d86c8fafe48dfb68328cb9c681f12d5ca36aa866",
    "example_d192_norope": "0cb86bd27dee58849359e60cb7d74b7979ddce3c68087e94c15c19a09dd5ef86",
    "example_d1024_r128": "2d40fdd12cda8c15e59cf426cd1c6c8f42e70fe8dab36fb181efa136889b66b2",
    "vllm_dsv32_indexer_fp8vllm_p64": "511b15dcf0e8370565cb3e3bcc2dcddc88230e8161bf0dc1e165bcc7bac5e4c7",
    "vllm_dsv32_indexer_fp8vllmue8m0_p64": "043d6c2d3345253f8c0377844084a16280b959c7e00262c07e7d7463aa3bd784",
}


def current_keys() -> dict[str, str]:
    """Every shipped variant's build key with FIXED_TOOLCHAIN for sm_90a (tools/golden_keys.py prints them)."""
    return {p.variant.name: p.key for p in plan(shipped_variants(), FIXED_TOOLCHAIN, ("sm_90a",))}


def test_shipped_build_keys_are_unchanged() -> None:
    assert current_keys() == GOLDEN_KEYS


def test_every_input_of_the_binary_changes_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """A different nvcc, tvm-ffi, host compiler, flags, header, template or target gives another key."""
    from dataclasses import replace

    from kernelgen.build import buildplan, lifecycle

    [v] = [x for x in shipped_variants() if x.name == "dsv4_indexer_fp8_p64"]

    def key(toolchain: Toolchain = FIXED_TOOLCHAIN, archs: tuple[str, ...] = ("sm_90a",)) -> str:
        return plan([v], toolchain, archs)[0].key

    base = key()
    changed = {
        "nvcc": key(replace(FIXED_TOOLCHAIN, nvcc_version="release 13.1")),
        "tvm-ffi": key(replace(FIXED_TOOLCHAIN, tvm_ffi_version="0.1.16")),
        "c++": key(replace(FIXED_TOOLCHAIN, cxx_version="c++ 13")),
        "arch": key(archs=("sm_100a",)),
        "packed-f32": key(replace(FIXED_TOOLCHAIN, defines=("-DKERNELGEN_PACKED_F32",))),
    }
    with monkeypatch.context() as m:
        m.setattr(buildplan, "CUDA_FLAGS", buildplan.CUDA_FLAGS + ("-lineinfo",))
        changed["flags"] = key()
    real_headers = lifecycle.read_headers
    with monkeypatch.context() as m:
        m.setattr(lifecycle, "read_headers", lambda: {**real_headers(), "numeric.cuh": b"// edited\n"})
        changed["header"] = key()
    real_render = lifecycle.render_variant
    with monkeypatch.context() as m:
        m.setattr(lifecycle, "render_variant", lambda *a, **k: real_render(*a, **k) + "// template edit\n")
        changed["template"] = key()
    assert all(k != base for k in changed.values()), [name for name, k in changed.items() if k == base]
    assert len(set(changed.values())) == len(changed)
