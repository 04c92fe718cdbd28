"""The write-ups as variants. Importing this package registers every one of them.

One file per write-up (seed files in ../shared/seeds/), one for the fused QKV design,
one for the per-head design, one for PyTorch's own modules, one for attention kernels (functions over projected heads),
one for kernels that run only in half precision (and the Triton one),
one for LLaMA-style pieces, one for GPT-NeoX's attention, one for gpt-oss's attention sinks,
two for ALiBi (BLOOM's attention, an MPT-style kernel).
"""

from . import (  # noqa: F401  (imported for their registrations)
    alibi_kernels,
    annotated_notebook,
    annotated_preln,
    bloom_alibi,
    decoder_only,
    fused_qkv,
    gpt_neox,
    gpt_oss,
    half_kernels,
    kernels,
    llama,
    per_head,
    postnorm_blog,
    targets,
    tensor2tensor_prenorm,
    torch_reference,
    triton_attention,
)

# Shown by ``python -m harness list``: where the ``source`` of these variants comes from.
SOURCES = (
    "NNN_<hash>.txt names one of the five Chinese write-ups of the Transformer this project "
    "compares; they are not shipped with the repository (on the project's machines they sit in "
    "../shared/seeds/ beside the checkout); the docstring of each variants/*.py file "
    "summarises its write-up and every place the variant deviates from it"
)
