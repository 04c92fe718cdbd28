"""Seed 004_4e525cb8a3aa6a12.txt: the Harvard annotated Transformer, pre-LN, with training.

Faithful to the write-up's code, in the project's names:
- a **custom ``LayerNorm``**: ``gamma * (x - mean) / (std + eps) + beta`` with the
  **unbiased** std (``Tensor.std``) and **eps added to the std** (eps 1e-6), not what
  ``nn.LayerNorm`` computes (biased variance, eps inside the square root);
- ``SubLayer``: **pre-norm** ``x + dropout(sublayer(norm(x)))``;
- ``scaled_dot_product_attention``: scores / sqrt(d_k), ``mask == 0`` filled with -1e9;
  ``MultiHeadAttention(h, d_model)``: four ``Linear(D, D)`` in a ModuleList, mask
  unsqueezed over heads;
- ``PositionWiseFeedForward``: dropout between the two Linear;
- ``subsequent_mask``: ``triu(diagonal=1) == 0`` (True = keep); ``Batch.make_std_mask``:
  key padding AND subsequent mask;
- ``Embeddings`` x sqrt(D); ``PositionalEncoding`` interleaved, dropout after.
The whole model (``make_model``: stacks with their final norm, ``Transformer``,
``Generator``) and the training pieces (Noam rate, ``LabelSmoothing``, ``Batch``, the copy
task, ``greedy_decode``) are at the end of this file, with their own registrations.
"""

from __future__ import annotations

import copy
import math

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from harness import (
    SPREADS,
    STEP_COUNTS,
    Param,
    dropout_sites,
    get_variant,
    layers,
    linear_entries,
    nest,
    norm_entries,
    optimizer_rates,
    register,
    register_decoding,
)

SEED = "004_4e525cb8a3aa6a12.txt"


class LayerNorm(nn.Module):
    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)  # unbiased (N - 1)
        return self.gamma * (x - mean) / (std + self.eps) + self.beta


class SubLayer(nn.Module):
    """Pre-LN: normalise, run the sublayer, drop out, add the residual."""

    def __init__(self, d_model: int, dropout_prob: float = 0.1):
        super().__init__()
        self.norm = LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout_prob)

    def forward(self, x, main_logic):
        return x + self.dropout(main_logic(self.norm(x)))


def scaled_dot_product_attention(query, key, value, mask=None, dropout=None):
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)  # (B, H, T, S)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    scores = scores.softmax(dim=-1)
    if dropout is not None:
        scores = dropout(scores)
    return torch.matmul(scores, value), scores


class MultiHeadAttention(nn.Module):
    def __init__(self, h: int, d_model: int, dropout_prob: float = 0.1):
        super().__init__()
        self.d_k = d_model // h
        self.h = h
        self.linears = nn.ModuleList([nn.Linear(d_model, d_model) for _ in range(4)])
        self.dropout = nn.Dropout(dropout_prob)

    def forward(self, query, key, value, mask=None):
        if mask is not None:
            mask = mask.unsqueeze(1)
        n_batches = query.size(0)
        query, key, value = [
            linear(x).view(n_batches, -1, self.h, self.d_k).transpose(1, 2)  # (B, H, L, d_k)
            for linear, x in zip(self.linears, (query, key, value))
        ]
        out, _ = scaled_dot_product_attention(query, key, value, mask, self.dropout)
        out = out.transpose(1, 2).contiguous().view(n_batches, -1, self.h * self.d_k)
        out = self.linears[-1](out)
        del query, key, value
        return out


class PositionWiseFeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout_prob: float = 0.1):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout_prob)

    def forward(self, x):
        return self.linear2(self.dropout(nn.functional.relu(self.linear1(x))))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, attention, feed_forward, dropout_prob):
        super().__init__()
        self.d_model = d_model
        self.attention = attention
        self.feed_forward = feed_forward
        self.sub_layers = nn.ModuleList([SubLayer(d_model, dropout_prob) for _ in range(2)])

    def forward(self, x, mask):
        x = self.sub_layers[0](x, lambda x: self.attention(x, x, x, mask))
        return self.sub_layers[1](x, self.feed_forward)


class DecoderLayer(nn.Module):
    def __init__(self, d_model, self_attention, src_attention, feed_forward, dropout_prob):
        super().__init__()
        self.d_model = d_model
        self.self_attention = self_attention
        self.src_attention = src_attention
        self.feed_forward = feed_forward
        self.sub_layers = nn.ModuleList([SubLayer(d_model, dropout_prob) for _ in range(3)])

    def forward(self, x, memory, src_mask, tgt_mask):
        x = self.sub_layers[0](x, lambda x: self.self_attention(x, x, x, tgt_mask))
        x = self.sub_layers[1](x, lambda x: self.src_attention(x, memory, memory, src_mask))
        return self.sub_layers[2](x, self.feed_forward)


def subsequent_mask(size: int) -> torch.Tensor:
    """(1, T, T) bool, True = keep."""
    upper = torch.triu(torch.ones((1, size, size)), diagonal=1).type(torch.uint8)
    return upper == 0


def make_std_mask(tgt, pad_idx):
    """``Batch.make_std_mask``: (B, T, T) = key is not pad AND subsequent mask."""
    tgt_mask = (tgt != pad_idx).unsqueeze(-2)
    return tgt_mask & subsequent_mask(tgt.size(-1)).type_as(tgt_mask)


class Embeddings(nn.Module):
    def __init__(self, d_model: int, vocab_size: int):
        super().__init__()
        self.lookup_table = nn.Embedding(vocab_size, d_model)
        self.d_model = d_model

    def forward(self, x):
        return self.lookup_table(x) * math.sqrt(self.d_model)


class PositionalEncoding(nn.Module):
    def __init__(self, d_model: int, dropout_prob: float, max_len: int = 5000):
        super().__init__()
        self.dropout = nn.Dropout(dropout_prob)
        encodings = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model))
        encodings[:, 0::2] = torch.sin(position * div_term)
        encodings[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("positional_encodings", encodings.unsqueeze(0))

    def forward(self, x):
        x = x + self.positional_encodings[:, : x.size(1)]
        return self.dropout(x)


# -- registry entries ------------------------------------------------------------------------

ATTN_MAP = linear_entries({"q": "linears.0", "k": "linears.1", "v": "linears.2", "o": "linears.3"})
FFN_MAP = linear_entries({"w1": "linear1", "w2": "linear2"})
NORM_FORMULA = "unbiased std, eps added to std"
LAYER_TRAITS = {
    "norm_placement": "pre", "norm_formula": NORM_FORMULA, "eps": 1e-6, "activation": "relu",
    "mask_convention": "True = keep", "fill": -1e9, "bias": True,
}
ENCODER_DROPOUT = ("self-attention weights", "attention sublayer output", "FFN hidden", "FFN sublayer output")
DECODER_DROPOUT = ("self-attention weights", "self-attention sublayer output", "cross-attention weights",
                   "cross-attention sublayer output", "FFN hidden", "FFN sublayer output")


def _sublayer_norms(count: int) -> dict:
    return {
        k: v
        for i in range(count)
        for k, v in norm_entries(f"norm{i + 1}", f"sub_layers.{i}.norm", "gamma", "beta").items()
    }


register(
    id="annotated_preln", family="attention", source=SEED, summary="4 Linear in a ModuleList",
    build=lambda cfg: MultiHeadAttention(cfg.heads, cfg.d_model, cfg.dropout),
    call=lambda m, i: m(i["query"], i["key"], i["value"], i["mask"]),
    param_map=ATTN_MAP,
    traits={
        "sublayer": "attention", "qkv_layout": "ModuleList of 4 Linear", "bias": True,
        "scale": "scores / sqrt(d_k)", "mask_convention": "True = keep", "fill": -1e9,
        "fully_masked_row": "mean of V", "dropout_sites": ("attention weights",),
    },
)
register(
    id="annotated_preln", family="norm", source=SEED, summary="custom LayerNorm",
    build=lambda cfg: LayerNorm(cfg.d_model), call=lambda m, i: m(i["x"]),
    param_map={"weight": Param("gamma"), "bias": Param("beta")},
    traits={"norm_formula": NORM_FORMULA, "eps": 1e-6, "std": "unbiased (N-1), eps added to std"},
)
register(
    id="annotated_preln", family="ffn", source=SEED, summary="dropout between the Linear",
    build=lambda cfg: PositionWiseFeedForward(cfg.d_model, cfg.d_ff, cfg.dropout),
    call=lambda m, i: m(i["x"]), param_map=FFN_MAP,
    traits={"sublayer": "ffn", "activation": "relu", "dropout_sites": ("hidden",)},
)
register(
    id="annotated_preln", family="encoder_layer", source=SEED, summary="pre-LN, custom LayerNorm",
    build=lambda cfg: EncoderLayer(
        cfg.d_model, MultiHeadAttention(cfg.heads, cfg.d_model, cfg.dropout),
        PositionWiseFeedForward(cfg.d_model, cfg.d_ff, cfg.dropout), cfg.dropout,
    ),
    call=lambda m, i: m(i["x"], i["pad"][:, None, :]),  # Batch.src_mask: (B, 1, S) True = keep
    param_map={**nest(ATTN_MAP, "self_attn.", "attention."),
               **nest(FFN_MAP, "ffn.", "feed_forward."), **_sublayer_norms(2)},
    traits={**LAYER_TRAITS, "dropout_sites": ENCODER_DROPOUT},
)
register(
    id="annotated_preln", family="decoder_layer", source=SEED, summary="pre-LN, custom LayerNorm",
    build=lambda cfg: DecoderLayer(
        cfg.d_model, MultiHeadAttention(cfg.heads, cfg.d_model, cfg.dropout),
        MultiHeadAttention(cfg.heads, cfg.d_model, cfg.dropout),
        PositionWiseFeedForward(cfg.d_model, cfg.d_ff, cfg.dropout), cfg.dropout,
    ),
    call=lambda m, i: m(i["x"], i["memory"], i["src_pad"][:, None, :], i["tgt_mask"]),
    param_map={**nest(ATTN_MAP, "self_attn.", "self_attention."),
               **nest(ATTN_MAP, "cross_attn.", "src_attention."),
               **nest(FFN_MAP, "ffn.", "feed_forward."), **_sublayer_norms(3)},
    traits={**LAYER_TRAITS, "dropout_sites": DECODER_DROPOUT},
)
register(
    id="annotated_preln", family="positional_encoding", source=SEED,
    summary="interleaved, dropout after",
    build=lambda cfg: PositionalEncoding(cfg.d_model, cfg.dropout), call=lambda m, i: m(i["x"]),
    traits={"pe_layout": "interleaved sin/cos", "pe_frequencies": "10000^(-2i/D)",
            "dropout_sites": ("after the add",), "internal_dtype": "float32"},  # the table is built in float32
)
register(
    id="annotated_preln", family="embedding", source=SEED, summary="lookup x sqrt(D)",
    build=lambda cfg: Embeddings(cfg.d_model, cfg.vocab), call=lambda m, i: m(i["tokens"]),
    param_map={"weight": Param("lookup_table.weight")},
    traits={"embedding_scale": "sqrt(D)", "pad_rows": "kept"},
)
register(
    id="annotated_preln", family="masks", source=SEED, summary="subsequent_mask, make_std_mask",
    build=lambda cfg: None,
    call=lambda m, i: {
        "causal": lambda: subsequent_mask(i["tokens"].shape[1])[0].to(i["tokens"].device),  # as type_as moves it
        "pad": lambda: i["tokens"] != i["pad_idx"],  # Batch.src_mask, squeezed
        "target": lambda: make_std_mask(i["tokens"], i["pad_idx"]),
    }[i["case"]](),
    traits={"mask_convention": "True = keep", "causal_mask": "tril", "pad_mask": "tokens != pad",
            "target_mask": "causal & key not pad"},
)


# == The whole model and its training pieces =================================================
# ``make_model`` as the write-up builds it: Encoder/Decoder stacks of deep copies ending
# with the custom LayerNorm, separate source/target ``Embeddings`` (x sqrt(D)) each
# followed by a deep copy of the interleaved ``PositionalEncoding``, a ``Generator``
# (Linear + log_softmax), xavier init of every matrix. Training as written: the Noam
# ``learning_rate`` (step 0 counted as step 1, for LambdaLR), ``LabelSmoothing`` (KL
# divergence, smoothing spread over V - 2, the padding column and padding rows zeroed),
# ``Batch`` (target shifted by the caller: tgt = trg[:, :-1], tgt_y = trg[:, 1:]),
# ``SimpleLossCompute``, the copy task's ``data_gen`` and ``greedy_decode`` (one
# sentence at a time, the whole prefix re-decoded each step; no cache).
# Deviations: ``Batch``'s pad index defaults to 2 in the write-up while its copy task
# passes ``vocab['<pad>']`` = 0; here the caller always passes it.




class Transformer(nn.Module):
    def __init__(self, encoder, decoder, src_embed, tgt_embed, generator):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder
        self.src_embed = src_embed
        self.tgt_embed = tgt_embed
        self.generator = generator

    def forward(self, src, tgt, src_mask, tgt_mask):
        return self.do_decode(self.do_encode(src, src_mask), src_mask, tgt, tgt_mask)

    def do_encode(self, src, src_mask):
        return self.encoder(self.src_embed(src), src_mask)

    def do_decode(self, memory, src_mask, tgt, tgt_mask):
        return self.decoder(self.tgt_embed(tgt), memory, src_mask, tgt_mask)


class Generator(nn.Module):
    def __init__(self, d_model, vocab_size):
        super().__init__()
        self.linear = nn.Linear(d_model, vocab_size)

    def forward(self, x):
        return nn.functional.log_softmax(self.linear(x), dim=-1)


class Encoder(nn.Module):
    def __init__(self, layer, N):
        super().__init__()
        self.layers = nn.ModuleList([copy.deepcopy(layer) for _ in range(N)])
        self.norm = LayerNorm(layer.d_model)

    def forward(self, x, mask):
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)


class Decoder(nn.Module):
    def __init__(self, layer, N):
        super().__init__()
        self.layers = nn.ModuleList([copy.deepcopy(layer) for _ in range(N)])
        self.norm = LayerNorm(layer.d_model)

    def forward(self, x, memory, src_mask, tgt_mask):
        for layer in self.layers:
            x = layer(x, memory, src_mask, tgt_mask)
        return self.norm(x)


def make_model(src_vocab_size, tgt_vocab_size, N=6, d_model=512, d_ff=2048, h=8, dropout_prob=0.1,
               max_len=5000, attention=None, embeddings=Embeddings, positional_encoding=None):
    """The write-up's ``make_model``. ``attention``/``embeddings``/``positional_encoding``
    let another write-up's components (001's) be built into the same structure; left
    out, they are this write-up's own."""
    func_copy = copy.deepcopy
    attention = attention or MultiHeadAttention(h, d_model, dropout_prob)
    feed_forward = PositionWiseFeedForward(d_model, d_ff, dropout_prob)
    positional_encoding = positional_encoding or PositionalEncoding(d_model, dropout_prob, max_len)
    model = Transformer(
        encoder=Encoder(EncoderLayer(d_model, func_copy(attention), func_copy(feed_forward), dropout_prob), N),
        decoder=Decoder(DecoderLayer(d_model, func_copy(attention), func_copy(attention),
                                     func_copy(feed_forward), dropout_prob), N),
        src_embed=nn.Sequential(embeddings(d_model, src_vocab_size), func_copy(positional_encoding)),
        tgt_embed=nn.Sequential(embeddings(d_model, tgt_vocab_size), func_copy(positional_encoding)),
        generator=Generator(d_model, tgt_vocab_size),
    )
    for p in model.parameters():  # Glorot / fan_avg
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    return model


def learning_rate(step, model_size, factor, warmup):
    """Noam; step 0 is counted as step 1 (LambdaLR calls it with 0 first)."""
    if step == 0:
        step = 1
    return factor * (model_size ** (-0.5) * min(step ** (-0.5), step * warmup ** (-1.5)))


class LabelSmoothing(nn.Module):
    """KL divergence to a smoothed target: confidence 1 - s on the target, s / (V - 2)
    elsewhere, the padding column and the rows whose target is padding zeroed."""

    def __init__(self, size, padding_idx, smoothing=0.0):
        super().__init__()
        self.criterion = nn.KLDivLoss(reduction="sum")
        self.padding_idx = padding_idx
        self.confidence = 1.0 - smoothing
        self.smoothing = smoothing
        self.size = size
        self.true_dist = None

    def forward(self, x, target):
        assert x.size(1) == self.size
        true_dist = x.data.clone()
        true_dist.fill_(self.smoothing / (self.size - 2))
        true_dist.scatter_(1, target.data.unsqueeze(1), self.confidence)
        true_dist[:, self.padding_idx] = 0
        mask = torch.nonzero(target.data == self.padding_idx)
        if mask.dim() > 0:
            true_dist.index_fill_(0, mask.squeeze(), 0.0)
        self.true_dist = true_dist
        return self.criterion(x, true_dist)


class Batch:
    """Source/target of one batch with masks; the target is shifted here, by the caller."""

    def __init__(self, src, tgt=None, pad_idx=2):
        self.src = src
        self.src_mask = (src != pad_idx).unsqueeze(-2)     # (B, 1, S) True = keep
        if tgt is not None:
            self.tgt = tgt[:, :-1]
            self.tgt_mask = make_std_mask(self.tgt, pad_idx)  # (B, T, T) True = keep
            self.tgt_y = tgt[:, 1:]
            self.ntokens = (self.tgt_y != pad_idx).data.sum()


class SimpleLossCompute:
    def __init__(self, generator, criterion):
        self.generator = generator
        self.criterion = criterion

    def __call__(self, x, y, norm):
        x = self.generator(x)
        loss = self.criterion(x.contiguous().view(-1, x.size(-1)), y.contiguous().view(-1)) / norm
        return loss.data * norm, loss


def data_gen(vocab, batch_size, n_batches, max_len=8, generator=None):
    """The copy task: <start>, random letters, <end>; source = target. ``generator``
    (a torch.Generator) is this file's addition, for seeded runs."""
    for _ in range(n_batches):
        start_symbol_idx = vocab["<start>"]
        end_symbol_idx = vocab["<end>"]
        data = torch.randint(start_symbol_idx + 1, end_symbol_idx, size=(batch_size, max_len), generator=generator)
        data[:, 0] = start_symbol_idx
        data[:, -1] = end_symbol_idx
        src = data.requires_grad_(False).clone().detach()
        tgt = data.requires_grad_(False).clone().detach()
        yield Batch(src, tgt, pad_idx=vocab["<pad>"])


def greedy_decode(model, src, src_mask, max_len, start_symbol):
    memory = model.do_encode(src, src_mask)
    ys = torch.zeros(1, 1).fill_(start_symbol).type_as(src.data)
    for _ in range(max_len - 1):
        out = model.do_decode(memory, src_mask, ys, subsequent_mask(ys.size(1)).type_as(src.data))
        prob = model.generator(out[:, -1])
        _, next_word = torch.max(prob, dim=1)
        next_word = next_word.data[0]
        ys = torch.cat([ys, torch.zeros(1, 1).type_as(src.data).fill_(next_word)], dim=1)
    return ys


# -- registry entries: whole models ----------------------------------------------------------

def annotated_model_map(cfg, embedding_table="lookup_table.weight"):
    """``make_model``'s parameters; the layers' maps are the layer families' own."""
    enc = get_variant("encoder_layer", "annotated_preln").map_for(cfg)
    dec = get_variant("decoder_layer", "annotated_preln").map_for(cfg)
    out = {"src_embed.weight": Param(f"src_embed.0.{embedding_table}"),
           "tgt_embed.weight": Param(f"tgt_embed.0.{embedding_table}"),
           **linear_entries({"generator": "generator.linear"})}
    for i in range(layers(cfg)):
        out.update(nest(enc, f"encoder.{i}.", f"encoder.layers.{i}."))
        out.update(nest(dec, f"decoder.{i}.", f"decoder.layers.{i}."))
    out.update(norm_entries("encoder.norm", "encoder.norm", "gamma", "beta"))
    out.update(norm_entries("decoder.norm", "decoder.norm", "gamma", "beta"))
    return out


def annotated_model_call(model, inputs):
    """The write-up's ``Batch`` masks: source pad keys, target pad keys AND subsequent."""
    src_mask = (inputs["src"] != inputs["pad_idx"]).unsqueeze(-2)
    return model.generator(model(inputs["src"], inputs["tgt"], src_mask,
                                 make_std_mask(inputs["tgt"], inputs["pad_idx"])))


def _annotated_prepare(model, inputs, cached):
    src_mask = (inputs["src"] != inputs["pad_idx"]).unsqueeze(-2)
    return {"memory": model.do_encode(inputs["src"], src_mask), "src_mask": src_mask}


def _annotated_step(model, state, ys):
    out = model.do_decode(state["memory"], state["src_mask"], ys, subsequent_mask(ys.size(1)))
    return model.generator(out[:, -1])


def annotated_greedy(model, inputs, steps):
    """``greedy_decode`` per sentence (it decodes one at a time); the start symbol dropped."""
    rows = []
    for b in range(inputs["src"].size(0)):
        src = inputs["src"][b:b + 1]
        rows.append(greedy_decode(model, src, (src != inputs["pad_idx"]).unsqueeze(-2), steps + 1,
                                  inputs["start"])[:, 1:])
    return torch.cat(rows)


MODEL_TRAITS = {
    **LAYER_TRAITS, "final_norm": True, "embedding_scale": "sqrt(D)", "pad_rows": "kept",
    "shared_embeddings": False, "tied_output": False, "pe_layout": "interleaved sin/cos",
    "pe_frequencies": "10000^(-2i/D)", "target_shift": "by the caller",
    "internal_dtype": "float32",  # the position table is built in float32
    "dropout_sites": dropout_sites(("source positions", "target positions"),
                                   encoder=ENCODER_DROPOUT, decoder=DECODER_DROPOUT),
    "note": "Generator = Linear + log_softmax; target pad keys masked (Batch); no cache",
}

register(
    id="annotated_preln", family="encoder_decoder", source=SEED,
    summary="make_model: pre-LN, custom LayerNorm, Generator",
    build=lambda cfg: make_model(cfg.vocab, cfg.vocab, layers(cfg), cfg.d_model, cfg.d_ff, cfg.heads, cfg.dropout),
    call=annotated_model_call, param_map=annotated_model_map, traits=MODEL_TRAITS,
)
register_decoding("encoder_decoder", "annotated_preln", prepare=_annotated_prepare, step=_annotated_step,
                  greedy=annotated_greedy)


# -- registry entries: the loss and the schedule ---------------------------------------------




def _label_smoothing_loss(inputs):
    """``SimpleLossCompute``: generator log-probabilities into ``LabelSmoothing``, / ntokens."""
    target = inputs["target"]
    criterion = LabelSmoothing(inputs["logits"].size(-1), inputs["pad_idx"], inputs["smoothing"])
    ntokens = (target != inputs["pad_idx"]).sum()
    return criterion(nn.functional.log_softmax(inputs["logits"], dim=-1), target) / ntokens


register(
    id="annotated_preln", family="loss", source=SEED, summary="LabelSmoothing: KL to a smoothed target, / ntokens",
    build=lambda cfg: None, call=lambda m, i: _label_smoothing_loss(i),
    traits={"smoothing_spread": SPREADS[0], "loss_form": "KL divergence", "note": "KLDivLoss(sum) / ntokens",
            "data_dependent": "the write-up's LabelSmoothing finds the pad rows with torch.nonzero"},
)
register(
    id="annotated_preln", family="lr_schedule", source=SEED, summary="learning_rate through LambdaLR",
    build=lambda cfg: None,
    call=lambda m, i: optimizer_rates(lambda opt: LambdaLR(opt, lambda step: learning_rate(
        step, i["d_model"], i["factor"], i["warmup"])), i["steps"]),
    traits={"step_count": STEP_COUNTS[0], "note": "LambdaLR(learning_rate): updates 1 and 2 share a rate"},
)
