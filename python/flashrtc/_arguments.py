"""The options and tensors of a call as flashrtc takes them: causal as a mask, the scale, the tile, the
layout, SDPA's arguments (and those it has that flashrtc does not yet), and the rules q, k, v, o, dout and
the lse share (dims, dtypes, shapes, one device), forward and backward alike. Each mistake is an
InvalidArgumentError (TypeError for a value of the wrong kind) naming the argument, before anything reaches
the library.
"""
from __future__ import annotations

import math
from typing import Optional

from . import _library
from ._errors import InvalidArgumentError, shown
from ._tensors import TensorView

# Which dimension of a 4-d tensor is batch, sequence, head and head dim.
LAYOUTS = {"bhnd": (0, 2, 1, 3), "bnhd": (0, 1, 2, 3)}
LAYOUT_TEXT = {"bhnd": "[B, H, N, d]", "bnhd": "[B, N, H, d]"}
# The canonical causal value of each mask (what the operators pass back here); True is "top-left" too.
CAUSAL_BY_MASK = {_library.MASK_NONE: False, _library.MASK_CAUSAL_TOP_LEFT: "top-left",
                  _library.MASK_CAUSAL_BOTTOM_RIGHT: "bottom-right"}
MASK_BY_CAUSAL = {**{causal: mask for mask, causal in CAUSAL_BY_MASK.items()}, True: _library.MASK_CAUSAL_TOP_LEFT}
# Each valid causal value's canonical one: the operators' signatures are cached under it (True: "top-left").
CANONICAL_CAUSAL = {causal: CAUSAL_BY_MASK[mask] for causal, mask in MASK_BY_CAUSAL.items()}
# Option types whose equal values mean the same call (True == 1 == 1.0 as dict keys: a float causal or a
# bool scale must not find the entry of a valid call).
CAUSAL_KEY_TYPES = (bool, int, str)
SCALE_KEY_TYPES = (type(None), float, int)
FLAG_TYPES = (type(None), bool)  # enable_gqa, deterministic: None (the default) or a bool
_TILE_FIELDS = ("block_m", "block_n", "warps", "stages")
_FLOAT32_MAX = 3.4028234663852886e38


def merge_causal(causal, is_causal):
    """The causal value of flashrtc's causal= (default None) and SDPA's is_causal= (default False; None counts
    as False): causal when given, with is_causal left False; else is_causal, True or False."""
    if causal is None:
        if is_causal is None:
            return False
        if type(is_causal) is not bool:
            raise InvalidArgumentError(f"is_causal={shown(is_causal)}: must be True or False (causal= also takes "
                                       "'bottom-right')")
        return is_causal
    if is_causal is not None and is_causal is not False:
        raise InvalidArgumentError(f"causal={shown(causal)} and is_causal={shown(is_causal)}: give one of them "
                                   "(is_causal is SDPA's name for causal=True/False)")
    return causal


def check_sdpa_unsupported(attn_mask, dropout_p) -> None:
    """SDPA's attn_mask and dropout_p, which flashrtc has no kernels for yet: None and 0 pass, anything else is
    refused rather than ignored."""
    if attn_mask is not None:
        raise InvalidArgumentError("attn_mask: flashrtc does not take a mask tensor yet; for causal masks pass "
                                   "is_causal=True (top-left, as SDPA) or causal='bottom-right', and call "
                                   "torch's scaled_dot_product_attention for any other mask")
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)):
        raise InvalidArgumentError(f"dropout_p={shown(dropout_p)}: expected a number, and 0.0 is the only value "
                                   "flashrtc takes (it has no attention dropout yet)")
    if dropout_p != 0:
        raise InvalidArgumentError(f"dropout_p={shown(dropout_p)}: flashrtc has no attention dropout yet; pass "
                                   "0.0, or call torch's scaled_dot_product_attention where dropout is wanted")


def check_layout(layout) -> None:
    if layout not in LAYOUTS:
        raise InvalidArgumentError(f"layout={shown(layout)}: must be 'bhnd' ([B, H, N, d]) or 'bnhd' ([B, N, H, d])")


def check_gqa(enable_gqa, heads_q, heads_kv) -> None:
    """SDPA's enable_gqa: None and True allow Hq != Hkv (flashrtc always groups); False refuses it."""
    check_flag(enable_gqa, "enable_gqa")
    if enable_gqa is False and heads_q != heads_kv:
        raise InvalidArgumentError(f"enable_gqa=False with {heads_q} query heads and {heads_kv} key/value heads: "
                                   "they must match, as in SDPA; pass enable_gqa=True (or leave it out) for "
                                   "grouped-query attention")


def check_flag(value, name) -> None:
    if type(value) not in FLAG_TYPES:
        raise InvalidArgumentError(f"{name}={shown(value)}: must be True, False or None")


def mask_of(causal) -> int:
    """The flashrtc_mask of a causal value: False, True, 0, 1, "top-left" or "bottom-right"."""
    key = None
    if isinstance(causal, str):
        key = causal
    elif isinstance(causal, int) and causal in (0, 1):  # bools, and 0 / 1
        key = bool(causal)
    if key not in MASK_BY_CAUSAL:
        raise InvalidArgumentError(f"causal={shown(causal)}: must be False, True (= 'top-left', SDPA's is_causal) "
                                   "or 'bottom-right'")
    return MASK_BY_CAUSAL[key]


def tile_of(config) -> tuple:
    """(block_m, block_n, warps, stages) of a config (a sequence, a mapping or an object with those
    attributes); None: (0, 0, 0, 0), the library's choice."""
    if config is None:
        return (0, 0, 0, 0)
    if isinstance(config, dict):
        missing = [f for f in _TILE_FIELDS if f not in config]
        if missing or len(config) != 4:
            raise InvalidArgumentError(f"config={shown(config)}: give exactly {', '.join(_TILE_FIELDS)}")
        values = tuple(config[f] for f in _TILE_FIELDS)
    elif all(hasattr(config, f) for f in _TILE_FIELDS):
        values = tuple(getattr(config, f) for f in _TILE_FIELDS)
    elif isinstance(config, (tuple, list)):
        if len(config) != 4:
            raise InvalidArgumentError(f"config={shown(config)}: give 4 values, ({', '.join(_TILE_FIELDS)})")
        values = tuple(config)
    else:
        raise TypeError(f"config: expected (block_m, block_n, warps, stages), a mapping or an object with those "
                        f"attributes, got {type(config).__qualname__}")
    for field, value in zip(_TILE_FIELDS, values):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0 or value >= 2 ** 31:
            raise InvalidArgumentError(f"config: {field}={shown(value)} must be a positive integer")
    return values


def scale_of(scale) -> Optional[float]:
    """The softmax scale as a float (None: the library's 1/sqrt(d)); infinities and NaN pass, for the
    library to name them."""
    if scale is None:
        return None
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) and not hasattr(scale, "__float__"):
        raise TypeError(f"scale: expected a number, got {type(scale).__qualname__}")
    try:
        value = float(scale)
    except OverflowError:  # an int beyond any float
        value = None
    if value is None or math.isfinite(value) and abs(value) > _FLOAT32_MAX:  # inf and NaN: the library names them
        raise InvalidArgumentError(f"scale={shown(scale)}: out of float32's range "
                                   f"[-{_FLOAT32_MAX:g}, {_FLOAT32_MAX:g}]")
    return value


def check_inputs(views: dict, layout: str) -> tuple:
    """The rules of q, k, v and any further tensors in views shaped like q (o, dout), forward and backward
    alike; returns (batch, seqlen_q, heads_q, head_dim, seqlen_kv, heads_kv)."""
    for name, t in views.items():
        if len(t.shape) != 4:
            raise InvalidArgumentError(f"{name} has shape {t.shape}: expected 4 dims, {LAYOUT_TEXT[layout]} "
                                       f"(layout={layout!r})")
    qv, kv, vv = views["q"], views["k"], views["v"]
    if qv.dtype not in _library.DTYPES:
        raise InvalidArgumentError(f"q has dtype {qv.dtype}: flashrtc takes float16, bfloat16 and float32")
    for name, t in views.items():
        if t.dtype != qv.dtype:
            raise InvalidArgumentError(f"{name} has dtype {t.dtype}, q has {qv.dtype}: they must match")
    b, s, h, d = LAYOUTS[layout]
    batch, seqlen_q, heads_q, head_dim = (qv.shape[i] for i in (b, s, h, d))
    if kv.shape != vv.shape:
        raise InvalidArgumentError(f"k has shape {kv.shape} and v {vv.shape}: they must match")
    if kv.shape[b] != batch:
        raise InvalidArgumentError(f"k has batch {kv.shape[b]}, q has {batch}: they must match")
    if kv.shape[d] != head_dim:
        raise InvalidArgumentError(f"k has head dim {kv.shape[d]}, q has {head_dim}: they must match")
    for name, t in views.items():
        if name not in ("q", "k", "v") and t.shape != qv.shape:
            raise InvalidArgumentError(f"{name} has shape {t.shape}, q has {qv.shape}: they must match")
    return batch, seqlen_q, heads_q, head_dim, kv.shape[s], kv.shape[h]


def check_lse(name: str, lv: TensorView, shape: tuple, text: str = "[B, Hq, Nq]") -> None:
    """The lse's rules: float32 of shape (the dims text names: [B, Hq, Nq], or a packed call's
    [Hq, total_q]), contiguous."""
    if lv.dtype != "float32":
        raise InvalidArgumentError(f"{name} has dtype {lv.dtype}: it must be float32")
    if lv.shape != shape:
        raise InvalidArgumentError(f"{name} has shape {lv.shape}: it must be {text} = {list(shape)}")
    expected = tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))
    if any(n > 1 and st != e for n, st, e in zip(shape, lv.strides, expected)):
        raise InvalidArgumentError(f"{name} has strides {lv.strides}: it must be contiguous")


def check_same_device(named_views) -> None:
    """All views on one device (those whose interface does not tell are not compared)."""
    known = [(name, t.device) for name, t in named_views if t.device is not None]
    for name, device in known[1:]:
        if device != known[0][1]:
            raise InvalidArgumentError(f"{name} is on cuda:{device}, {known[0][0]} on cuda:{known[0][1]}: "
                                       "all tensors must be on one device")
