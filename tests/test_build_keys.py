"""Pure tier: build keys are a function of the generated code and the toolchain, nothing else.

Moving a module, renaming a function or reorganising the package must not change any key (a
changed key silently rebuilds every user's cache). The keys below were last updated when
launch configurations became template instances inside one build (the generated code changed);
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
    "dsv32_indexer_fp8_p64": "ba09df0390ef719aba29ba2f9642dd57b687031878d193e23cbf23bf8a366eac",
    "dsv32_indexer_bf16_p64": "cc8a96c221ecd422a9dbfd1c1bed3d9ff8a2942f8a508d86fb408f83c93e6048",
    "dsv4_indexer_fp8_p1": "f46d937726194847c9df3c48aa91f4d81a986c0b1e691caacd02adf4881ba8aa",
    "dsv4_indexer_fp8_p16": "ad3b9accd895fdc8a9fdee48ef51a528a42e35318614f9e15262842bc08991b7",
    "dsv4_indexer_fp8_p64": "2b9fcdcf1f6fd1776b145e8d7b5e85885b58a34ac3d6d1f8d38d32c8dc74ff4e",
    "dsv4_indexer_fp8_p256": "925e80dc672ce56394202aefb26f182547b9deb2dde68101b7276031a8a61d3c",
    "dsv4_indexer_bf16_p1": "d5ffa5a29ab2e31dcd83bd87b30a3bfbdbb160c75ad1033a8a8ecf1496e18d4a",
    "dsv4_indexer_bf16_p16": "0682fbf0ddb9b3d46f1c4678c8024fd783b2ba335978c74523a27a8968e17934",
    "dsv4_indexer_bf16_p64": "e8b11b73191ee98c10f23a525c2c44d2b9569928a71db0b6dab8120139a84f0b",
    "dsv4_indexer_bf16_p256": "6eb18aea995dd995dccd0eb9cadbc870b16dbdaa9ade765b8651809567c388d2",
    "dsv4_indexer_fp4_p1": "dd3c0f0f61019a90f3bd34ebb63ccdeea81103fb185ae934feeaeaf6a57f1f30",
    "dsv4_indexer_fp4_p16": "f1e34c88a9ce93646c0c4a1e9bd175659b304d7da8af82bc8b31e8f040f71680",
    "dsv4_indexer_fp4_p64": "ca376c6d420b57debf698f492f035a6ea7ff8b9698128c80c5793b5fb7250fe7",
    "dsv4_indexer_fp4_p256": "57a50f3a8df3485d42383af82e3c56c516fc7b5e9eb6d27efc16808f7da9da06",
    "dsv4_mainkv_fp8mla_p1": "b3b317f4c55900f3d00ba17693c075442ff8d0407556fceb4c16434826baefc9",
    "dsv4_mainkv_fp8mla_p64": "2709ae24c903bfcbfa8ff264e207a3f34ee6cf6940f73b64d29f3ec88de2cb65",
    "dsv4_mainkv_bf16_p1": "ef07fac70ef230e5a46ad739dcfdbce2e6a3baa894f5b8e3c734136fc05d48d4",
    "dsv4_mainkv_bf16_p64": "bc3f36734ac0e8eb65d6f6ec98d1f0bc0a8f6d7549edb285434feb44e572a06c",
    "dsv4_mainkv_fp8mla_bfround_p64": "8e8e79216ec669a6c0b761279243d52a3efbd7b08861cc2be2338ed1ba3a3da8",
    "example_fp8_inbf16": "2d50b7c635de0d80c554e95c043360109c7142c91c3bfccba53f90d46c436b92",
    "example_fp8_infp32": "5107f684619c3680baf799e978346df7ed1c4049712983fb72f4449102d7fcba",
    "example_fp4_inbf16": "f0c584ba658c007d4074cfa3b28bf2e5f35b794af800332147f2e4bbb0400bc0",
    "example_fp4_infp32": "23391bcc2e9da3b940498ac804cb6d1d076d5108b3b213b60930ca5daa2057a9",
    "example_ln_neox_head": "b5c23380001c50775471baf1a37f4632a4c5aa103be4b789688ffb44deb2cb08",
    "example_d192_norope": "817100bc35771d25eae1c35304ba220222d68f8bf03592aa7e7b636b52fdae5c",
    "example_d1024_r128": "005f1679caade1735244bc5d75827bdecb4c908196889666e4ce1a0b0fbce456",
}


def test_shipped_build_keys_are_unchanged() -> None:
    keys = {p.variant.name: p.key for p in plan(shipped_variants(), FIXED_TOOLCHAIN, ("sm_90a",))}
    assert keys == GOLDEN_KEYS
