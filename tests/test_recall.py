"""Pure tier: the recall study (small contexts): store ordering, exact controls, needle construction."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernelgen import recall
from kernelgen.recall import FP32, KeyModel, Row

pytestmark = pytest.mark.pure

SMALL = dict(contexts=(2048, 4096), topk=(128, 512), heads=16, queries=8, needles=4, margins=(0.03, 0.3, 1.0), seed=3)
STORES = (FP32, "bf16", "fp8_e4m3", "fp4_e2m1")


@pytest.fixture(scope="module")
def rows() -> list[Row]:
    return recall.run_study(stores=STORES, **SMALL)


def _mean(rows: list[Row], store: str, metric: str) -> float:
    picked = [r.value for r in rows if r.store == store and r.metric == metric]
    assert picked, (store, metric)
    return sum(picked) / len(picked)


def test_recall_orders_stores_bf16_fp8_fp4(rows: list[Row]) -> None:
    bf16, fp8, fp4 = (_mean(rows, s, "topk") for s in ("bf16", "fp8_e4m3", "fp4_e2m1"))
    assert bf16 >= fp8 >= fp4
    assert bf16 > 0.99
    assert fp4 < 0.99  # the study must be sensitive enough to see fp4's error at all
    errors = [_mean(rows, s, "score_error") for s in STORES]
    assert errors == sorted(errors) and errors[0] == 0.0
    needles = [_mean(rows, s, "needle") for s in ("bf16", "fp8_e4m3", "fp4_e2m1")]
    assert needles == sorted(needles, reverse=True)


def test_fp32_control_recalls_everything(rows: list[Row]) -> None:
    control = [r for r in rows if r.store == FP32 and r.metric in ("topk", "needle")]
    assert {r.metric for r in control} == {"topk", "needle"}
    assert all(r.value == 1.0 for r in control)


def test_keys_a_store_holds_exactly_decode_identically_and_recall_one() -> None:
    v = recall.study_variants(["bf16"])["bf16"]
    model = KeyModel()
    world = recall.make_world(v, model, 3000, seed=1)
    keys = recall.make_keys(v, world, model, 3000, seed=1).to(torch.bfloat16).float()  # bf16-exact fp32 keys
    decoded = recall.decode_store(v, "bf16", keys)
    assert torch.equal(decoded, keys)
    q, w = recall.make_queries(v, world, model, 4, 8, 3000, seed=1)
    ref, got = recall.indexer_scores(keys, q, w), recall.indexer_scores(decoded, q, w)
    for k in (1, 100, 2999):
        assert torch.equal(recall.topk_recall(ref, got, k), torch.ones(4, dtype=torch.float64))


def test_topk_recall_counts_overlap() -> None:
    ref = torch.tensor([[5.0, 4.0, 3.0, 2.0, 1.0]])
    test = torch.tensor([[5.0, 1.0, 3.0, 2.0, 4.0]])  # top-2 {0, 4} vs ref {0, 1}
    assert recall.topk_recall(ref, test, 2).tolist() == [0.5]
    assert recall.topk_recall(ref, test, 5).tolist() == [1.0]


def test_needles_sit_just_above_the_kth_score_and_are_all_found_unquantized() -> None:
    v = recall.study_variants([FP32])[FP32]
    model = KeyModel()
    n, k, margins, count = 4096, 256, (0.01, 0.1, 1.0), 5
    world = recall.make_world(v, model, n + 1, seed=2)
    keys = recall.make_keys(v, world, model, n, seed=2)
    q, w = recall.make_queries(v, world, model, 6, 16, n, seed=2)
    ref = recall.indexer_scores(keys, q, w)
    needles, target = recall.plant_needles(keys, ref, q, w, k, margins, count, torch.Generator().manual_seed(0))
    assert needles.shape == (6, len(margins) * count, v.head_dim)
    scores = recall.needle_scores(needles, q, w)
    kth = ref.topk(k, dim=1).values[:, -1:]
    assert bool((scores >= target).all()) and bool((scores > kth).all())
    assert float(((scores - target) / ref.std(dim=1, keepdim=True)).max()) < 1e-4  # just above, not far above
    lengths, context_lengths = needles.norm(dim=-1), keys.norm(dim=-1)  # a needle keeps its start key's length
    assert float(lengths.min()) >= float(context_lengths.min()) * (1 - 1e-5)
    assert float(lengths.max()) <= float(context_lengths.max()) * (1 + 1e-5)
    ascending = ref.sort(dim=1).values
    assert bool(recall._retrieved(ascending, scores, k).all())
    assert not bool(recall._retrieved(ascending, scores, k // 2).all())  # they are near the k-th score, not the top


def test_contexts_are_prefixes_results_do_not_depend_on_the_largest() -> None:
    small = dict(topk=(128,), heads=8, queries=4, needles=2, margins=(0.1,), stores=("fp8_e4m3",), seed=5)
    alone = recall.run_study(contexts=(2048,), **small)
    longer = [r for r in recall.run_study(contexts=(2048, 4096), **small) if r.context == 2048]
    assert alone == longer


def test_table_and_plot(rows: list[Row], tmp_path: Path) -> None:
    text = recall.table_markdown(rows)
    assert "| fp4 | 512 |" in text and "| 2K | 4K |" in text and "Needle recall" in text
    pytest.importorskip("matplotlib")
    out = tmp_path / "recall.png"
    recall.plot(rows, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_main_writes_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = tmp_path / "t.md"
    assert recall.main(["--contexts", "2K", "--topk", "256", "--heads", "4", "--queries", "2", "--needles", "1",
                        "--margins", "0.5", "--table", str(table)]) == 0
    assert "| bf16 | 256 |" in table.read_text()
    assert "Generated by `python -m kernelgen.recall --contexts 2K" in capsys.readouterr().out
