"""Hugging Face transformers on flashrtc: after ``flashrtc.transformers.register()``, a model loaded or built
with ``attn_implementation="rtc"`` runs its attention on flashrtc, prefill and KV-cache decoding alike.

    import flashrtc.transformers
    flashrtc.transformers.register()
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="rtc", dtype=torch.bfloat16)

The name is "rtc", not "flashrtc": transformers (5.x) takes every implementation name containing "flash" for
a FlashAttention build and looks it up on its kernel hub.

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

NAME = "rtc"  # see the module docstring: no "flash" in it


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
    o = attention(query, key, value, causal="bottom-right" if is_causal else False, scale=scaling)
    return o.transpose(1, 2).contiguous(), None


def register():
    """Makes ``attn_implementation="rtc"`` available to every transformers model of this process."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(NAME, attention_forward)
    AttentionMaskInterface.register(NAME, _mask)
