"""Hugging Face transformers on flashrtc: after ``flashrtc.transformers.register()``, a model loaded or built
with ``attn_implementation="rtc"`` runs its attention on flashrtc, prefill and KV-cache decoding alike.

    import flashrtc.transformers
    flashrtc.transformers.register()
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="rtc", dtype=torch.bfloat16)

The name is "rtc", not "flashrtc": transformers (5.x) takes every implementation name containing "flash" for
a FlashAttention build and looks it up on its kernel hub.

A decoding step (a few queries over a longer cache, no gradients) runs flashrtc.attention_with_kvcache on the
cache's keys and values as transformers holds them (a strided view, no copy); a batch with padding runs
flashrtc.attention_varlen on its tokens gathered without the padding (unpad, varlen, pad); everything else
runs flashrtc.attention.

What it honours: causal decoder attention (queries aligned to the end of the keys, as with a KV cache),
bidirectional (encoder) attention, padding masks (a 2D attention_mask, left or right padding, prefill and
KV-cache decoding alike; padded query rows come out as zeros), GQA/MQA (no repeat of k and v), the model's
softmax scaling. What it refuses, with NotImplementedError naming the reason, instead of computing something
else: 4D custom masks, sliding windows and other mask functions (packed sequences, or/and masks), a static
cache whose key length does not end at the current query, attention dropout, position biases, softcapping,
and attention weights as output. Training works as anywhere else: autograd goes through flashrtc's backward (for
padded batches, through attention_varlen's, once it has one). Needs transformers with AttentionInterface and
AttentionMaskInterface (4.50 or newer); importing this module does not import transformers.

Continuous batching (model.generate_batch) is not served: transformers 5.24 runs it only on "paged|eager",
"sdpa" or an implementation whose name contains "flash" (ContinuousBatchingManager.switch_to_cb_friendly_attn
raises ValueError for any other), and a name containing "flash" is taken for a FlashAttention build and
looked up on transformers' kernel hub. Were the name let through, the rest would be attention_varlen's call:
the model writes the new keys and values into the paged cache itself and calls the attention with query
[1, H, total_q, d], key and value [1, Hkv, total_k, d] (every request's keys, cached and new, packed),
cu_seq_lens_q, cu_seq_lens_k (int32), max_length_q, max_length_k and, for a name without "flash",
is_causal=False with a block-diagonal mask that the prefix sums and causal=True (bottom-right per request)
replace. Two differences to handle then: under CUDA graphs max_length_k is padded to a power of two, past
total_k, which attention_varlen refuses; and the decode fast path (a block table with the paged k_cache and
v_cache, FlashAttention implementations only) would be attention_with_kvcache(block_table=...).
"""
from ._attention import attention
from ._attention_varlen import attention_varlen
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
    itself (causal bottom-right or none) and returns None, so no mask tensor is built; with a 2D padding
    mask that masks some position, that mask over the key window, as a bool [B, 1, 1, kv_length] tensor
    (True: attend), for attention_forward to drop the padded tokens by."""
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
    if attention_mask is None:
        return None
    padding = attention_mask
    if padding.dim() != 2:
        _refuse("a custom attention mask")
    # Key kv_offset + j is column kv_offset + j of the 2D mask; columns past its end are padding (as
    # transformers' own masks read it).
    missing = kv_offset + kv_length - padding.shape[-1]
    if missing > 0:
        import torch  # transformers imported it already
        padding = torch.nn.functional.pad(padding, (0, missing))
    padding = padding[:, kv_offset:kv_offset + kv_length]
    if bool(padding.all()):
        return None
    # The queries are the last q_length keys (attention_forward takes the mask's last columns as theirs).
    if q_offset - kv_offset != kv_length - q_length:
        _refuse(f"a padding mask over keys ({kv_length}) that do not end at the current query (offset "
                f"{q_offset})")
    return padding.bool()[:, None, None, :]


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None,
                      **kwargs):
    """AttentionInterface entry: query [B, H, Nq, d], key and value [B, Hkv, Nk, d]; returns the output as
    [B, Nq, H, d] (contiguous) and no attention weights, like transformers' SDPA integration. attention_mask
    is None or the padding mask _mask returns."""
    if attention_mask is not None and not _is_padding_mask(attention_mask, query, key):
        _refuse("an attention mask tensor (a 4D custom mask)")
    if dropout:
        _refuse("attention dropout")
    for name in ("position_bias", "softcap", "sliding_window", "sinks", "s_aux"):
        if kwargs.get(name) is not None:
            _refuse(name.replace("_", " "))
    if kwargs.get("output_attentions"):
        _refuse("returning attention weights")
    if is_causal is None:
        is_causal = getattr(module, "is_causal", True)
    if attention_mask is not None:
        return _padded_attention(query, key, value, attention_mask, is_causal, scaling), None
    if _is_decode_step(query, key, value):
        return _decode_step(query, key, value, is_causal, scaling), None
    o = attention(query, key, value, causal="bottom-right" if is_causal else False, scale=scaling)
    return o.transpose(1, 2).contiguous(), None


def _is_padding_mask(mask, query, key) -> bool:
    """Whether mask is what _mask returns for padding: bool [B, 1, 1, Nk]."""
    import torch  # transformers imported it already
    return mask.dtype == torch.bool and tuple(mask.shape) == (query.shape[0], 1, 1, key.shape[-2])


def _padded_attention(query, key, value, mask, is_causal, scaling):
    """query [B, H, Nq, d], key and value [B, Hkv, Nk, d], mask [B, 1, 1, Nk] (True: a token, False:
    padding): unpad, attention_varlen, pad. Sequence b is row b's tokens: its keys the mask's positions, its
    queries the mask's positions among the last Nq (the queries are the last Nq keys, as _mask checks).
    causal=True is bottom-right per sequence, which is the model's causal mask exactly: a row's queries are
    its last tokens, so its i-th query of Lq sees the first i + 1 + Lk - Lq of its Lk tokens. Returns
    [B, Nq, H, d], zeros at padded queries.

    A KV-cache decoding step gathers the row's tokens from the whole cache every step (a copy of the cache's
    tokens per layer and step): correct, not fast. The gathers and the scatter are torch ops, so autograd
    runs through them into attention_varlen's backward."""
    import torch  # transformers imported it already

    batch, heads, n_q, head_dim = query.shape
    n_k = key.shape[-2]
    tokens_k = mask.reshape(batch, n_k)
    tokens_q = tokens_k[:, n_k - n_q:]
    out = query.new_zeros(batch, n_q, heads, head_dim)
    b_q, i_q = tokens_q.nonzero(as_tuple=True)  # row-major: each sequence's tokens in order, b ascending
    if b_q.numel() == 0:
        return out  # every query is padding
    b_k, j_k = tokens_k.nonzero(as_tuple=True)
    # Advanced indices on dims 0 and 2 around a slice: [tokens, H, d], the packed layout.
    q = query[b_q, :, i_q]
    k = key[b_k, :, j_k]
    v = value[b_k, :, j_k]

    def prefix_sums(tokens):
        lengths = tokens.sum(dim=1, dtype=torch.int32)
        return torch.nn.functional.pad(lengths.cumsum(0, dtype=torch.int32), (1, 0)), int(lengths.max())

    cu_q, max_q = prefix_sums(tokens_q)
    cu_k, max_k = prefix_sums(tokens_k)
    o = attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, softmax_scale=scaling, causal=bool(is_causal))
    return out.index_put((b_q, i_q), o)


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
