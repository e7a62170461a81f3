"""The word-level tokenizer of the built-in tiny base (hf_ssm.adapters.tiny_base), saved next to its Qwen2 weights as
scripts/train_adapter.py leaves it in <run>/base, reloads with the ids it had: through transformers' AutoTokenizer
(with and without remote code, also where hf_ssm is not installed) and through the package's own loader, also in
the format saved before the tokenizer had a class of its own."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap

import pytest

from hf_ssm.adapters.bases import load_tokenizer
from hf_ssm.adapters.tiny_base import EOS_TOKEN, PAD_TOKEN, UNK_TOKEN, build_tiny_qwen2, build_word_tokenizer
from hf_ssm.data import nl_state_tracking as nl

TASKS = [*nl.NL_TASK_NAMES, "tracking_shuffled_objects"]
AUDITED = "Alice flips the switch. Answer:"  # AutoTokenizer read it as ['.', ':'] (a Qwen2Tokenizer)


def story_texts() -> list[str]:
    """One prompt of every task (names, objects, punctuation, options), and the sentence that was lost."""
    rng = random.Random(0)
    return [AUDITED, *(nl.get_nl_task(name).sample(4, rng).prompt for name in TASKS)]


@pytest.fixture(scope="module")
def saved_base(tmp_path_factory):
    """(folder, in-process tokenizer): a tiny Qwen2 (config.json's model_type "qwen2") and its tokenizer, saved."""
    folder = tmp_path_factory.mktemp("tiny_base")
    tokenizer = build_word_tokenizer(nl.task_vocabulary([nl.get_nl_task(name) for name in TASKS]))
    build_tiny_qwen2(len(tokenizer), hidden_size=16, num_layers=1, num_heads=2).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, tokenizer


def test_a_saved_tiny_base_tokenizer_loads_through_auto_tokenizer_with_the_same_ids(saved_base):
    """AutoTokenizer.from_pretrained(<saved tiny base>) encodes every story to the ids the package's in-process
    tokenizer gives (it was rebuilt as a byte-level Qwen2Tokenizer that kept only '.' and ':'), pads on the left with
    the same pad id, and decodes the ids to the text's words: lower-cased, one space apart."""
    from transformers import AutoTokenizer

    folder, tokenizer = saved_base
    loaded = AutoTokenizer.from_pretrained(folder)
    texts = story_texts()
    for text in texts:
        ids = tokenizer(text)["input_ids"]
        assert loaded(text)["input_ids"] == ids, text
        assert tokenizer.unk_token_id not in ids, text  # every word of the stories is in the vocabulary
        assert loaded.decode(ids) == tokenizer.decode(ids) == " ".join(nl.words_of(text))
    assert loaded(texts, padding=True)["input_ids"] == tokenizer(texts, padding=True)["input_ids"]
    assert loaded.padding_side == "left" and loaded.pad_token_id == tokenizer.pad_token_id == 0
    assert (loaded.pad_token, loaded.unk_token, loaded.eos_token) == (PAD_TOKEN, UNK_TOKEN, EOS_TOKEN)


# AutoTokenizer on the folder argv[1], plain and with remote code, in a process where hf_ssm cannot be imported:
# prints one JSON object {"plain" | "remote": [[ids, decoded] per text of argv[2] (a JSON list)], "modules": [...]}.
LOAD_WITHOUT_HF_SSM = textwrap.dedent(
    """
    import json
    import sys

    class BlockHfSsm:
        def find_spec(self, name, path=None, target=None):
            if name == "hf_ssm" or name.startswith("hf_ssm."):
                raise ImportError("hf_ssm is blocked in this process")

    sys.meta_path.insert(0, BlockHfSsm())
    from transformers import AutoTokenizer

    texts = json.loads(sys.argv[2])
    out = {"modules": []}
    for key, kwargs in (("plain", {}), ("remote", {"trust_remote_code": True})):
        tokenizer = AutoTokenizer.from_pretrained(sys.argv[1], **kwargs)
        out["modules"].append(type(tokenizer).__module__)
        out[key] = [[ids, tokenizer.decode(ids)] for ids in tokenizer(texts)["input_ids"]]
    print(json.dumps(out))
    """
)


def test_a_saved_tiny_base_tokenizer_loads_where_hf_ssm_is_not_installed(saved_base, tmp_path):
    """In a process where hf_ssm cannot be imported, AutoTokenizer gives the in-process ids and decoding, both
    as transformers' own class (no remote code) and as the class file saved with the tokenizer
    (trust_remote_code=True: the file needs nothing but transformers)."""
    folder, tokenizer = saved_base
    texts = story_texts()
    env = {"HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules"), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-c", LOAD_WITHOUT_HF_SSM, str(folder), json.dumps(texts)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, **env},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    expected = [[ids, tokenizer.decode(ids)] for ids in tokenizer(texts)["input_ids"]]
    assert out["plain"] == out["remote"] == expected
    assert not any(module.startswith("hf_ssm") for module in out["modules"]), out["modules"]


def test_a_tiny_base_saved_in_the_older_format_still_loads_through_the_package_loader(tmp_path):
    """A tiny base saved before the tokenizer had a class of its own (tokenizer_class "TokenizersBackend", no
    auto_map: AutoTokenizer rebuilds it as a Qwen2Tokenizer) still loads through hf_ssm's `load_tokenizer`, with
    the ids of the in-process tokenizer."""
    from transformers import PreTrainedTokenizerFast

    tokenizer = build_word_tokenizer(nl.task_vocabulary([nl.get_nl_task("parity")]))
    older = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer.backend_tokenizer,
        pad_token=PAD_TOKEN,
        unk_token=UNK_TOKEN,
        eos_token=EOS_TOKEN,
        padding_side="left",
    )
    build_tiny_qwen2(len(tokenizer), hidden_size=16, num_layers=1, num_heads=2).save_pretrained(tmp_path)
    older.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "TokenizersBackend" and "auto_map" not in config
    loaded = load_tokenizer(str(tmp_path))
    text = nl.get_nl_task("parity").sample(5, random.Random(1)).prompt
    assert loaded(AUDITED)["input_ids"] == tokenizer(AUDITED)["input_ids"]
    assert loaded(text)["input_ids"] == tokenizer(text)["input_ids"]
    assert loaded.padding_side == "left" and loaded.pad_token_id == 0
