"""Hugging Face transformers on flashrtc: after ``flashrtc.transformers.register()``, a model loaded or built
with ``attn_implementation="rtc"`` runs its attention on flashrtc, prefill and KV-cache decoding alike.

    import flashrtc.transformers
    flashrtc.transformers.register()
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="rtc", dtype=torch.bfloat16)

The name is "rtc", not "flashrtc": transformers (5.x) takes every implementation name containing "flash" for
a FlashAttention build and looks it up on its kernel hub.

A decoding step (a few queries over a longer cache, no gradients) runs flashrtc.attention_with_kvcache on the
cache's keys and values as transformers holds them (a strided view, no copy); everything else runs
flashrtc.attention.

What it honours: causal decoder attention (queries aligned to the end of the keys, as with a KV cache),
bidirectional (encoder) attention, GQA/MQA (no repeat of k and v), the model's softmax scaling. What it
refuses, with NotImplementedError naming the reason, instead of computing something else: padding masks
(a 2D attention_mask with any masked position; pad-free batches pass), 4D custom masks, sliding windows and
other mask functions (packed sequences, or/and masks), a static cache whose key length does not end at the
current query, attention dropout, position biases, softcapping and attention weights as output. Training
works as anywhere else: autograd goes through flashrtc's backward. Needs transformers with AttentionInterface and AttentionMaskInterface
(4.50 or newer); importing this module does not import transformers.
"""
from ._attention import attention
from ._decode import attention_with_kvcache
from ._torch_api import api as torch_api

NAME = "rtc"  # see the module docstring: no "flash" in it
# Queries per sequence up to which a step over a longer cache takes the decode kernel, which packs a KV
# head's query heads and tokens into one tile's rows; longer chunks fill the forward's tiles better.
DECODE_MAX_QUERIES = 16


def _refuse(what):
    raise NotImplementedError(f"flashrtc attention for transformers: {what} is not supported yet")


def _mask(batch_size=None, q_length=None, kv_length=None, q_offset=0, kv_offset=0, mask_function=None,
          attention_mask=None, local_size=None, **kwargs):
    """AttentionMaskInterface entry: checks that the mask the model asks for is one flashrtc computes by
    itself (causal bottom-right or none) and returns None, so no mask tensor is built."""
    from transformers.masking_utils import bidirectional_mask_function, causal_mask_function

    if mask_function is causal_mask_function:
        # flashrtc's causal mask aligns the last query with the last key: query i sees keys j <= i + Nk - Nq.
        # The model's mask lets it see keys j <= i + q_offset - kv_offset; both agree only when the keys end at
        # the current query (a dynamic cache does; a static cache with empty slots does not).
        if q_offset - kv_offset != kv_length - q_length:
            _refuse(f"a key length ({kv_length}) that does not end at the current query (offset {q_offset}; "
                    "a static cache with empty slots)")
    elif mask_function is not bidirectional_mask_function:
        _refuse("this mask function (sliding window, chunked, packed sequences or a custom or/and mask)")
    if local_size is not None:
        _refuse("a sliding window")
    if attention_mask is not None:
        padding = attention_mask
        if padding.dim() != 2:
            _refuse("a custom attention mask")
        if padding.shape[-1] > kv_length:
            padding = padding[:, kv_offset:kv_offset + kv_length]
        if not bool(padding.all()):
            _refuse("a padding mask (until variable-length batches exist, pass batches without padding)")
    return None


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None,
                      **kwargs):
    """AttentionInterface entry: query [B, H, Nq, d], key and value [B, Hkv, Nk, d]; returns the output as
    [B, Nq, H, d] (contiguous) and no attention weights, like transformers' SDPA integration."""
    if attention_mask is not None:
        _refuse("an attention mask tensor")
    if dropout:
        _refuse("attention dropout")
    for name in ("position_bias", "softcap", "sliding_window", "sinks", "s_aux"):
        if kwargs.get(name) is not None:
            _refuse(name.replace("_", " "))
    if kwargs.get("output_attentions"):
        _refuse("returning attention weights")
    if is_causal is None:
        is_causal = getattr(module, "is_causal", True)
    if _is_decode_step(query, key, value):
        return _decode_step(query, key, value, is_causal, scaling), None
    o = attention(query, key, value, causal="bottom-right" if is_causal else False, scale=scaling)
    return o.transpose(1, 2).contiguous(), None


def _is_decode_step(query, key, value) -> bool:
    """A few queries over more keys, that autograd does not record (the decode kernel has no backward)."""
    n_q, n_k = query.shape[-2], key.shape[-2]
    if not (n_q < n_k and n_q <= DECODE_MAX_QUERIES):
        return False
    return not (torch_api().is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad))


def _decode_step(query, key, value, is_causal, scaling):
    """query [B, H, Nq, d] over key, value [B, Hkv, Nk, d], as attention_with_kvcache's [B, N, H, d] views:
    each sequence's keys are one full page of a contiguous cache (no cache_seqlens: all Nk keys count), and
    transformers' causal mask for a cache is bottom-right, as causal=True is. Returns [B, Nq, H, d],
    contiguous."""
    def bnhd(t):
        t = t if t.stride(-1) == 1 else t.contiguous()
        return t.transpose(1, 2)
    return attention_with_kvcache(bnhd(query), bnhd(key), bnhd(value), softmax_scale=scaling,
                                  causal=bool(is_causal))


def register():
    """Makes ``attn_implementation="rtc"`` available to every transformers model of this process."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(NAME, attention_forward)
    AttentionMaskInterface.register(NAME, _mask)
