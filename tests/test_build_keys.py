"""Pure tier: build keys are a function of the generated code and the toolchain, nothing else.

Moving a module, renaming a function or reorganising the package must not change any key (a
changed key silently rebuilds every user's cache). The keys below were computed before the
package moved into stage subpackages; update them only in a commit that changes generated code
or the key recipe on purpose, and say so in that commit."""
from __future__ import annotations

import pytest

from kernelgen.build.lifecycle import plan
from kernelgen.build.toolchain import Toolchain
from kernelgen.spec.parse import shipped_variants

pytestmark = pytest.mark.pure

FIXED_TOOLCHAIN = Toolchain("nvcc", "/usr/local/cuda", "release 13.0", "c++ 12", "0.1.15", ("/i",), "/l")

GOLDEN_KEYS = {
    "dsv32_indexer_fp8_p64": "ac020879fbffd876b013d96f06eafc659e937bdba3012159b76df12d3c0c3b52",
    "dsv32_indexer_bf16_p64": "0e2151ddfad2f3243035716025d1166293051669f9435032362d1dd15ca4dfae",
    "dsv4_indexer_fp8_p1": "c819a9de2a948d1a6563d91fee15715d336632164f2978bdbcf3d607fd9c6aed",
    "dsv4_indexer_fp8_p16": "2eb53348b2bc9f44d66795353cda99d2ad585e93d741081231331c3207e8efa8",
    "dsv4_indexer_fp8_p64": "4d37bc87b0e60f4d116a48be4fe3ba6c70929df0695d88e443733d4a325d5ede",
    "dsv4_indexer_fp8_p256": "e14716b899a683739a1fe184d6e7789a4e72dac914770f0f82d315cc6dab1c4f",
    "dsv4_indexer_bf16_p1": "78c658174ef3a48b875ed686aa5c7e9e90559cb92f28c2c8f3be10125a9e8bba",
    "dsv4_indexer_bf16_p16": "787dfb77dc0ed6f13778fed19b0a741684c9ca676638769abaea135dd27ef42c",
    "dsv4_indexer_bf16_p64": "7a2ff07ee050049b92c98eb49ed33971889be7d22ca4be55f71c63f1b43b571b",
    "dsv4_indexer_bf16_p256": "576e3a34d821cebf0e5dc50491314439bd3f008471c06d4666a0d127c7b794e3",
    "dsv4_indexer_fp4_p1": "353cce4b6d20d5f1685c4ac291ee777261aa86ce93ff50e9995462b0c98cf382",
    "dsv4_indexer_fp4_p16": "d5d32d46030c2cbeb9d2df2d0915ea7ebfa10f4cb959bff241d459a4309e7edf",
    "dsv4_indexer_fp4_p64": "eb530e29558160d71bcdc310d3659d9c65638bf5e12f549c14d09894af0f9440",
    "dsv4_indexer_fp4_p256": "75aff32368e136ab4627ae497d5b7b3e07d9701b17dbc1a5d680e233564572b0",
    "dsv4_mainkv_fp8mla_p1": "7f06eee34b432c38dd4522cd1d49d672d223f7a0accc7e1e5e4c289eca1e0da2",
    "dsv4_mainkv_fp8mla_p64": "304ea79f6173c50c127be2e1b54b2d6f3bca21c51dcfd1c300218768679de6ec",
    "dsv4_mainkv_bf16_p1": "429d2f974455e1225fbdf2b101cdc8e10429a51e6fdb3e628ca3121816532a40",
    "dsv4_mainkv_bf16_p64": "52de57dddd1b35432a87258c16918260e011292609d80b069b1ae717f93798e9",
    "dsv4_mainkv_fp8mla_bfround_p64": "ad0e0fb67c776b9f30c13f151332d314114f30023fc93234999718e6e6a7af14",
    "example_fp8_inbf16": "03ddffb08e677000961611e39e1cd76509499e8791c4aa73947e5f939b6a4cbd",
    "example_fp8_infp32": "b738407072e91c66569283d79c6d6baae5c1dbf0c246ce1e104f537346d2299b",
    "example_fp4_inbf16": "73e1acfd2678ed497c4b465cc4ece5c553066b7d45adfc8ac11ec62297d815e0",
    "example_fp4_infp32": "7ee2c44542e3e92a1ae61cb08ccc47da6cb567630cc5e7473e3321609a35cee0",
    "example_ln_neox_head": "19d7a244bc21772a83d2f0b807196649294764be7d07398b81ecd8b90c2164e4",
    "example_d192_norope": "c8917744b62a639363b524642740874a665e91df88e8a9f1bae2a7474b891547",
    "example_d1024_r128": "158694a8747ada464e83f28030da1f475aedb0af0bd5be4f4ec13f88746f1346",
}


def test_shipped_build_keys_are_unchanged() -> None:
    keys = {p.variant.name: p.key for p in plan(shipped_variants(), FIXED_TOOLCHAIN, ("sm_90a",))}
    assert keys == GOLDEN_KEYS
