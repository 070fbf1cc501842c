"""compare.py --op varlen: a batch of sequences of different lengths, packed without padding, through
flashrtc.attention_varlen beside what a user of PyTorch would run on the same batch:

- "sdpa-jagged": SDPA over nested jagged tensors (torch.nested, layout torch.jagged), which PyTorch routes to
  FlashAttention-2's variable-length kernel;
- "sdpa-padded": SDPA over the batch padded to its longest sequence, with a boolean mask hiding the padding
  keys (and the future, when causal), the backend SDPA picks for a masked call;
- "flashrtc-dense": flashrtc.attention over the same packed tensors viewed as [B, L, H, d], only when every
  sequence has the same length (the varlen kernel's overhead over the dense one).

Lengths: --lengths uniform:LO:HI (default uniform:128:8192; drawn with --seed until --total-tokens, the last
one cut to fit), equal:L (total-tokens // L sequences of L), or a comma-separated list. Every provider is
timed on the same tokens by the peers' timer; rates count the real tokens only: tokens/s, and TFLOP/s as the
sum over sequences of 4 H L^2 d (halved when causal; x3.5 for fwd+bwd). Queries and keys have the same
lengths, so a causal mask is the same top-left or bottom-right.

flashrtc's output (and for fwd+bwd its gradients) is checked first against a float32 reference computed per
sequence, by compare.py's rule with sdpa-jagged's error in the inputs' dtype as the peer's.
"""
import json
import math
import random
import sys

VARLEN_PEERS = ("sdpa-jagged", "sdpa-padded")
VARLEN_PROVIDERS = ("flashrtc",) + VARLEN_PEERS + ("flashrtc-dense",)
VARLEN_MODES = ("fwd", "fwd+bwd")
VARLEN_MODE_FORWARDS = {"fwd": 1.0, "fwd+bwd": 3.5}
DEFAULT_LENGTHS = "uniform:128:8192"
DEFAULT_TOTAL_TOKENS = 65536


def lengths_of(spec, total_tokens, seed):
    """The sequence lengths --lengths names (see the module's docstring). Raises ValueError on a bad spec."""
    kind, _, rest = spec.partition(":")
    if kind == "uniform":
        lo, hi = (int(x) for x in rest.split(":"))
        if not 1 <= lo <= hi:
            raise ValueError(f"--lengths {spec}: expected 1 <= LO <= HI")
        rng, lengths = random.Random(seed), []
        while sum(lengths) < total_tokens:
            lengths.append(min(rng.randint(lo, hi), total_tokens - sum(lengths)))
        return lengths
    if kind == "equal":
        length = int(rest)
        if not 1 <= length <= total_tokens:
            raise ValueError(f"--lengths {spec}: expected 1 <= L <= --total-tokens")
        return [length] * (total_tokens // length)
    lengths = [int(x) for x in spec.split(",")]
    if min(lengths) < 1:
        raise ValueError(f"--lengths {spec}: lengths must be positive")
    return lengths


def varlen_flops(lengths, heads, d, causal):
    """Forward FLOPs of the real tokens: sum of 4 H L^2 d, halved when causal."""
    return sum(4.0 * heads * n * n * d for n in lengths) * (0.5 if causal else 1.0)


def _key(row):
    return (row["mode"], row["dtype"], row["d"], row["causal"])


def varlen_table(rows, short_names):
    """(heading lines, one line per (mode, dtype, d, causal), summary lines): per provider millions of tokens
    per second / TFLOP/s, then flashrtc's time ratio to each other provider (> 1: flashrtc faster)."""
    by_point = {}
    for row in rows:
        by_point.setdefault(_key(row), {})[row["provider"]] = row
    others = [p for p in VARLEN_PROVIDERS[1:] if any(p in r for r in by_point.values())]
    head = (f"{'mode':7} {'dtype':5} {'d':>4} {'causal':6} | " + " ".join(f"{p:>15}" for p in VARLEN_PROVIDERS
                                                                          if p == "flashrtc" or p in others) +
            " | " + " ".join(f"{'/' + p:>15}" for p in others) + " | max err (peer)")
    first = next(iter(rows), {})
    heading = [f"{first.get('B', '?')} sequences, {first.get('tokens', '?')} tokens (lengths {first.get('lengths', '?')}), "
               f"H = {first.get('H', '?')}/{first.get('Hkv', '?')}; cells: M tokens/s / TFLOP/s of the real tokens; "
               "ratios: the provider's time over flashrtc's (> 1: flashrtc faster)", head]
    lines, logs = [], {}
    for key in sorted(by_point, key=lambda k: (VARLEN_MODES.index(k[0]) if k[0] in VARLEN_MODES else 9, *k[1:])):
        r = by_point[key]
        mode, dtype, d, causal = key
        fr = r.get("flashrtc", {})

        def cell(row):
            if not row:
                return f"{'':>15}"
            if "ms" in row:
                return f"{row['mtok_s']:.0f}/{row['tflops']:.0f}".rjust(15)
            return ("MISMATCH" if row.get("mismatch") else "error").rjust(15)

        ratios = []
        for p in others:
            if fr.get("ms", 0) > 0 and r.get(p, {}).get("ms", 0) > 0:
                ratio = r[p]["ms"] / fr["ms"]
                logs.setdefault((mode, short_names.get(dtype, dtype), p), []).append(math.log(ratio))
                ratios.append(f"{ratio:>15.2f}")
            else:
                ratios.append(f"{'-':>15}")
        err = f"{fr['max_abs_err']:.1e} ({fr['peer_max_abs_err']:.1e})" if "max_abs_err" in fr else ""
        lines.append(f"{mode:7} {short_names.get(dtype, dtype):5} {d:>4} {'yes' if causal else 'no':6} | " +
                     " ".join(cell(r.get(p)) for p in VARLEN_PROVIDERS if p == "flashrtc" or p in others) +
                     " | " + " ".join(ratios) + " | " + err)
    summary = [f"varlen {mode} {dtype}: {p}'s time / flashrtc's: geometric mean "
               f"{math.exp(sum(v) / len(v)):.2f} over {len(v)} points, {sum(1 for x in v if x < 0)} below 1"
               for (mode, dtype, p), v in sorted(logs.items())]
    return heading, lines, summary


# ---- the measurement (torch, a GPU) ------------------------------------------------------------------------

def _error_text(e):
    return type(e).__name__ + ": " + (str(e).splitlines() or [""])[0][:160]


def _reference(torch, F, sdpa_kernel, SDPBackend, q, k, v, dout, cu, causal, with_grads):
    """Per sequence in float32 (memory-efficient backend): o, and with_grads dq, dk, dv, as packed tensors."""
    outs = [torch.empty(x.shape, device=x.device, dtype=torch.float32) for x in (q, q, k, v)]
    group = q.shape[1] // k.shape[1]
    bounds = cu.tolist()
    for s, e in zip(bounds[:-1], bounds[1:]):
        leaves = [x[s:e].detach().float().transpose(0, 1).unsqueeze(0).requires_grad_(with_grads)
                  for x in (q, k, v)]
        kk, vv = (x.repeat_interleave(group, dim=1) for x in leaves[1:])
        with torch.enable_grad() if with_grads else torch.no_grad():
            with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
                o = F.scaled_dot_product_attention(leaves[0], kk, vv, is_causal=causal)
            if with_grads:
                o.backward(dout[s:e].float().transpose(0, 1).unsqueeze(0))
        results = [o.detach()] + ([x.grad for x in leaves] if with_grads else [])
        for out, t in zip(outs, results):
            out[s:e] = t[0].transpose(0, 1)
    return outs if with_grads else outs[:1]


def _check(torch, common, mine, peer, ref, dtype, names):
    """compare.py's rule for each tensor (flashrtc's error at most twice the peer's plus eps x max|ref|);
    returns the row fields of the tensor closest to its limit; raises common.Mismatch over the rule."""
    worst = None
    for name, m, p, r in zip(names, mine, peer, ref):
        err = (m.float() - r).abs().max().item()
        peer_err = (p.float() - r).abs().max().item()
        allowed = common.allowed_error(peer_err, r.abs().max().item(), torch.finfo(dtype).eps)
        result = dict(max_abs_err=err, peer_max_abs_err=peer_err, allowed_err=allowed, checked_tensor=name)
        if not (err <= allowed):  # NaN fails too
            raise common.Mismatch(result)
        if worst is None or err / allowed > worst["max_abs_err"] / worst["allowed_err"]:
            worst = result
    return worst


def measure_varlen(a, common):
    """--op varlen: rows for every (dtype, d, causal) and mode, printed as they finish. common: compare.py."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    flashrtc = common.import_flashrtc()
    peers = common.load_peers(a.peers)
    table_out = sys.stderr if a.json else sys.stdout
    lengths = a.varlen_lengths
    equal = len(set(lengths)) == 1
    print(f"flashrtc {flashrtc.library_version()} ({flashrtc.loaded_path()}); torch {torch.__version__}; "
          f"{torch.cuda.get_device_name()}; timer from {peers.__spec__.origin}", file=table_out, flush=True)
    cu = torch.tensor([0] + list(_prefix_sums(lengths)), device="cuda", dtype=torch.int32)
    total, longest, batch = cu[-1].item(), max(lengths), len(lengths)
    shown_lengths = a.lengths if not a.lengths[0].isdigit() else f"{min(lengths)}..{longest}"
    rows, mismatches, first = [], [], True
    for dtype_name in a.dtypes:
        dtype = getattr(torch, dtype_name)
        for d in a.head_dims:
            hq, hkv = a.varlen_heads if a.varlen_heads else (max(1, common.GRID_MODEL_DIM // d),) * 2
            for causal in a.causals:
                torch.manual_seed(0)
                q = torch.randn(total, hq, d, device="cuda", dtype=dtype)
                k, v = (torch.randn(total, hkv, d, device="cuda", dtype=dtype) for _ in range(2))
                dout = torch.randn_like(q)
                base = dict(dtype=dtype_name, d=d, causal=causal, B=batch, H=hq, Hkv=hkv, tokens=total,
                            lengths=shown_lengths)
                flops = varlen_flops(lengths, hq, d, causal)
                forwards = _forwards(torch, F, flashrtc, q, k, v, cu, longest, lengths, causal, equal)
                point_rows = []
                for mode in VARLEN_MODES:
                    backward = mode != "fwd"
                    leaves = [x.detach().requires_grad_(backward) for x in (q, k, v)]
                    checked, time_flashrtc = {}, True
                    try:
                        checked = _check_flashrtc(torch, F, sdpa_kernel, SDPBackend, common, forwards, leaves,
                                                  dout, cu, causal, backward)
                    except common.Mismatch as e:
                        row = dict(provider="flashrtc", mode=mode, mismatch=True,
                                   error="output mismatch against the reference", **e.args[0], **base)
                        mismatches.append(row)
                        point_rows.append(row)
                        time_flashrtc = False
                        print(f"MISMATCH: flashrtc varlen {mode} {common.SHORT[dtype_name]} d={d} causal={causal}: "
                              f"{e.args[0]['checked_tensor']} max abs error {e.args[0]['max_abs_err']:.3g} > allowed "
                              f"{e.args[0]['allowed_err']:.3g} (peer's {e.args[0]['peer_max_abs_err']:.3g})",
                              file=sys.stderr, flush=True)
                    except Exception as e:  # no backward in this build, a refused shape: its row says so
                        point_rows.append(dict(provider="flashrtc", mode=mode, error=_error_text(e), **base))
                        time_flashrtc = False
                    for provider, forward in forwards.items():
                        if provider == "flashrtc" and not time_flashrtc:
                            continue
                        row = dict(provider=provider, mode=mode, **base)
                        if provider == "flashrtc":
                            row.update(checked)
                        try:
                            fn = common.timed(lambda f=forward: f(*leaves), mode, dout, leaves)
                            fn()  # warm: compile, autotune, load
                            torch.cuda.synchronize()
                            ms = peers.time_fn(fn)
                            row.update(ms=round(ms, 4), mtok_s=round(total / ms / 1e3, 1),
                                       tflops=round(VARLEN_MODE_FORWARDS[mode] * flops / ms / 1e9, 1))
                        except Exception as e:  # a provider that refuses the batch, a mode or the memory
                            row.update(error=_error_text(e))
                        point_rows.append(row)
                    for x in leaves:
                        x.grad = None
                del q, k, v, dout, forwards
                torch.cuda.empty_cache()
                for row in point_rows:
                    if a.json:
                        print(json.dumps(row), flush=True)
                heading, lines, _ = varlen_table(point_rows, common.SHORT)
                print("\n".join(heading + lines if first else lines), file=table_out, flush=True)
                first = False
                rows += point_rows
    return rows, mismatches


def _prefix_sums(lengths):
    total = 0
    for n in lengths:
        total += n
        yield total


def _forwards(torch, F, flashrtc, q, k, v, cu, longest, lengths, causal, equal):
    """provider -> f(q, k, v) over packed [total, H, d] leaves, returning a tensor to backpropagate from."""
    group = q.shape[1] // k.shape[1]
    offsets = cu.long()
    batch = len(lengths)
    # Where each packed token sits in the padded [B, longest] batch, and the padded batch's mask: key j of
    # sequence b is visible to its query i when j < L_b (and j <= i when causal).
    position = torch.cat([torch.arange(b * longest, b * longest + n, device="cuda") for b, n in enumerate(lengths)])
    length = torch.tensor(lengths, device="cuda")
    keys = torch.arange(longest, device="cuda")
    mask = (keys[None, None, :] < length[:, None, None]).expand(batch, longest, longest)
    if causal:
        mask = mask & (keys[None, None, :] <= keys[None, :, None])
    mask = mask[:, None]  # [B, 1, longest, longest]

    def varlen(q, k, v):
        return flashrtc.attention_varlen(q, k, v, cu, cu, longest, longest, causal=causal)

    def jagged(q, k, v):
        def nested(x):
            x = x if group == 1 or x.shape[1] == q.shape[1] else x.repeat_interleave(group, dim=1)
            return torch.nested.nested_tensor_from_jagged(x, offsets).transpose(1, 2)  # [B, H, j, d]
        o = F.scaled_dot_product_attention(nested(q), nested(k), nested(v), is_causal=causal)
        return o.transpose(1, 2).values()

    def padded(q, k, v):
        def pad(x):
            out = x.new_zeros(batch * longest, *x.shape[1:])
            out = out.index_copy(0, position, x)  # out of place: autograd reaches the packed leaves
            return out.view(batch, longest, *x.shape[1:]).transpose(1, 2)  # [B, H, longest, d]
        o = F.scaled_dot_product_attention(pad(q), pad(k), pad(v), attn_mask=mask, enable_gqa=group > 1)
        return o.transpose(1, 2).reshape(batch * longest, *q.shape[1:]).index_select(0, position)

    forwards = {"flashrtc": varlen, "sdpa-jagged": jagged, "sdpa-padded": padded}
    if equal:
        def dense(q, k, v):
            def view(x):
                return x.view(batch, lengths[0], *x.shape[1:])
            return flashrtc.attention(view(q), view(k), view(v), causal=causal, layout="bnhd").reshape(q.shape)
        forwards["flashrtc-dense"] = dense
    return forwards


def _check_flashrtc(torch, F, sdpa_kernel, SDPBackend, common, forwards, leaves, dout, cu, causal, backward):
    """flashrtc's output (and gradients) against the per-sequence float32 reference, sdpa-jagged (else
    sdpa-padded) in the inputs' dtype as the peer. Returns the row fields (compare.py's rule)."""
    def run(name):
        fresh = [x.detach().clone().requires_grad_(backward) for x in leaves]
        o = forwards[name](*fresh)
        if not backward:
            return [o.detach()]
        o.backward(dout)
        return [o.detach()] + [x.grad for x in fresh]

    ref = _reference(torch, F, sdpa_kernel, SDPBackend, *leaves, dout, cu, causal, backward)
    mine = run("flashrtc")
    try:
        peer = run("sdpa-jagged")
    except Exception:  # a torch without nested jagged SDPA: the padded call is the same computation
        peer = run("sdpa-padded")
    names = ("o", "dq", "dk", "dv")[:len(ref)]
    return _check(torch, common, mine, peer, ref, leaves[0].dtype, names)
