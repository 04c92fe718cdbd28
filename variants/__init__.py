"""The write-ups as variants. Importing this package registers every one of them.

One file per write-up (seed files in ../shared/seeds/), one for the fused QKV design,
one for the per-head design, one for PyTorch's own modules.
"""

from . import (  # noqa: F401  (imported for their registrations)
    annotated_notebook,
    annotated_preln,
    decoder_only,
    fused_qkv,
    per_head,
    postnorm_blog,
    targets,
    tensor2tensor_prenorm,
    torch_reference,
)
