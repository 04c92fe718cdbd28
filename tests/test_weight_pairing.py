"""How ``harness.judge`` pairs the reference's weights with a candidate whose parameter names
differ and no map is given (``harness.check.reference_weights``): by shape where each shape
is held once on each side (said in the verdict: "paired by shape: g<-0.weight, ..."), and
one line naming the unpaired tensors where a shape is ambiguous or has no partner."""

from __future__ import annotations

import torch
from torch import nn

from harness import judge
from harness.check.reference_weights import by_shape


class Reordered(nn.Module):
    """RMSNorm + linear with its layers declared in another order under other names."""

    def __init__(self, d: int = 64, out: int = 32, eps: float = 1e-6, first: str = "b"):
        super().__init__()
        made = {"b": lambda: nn.Parameter(torch.zeros(out)), "w": lambda: nn.Parameter(torch.randn(out, d)),
                "g": lambda: nn.Parameter(torch.ones(d))}
        for name in dict.fromkeys([first, "b", "w", "g"]):
            setattr(self, name, made[name]())
        self.eps = eps

    def rms(self, x: torch.Tensor) -> torch.Tensor:
        return torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * self.rms(x) * self.g) @ self.w.T + self.b


class ReorderedEpsOutside(Reordered):
    """A planted mistake behind the same pairing: eps after the square root."""

    def rms(self, x: torch.Tensor) -> torch.Tensor:
        return 1 / (x.pow(2).mean(-1, keepdim=True).sqrt() + self.eps)


def _judged(candidate: nn.Module, d: int = 64, out: int = 32):
    reference = nn.Sequential(nn.RMSNorm(d, eps=1e-6), nn.Linear(d, out))
    return judge(reference, candidate, lambda batch=4, tokens=10: [torch.randn(batch, tokens, d)])


def test_layers_declared_in_another_order_with_other_names_pair_by_shape_and_are_equivalent():
    torch.manual_seed(0)
    j = _judged(Reordered())
    assert j.ok, j.failure
    assert j.weights == "paired by shape: g<-0.weight, w<-1.weight, b<-1.bias"
    assert "weights paired by shape: g<-0.weight, w<-1.weight, b<-1.bias" in j.summary


def test_a_wrong_candidate_paired_by_shape_is_still_caught_and_says_how_it_was_paired():
    torch.manual_seed(0)
    j = _judged(ReorderedEpsOutside())
    assert not j.ok and j.failure.startswith("wrong at scale x1e-3 (float64): output"), j.failure
    assert j.summary.endswith("(weights paired by shape: g<-0.weight, w<-1.weight, b<-1.bias)")


def test_an_ambiguous_shape_is_one_line_naming_the_unpaired_tensors():
    torch.manual_seed(0)
    j = _judged(Reordered(32, 32, first="w"), d=32, out=32)  # gain and bias both (32,), not in creation order
    assert not j.ok and "\n" not in j.failure and j.failure.startswith("weights: "), j.failure
    assert j.failure == ("weights: the parameters pair neither by name nor by shape: shape (32,) is held by the "
                         "reference's '0.weight', '1.bias' and the candidate's 'b', 'g' (ambiguous); "
                         "give param_map={'0.weight': Param(...)} naming where each lives")
    assert "give param_map=" in j.failure and j.regimes == ("given",)


def test_a_tensor_with_no_partner_of_its_shape_is_named():
    class Other(Reordered):  # the gain of another width: no partner of its shape on either side
        def __init__(self):
            super().__init__(first="w")
            self.g = nn.Parameter(torch.ones(3))

    class Extra(Reordered):
        def __init__(self):
            super().__init__(first="w")
            self.scale = nn.Parameter(torch.ones(3))

    torch.manual_seed(0)
    j = _judged(Other())
    assert not j.ok and "\n" not in j.failure, j.failure
    assert j.failure.startswith("weights: the parameters pair neither"), j.failure
    assert ("the reference's '0.weight' (64,) has no partner of that shape; the candidate's 'g' (3,) has no partner "
            "of that shape") in j.failure
    j = _judged(Extra())  # one more on the candidate's side: the names' line, with every unmatched one
    assert not j.ok and "\n" not in j.failure and j.regimes == ("given",)
    assert "candidate's unmatched: 'w' (32, 64), 'b' (32,), 'g' (64,), 'scale' (3,)" in j.failure, j.failure


def test_names_that_match_pair_by_name_and_only_the_rest_by_shape():
    ref = {"a": torch.zeros(4, 4), "b": torch.zeros(4, 4), "norm": torch.zeros(4)}
    cand = {"gain": torch.zeros(4), "b": torch.zeros(4, 4), "a": torch.zeros(4, 4)}
    assert by_shape(ref, cand) == ({"a": "a", "b": "b", "norm": "gain"}, "")
    paired, why = by_shape(ref, {"x": torch.zeros(4, 4), "y": torch.zeros(4, 4), "gain": torch.zeros(4)})
    assert paired == {} and "(4, 4) is held by the reference's 'a', 'b' and the candidate's 'x', 'y'" in why
    paired, why = by_shape({"w": torch.zeros(3, 8)}, {"w": torch.zeros(8, 3)})
    assert paired == {} and "the reference's 'w' (3, 8) has no partner" in why and "candidate's 'w' (8, 3)" in why


def test_a_kernelbench_candidate_with_renamed_reordered_layers_is_correct_paired_by_shape():
    from pathlib import Path

    from harness.check.kernelbench import judge_candidate, load_problem

    corpus = Path(__file__).resolve().parent / "kernelbench"
    row, j = judge_candidate(load_problem(corpus / "min_gpt.py"), corpus / "min_gpt" / "ok_renamed_reordered.py")
    assert row.correct, row.failing_check
    assert row.weights == ("paired by shape: qkv.weight<-c_attn.weight, qkv.bias<-c_attn.bias, "
                           "out.weight<-c_proj.weight, out.bias<-c_proj.bias")
