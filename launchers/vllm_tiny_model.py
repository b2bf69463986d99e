"""Build a tiny random-weight Llama and its tokenizer offline, the same files every time.

Usage (with the vLLM venv's Python, which has torch, transformers and tokenizers):
    python launchers/vllm_tiny_model.py OUT_DIR      build into OUT_DIR
    python launchers/vllm_tiny_model.py --into ROOT  the cached model ROOT/tiny-llama-DIGEST (built
                                                     once), its path printed (launchers/vllm-up.sh)

Nothing is downloaded: a byte-level BPE tokenizer is trained with ``tokenizers`` on text generated
here from a fixed seed, the model is ``LlamaForCausalLM`` (2 layers, hidden 128, 4 heads: head size
32, which vLLM's CPU attention serves; vocabulary 2048; about 1 M parameters) with weights drawn
from a fixed torch seed, saved as safetensors, and the tokenizer carries a chat template so
``/v1/chat/completions`` works. Its answers are gibberish; the server serving it is real vLLM.

Deterministic: one thread for the tokenizer trainer (its merges do not depend on scheduling), fixed
seeds for the corpus and the weights; ``launchers/vllm-up.sh`` caches the result by this file's
digest. ``--check`` builds twice into temporary directories and compares every file's digest.

``--into`` never deletes or changes a model in place (:func:`install`): a vLLM of another checkout
may be serving from any ``tiny-llama-*`` directory, so a model is built beside the others and
renamed into place whole, and an older builder's model stays where it is.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", RAYON_NUM_THREADS="1")

SEED = 20261205
MARKER = ".gymslurm-complete"  # holds the builder's digest: the model is whole
SPECIAL = ["<unk>", "<s>", "</s>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|' + message['role'] + '|>\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}{{ '<|end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)
WORDS = (  # noqa: SIM905 (a sentence reads better than 74 quoted words)
    "the a of to in and or is are was be it this that with for on at by from as not no yes answer "
    "question solve number sum product equals plus minus times model server request response token "
    "batch queue job shard resume rollout reward policy agent result value error retry metric one two "
    "three four five six seven eight nine ten zero math code test pass fail grade score prompt chat"
).split()


def corpus(lines: int) -> list[str]:
    """Sentences of the words above and some numbers, from the fixed seed."""
    rng = random.Random(SEED)
    out = []
    for _ in range(lines):
        words = [rng.choice(WORDS) for _ in range(rng.randint(5, 25))]
        if rng.random() < 0.3:
            words.append(str(rng.randint(0, 99999)))
        out.append(" ".join(words) + rng.choice([".", "?", "!", ""]))
    return out


def build(out: Path) -> None:
    """Write the tokenizer and the model into ``out``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=2048,
        special_tokens=SPECIAL,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus(20000), trainer=trainer)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="<|end|>",
        pad_token="<pad>",
        additional_special_tokens=SPECIAL[4:],
        model_max_length=2048,
    )
    hf_tok.chat_template = CHAT_TEMPLATE
    hf_tok.save_pretrained(out)
    config_path = out / "tokenizer_config.json"  # some versions write chat_template.jinja only
    config = json.loads(config_path.read_text())
    config["chat_template"] = CHAT_TEMPLATE
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    ids = {
        "bos_token_id": hf_tok.bos_token_id,
        "eos_token_id": hf_tok.eos_token_id,
        "pad_token_id": hf_tok.pad_token_id,
    }
    model_config = LlamaConfig(
        vocab_size=len(hf_tok),
        hidden_size=128,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
        torch_dtype="float32",
        **ids,
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(model_config)
    for key, value in ids.items():
        setattr(model.generation_config, key, value)
    model.save_pretrained(out, safe_serialization=True)


def digests(folder: Path) -> dict[str, str]:
    """Every file's sha256 under ``folder``, by relative path."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def check() -> int:
    """Build twice and compare: 0 when every file is the same, else 1 (and which differ)."""
    with tempfile.TemporaryDirectory() as tmp:
        first, second = Path(tmp, "a"), Path(tmp, "b")
        build(first)
        build(second)
        a, b = digests(first), digests(second)
    differ = sorted(name for name in a.keys() | b.keys() if a.get(name) != b.get(name))
    print(json.dumps({"files": len(a), "differ": differ, "digests": a}, indent=1))
    return 1 if differ else 0


def builder_digest() -> str:
    """This file's sha256: the same builder builds the same files, so it names the model."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


def readable_by_all(folder: Path) -> None:
    """Let every user read the model: a Slurm job runs as its submitter, and both mkdtemp (0700) and
    safetensors (model.safetensors 0600) write for their owner only."""
    folder.chmod(0o755)
    for path in folder.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)


def install(root: Path, digest: str, build: Callable[[Path], None] = build) -> Path:
    """The model ``root/tiny-llama-DIGEST[:12]``, built with ``build`` unless it is already whole.

    Built into a fresh ``*.partial-*`` directory beside it, marked whole (``MARKER`` holding
    ``digest``), then renamed into place in one step: a reader sees no model or the whole one. No
    other directory is deleted: another builder's model may be serving a running vLLM. A directory
    of this name that is not marked whole (damaged by hand) is renamed aside (``*.stale-*``), never
    deleted. Partial builds left by an interrupted run are removed: the caller holds
    launchers/vllm-up.sh's lock, so no build is under way but this one.
    """
    final = root / f"tiny-llama-{digest[:12]}"
    marker = final / MARKER
    if marker.is_file() and marker.read_text().strip() == digest:
        return final
    for partial in root.glob("tiny-llama-*.partial-*"):
        shutil.rmtree(partial, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{final.name}.partial-", dir=root))
    print(f"vllm-up: building the tiny model into {final}", file=sys.stderr)
    try:
        build(tmp)
        (tmp / MARKER).write_text(digest + "\n")
        readable_by_all(tmp)
        if final.exists():
            final.rename(root / f"{final.name}.stale-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
        tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def main() -> int:
    if sys.argv[1:] == ["--check"]:
        return check()
    if len(sys.argv) == 3 and sys.argv[1] == "--into":
        print(install(Path(sys.argv[2]), builder_digest()))
        return 0
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(sys.argv[1])
    build(out)
    print(json.dumps({"out": str(out), "files": digests(out)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
