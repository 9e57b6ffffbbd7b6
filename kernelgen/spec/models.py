"""The `models:` section: a model's attention prep in the words of its config, expanded into variants and a
launch group."""
from __future__ import annotations

from typing import Any

from .group import Group
from .names import MAX_NAME_LENGTH
from .settings import _axis_value, _entries, _fail, _launch, _make
from .variant import Launch, Variant
from .yamlsrc import Located, quote

# `models:`: a model's attention prep in the words of its config (num_q_heads, num_kv_heads, head_dim, ...),
# expanded into its Q output, K cache and V cache variants (<name>_q, <name>_k, <name>_v) and a launch group
# <name> of the three. Each key with its default and the variant axis it sets.
MODEL_DEFAULTS: dict[str, object] = {
    "num_q_heads": None, "num_kv_heads": None, "head_dim": None,  # required
    "v_head_dim": None,  # default head_dim
    "rotary_dim": None,  # default head_dim (full rotary); fewer: the first rotary_dim dims of each head; 0: no RoPE
    "rope_style": "neox", "rope_table": "halves", "qk_norm": "none",
    "v_norm": "none",  # Gemma-3n: rms_unweighted (vLLM's v_norm = RMSNorm(head_dim, has_weight=False)) on each V head
    "mrope_section": None,  # M-RoPE (rope_style mrope or mrope_interleaved): pairs per position stream, e.g. [16, 24, 24]
    "q_temperature": "none",  # llama4: Llama-4's attn_temperature_tuning on Q (its NoPE layers)
    "attn_output_gate": False,  # Qwen3-Next / Qwen3.5: each Q head of the projection is [q | gate]; Q reads q
    "norm_order": "norm_then_rope",  # or "rope_then_norm": Q's and K's norm runs on the rotated heads
    "q_store": "bf16",  # or "none": no Q output (the group writes K and V only)
    "kv_store": "bf16", "k_store": None, "v_store": None,  # k_store / v_store default to kv_store
    "page_size": 16, "kv_layout": "nhd", "input_dtype": "bf16", "weight_dtype": "fp32",
    "kv_pool": "separate",  # or "joint": K and V are the halves of one pool [num_pages, 2, page_size, ...]
    # or "token4": V's scale bytes of 4 consecutive tokens interleaved (vLLM's NVFP4 V scales for trtllm-gen, SM100)
    "v_scale_order": "linear",
}
MODEL_KEYS = ("name", *MODEL_DEFAULTS, "launch")
_REQUIRED = {"num_q_heads": "num_q_heads: 32", "num_kv_heads": "num_kv_heads: 8", "head_dim": "head_dim: 128"}
# what a key left out means, where its default is not a value of its own
_DERIVED = {"mrope_section": "none: one position stream", "v_head_dim": "head_dim", "rotary_dim": "head_dim: full rotary", "k_store": "kv_store",
            "v_store": "kv_store"}
_MODEL_AXIS = {"num_q_heads": "heads", "num_kv_heads": "heads", "head_dim": "head_dim", "v_head_dim": "head_dim",
               "rotary_dim": "rope_dim", "rope_style": "rope_style", "rope_table": "rope_table", "qk_norm": "norm",
               "v_norm": "norm",
               "mrope_section": "rope_sections", "q_temperature": "temperature", "attn_output_gate": "x_head_stride",
               "norm_order": "norm_order",
               "q_store": "store", "kv_store": "store", "k_store": "store", "v_store": "store",
               "page_size": "page_size", "kv_layout": "kv_layout", "input_dtype": "input_dtype",
               "weight_dtype": "weight_dtype", "kv_pool": "kv_pool", "v_scale_order": "scale_order"}


def _null_message(model: str, key: str) -> str:
    """A model key given as null: it never stands for the default (leaving the key out does)."""
    if key in _REQUIRED:
        return (f"model {quote(model)}: {key} is null (~, null or nothing after the colon); it is required: give the model "
                f"config's value, e.g. {_REQUIRED[key]}")
    default = MODEL_DEFAULTS[key] if MODEL_DEFAULTS[key] is not None else _DERIVED[key]
    return (f"model {quote(model)}: {key} is null (~, null or nothing after the colon); give {key} a value, or leave the key "
            f"out for its default ({default})")


def _models(src: Located, top: dict[str, Any], spec_name: str) -> tuple[list[Variant], tuple[Group, ...]]:
    variants: list[Variant] = []
    groups = []
    for path, table, name in _entries(src, top, "models", MODEL_KEYS, "model",
                                      "each with a name, num_q_heads, num_kv_heads and head_dim"):
        if len(name) + len("_q") > MAX_NAME_LENGTH:
            raise _fail(src, path + ("name",), f"model name {quote(name)} is {len(name)} characters: its variants "
                                               f"add _q, _k and _v, and a variant name may have at most "
                                               f"{MAX_NAME_LENGTH} (MAX_NAME_LENGTH); use at most "
                                               f"{MAX_NAME_LENGTH - 2}")
        for key in ("num_q_heads", "num_kv_heads", "head_dim"):
            if key not in table:
                raise _fail(src, path, f"model {quote(name)} needs {key}: (e.g. num_q_heads: 32, num_kv_heads: 8, "
                                       "head_dim: 128, as in the model's config)")
        given = {k: v for k, v in table.items() if k not in ("name", "launch")}
        for key, value in given.items():  # every key given is checked, a null too: it never means the default
            if value is None:
                raise _fail(src, path + (key,), _null_message(name, key))
            if key == "attn_output_gate":  # a flag of the model, not an axis value
                if not isinstance(value, bool):
                    raise _fail(src, path + (key,), f"model {quote(name)}: attn_output_gate must be true or false, "
                                                    f"got {quote(value)}")
            elif not (key == "q_store" and value == "none"):
                given[key] = _axis_value(src, path + (key,), _MODEL_AXIS[key], value, key)
        m = {**MODEL_DEFAULTS, **given}
        if m["num_q_heads"] % m["num_kv_heads"]:
            raise _fail(src, path + ("num_q_heads",),
                        f"model {quote(name)}: num_q_heads {m['num_q_heads']} is not a multiple of num_kv_heads "
                        f"{m['num_kv_heads']}: grouped-query attention shares each KV head among num_q_heads / "
                        "num_kv_heads query heads, in every engine; check the model's config (num_attention_heads, "
                        "num_key_value_heads)")
        where = {key: str(src.at(path + (key,))) for key in table if key != "name"}
        head_dim = m["head_dim"]
        rotary = head_dim if m["rotary_dim"] is None else m["rotary_dim"]
        shared = {"input_dtype": m["input_dtype"], "weight_dtype": m["weight_dtype"], "rope_place": "head",
                  "rope_style": m["rope_style"], "rope_table": m["rope_table"]}
        qk = {**shared, "head_dim": head_dim, "rope_dim": rotary, "norm": m["qk_norm"], "norm_order": m["norm_order"],
              "rope_sections": m["mrope_section"] or ()}
        parts = {
            "q": ({**qk, "heads": m["num_q_heads"], "store": m["q_store"], "slots": "token", "page_size": 1,
                   "temperature": m["q_temperature"], "x_head_stride": 2 * head_dim if m["attn_output_gate"] else 0},
                  ("num_q_heads", "head_dim", "rotary_dim", "qk_norm", "norm_order", "q_store", "mrope_section",
                   "rope_style", "q_temperature", "attn_output_gate")),
            "k": ({**qk, "heads": m["num_kv_heads"], "store": m["k_store"] or m["kv_store"],
                   "page_size": m["page_size"], "kv_layout": m["kv_layout"], "kv_pool": m["kv_pool"]},
                  ("num_kv_heads", "head_dim", "rotary_dim", "qk_norm", "norm_order", "k_store", "kv_store",
                   "page_size", "kv_layout", "kv_pool", "mrope_section", "rope_style")),
            "v": ({**shared, "head_dim": m["v_head_dim"] or head_dim, "heads": m["num_kv_heads"], "rope_dim": 0,
                   "norm": m["v_norm"], "store": m["v_store"] or m["kv_store"], "page_size": m["page_size"],
                   "kv_layout": m["kv_layout"], "kv_pool": m["kv_pool"], "scale_order": m["v_scale_order"]},
                  ("num_kv_heads", "v_head_dim", "head_dim", "v_norm", "v_store", "kv_store", "page_size",
                   "kv_layout", "kv_pool", "v_scale_order")),
        }
        members = []
        for role, (settings, keys) in parts.items():
            if role == "q" and m["q_store"] == "none":
                continue
            origins = {_MODEL_AXIS[k]: where[k] for k in reversed(keys) if k in where}
            v = _make(src, spec_name, f"{name}_{role}", settings, path, path + ("name",), origins)
            variants.append(v)
            members.append((role, v))
        k, v = (dict(members)[role] for role in ("k", "v"))
        if m["kv_pool"] == "joint" and (k.head_dim, k.store) != (v.head_dim, v.store):
            raise _fail(src, path + ("kv_pool",), f"model {quote(name)}: kv_pool: joint needs K and V pages of one "
                                                  f"shape (head_dim {k.head_dim} / {v.head_dim}, store {k.store} / "
                                                  f"{v.store} here): give v_head_dim and v_store the K values, or "
                                                  "drop kv_pool")
        launch = Launch(**_launch(src, path + ("launch",), table["launch"])) if "launch" in table else Launch()
        groups.append(Group(name, tuple(members), launch, spec_name, str(src.at(path))))
    return variants, tuple(groups)
