"""Lesson 08's tasks on the position schemes (exercises/08_length_extrapolation.ipynb): diagnose a
colleague's position-scheme switch from what it returned, predict which untrained TinyDecoder notices a
swap of two tokens, and review colleagues' reports of that measurement (find each one's flaw, measure it
right). The lab's own measurement, the dip diagnosis and the concept questions are in ``copy_accuracy.py``.

Hidden cases (any seed but 0): three right switches (any valid convention) and five buggy ones, fresh
shapes; one sound report and four drawn flaws on fresh models, tokens and swaps. The prediction cannot
vary. The answers may use the library, but not the grader's references."""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import Tensor

from .. import alibi as _alibi
from ..lab.model import TinyDecoder
from .judges import (
    ONE_THREAD,
    Judged,
    call,
    diagnoses,
    draw,
    feedback,
    interleaved_to_concat,
    pe_table,
    pick,
    randn,
    seeded,
    type_text,
)
from .registry import Task, is_marker, register

# --------------------------------------------------------------------------------------
# 08_diagnose_switch: a colleague's scheme switch gave (x_in, bias); name its bug, or "ok"
# --------------------------------------------------------------------------------------
# A case: (scheme, x (B, T, D), table (max_len, D), num_heads, x_in, bias); truth read off it (_switch_cause).

SWITCH_CAUSES = ("ok", "table_missing", "table_extra", "rows_shifted", "rows_past_table", "bias_sign",
                 "bias_missing", "bias_extra")
_SWITCH_DRAWS = {  # cause -> the (scheme, how it is written) the generator may draw for it
    "ok": (("sinusoidal", "interleaved"), ("sinusoidal", "concatenated"), ("learned", ""),
           ("learned", "offset"), ("alibi", "paper"), ("alibi", "bloom"), ("rope", ""), ("none", "")),
    "table_missing": (("sinusoidal", ""), ("learned", "")), "table_extra": (("rope", ""), ("none", ""),
                                                                           ("alibi", "")),
    "rows_shifted": (("learned", ""),), "rows_past_table": (("learned", ""),), "bias_sign": (("alibi", ""),),
    "bias_missing": (("alibi", ""),),
    "bias_extra": (("rope", ""), ("none", ""), ("sinusoidal", ""), ("learned", "")),
}
_SWITCH_VISIBLE = [("ok", "sinusoidal", "concatenated"), ("rows_past_table", "learned", ""),
                   ("bias_sign", "alibi", ""), ("ok", "alibi", "bloom"), ("table_extra", "rope", ""),
                   ("ok", "rope", ""), ("rows_shifted", "learned", ""), ("bias_missing", "alibi", ""),
                   ("ok", "learned", "offset")]


def _switch_case(g: torch.Generator, cause: str, scheme: str, how: str) -> tuple:
    t, d, heads = draw(g, 4, 12), 2 * draw(g, 2, 8), draw(g, 1, 4)
    rows = (draw(g, 2, t - 1) if cause == "rows_past_table" else t if cause == "rows_shifted"  # no room
            else draw(g, t + 2, 16) if how == "offset" else draw(g, t, 16))
    x, table = randn(g, draw(g, 1, 2), t, d), randn(g, rows, d)  # (B, T, D), (max_len, D)
    pe = pe_table(t, d)  # (T, D)
    slopes = _alibi.alibi_slopes(heads)[:, None, None]  # (H, 1, 1)
    bias = _alibi.alibi_bias(heads, t) if scheme == "alibi" else None  # (H, T, T)
    x_in = x + interleaved_to_concat(pe) if how == "concatenated" else x + pe if scheme == "sinusoidal" else x
    if how == "bloom":  # +m_h j: the paper's -m_h (i - j) plus m_h i, one constant per query row
        bias = (slopes * torch.arange(t)).expand(heads, t, t).clone()  # (H, T, T)
    if scheme == "learned":  # rows from `start` (an offset with room, as OPT's), clamped to the last row
        start = draw(g, 1, 2) if how == "offset" else int(cause == "rows_shifted")
        x_in = x + table[torch.arange(t).add(start).clamp(max=rows - 1)]
    if cause in ("table_missing", "table_extra"):
        x_in = x if cause == "table_missing" else x + pe
    if cause in ("bias_sign", "bias_missing", "bias_extra"):
        bias = (-bias if cause == "bias_sign" else None if cause == "bias_missing"
                else _alibi.alibi_bias(heads, t))
    return scheme, x, table, heads, x_in, bias


def _switch_cases(seed: int = 0) -> list[tuple]:
    """Seed 0: the visible nine. Any other seed: three right switches and five bugs, in a random order."""
    g = seeded(1080 + seed)
    if seed == 0:
        return [_switch_case(g, *spec) for spec in _SWITCH_VISIBLE]
    oks = torch.randperm(len(_SWITCH_DRAWS["ok"]), generator=g)[:3].tolist()
    bugs = [SWITCH_CAUSES[1:][i] for i in torch.randperm(7, generator=g)[:5].tolist()]
    specs = [("ok", *_SWITCH_DRAWS["ok"][i]) for i in oks] + [(c, *pick(g, _SWITCH_DRAWS[c])) for c in bugs]
    return [_switch_case(g, *specs[i]) for i in torch.randperm(len(specs), generator=g).tolist()]


def _same(a: Tensor | None, b: Tensor) -> bool:
    return a is not None and tuple(a.shape) == tuple(b.shape) and bool(torch.allclose(a, b, atol=1e-5))


def _causal_rows(bias: Tensor) -> Tensor:
    """The bias as softmax sees it under the causal mask: each query row less its key-0 entry, j <= i."""
    return torch.tril(bias - bias[..., :1])  # (H, T, T)


def _switch_cause(scheme: str, x: Tensor, table: Tensor, num_heads: int, x_in: Tensor,
                  bias: Tensor | None) -> str:
    """Which of SWITCH_CAUSES a switch's output shows, read with the library."""
    t = x.shape[1]
    added = (x_in - x).double()  # (B, T, D): what the switch added to the embeddings
    if scheme in ("sinusoidal", "learned"):
        if _same(added, torch.zeros_like(added)):
            return "table_missing"
        if scheme == "learned" and t > table.shape[0]:
            return "rows_past_table"
        if scheme == "learned" and not any(_same(added[0], table[k:k + t].double())
                                           for k in range(table.shape[0] - t + 1)):
            return "rows_shifted"  # no window of T rows: off by one past the end, the last row twice
    elif not _same(added, torch.zeros_like(added)):
        return "table_extra"
    if scheme != "alibi":
        return "ok" if bias is None else "bias_extra"
    if bias is None:
        return "bias_missing"
    right = _causal_rows(_alibi.alibi_bias(num_heads, t).double())  # (H, T, T)
    return "ok" if _same(_causal_rows(bias.double()), right) else "bias_sign"


_FALSE_ALARMS = {  # (scheme, written that way) -> the misconception behind calling a right switch buggy
    "concatenated": ("extrapolation.switch_layout_called_bug", "you named a bug in a switch that is right: "
                     "its table is the sinusoidal one with all sines first, then all cosines. That layout "
                     "is a valid convention (tensor2tensor, fairseq); a model trained from scratch learns "
                     "with either.", "compare x_in - x with both layouts of the table."),
    "bloom": ("extrapolation.switch_bloom_form_called_bug", "you named a bug in an ALiBi bias that is right: "
              "written +m_h j, as BLOOM does, it differs from -m_h |i - j| by m_h i, one constant per query "
              "row, which softmax ignores (the causal mask removes j > i).",
              "compare each row's differences along j, on the keys j <= i."),
    "offset": ("extrapolation.switch_offset_called_bug", "you named a bug in a learned switch that is right: "
               "its lookup starts at row k of a table with room for T + k rows, as OPT's starts at row 2. A "
               "model trained from scratch learns those rows; the first k are never used.",
               "compare x_in - x with every window of T consecutive rows of the table."),
    "rope": ("extrapolation.switch_rope_needs_a_table", "you expected RoPE to add something to the "
             "embeddings; it turns queries and keys inside attention, so at this switch x passes through.",
             "lesson 08's table, section 2: where each scheme enters."),
    "other": ("extrapolation.switch_false_alarm", "you named a bug in a switch that is right.",
              "check each scheme against where it enters: the input, the scores, or neither."),
}
_MISSED = {
    "rows_past_table": ("extrapolation.switch_rows_past_table_missed", "you missed that T is longer than "
                        "this learned switch's table: it must refuse (a ValueError), and this one returned "
                        "rows anyway.", "compare T with the table's max_len before its values."),
    "bias_sign": ("extrapolation.switch_bias_sign_missed", "you called an ALiBi bias right whose slopes "
                  "point the wrong way: it rewards distant keys.", "along a row, should the bias rise or "
                  "fall as the key moves away from the query?"),
}


def _switch_said(out: Any, case: tuple) -> tuple[str, str, str] | None:
    """(id, what is wrong, hint) for one case's answer, or None if it is right."""
    if is_marker(out, "error"):
        return "generic.error", f"your code raised {out['error']}.", "return one of the causes, a string."
    if out not in SWITCH_CAUSES:
        return ("generic.wrong_type", f"expected one of {SWITCH_CAUSES} as a string; got {type_text(out)}.",
                "return the cause's name, e.g. \"ok\".")
    truth = _switch_cause(*case)
    if out == truth:
        return None
    scheme, x, table, _, x_in, bias = case
    if truth == "ok":
        how = ("concatenated" if scheme == "sinusoidal" and not _same((x_in - x)[0], pe_table(*x.shape[1:]))
               else "offset" if scheme == "learned" and not _same((x_in - x)[0], table[:x.shape[1]])
               else "bloom" if scheme == "alibi" and not _same(bias, _alibi.alibi_bias(*bias.shape[:2]))
               else "rope" if scheme == "rope" else "other")
        return _FALSE_ALARMS[how]
    if out == "ok" or (truth, out) == ("rows_past_table", "rows_shifted"):
        return _MISSED.get(truth, ("extrapolation.switch_bug_missed", f"you called a {scheme!r} switch "
                                   "right that has a bug.", "check what it adds to x, and its bias, "
                                   "against where this scheme enters."))
    return ("extrapolation.switch_wrong_cause", f"the {scheme!r} switch has a bug, but not the one you "
            "named.", "compare x_in - x with the table rows it should add, and the bias with -m_h |i - j|.")


@diagnoses(*dict.fromkeys([m[0] for m in (*_FALSE_ALARMS.values(), *_MISSED.values())]
                          + ["extrapolation.switch_bug_missed", "extrapolation.switch_wrong_cause"]))
def _judge_switch(outputs: list, cases: list) -> Judged:
    said = [_switch_said(out, case) for out, case in zip(outputs, cases, strict=True)]
    per_case = [s[0] if s else None for s in said]
    wrong = [s for s in said if s]
    if not wrong:
        return Judged(1.0, f"passed: all {len(cases)} switches diagnosed right.", None, per_case)
    more = f" ({len(wrong) - 1} more case(s) wrong.)" if len(wrong) > 1 else ""
    return Judged(per_case.count(None) / len(cases), feedback(wrong[0][1] + more, wrong[0][2]), wrong[0][0],
                  per_case)


register(Task(
    id="08_diagnose_switch", kind="diagnose", title="Diagnose: what is wrong with this scheme switch?",
    points=3, entry="diagnose_switch", forbidden=("posenc_lesson.tasks.extrapolation._switch_cause",),
    cases=_switch_cases, run=call, judge=_judge_switch, hidden=_switch_cases,
    allowed=("posenc_lesson",),  # the statement: here the library is yours to use
))


_ORDER_TOKENS = (0, 5, 7, 3, 9, 4)


@functools.lru_cache(maxsize=256)
def _swap_logits(scheme: str, num_layers: int, seeds: tuple = (0, 0), tokens: tuple = _ORDER_TOKENS,
                 swap: tuple = (1, 2)) -> tuple[Tensor, Tensor]:
    """An untrained TinyDecoder's logits (T, V) on ``tokens`` (model seeded with seeds[0]) and on them with
    positions ``swap`` exchanged (model seeded with seeds[1]). Deterministic: computed once per process."""
    order = list(range(len(tokens)))
    order[swap[0]], order[swap[1]] = order[swap[1]], order[swap[0]]
    out = []
    for seed, ids in zip(seeds, (list(tokens), [tokens[i] for i in order]), strict=True):
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            model = TinyDecoder(12, d_model=16, num_heads=2, num_layers=num_layers, pos=scheme, max_len=16)
        model.eval()
        with torch.no_grad():
            out.append(model(torch.tensor([ids]))[0])  # (T, V)
    return out[0], out[1]


def _order_sensitive(scheme: str, num_layers: int, seed: int = 0, tokens: tuple = _ORDER_TOKENS,
                     swap: tuple = (1, 2)) -> bool:
    """Does swapping two tokens before the last change the untrained model's last logits (atol 1e-5)?"""
    a, b = _swap_logits(scheme, num_layers, (seed, seed), tuple(tokens), tuple(swap))
    return not torch.allclose(a[-1], b[-1], atol=1e-5)


_PREDICTION_KEYS = ("none, 1 layer", "sinusoidal, 1 layer", "learned, 1 layer", "rope, 1 layer",
                    "alibi, 1 layer", "none, 2 layers")
_TWO_LAYERS_BLIND = ("you predicted that without a position signal no layer tells the order; but the causal "
                     "mask gives each token its own prefix: after one layer token 1's state depends on what "
                     "stands at position 1, so layer 2 reads no reordering of the same states.")
_ONE_LAYER_SEES = ("you predicted that one layer without positions notices the swap; but its last query "
                   "attends over the set of tokens 0 .. 5, the same after the swap, keys and values too.")


@diagnoses("extrapolation.nope_two_layers_order_blind", "extrapolation.nope_one_layer_sees_order")
def _judge_prediction(outputs: list, cases: list) -> Judged:
    (out,) = outputs
    if is_marker(out, "error"):
        return Judged(0.0, feedback(f"your code raised {out['error']}.", "return a dict of six bools."),
                      "generic.error")
    if not isinstance(out, dict) or sorted(out) != sorted(_PREDICTION_KEYS) or not all(
            isinstance(v, bool) for v in out.values()):
        keys = ", ".join(repr(k) for k in _PREDICTION_KEYS)
        return Judged(0.0, feedback("return a dict with exactly the six keys of the statement, each True or "
                                    "False.", f"the keys are {keys}."), "generic.wrong_type")
    truth = {key: _order_sensitive(key.split(",")[0], int(key.split(", ")[1][0]))
             for key in _PREDICTION_KEYS}
    wrong = sum(out[key] != truth[key] for key in _PREDICTION_KEYS)
    if not wrong:
        return Judged(1.0, "passed: every prediction matches the measurement.", None)
    hint = "a model is order-blind when its last output is a function of the *set* of earlier tokens."
    if out["none, 2 layers"] != truth["none, 2 layers"] and out["none, 2 layers"] == out["none, 1 layer"]:
        return Judged(0.0, feedback(_TWO_LAYERS_BLIND, hint), "extrapolation.nope_two_layers_order_blind")
    if out["none, 1 layer"] != truth["none, 1 layer"]:
        return Judged(0.0, feedback(_ONE_LAYER_SEES, hint), "extrapolation.nope_one_layer_sees_order")
    more = hint[:-1] + "; think about what the causal mask does in a second layer."
    return Judged(0.0, feedback(f"{wrong} of {len(_PREDICTION_KEYS)} predictions disagree with the "
                                "measurement.", more), "generic.wrong_unknown")


register(Task(
    id="08_predict_order",
    kind="predict",
    title="Predict: which models notice a swap?",
    points=1,
    entry="predicted_order_sensitive",
    forbidden=("posenc_lesson.tasks.extrapolation._order_sensitive",),
    cases=lambda: [()],
    run=call,
    hidden=lambda seed: [()],  # a prediction has no input: it cannot vary
    allowed=("posenc_lesson",),
    judge=_judge_prediction,
))


# --------------------------------------------------------------------------------------
# 08_review_order: colleagues' reports of the swap measurement; find each one's flaw, measure it right
# --------------------------------------------------------------------------------------
# A report: {"scheme", "num_layers", "tokens", "swap" (two positions before the last), "seeds" (the seed of
# the model run on the tokens, then of the one run on the swapped tokens), "compare" ("last logits", "every
# position's logits" or "last arg-max"), "tolerance" (atol; 0.0: torch.equal), "verdict" (what their code
# printed)}. The answer: (the entry holding the flaw, or None; the verdict measured right: one model, the
# last logits, atol 1e-5).

ORDER_FLAWS = ("none", "every_position", "two_models", "exact_equality", "argmax_only")
_ORDER_VISIBLE = [  # (flaw, scheme, layers, tokens, swap, seed, tolerance)
    ("none", "rope", 2, (0, 5, 7, 3, 9, 4), (1, 3), 3, 1e-6), ("every_position", "none", 1, (0, 8, 2, 6, 4),
    (1, 2), 0, 1e-5), ("two_models", "none", 1, (0, 5, 7, 3, 9, 4), (2, 4), 1, 1e-5), ("exact_equality",
    "none", 1, (0, 5, 7, 3, 9, 4), (1, 2), 0, 0.0),
    ("argmax_only", "rope", 1, (0, 3, 11, 6, 2, 9, 5), (2, 5), 4, 1e-5)]


def _report(flaw: str, scheme: str, layers: int, tokens: tuple, swap: tuple, seed: int, tol: float) -> dict:
    seeds = (seed, seed + 1) if flaw == "two_models" else (seed, seed)
    compare = {"every_position": "every position's logits", "argmax_only": "last arg-max"}.get(flaw,
                                                                                            "last logits")
    a, b = _swap_logits(scheme, layers, seeds, tokens, swap)  # (T, V) each
    if compare == "last arg-max":
        same = bool(a[-1].argmax() == b[-1].argmax())
    else:
        a, b = (a, b) if compare.startswith("every") else (a[-1], b[-1])
        same = torch.equal(a, b) if tol == 0.0 else torch.allclose(a, b, rtol=0.0, atol=tol)
    return {"scheme": scheme, "num_layers": layers, "tokens": list(tokens), "swap": list(swap),
            "seeds": list(seeds), "compare": compare, "tolerance": tol, "verdict": not same}


def _order_cases(seed: int = 0) -> list[tuple]:
    """(report,): seed 0 the visible five, one per flaw; any other seed one sound report and four drawn
    flaws. A flaw that fakes order-sensitivity is drawn on NoPE, one layer, half the time, where it shows."""
    if seed == 0:
        return [(_report(*spec),) for spec in _ORDER_VISIBLE]
    g = seeded(1180 + seed)
    flaws = ["none"] + [pick(g, ORDER_FLAWS) for _ in range(4)]
    cases = []
    while flaws:
        flaw, t = flaws[-1], draw(g, 5, 8)
        scheme = pick(g, ("none", "sinusoidal", "learned", "rope", "alibi"))
        layers = draw(g, 1, 3)
        if flaw in ("every_position", "two_models", "exact_equality") and draw(g, 0, 1):
            scheme, layers = "none", 1
        tokens = (0, *torch.randperm(11, generator=g)[:t - 1].add(1).tolist())  # BOS, then distinct ids
        a = draw(g, 0, t - 3)
        swap, s = (a, draw(g, a + 1, t - 2)), draw(g, 0, 9)
        x, y = _swap_logits(scheme, layers, (s, s), tokens, swap)
        gap = (x[-1] - y[-1]).abs().max().item()
        if 1e-6 <= gap <= 1e-3:  # too close to a tolerance to call: draw another
            continue
        flaws.pop()
        cases.append((_report(flaw, scheme, layers, tokens, swap, s, 0.0 if flaw == "exact_equality" else
                              pick(g, (1e-6, 1e-5))),))  # well below a real change (1.5e-4 seen)
    return cases


def _order_flaw(report: dict) -> str:
    if report["compare"] != "last logits":
        return "every_position" if report["compare"].startswith("every") else "argmax_only"
    if report["seeds"][0] != report["seeds"][1]:
        return "two_models"
    return "exact_equality" if report["tolerance"] == 0.0 else "none"


_ORDER_MISSED = {
    "every_position": ("extrapolation.order_every_position", "you trusted a comparison of every position: "
                       "the positions from the first swapped one on read other tokens after the swap, so "
                       "their outputs differ for any model.", "only the last position can show order."),
    "two_models": ("extrapolation.order_two_models_missed", "you trusted a comparison of two different "
                   "models: seeded differently, their weights differ, so their outputs differ whatever the "
                   "order.", "which weights ran on the tokens, and which on the swapped tokens?"),
    "exact_equality": ("extrapolation.order_exact_equality_missed", "you trusted an exact comparison of "
                       "floats: summing the same terms in another order changes the last bits.",
                       "outputs equal up to rounding must count as equal: use a tolerance."),
    "argmax_only": ("extrapolation.order_argmax_missed", "you trusted a comparison of arg-maxes: an "
                    "untrained model's logits can move without changing which token is largest.",
                    "does the output change, or only the top token?"),
}


_FIELD = {"none": None, "every_position": "compare", "argmax_only": "compare", "two_models": "seeds",
          "exact_equality": "tolerance"}  # the report's entry each flaw sits in
_REPORT_KEYS = ("scheme", "num_layers", "tokens", "swap", "seeds", "compare", "tolerance")


def _order_said(out: Any, case: tuple) -> tuple[str, str, str] | None:
    (report,) = case
    if is_marker(out, "error"):
        return "generic.error", f"your code raised {out['error']}.", "return (field, verdict)."
    if not (isinstance(out, list) and len(out) == 2 and (out[0] is None or out[0] in _REPORT_KEYS)
            and isinstance(out[1], bool)):
        return ("generic.wrong_type", f"expected a pair (field, verdict): None or one of {_REPORT_KEYS}, "
                f"and a bool; got {type_text(out)}.", "return e.g. (None, True) or (\"tokens\", False).")
    flaw = _order_flaw(report)
    field, truth = _FIELD[flaw], _order_sensitive(report["scheme"], report["num_layers"], report["seeds"][0],
                                                  tuple(report["tokens"]), tuple(report["swap"]))
    if out[0] == field and out[1] == truth:
        return None
    if out[0] == field:
        if out[1] == report["verdict"]:
            return ("extrapolation.order_claim_kept", "you named the flaw but kept the report's verdict, "
                    "which the flaw produced.", "measure again with the flaw fixed.")
        return ("generic.wrong_unknown", "your verdict disagrees with the measurement.", "one model, seeded "
                "once, the last position's logits, torch.allclose(..., atol=1e-5).")
    if field is None:
        return ("extrapolation.order_valid_variant_flagged", "you named a flaw in a sound report: another "
                "seed (the same for both runs), other tokens, two other positions before the last, or "
                "another small tolerance measure the same thing.", "what could each choice change in the "
                "verdict?")
    if out[0] is None:
        return _ORDER_MISSED[flaw]
    return ("generic.wrong_unknown", f"the report's {out[0]!r} is sound; its flaw is elsewhere.",
            "look for the one choice that can change the verdict by itself.")


@diagnoses(*(m[0] for m in _ORDER_MISSED.values()), "extrapolation.order_claim_kept",
           "extrapolation.order_valid_variant_flagged")
def _judge_order(outputs: list, cases: list) -> Judged:
    said = [_order_said(out, case) for out, case in zip(outputs, cases, strict=True)]
    per_case = [s[0] if s else None for s in said]
    wrong = [s for s in said if s]
    if not wrong:
        return Judged(1.0, f"passed: all {len(cases)} reports reviewed right.", None, per_case)
    more = f" ({len(wrong) - 1} more report(s) wrong.)" if len(wrong) > 1 else ""
    return Judged(per_case.count(None) / len(cases), feedback(wrong[0][1] + more, wrong[0][2]), wrong[0][0],
                  per_case)


register(Task(
    id="08_review_order",
    kind="diagnose",
    title="Diagnose: which order measurements can you trust?",
    points=2,
    entry="review_order",
    forbidden=tuple(f"posenc_lesson.tasks.extrapolation.{f}" for f in ("_order_sensitive", "_swap_logits",
                                                                         "_order_flaw")),
    cases=_order_cases,
    run=ONE_THREAD,
    hidden=_order_cases,
    allowed=("posenc_lesson",),
    judge=_judge_order,
))
