"""flashrtc's attention as PyTorch operators (torch.library), so autograd records it and torch.compile traces
it without graph breaks:

    flashrtc::attention_forward(q, k, v, mask, scale, layout, tile, deterministic) -> (o, lse)
    flashrtc::attention_backward(dout, q, k, v, o, lse, mask, scale, layout, deterministic) -> (dq, dk, dv)
    flashrtc::attention_with_kvcache(q, k_cache!, v_cache!, k?, v?, cache_seqlens?, cache_batch_idx?,
                                     block_table?, softmax_scale, causal, num_splits) -> (o, lse)
    flashrtc::attention_over_kvcache(q, k_cache, v_cache, cache_seqlens?, ...) -> (o, lse)   (no append)
    flashrtc::merge_states(o_a, lse_a, o_b, lse_b) -> (o, lse)
    flashrtc::attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                               causal, seqused_k?, tile) -> (o, lse)
    flashrtc::attention_varlen_backward(dout, q, k, v, o, lse, cu_seqlens_q, ...) -> (dq, dk, dv)

Each has a fake implementation (the outputs' shapes, dtypes and strides, from the same allocation as the
real one) and the forward has register_autograd (saves q, k, v, o, lse; gradients for q, k, v). The real
implementations run eagerly, also under torch.compile, so they take PyTorch's current stream as any eager
call does. torch.compile traces the operators; an eager call under autograd runs the same formula as an
autograd.Function with the CUDA implementations called directly (_EagerAttention: a fraction of the host
cost). The KV-cache operators are for inference: attention_with_kvcache writes k and v into the caches (its
schema says so, so torch.compile and functionalization order it), and neither has gradients (a call that
autograd would record raises; merge_states' registered backward raises too). The CUDA implementations are
_forward's, _backward's and _kvcache's launches; flashrtc.attention (_attention) and the KV-cache functions
(_decode) import this module, and so torch, only for a call that needs it. attention_varlen's autograd formula
calls its backward operator, whose CUDA implementation is _varlen.varlen_backward.
"""
from __future__ import annotations

import functools
from typing import Tuple

import torch

from ._arguments import CAUSAL_BY_MASK, LAYOUT_TEXT, LAYOUTS, check_flag, check_gqa, check_layout, mask_of, \
    scale_of, tile_of
from ._backward import backward_for_operator
from ._errors import InvalidArgumentError, UnsupportedError
from ._forward import forward_for_operator
from ._kvcache import causal_mask, kvcache_for_operator, merge_for_operator
from ._tensors import not_on_cuda
from ._varlen import max_seqlen, varlen_backward, varlen_for_operator

if not hasattr(torch.library, "register_autograd"):
    raise UnsupportedError(f"flashrtc under autograd or torch.compile needs torch 2.4 or newer (torch.library."
                           f"register_autograd); this is torch {torch.__version__}: call it under torch.no_grad() here")
Tensor = torch.Tensor


def forward_outputs(q: Tensor, layout: str) -> Tuple[Tensor, Tensor]:
    """o and lse as the real forward allocates them (torch.empty_like(q); float32 [B, Hq, Nq] contiguous)."""
    if q.dim() != 4:
        raise InvalidArgumentError(f"q has shape {tuple(q.shape)}: expected 4 dims, "
                                   f"{LAYOUT_TEXT[layout]} (layout={layout!r})")
    b, s, h, _ = LAYOUTS[layout]
    lse = torch.empty((q.shape[b], q.shape[h], q.shape[s]), dtype=torch.float32, device=q.device)
    return torch.empty_like(q), lse


def backward_outputs(q: Tensor, k: Tensor, v: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """dq, dk, dv as the real backward allocates them."""
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def forward_kernel(q, k, v, mask, scale, layout, tile, deterministic):
    """The forward operator's CUDA implementation: o and lse; tile: [] or (block_m, block_n, warps, stages);
    deterministic is for the backward (python/tests/stub_cuda.py registers it for CPU stand-ins too)."""
    return forward_for_operator(q, k, v, CAUSAL_BY_MASK[mask], scale, layout, tile or None)


backward_kernel = backward_for_operator  # the backward operator's CUDA implementation: dq, dk, dv


# Defined and implemented with torch.library.Library rather than torch.library.custom_op: the same operators
# (schemas, fake implementations, autograd formula through torch.library.register_autograd), without the
# Python wrappers custom_op puts around each kernel call (bench/dispatch_floor.py measures both).
_LIBRARY = torch.library.Library("flashrtc", "DEF")
_LIBRARY.define("attention_forward(Tensor q, Tensor k, Tensor v, SymInt mask, float? scale, str layout, SymInt[] tile, "
                "bool deterministic) -> (Tensor, Tensor)", tags=(torch.Tag.pt2_compliant_tag,))
_LIBRARY.define("attention_backward(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, SymInt mask, "
                "float? scale, str layout, bool deterministic) -> (Tensor, Tensor, Tensor)",
                tags=(torch.Tag.pt2_compliant_tag,))
_LIBRARY.impl("attention_forward", forward_kernel, "CUDA")
_LIBRARY.impl("attention_backward", backward_kernel, "CUDA")


@torch.library.register_fake("flashrtc::attention_forward", lib=_LIBRARY)
def _attention_forward_fake(q, k, v, mask, scale, layout, tile, deterministic):
    return forward_outputs(q, layout)


@torch.library.register_fake("flashrtc::attention_backward", lib=_LIBRARY)
def _attention_backward_fake(dout, q, k, v, o, lse, mask, scale, layout, deterministic):
    return backward_outputs(q, k, v)


def _save(ctx, q, k, v, output, options):
    """What the backward needs: q, k, v, o, lse, and options (mask, scale, layout, deterministic)."""
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.options = options
    ctx.mark_non_differentiable(lse)  # its gradient would need a term the kernels do not compute


def _backward_arguments(ctx, dout):
    """(dout, q, k, v, o, lse) for the backward operator."""
    q, k, v, o, lse = ctx.saved_tensors
    if dout.stride() != o.stride():  # e.g. a broadcast gradient (stride 0): the kernels need o's rules
        dout = torch.empty_like(o).copy_(dout)
    return dout, q, k, v, o, lse


def _setup_context(ctx, inputs, output):
    q, k, v, mask, scale, layout, _tile, deterministic = inputs
    _save(ctx, q, k, v, output, (mask, scale, layout, deterministic))


def _gradients(ctx, dout, _dlse):
    dq, dk, dv = torch.ops.flashrtc.attention_backward.default(*_backward_arguments(ctx, dout), *ctx.options)
    return dq, dk, dv, None, None, None, None, None


torch.library.register_autograd("flashrtc::attention_forward", _gradients, setup_context=_setup_context, lib=_LIBRARY)


_LIBRARY.define("attention_with_kvcache(Tensor q, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor? k, Tensor? v, "
                "Tensor? cache_seqlens, Tensor? cache_batch_idx, Tensor? block_table, float? softmax_scale, "
                "bool causal, SymInt num_splits) -> (Tensor, Tensor)", tags=(torch.Tag.pt2_compliant_tag,))
_LIBRARY.define("merge_states(Tensor o_a, Tensor lse_a, Tensor o_b, Tensor lse_b) -> (Tensor, Tensor)",
                tags=(torch.Tag.pt2_compliant_tag,))
# The same call without an append, whose schema writes nothing: functionalization would otherwise treat the
# caches as written by every read-only step (transformers' decoding) and may copy them whole.
_LIBRARY.define("attention_over_kvcache(Tensor q, Tensor k_cache, Tensor v_cache, Tensor? cache_seqlens, "
                "Tensor? cache_batch_idx, Tensor? block_table, float? softmax_scale, bool causal, SymInt num_splits) "
                "-> (Tensor, Tensor)", tags=(torch.Tag.pt2_compliant_tag,))
_LIBRARY.impl("attention_with_kvcache", kvcache_for_operator, "CUDA")


def _kvcache_read_kernel(q, k_cache, v_cache, cache_seqlens, cache_batch_idx, block_table, softmax_scale, causal,
                         num_splits):
    return kvcache_for_operator(q, k_cache, v_cache, None, None, cache_seqlens, cache_batch_idx, block_table,
                                softmax_scale, causal, num_splits)


_LIBRARY.impl("attention_over_kvcache", _kvcache_read_kernel, "CUDA")
_LIBRARY.impl("merge_states", merge_for_operator, "CUDA")

NO_GRADIENTS = ("flashrtc's attention_with_kvcache and merge_states are for inference and have no backward: "
                "call them under torch.no_grad() (or detach the inputs), and flashrtc.attention for training")


def kvcache_outputs(q: Tensor) -> Tuple[Tensor, Tensor]:
    """o and lse as the real attention_with_kvcache allocates them: contiguous [B, Nq, Hq, d] and float32
    [B, Hq, Nq]."""
    if q.dim() != 4:
        raise InvalidArgumentError(f"q has shape {tuple(q.shape)}: expected 4 dims, [B, Nq, Hq, d]")
    b, n, h, d = q.shape
    return (torch.empty((b, n, h, d), dtype=q.dtype, device=q.device),
            torch.empty((b, h, n), dtype=torch.float32, device=q.device))


def merge_outputs(o_a: Tensor) -> Tuple[Tensor, Tensor]:
    """o and lse as the real merge_states allocates them."""
    if o_a.dim() != 4:
        raise InvalidArgumentError(f"o_a has shape {tuple(o_a.shape)}: expected 4 dims, [B, N, H, d]")
    b, n, h, d = o_a.shape
    return (torch.empty((b, n, h, d), dtype=o_a.dtype, device=o_a.device),
            torch.empty((b, h, n), dtype=torch.float32, device=o_a.device))


@torch.library.register_fake("flashrtc::attention_with_kvcache", lib=_LIBRARY)
def _kvcache_fake(q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, block_table, softmax_scale, causal,
                  num_splits):
    return kvcache_outputs(q)


@torch.library.register_fake("flashrtc::attention_over_kvcache", lib=_LIBRARY)
def _kvcache_read_fake(q, k_cache, v_cache, cache_seqlens, cache_batch_idx, block_table, softmax_scale, causal,
                       num_splits):
    return kvcache_outputs(q)


@torch.library.register_fake("flashrtc::merge_states", lib=_LIBRARY)
def _merge_fake(o_a, lse_a, o_b, lse_b):
    return merge_outputs(o_a)


def _no_gradients(ctx, *grads):
    raise UnsupportedError(NO_GRADIENTS)


def _no_context(ctx, inputs, output):
    return None


torch.library.register_autograd("flashrtc::merge_states", _no_gradients, setup_context=_no_context, lib=_LIBRARY)


def refuse_gradients(tensors) -> None:
    """UnsupportedError when autograd would record a KV-cache call (grad enabled, an input requiring grad):
    the mutating operator cannot carry an autograd formula, so the refusal comes at the call, never as a
    silently missing gradient."""
    if torch.is_grad_enabled() and any(isinstance(t, Tensor) and t.requires_grad for t in tensors):
        raise UnsupportedError(NO_GRADIENTS)


# Unlike attention() above, Dynamo traces into these two (no allow_in_graph): the graph then holds the operator
# itself, whose schema carries the cache writes to functionalization; a mistake found here breaks the graph
# with flashrtc's message in the error, as attention()'s checks before its operator do.
def attention_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, block_table, softmax_scale,
                           causal, num_splits, return_lse):
    """flashrtc.attention_with_kvcache under torch.compile: the operator, after the checks only Python makes
    (an int cache_seqlens becomes a tensor here, inside the graph)."""
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(t, Tensor):
            raise InvalidArgumentError(f"{name} is a {type(t).__module__}.{type(t).__qualname__}: under "
                                       "torch.compile the tensors must be torch tensors")
    refuse_gradients((q, k_cache, v_cache, k, v))
    causal_mask(causal)  # refuses what is not a bool, as the plain path does
    if (k is None) != (v is None):
        raise InvalidArgumentError("k and v: give both (appended together) or neither")
    scale = scale_of(softmax_scale)
    if isinstance(cache_seqlens, int):
        cache_seqlens = torch.full((q.shape[0],), cache_seqlens, dtype=torch.int32, device=q.device)
    if k is None and v is None:
        o, lse = torch.ops.flashrtc.attention_over_kvcache.default(q, k_cache, v_cache, cache_seqlens,
                                                                   cache_batch_idx, block_table, scale, causal,
                                                                   num_splits)
    else:
        o, lse = torch.ops.flashrtc.attention_with_kvcache.default(q, k_cache, v_cache, k, v, cache_seqlens,
                                                                   cache_batch_idx, block_table, scale, causal,
                                                                   num_splits)
    return (o, lse) if return_lse else o


def merge_states(o_a, lse_a, o_b, lse_b):
    """flashrtc.merge_states under torch.compile: the operator."""
    return torch.ops.flashrtc.merge_states.default(o_a, lse_a, o_b, lse_b)


def _check_devices(q, k, v) -> None:
    """q, k and v on CUDA, or on a device the forward operator has a kernel for all the same (meta, through the
    fake implementation; the CPU, where python/tests/test_torch_op_cpu.py registers reference kernels).
    Anything else is refused as the plain path refuses it, before the operator or the autograd function sees
    it, where torch's dispatcher would raise NotImplementedError ("Could not run
    'flashrtc::attention_forward' with arguments from the 'CPU' backend")."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        device = t.device
        if device.type == "cuda":
            continue
        try:
            key = torch._C._dispatch_key_for_device(device.type)
            served = torch._C._dispatch_has_computed_kernel_for_dispatch_key("flashrtc::attention_forward", key)
        except (AttributeError, RuntimeError):  # a torch without these lookups, or a device it cannot name
            served = False
        if not served:
            raise not_on_cuda(name, device)


def _forward_any(q, k, v, mask, scale, layout, tile, deterministic):
    """The forward of an eager autograd call: CUDA tensors directly, others (_check_devices let them through:
    a kernel is registered for them) through the operator."""
    if q.is_cuda:
        return forward_kernel(q, k, v, mask, scale, layout, tile, deterministic)
    return torch.ops.flashrtc.attention_forward.default(q, k, v, mask, scale, layout, tile, deterministic)


class _EagerAttention(torch.autograd.Function):
    """The operator's autograd formula (_save, _backward_arguments) for eager calls, with the CUDA
    implementations called directly: torch.library's Python autograd wrapper and two dispatcher round
    trips cost several times a whole SDPA call of host time (bench/dispatch_floor.py measures both;
    docs/measurements/host-cost/host_cost_python.md).
    forward(q, k, v, run, options): run(q, k, v) gives (o, lse); options (mask, scale, layout,
    deterministic) are the backward's."""

    @staticmethod
    def forward(q, k, v, run, options):
        return run(q, k, v)

    @staticmethod
    def setup_context(ctx, inputs, output):
        q, k, v, _run, options = inputs
        _save(ctx, q, k, v, output, options)

    @staticmethod
    def backward(ctx, dout, dlse):
        if torch.is_grad_enabled():  # create_graph=True: once_differentiable refuses a double backward
            return _once_differentiable_backward(ctx, dout, dlse)
        return _eager_gradients(ctx, dout, dlse)  # the engine runs it under no_grad, as once_differentiable would


def _eager_gradients(ctx, dout, _dlse):
    """_gradients with the CUDA implementation called directly (other devices: through the operator)."""
    backward = backward_kernel if dout.is_cuda else torch.ops.flashrtc.attention_backward.default
    dq, dk, dv = backward(*_backward_arguments(ctx, dout), *ctx.options)
    return dq, dk, dv, None, None


# The kernels' gradients are not recorded: no double backward.
_once_differentiable_backward = torch.autograd.function.once_differentiable(_eager_gradients)

# Function.apply's Python wrapper binds the arguments to forward's signature with inspect on every call (for
# setup_context), several microseconds; the C++ apply under it takes positional arguments as they are. The
# wrapper's one other step, outside functorch transforms, unwraps tensors left over from a finished transform.
_apply_base = getattr(getattr(torch._C, "_FunctionBase", None), "__dict__", {}).get("apply")
_unwrap_if_dead = getattr(getattr(torch._C, "_functorch", None), "unwrap_if_dead", None)
_transforms_active = getattr(torch._C, "_are_functorch_transforms_active", None)
_apply_direct = (_apply_base.__get__(None, _EagerAttention)
                 if None not in (_apply_base, _unwrap_if_dead, _transforms_active) else None)
_are_deterministic = torch.are_deterministic_algorithms_enabled


def _apply_eager(q, k, v, run, options):
    if _apply_direct is None or _transforms_active():
        return _EagerAttention.apply(q, k, v, run, options)
    return _apply_direct(_unwrap_if_dead(q), _unwrap_if_dead(k), _unwrap_if_dead(v), run, options)


def eager_attention(signature, q, k, v, deterministic, return_lse):
    """An eager autograd call of CUDA tensors whose signature flashrtc.attention has seen with the lse, so its
    checks have passed: straight to the autograd function with the signature's prepared launch."""
    mask, scale, layout = signature.checked
    if deterministic is None:
        deterministic = _are_deterministic()
    o, lse = _apply_eager(q, k, v, signature.forward_with_lse, (mask, scale, layout, deterministic))
    return (o, lse) if return_lse else o


# Dynamo records this call as it is instead of tracing into it, and runs it on fake tensors for its
# outputs: so its argument checks run as plain Python, and a mistake raises InvalidArgumentError (inside
# torch.compile's error) with flashrtc's message rather than a graph break on the raise.
@torch.compiler.allow_in_graph
def attention(q, k, v, causal, scale, enable_gqa, return_lse, layout, config, out, lse_out, stream, deterministic,
              traced):
    """flashrtc.attention's call as the forward operator (traced: under torch.compile), or its eager twin
    _EagerAttention (autograd)."""
    for name, given in (("out", out), ("lse_out", lse_out), ("stream", stream)):
        if given is not None:
            raise InvalidArgumentError(f"{name}= is not supported under autograd or torch.compile (the operator "
                                       "allocates its outputs on the current stream; for another stream, call "
                                       "inside `with torch.cuda.stream(s):`)")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise InvalidArgumentError(f"{name} is a {type(t).__module__}.{type(t).__qualname__}: under autograd "
                                       "or torch.compile q, k and v must all be torch tensors")
    if not (q.is_cuda and k.is_cuda and v.is_cuda):
        _check_devices(q, k, v)
    check_layout(layout)
    mask = mask_of(causal)
    scale = scale_of(scale)
    tile = list(tile_of(config)) if config is not None else []
    if q.dim() == 4 and k.dim() == 4:
        h = LAYOUTS[layout][2]
        check_gqa(enable_gqa, q.shape[h], k.shape[h])
    check_flag(deterministic, "deterministic")
    if deterministic is None:
        deterministic = torch.are_deterministic_algorithms_enabled()
    if traced:
        o, lse = torch.ops.flashrtc.attention_forward.default(q, k, v, mask, scale, layout, tile, deterministic)
    else:
        run = functools.partial(_forward_any, mask=mask, scale=scale, layout=layout, tile=tile,
                                deterministic=deterministic)
        o, lse = _apply_eager(q, k, v, run, (mask, scale, layout, deterministic))
    return (o, lse) if return_lse else o


_LIBRARY.define("attention_varlen(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, "
                "SymInt max_seqlen_q, SymInt max_seqlen_k, float? softmax_scale, bool causal, Tensor? seqused_k, "
                "SymInt[] tile, bool deterministic) -> (Tensor, Tensor)", tags=(torch.Tag.pt2_compliant_tag,))
_LIBRARY.define("attention_varlen_backward(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, "
                "Tensor cu_seqlens_q, Tensor cu_seqlens_k, SymInt max_seqlen_q, SymInt max_seqlen_k, "
                "float? softmax_scale, bool causal, Tensor? seqused_k, bool deterministic) -> "
                "(Tensor, Tensor, Tensor)",
                tags=(torch.Tag.pt2_compliant_tag,))
_LIBRARY.impl("attention_varlen", varlen_for_operator, "CUDA")
_LIBRARY.impl("attention_varlen_backward", varlen_backward, "CUDA")


def varlen_outputs(q: Tensor) -> Tuple[Tensor, Tensor]:
    """o and lse as the real attention_varlen allocates them: contiguous [total_q, Hq, d] and float32
    [Hq, total_q]."""
    if q.dim() != 3:
        raise InvalidArgumentError(f"q has shape {tuple(q.shape)}: expected 3 dims, [total_q, Hq, d]")
    total, h, d = q.shape
    return (torch.empty((total, h, d), dtype=q.dtype, device=q.device),
            torch.empty((h, total), dtype=torch.float32, device=q.device))


@torch.library.register_fake("flashrtc::attention_varlen", lib=_LIBRARY)
def _varlen_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal, seqused_k,
                 tile, deterministic):
    return varlen_outputs(q)


@torch.library.register_fake("flashrtc::attention_varlen_backward", lib=_LIBRARY)
def _varlen_backward_fake(dout, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                          softmax_scale, causal, seqused_k, deterministic):
    return backward_outputs(q, k, v)


def _varlen_setup_context(ctx, inputs, output):
    (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal, seqused_k, _tile,
     deterministic) = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, seqused_k)
    ctx.options = (max_seqlen_q, max_seqlen_k, softmax_scale, causal, deterministic)
    ctx.mark_non_differentiable(lse)


def _varlen_gradients(ctx, dout, _dlse):
    """Run only when a gradient through the call is asked for: the backward operator."""
    q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, seqused_k = ctx.saved_tensors
    max_seqlen_q, max_seqlen_k, softmax_scale, causal, deterministic = ctx.options
    if dout.stride() != o.stride():  # e.g. a broadcast gradient (stride 0): the kernels need o's rules
        dout = torch.empty_like(o).copy_(dout)
    dq, dk, dv = torch.ops.flashrtc.attention_varlen_backward.default(
        dout, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
        seqused_k, deterministic)
    return dq, dk, dv, None, None, None, None, None, None, None, None, None


torch.library.register_autograd("flashrtc::attention_varlen", _varlen_gradients,
                                setup_context=_varlen_setup_context, lib=_LIBRARY)


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
                     seqused_k, return_lse, out, lse_out, stream, config, deterministic):
    """flashrtc.attention_varlen under autograd or torch.compile: the operator, after the checks only Python
    makes (the operator's CUDA implementation makes the rest, as the plain path does)."""
    for name, given in (("out", out), ("lse_out", lse_out), ("stream", stream)):
        if given is not None:
            raise InvalidArgumentError(f"{name}= is not supported under autograd or torch.compile (the operator "
                                       "allocates its outputs on the current stream; for another stream, call "
                                       "inside `with torch.cuda.stream(s):`)")
    named = (("q", q), ("k", k), ("v", v), ("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k))
    for name, t in named + ((("seqused_k", seqused_k),) if seqused_k is not None else ()):
        if not isinstance(t, Tensor):
            raise InvalidArgumentError(f"{name} is a {type(t).__module__}.{type(t).__qualname__}: under autograd "
                                       "or torch.compile the tensors must all be torch tensors")
        if t.device.type != "cuda":
            raise not_on_cuda(name, t.device)
    causal_mask(causal)  # refuses what is not a bool, as the plain path does
    scale = scale_of(softmax_scale)
    tile = list(tile_of(config)) if config is not None else []
    # Plain ints are range-checked here; torch.compile's symbolic ints go to the operator's schema as they are.
    bounds = [max_seqlen(x, name) if type(x) is int or isinstance(x, bool) else x
              for x, name in ((max_seqlen_q, "max_seqlen_q"), (max_seqlen_k, "max_seqlen_k"))]
    if deterministic is None:
        deterministic = _are_deterministic()
    o, lse = torch.ops.flashrtc.attention_varlen.default(q, k, v, cu_seqlens_q, cu_seqlens_k, bounds[0], bounds[1],
                                                         scale, causal, seqused_k, tile, deterministic)
    return (o, lse) if return_lse else o
