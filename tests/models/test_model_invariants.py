"""The model-level invariants, for every registered SSM mixer (SSM_MIXER_CLASSES) inside a hybrid with attention:
cached decode = full forward, no host read in a decode step, left padding = each row alone, packing =
documents run separately, reload bit-identical, and trust_remote_code loading where hf_ssm is not installed.

A new mixer joins every check by its declaration in hf_ssm/modeling/mixer_registry.py (docs/design.md §12);
mixer-specific files test the rest.
"""

from __future__ import annotations

import os

import pytest
import torch

from hf_ssm import HybridSSMForCausalLM
from hf_ssm.modeling import SSM_MIXER_CLASSES
from model_checks import (
    HF_SSM_MODELING_FILES,
    host_reads_in_decode_step,
    hybrid_config,
    load_without_hf_ssm,
    max_cached_decode_error,
    packed_batch,
    reload_is_bit_identical,
    save_with_reference,
)

MIXERS = list(SSM_MIXER_CLASSES)
TOL = 1e-4  # float32 rounding, and DEER's Newton tolerance for the LrcSSM family (deer_tol = 1e-4)


@pytest.mark.parametrize("mixer", MIXERS)
def test_cached_decode_equals_full_forward(mixer):
    """Prefill + token-by-token decoding with the cache gives the full-sequence logits."""
    assert max_cached_decode_error(hybrid_config(mixer)) <= TOL


@pytest.mark.parametrize("mixer", MIXERS)
def test_decode_step_makes_no_host_read_in_hf_ssm(mixer):
    """One cached decode step (padded 2-D mask, as generate passes it) reads no tensor value on the host in
    hf_ssm's code, so generation adds no synchronisation per token (the mask utilities of transformers aside)."""
    model = HybridSSMForCausalLM(hybrid_config(mixer)).eval()
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, :2] = 0
    reads = host_reads_in_decode_step(model, torch.randint(1, 37, (2, 6)), mask)
    assert not {f: n for f, n in reads.items() if f in HF_SSM_MODELING_FILES}, reads


@pytest.mark.parametrize("mixer", MIXERS)
def test_left_padding_gives_each_row_its_unpadded_logits_and_state(mixer):
    """A left-padded batch (garbage tokens under the mask) gives every row the logits, SSM state and next decode
    step it gets alone: padding never changes an SSM state or an attention output."""
    model = HybridSSMForCausalLM(hybrid_config(mixer)).eval()
    rows = [torch.randint(1, 37, (9,)), torch.randint(1, 37, (4,))]
    width = 9
    ids = torch.randint(1, 37, (2, width))
    mask = torch.zeros(2, width, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = r
        mask[i, width - len(r) :] = 1
    nxt = torch.randint(1, 37, (2, 1))
    with torch.no_grad():
        out = model(ids, attention_mask=mask, use_cache=True)
        state = out.cache.layers[0].recurrent_states[0].clone()  # the decode step below updates it in place
        mask = torch.cat([mask, torch.ones(2, 1, dtype=torch.long)], dim=1)
        step = model(nxt, attention_mask=mask, cache=out.cache, use_cache=True).logits
        for i, r in enumerate(rows):
            alone = model(r[None], use_cache=True)
            assert torch.allclose(out.logits[i, width - len(r) :], alone.logits[0], atol=TOL), f"row {i}"
            assert torch.allclose(state[i], alone.cache.layers[0].recurrent_states[0][0], atol=TOL), f"row {i}"
            alone_step = model(nxt[i : i + 1], cache=alone.cache, use_cache=True).logits
            assert torch.allclose(step[i], alone_step[0], atol=TOL), f"row {i} decode step"


@pytest.mark.parametrize("mixer", MIXERS)
def test_packed_documents_equal_running_them_separately(mixer):
    """With position_ids restarting per document (no mask), every SSM state restarts and attention is
    block-diagonal: the packed logits equal each document run alone."""
    model = HybridSSMForCausalLM(hybrid_config(mixer)).eval()
    docs, ids, positions = packed_batch([(5, 3, 7), (4, 6, 5)])
    with torch.no_grad():
        packed = model(ids, position_ids=positions, use_cache=False).logits
        separate = [torch.cat([model(d[None], use_cache=False).logits[0] for d in row]) for row in docs]
    assert torch.allclose(packed, torch.stack(separate), atol=TOL)


@pytest.mark.parametrize("mixer", MIXERS)
def test_save_reload_is_bit_identical(mixer, tmp_path):
    """save_pretrained -> from_pretrained reproduces the logits exactly; the checkpoint is safetensors only."""
    assert reload_is_bit_identical(hybrid_config(mixer), str(tmp_path))


def test_remote_code_loads_every_mixer_without_hf_ssm(tmp_path):
    """Every mixer's checkpoint loads through AutoModelForCausalLM(trust_remote_code=True) in a process where hf_ssm
    cannot be imported (the saved folder carries all the modeling files it needs) and gives identical logits."""
    jobs = []
    for mixer in MIXERS:
        directory = tmp_path / mixer
        model = HybridSSMForCausalLM(hybrid_config(mixer))
        save_with_reference(model, directory, {"input_ids": torch.randint(1, 37, (2, 11))})
        # the registry and the mixer modules it loads lazily travel with the weights
        assert {
            "modeling_hybrid_ssm.py",
            "mixer_registry.py",
            "mixer_pd_ssm.py",
            "mixer_lru.py",
            "mixer_lrc.py",
        } <= set(os.listdir(directory))
        jobs.append({"directory": str(directory), "auto_class": "AutoModelForCausalLM"})
    results = load_without_hf_ssm(jobs, tmp_path)
    for mixer, result in zip(MIXERS, results):
        assert result["class"] == "HybridSSMForCausalLM" and "hf_ssm" not in result["module"], (mixer, result)
        assert result["identical"], mixer
