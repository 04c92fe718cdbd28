"""Ports of Gemma 2 and Qwen 3 written with the project's LLaMA-style pieces
(variants/llama.py), registered in the ``llama_model`` family for ``python -m harness
parity``: load with ``--variants examples/checkpoint_ports.py``.

Both hold parameters beyond a plain LLaMA's, which their checkpoints hold trained (the
family's extension groups, ``ModelConfig.extensions``):

- ``gemma2_port``: Gemma 2 (HF's ``Gemma2ForCausalLM``): token embeddings times sqrt(D) (the
  factor rounded to the activations' dtype, as Gemma's normalizer is), RMSNorms with the
  gain 1 + w in float32, *sandwich* norms (the ``sandwich_norms`` group: a norm on each
  sublayer's output before its residual add), attention logits soft-capped at 50, a GeGLU
  feed-forward (tanh gelu), the final logits soft-capped at 30, the head tied to the
  embedding. Its attention scale is 1/sqrt(d_k): a checkpoint whose
  ``query_pre_attn_scalar`` is not d_k is another model. Gemma 2's sliding window is not
  here: it is the same function on sequences no longer than the window.
- ``qwen3_port``: Qwen 3 (HF's ``Qwen3ForCausalLM``): ``llama_model`` with an RMSNorm over
  each head's q and k before RoPE (the ``qk_norm`` group), an untied head. Its QK-norm gains
  are canonical parameters wherever ``qk_norm`` is declared, so ``check`` holds it to the
  family's oracle as well.

``gemma2_port`` is skipped by ``check`` (the oracle has no sandwich norms; ``supports`` says
so). ``parity`` on a Gemma 2 or Qwen 3 checkpoint compares each with the checkpoint's own
class::

    python -m harness parity CHECKPOINT --port gemma2_port --variants examples/checkpoint_ports.py
"""

from checkpoint_models import GEMMA2, Gemma2Model, Qwen3Block, gemma2_map, needs, qwen3_map

from harness import register, register_decoding
from variants.llama import BLOCK, CACHE, LlamaModel, call_model, llama_prepare, llama_step

register(
    id="gemma2_port", family="llama_model", source="transformers.Gemma2ForCausalLM",
    summary="Gemma 2: sqrt(D) embedding scale, 1 + w RMSNorms, sandwich norms, softcaps 50 and 30, GeGLU, tied",
    build=lambda cfg: Gemma2Model(cfg), call=call_model, param_map=gemma2_map(), traits=GEMMA2,
    supports=needs("sandwich_norms", "Gemma 2"),
)
register(
    id="qwen3_port", family="llama_model", source="transformers.Qwen3ForCausalLM",
    summary="Qwen 3: llama_model with an RMSNorm of each head's q and k before RoPE, untied head",
    build=lambda cfg: LlamaModel(cfg, block=Qwen3Block), call=call_model, param_map=qwen3_map,
    traits={**BLOCK, "qk_norm": "rms per head", "tied_output": False},
)
for vid in ("gemma2_port", "qwen3_port"):
    register_decoding("llama_model", vid, prepare=llama_prepare, step=llama_step, cache=CACHE,
                      padding=("right", "left"))

