"""Save a small trained checkpoint of a real Hugging Face class, to try ``python -m harness
parity`` on (transformers, the ``hf`` extra)::

    python examples/tiny_checkpoint.py llama /tmp/tiny-llama

``CLASS`` is one of llama, mistral, gemma2, qwen3, gpt2. The model is built from a small
config of its class (2 layers, D = 32, 4 heads, 2 K/V heads where the class has GQA,
vocabulary 128), trained a few Adam steps on a seeded task (each next token a fixed
function of the last: its distributions become peaked, as a trained model's are), its
norm gains then moved away from their init (seeded), and written with ``save_pretrained``
(``config.json``, ``model.safetensors``) into a new folder, with ``tokens.txt``: sequences
of the task, one per line, for ``--tokens``. The folder must not exist or be empty.
Same seed, same checkpoint.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

VOCAB, WIDTH, LAYERS, HEADS, KV_HEADS, FFN, POSITIONS = 128, 32, 2, 4, 2, 64, 32


def config(kind: str):
    import transformers

    common = dict(vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=FFN, num_hidden_layers=LAYERS,
                  num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=POSITIONS,
                  head_dim=WIDTH // HEADS)
    if kind == "llama":
        return transformers.LlamaConfig(**common, tie_word_embeddings=False)
    if kind == "mistral":  # its sliding window of 4 keys is mistral_model's (3, 0)
        return transformers.MistralConfig(**common, sliding_window=4)
    if kind == "gemma2":  # the attention scale 1/sqrt(d_k); the window longer than any sequence here
        return transformers.Gemma2Config(**common, query_pre_attn_scalar=WIDTH // HEADS, sliding_window=POSITIONS)
    if kind == "qwen3":
        return transformers.Qwen3Config(**common, tie_word_embeddings=False)
    if kind == "gpt2":  # exact GELU, as nanoGPT's MLP
        return transformers.GPT2Config(vocab_size=VOCAB, n_positions=POSITIONS, n_embd=WIDTH, n_layer=LAYERS,
                                       n_head=HEADS, activation_function="gelu", bos_token_id=1, eos_token_id=1)
    raise SystemExit(f"error: unknown class '{kind}'; one of {', '.join(CLASSES)}")


CLASSES = ("llama", "mistral", "gemma2", "qwen3", "gpt2")


def task(gen: torch.Generator, batch: int, length: int) -> torch.Tensor:
    """Sequences whose next token is (5 x + 3) mod V after a random first token."""
    x = torch.randint(0, VOCAB, (batch, 1), generator=gen)
    rows = [x]
    for _ in range(length - 1):
        rows.append((rows[-1] * 5 + 3) % VOCAB)
    return torch.cat(rows, dim=1)


def build(kind: str, steps: int = 30, seed: int = 0):
    """The trained model (eval mode, float32) and the task's token sequences."""
    import transformers

    torch.manual_seed(seed)
    cfg = config(kind)
    cfg._attn_implementation = "eager"
    model = getattr(transformers, cfg.architectures[0] if cfg.architectures else "")(cfg) \
        if cfg.architectures else transformers.AutoModelForCausalLM.from_config(cfg)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=3e-2)
    model.train()
    for _ in range(steps):
        batch = task(gen, 8, 16)
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and ("norm" in name or "ln_" in name) and name.endswith("weight"):
                p.add_(0.3 * torch.randn(p.shape, generator=gen))
    return model.eval(), task(gen, 4, 16)


def save(kind: str, folder: str | Path, steps: int = 30, seed: int = 0) -> Path:
    folder = Path(folder)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise SystemExit(f"error: '{folder}' exists and is not an empty folder; give a new one")
    model, tokens = build(kind, steps, seed)
    model.save_pretrained(folder)
    (folder / "tokens.txt").write_text("".join(" ".join(map(str, row)) + "\n" for row in tokens.tolist()))
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cls", choices=CLASSES, metavar="CLASS", help=f"one of {', '.join(CLASSES)}")
    parser.add_argument("folder", help="a new folder to write the checkpoint into")
    parser.add_argument("--steps", type=int, default=30, help="Adam steps (default 30)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    folder = save(args.cls, args.folder, args.steps, args.seed)
    print(f"wrote {folder}/config.json, model.safetensors, tokens.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
