"""Issue 23 item 1 ("One PD path"): a bit-level fingerprint of every mixer's outputs and gradients, to compare the
code before and after a refactor that must not change a single bit.

For each registered SSM mixer (and each PD-SSM transition: dictionary, bank, direct), a tiny seeded model (the
mixer, then attention) runs on fixed inputs:

- forward + backward of the LM loss, with and without a left-padded attention mask: logits and every parameter's
  gradient;
- a cached decode: a prefill of 5 tokens, then 4 one-token steps (no gradient), with the padded mask: logits.

With --backends torch triton the PD-SSM models also run on the Triton kernels (in the interpreter on a CPU, set
TRITON_INTERPRET=1 before starting), and the PD ops themselves (dictionary, bank, given transitions) run once on
each backend, forward and backward, with a mask.

    TRITON_INTERPRET=1 python scripts/experiments/i23_pd_path_fingerprint.py --out runs/i23/before.pt
    TRITON_INTERPRET=1 python scripts/experiments/i23_pd_path_fingerprint.py --out runs/i23/after.pt \
        --compare runs/i23/before.pt

--compare prints one line per tensor group and exits 1 unless every tensor is torch.equal to the saved one.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

from hf_ssm import HybridSSMConfig, HybridSSMForCausalLM
from hf_ssm.modeling.mixer_registry import mixer_names

PD_TRANSITIONS = ("dictionary", "bank", "direct")
SIZES = dict(
    vocab_size=37,
    hidden_size=32,
    intermediate_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    pd_ssm_num_heads=2,
    pd_ssm_head_state_size=5,
    pd_ssm_dict_size=4,
    lrc_num_channels=8,
    lru_total_state_size=8,
    lru_group_size=2,
)


def cases(backends):
    """(label, config overrides) for every mixer, PD-SSM once per transition and backend."""
    for name in mixer_names():
        if name == "pd_ssm":
            for transition in PD_TRANSITIONS:
                for backend in backends:
                    yield (
                        f"pd_ssm/{transition}/{backend}",
                        dict(mixers=[name, "attention"], pd_ssm_transition=transition, scan_backend=backend),
                    )
        else:
            yield name, dict(mixers=[name, "attention"], scan_backend="torch")


def run_model(overrides) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    config = HybridSSMConfig(num_hidden_layers=2, **SIZES, **overrides)
    model = HybridSSMForCausalLM(config).train()
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(1, config.vocab_size, (2, 11), generator=gen)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # left padding in the second row
    out = {}
    for tag, attention_mask in (("plain", None), ("padded", mask)):
        model.zero_grad(set_to_none=True)
        labels = ids if attention_mask is None else ids.masked_fill(attention_mask == 0, -100)
        result = model(ids, attention_mask=attention_mask, labels=labels, use_cache=False)
        result.loss.backward()
        out[f"{tag}/logits"] = result.logits.detach().clone()
        out[f"{tag}/loss"] = result.loss.detach().clone()
        for n, p in model.named_parameters():
            if p.grad is not None:
                out[f"{tag}/grad/{n}"] = p.grad.clone()
    model.eval()
    with torch.no_grad():
        prefill = 5
        result = model(ids[:, :prefill], attention_mask=mask[:, :prefill], use_cache=True)
        pieces, cache = [result.logits], result.cache
        for t in range(prefill, prefill + 4):
            result = model(ids[:, t : t + 1], attention_mask=mask[:, : t + 1], cache=cache, use_cache=True)
            pieces.append(result.logits)
            cache = result.cache
    out["decode/logits"] = torch.cat(pieces, dim=1)
    return out


def pd_op(kind: str, backend: str):
    """The PD op `kind` ("dictionary", "bank", "given") on `backend`, through whichever binder the code has."""
    try:
        from hf_ssm.modeling.scan_dispatch import scan_ops

        ops = scan_ops(backend, "cpu")
        if hasattr(ops, "pd_scan"):
            return {"dictionary": ops.pd_dictionary_scan, "bank": ops.pd_bank_scan, "given": ops.pd_scan}[kind]
    except ImportError:
        pass
    from hf_ssm.modeling import pd_ops  # the code before issue 23

    if kind == "given":
        return lambda idx, dv, b, x0, p_soft: pd_ops.pd_scan(idx, dv, b, x0, p_soft, backend=backend)
    fn = {"dictionary": pd_ops.pd_dictionary_scan, "bank": pd_ops.pd_bank_scan}[kind]
    return lambda s, m, dv, b, x0, mask, tau: fn(s, m, dv, b, x0, mask, temperature=tau, backend=backend)


def run_ops(backend: str) -> dict[str, torch.Tensor]:
    """The three PD ops on fixed inputs (B, T, H, N, K) = (2, 9, 2, 5, 4), with a mask, forward and backward; and
    their T = 1 step without gradient."""
    gen = torch.Generator().manual_seed(2)
    batch, steps, heads, n, k = 2, 9, 2, 5, 4
    sel = torch.softmax(torch.randn(batch, steps, heads, k, generator=gen), -1)
    logits = torch.randn(batch, steps, heads, k, generator=gen)
    matrices = torch.randn(heads, k, n, n, generator=gen)
    dv = torch.polar(
        torch.rand(batch, steps, heads, n, generator=gen), 6.28 * torch.rand(batch, steps, heads, n, generator=gen)
    )
    b = torch.complex(*torch.randn(2, batch, steps, heads, n, generator=gen))
    x0 = torch.complex(*torch.randn(2, batch, heads, n, generator=gen))
    idx = torch.randint(0, n, (batch, steps, heads, n), generator=gen)
    p_soft = torch.softmax(torch.randn(batch, steps, heads, n, n, generator=gen), -2)
    mask = torch.ones(batch, steps, dtype=torch.bool)
    mask[1, :2] = False
    g_states = torch.complex(*torch.randn(2, batch, steps, heads, n, generator=gen))
    g_final = torch.complex(*torch.randn(2, batch, heads, n, generator=gen))
    out = {}
    for kind, selection in (("dictionary", sel), ("bank", logits), ("given", None)):
        op = pd_op(kind, backend)
        if kind == "given":
            leaves = [t.clone().requires_grad_() for t in (dv, b, x0, p_soft)]
            states, final = op(idx, *leaves)
        else:
            leaves = [t.clone().requires_grad_() for t in (selection, matrices, dv, b, x0)]
            states, final = op(*leaves, mask, 0.7)
        loss = (states * g_states.conj()).real.sum() + (final * g_final.conj()).real.sum()
        grads = torch.autograd.grad(loss, leaves)
        out[f"{kind}/states"], out[f"{kind}/final"] = states.detach(), final.detach()
        for i, g in enumerate(grads):
            out[f"{kind}/grad{i}"] = g
        with torch.no_grad():  # the T = 1 step
            if kind == "given":
                step = op(idx[:, :1], dv[:, :1], b[:, :1], x0, None)
            else:
                step = op(selection[:, :1], matrices, dv[:, :1], b[:, :1], x0, mask[:, :1], 0.7)
        out[f"{kind}/step"] = step[1]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--backends", nargs="+", default=["torch", "triton"])
    parser.add_argument("--compare", default=None, help="a saved fingerprint to compare with (torch.equal)")
    args = parser.parse_args()
    if "triton" in args.backends and os.environ.get("TRITON_INTERPRET") != "1":
        print("note: TRITON_INTERPRET=1 is not set; the triton cases need a GPU", file=sys.stderr)
    torch.set_num_threads(1)
    result = {}
    for label, overrides in cases(args.backends):
        for key, value in run_model(overrides).items():
            result[f"model/{label}/{key}"] = value
        print(f"ran {label}", flush=True)
    for backend in args.backends:
        for key, value in run_ops(backend).items():
            result[f"ops/{backend}/{key}"] = value
        print(f"ran ops/{backend}", flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    torch.save(result, args.out)
    print(f"saved {len(result)} tensors to {args.out}")
    if args.compare is None:
        return 0
    return compare(torch.load(args.compare), result)


def compare(before: dict, after: dict) -> int:
    """One line per group (model case or op backend/kind): how many tensors are bit-identical."""
    groups: dict[str, list[str]] = {}
    for key in sorted(set(before) | set(after)):
        group = key.split("/grad/")[0] if "/grad/" in key else key.rsplit("/", 1)[0]
        groups.setdefault(group, []).append(key)
    bad = 0
    for group, keys in groups.items():
        same = [k for k in keys if k in before and k in after and torch.equal(before[k], after[k])]
        differ = [k for k in keys if k not in same]
        bad += len(differ)
        line = f"{group}: {len(same)}/{len(keys)} bit-identical"
        if differ:
            worst = max(
                ((before[k] - after[k]).abs().max().item() if k in before and k in after else float("inf"))
                for k in differ
            )
            line += f"; DIFFER: {', '.join(differ[:4])}{' ...' if len(differ) > 4 else ''} (max |diff| {worst:.3g})"
        print(line)
    print(f"total: {len(set(before) | set(after)) - bad} bit-identical, {bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
