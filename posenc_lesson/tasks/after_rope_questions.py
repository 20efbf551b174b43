"""Lesson 13's tasks (exercises/13_after_rope.ipynb), part 2: read which layers of a released model
rotate (a RoPE/NoPE layer mix, or none), predict the share of stick-breaking's stick that the keys more
than L back receive (measured with ``stick_breaking_weights``), and the two concept questions: the
constant forget gate that makes a FoX head one of ALiBi's heads, and the offset at which xPos halves its
fastest-decaying pair.

The configs hold the position keys of released checkpoints' config.json as the course records them
(tools/hf_checkpoint_configs.py, lesson 12's Llama 4 Scout with the ``"no_rope_layers": []`` its published
text_config writes), layers cut; the reference is ``describe_positions``, whose layer rules equal
transformers' (lesson 12; Llama4TextConfig builds the list from no_rope_layer_interval when it is
empty). The concept questions' answers come from ``alibi_slopes`` and ``xpos_zeta``.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from torch import Tensor

from .. import alibi as _alibi
from .. import field_guide as _guide
from .. import stick_breaking as _stick
from .. import xpos as _xpos
from .concepts import Misconception, number_judge, question
from .field_guide import GUIDE_FORBIDDEN
from .field_guide_questions import SCOUT_TEXT
from .judges import Mistake, call, draw, seeded, tensor_judge
from .registry import Judged, Task, register

# --------------------------------------------------------------------------------------
# 13_read_rope_layers (read): which layers of a released model rotate their queries and keys
# --------------------------------------------------------------------------------------

SMOLLM3 = {  # HuggingFaceTB/SmolLM3-3B config.json's position keys (tools/hf_checkpoint_configs.py)
    "model_type": "smollm3", "hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 4,
    "max_position_embeddings": 65536, "rope_theta": 5000000.0, "rope_scaling": None,
    "no_rope_layer_interval": 4, "use_sliding_window": False, "sliding_window": None}
COMMAND_R7B = {  # CohereForAI/c4ai-command-r7b-12-2024 config.json's (cohere2: RoPE on the sliding layers)
    "model_type": "cohere2", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
    "rope_theta": 50000.0, "sliding_window": 4096, "sliding_window_pattern": 4,
    "max_position_embeddings": 8192}
MIXTRAL = {  # mistralai/Mixtral-8x7B-v0.1 config.json's (every layer rotates)
    "model_type": "mixtral", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
    "max_position_embeddings": 32768, "rope_theta": 1000000.0, "sliding_window": None}
MODELS = ("smollm3", "cohere2", "llama4", "mixtral")


def _config(model: str, layers: int) -> dict:
    """The model's config with ``layers`` layers, as its config.json writes it (SmolLM3's no_rope_layers
    list cut with it; Llama 4 in the multimodal form, the text model under text_config, with Scout's empty
    no_rope_layers: Llama4TextConfig reads [] as no list and derives it from no_rope_layer_interval)."""
    if model == "llama4":
        text = dict(copy.deepcopy(SCOUT_TEXT), num_hidden_layers=layers, no_rope_layers=[])
        return {"model_type": "llama4", "text_config": text}
    base = {"smollm3": SMOLLM3, "cohere2": COMMAND_R7B, "mixtral": MIXTRAL}[model]
    config = dict(copy.deepcopy(base), num_hidden_layers=layers)
    if model == "smollm3":
        config["no_rope_layers"] = ([1, 1, 1, 0] * layers)[:layers]  # 1: the layer rotates
    return config


def _rope_ref(config: dict) -> Tensor:
    """1 where describe_positions (equal to transformers) finds RoPE in the layer, else 0. (layers,)"""
    return torch.tensor([float(s == "rope") for s in _guide.describe_positions(config).schemes])


def _mixed(config: dict) -> bool:
    return config["model_type"] in ("smollm3", "cohere2", "llama4")


def _layers(config: dict) -> int:
    return (config.get("text_config") or config)["num_hidden_layers"]


def _empty_list(config: dict) -> bool:
    """Whether the config writes no_rope_layers as an empty list (Scout's text_config)."""
    return (config.get("text_config") or config).get("no_rope_layers", None) == []


def _pattern(config: dict, nope_at: int = 3) -> Tensor:
    return torch.tensor([float(i % 4 != nope_at) for i in range(_layers(config))])


def _rope_cases(seed: int = 0) -> list[tuple]:
    """(config,): SmolLM3, Command R7B, Llama 4 Scout (multimodal form) and Mixtral; hidden: the four in
    a drawn order, each cut to 5 .. 16 layers."""
    if seed == 0:
        return [(_config("smollm3", 8),), (_config("cohere2", 8),), (_config("llama4", 12),),
                (_config("mixtral", 4),)]
    g = seeded(1330 + seed)
    return [(_config(MODELS[int(j)], draw(g, 5, 16)),) for j in torch.randperm(len(MODELS), generator=g)]


_ROPE_MISTAKES = [
    Mistake(lambda c: 1.0 - _rope_ref(c),
            "your flags are the other way round: SmolLM3's and Llama 4's no_rope_layers holds 1 for a layer "
            "that rotates (the modeling code reads it as use_rope), and Cohere 2 rotates its sliding-window "
            "layers, not its global ones.", "which value of no_rope_layers does the modeling code call "
            "use_rope, and which of Cohere 2's layers see the whole sequence?",
            id="after_rope.rope_flags_inverted"),
    Mistake(lambda c: _pattern(c, nope_at=0) if _mixed(c) else _rope_ref(c),
            "your NoPE layers open each group of four (layers 0, 4, 8, ...); in these models the layer "
            "without RoPE closes it.",
            "count the layers from 0: which index has the fourth layer of a group?",
            id="after_rope.nope_layer_first"),
    Mistake(lambda c: _pattern(c),
            "you gave every model the 3 : 1 mix, also one whose config says nothing of the sort: a model "
            "without no_rope_layers, a no_rope_layer_interval or Cohere 2's sliding pattern rotates in "
            "every layer.", "which key tells you that a layer has no RoPE? Does every config have it?",
            id="after_rope.nope_pattern_assumed"),
    Mistake(lambda c: torch.zeros(0) if _empty_list(c) else _rope_ref(c),
            "you took Scout's \"no_rope_layers\": [] as the flags themselves: an empty list has no entry for "
            "any layer, and your answer came out empty.",
            "what does transformers' Llama4TextConfig do when no_rope_layers is empty?",
            id="after_rope.empty_no_rope_layers_taken_literally"),
    Mistake(lambda c: torch.ones(_layers(c)) if _empty_list(c) else _rope_ref(c),
            "you read Scout's empty no_rope_layers as 'no layer goes without RoPE': transformers does not "
            "read an empty list as a list of flags.",
            "what does transformers' Llama4TextConfig do when no_rope_layers is empty?",
            id="after_rope.empty_no_rope_layers_as_every_layer_rotating"),
    Mistake(lambda c: torch.ones(_layers(c)),
            "you have every layer rotate: these configs leave some layers without any position.",
            "look for no_rope_layers, no_rope_layer_interval and Cohere 2's sliding_window_pattern.",
            id="after_rope.rope_nope_mix_ignored"),
]

def _as_numbers(out: Any) -> Any:
    """True/False flags read as 1/0: a bool tensor or list is as good an answer as an integer one."""
    if isinstance(out, Tensor) and out.dtype == torch.bool:
        return out.long()
    if isinstance(out, list | tuple) and out and all(isinstance(v, bool) for v in out):
        return [int(v) for v in out]
    return out


def _flags_judge(inner: Any) -> Any:
    def judge(outputs: list, cases: list) -> Judged:
        return inner([_as_numbers(o) for o in outputs], cases)

    judge.mistakes, judge.known, judge.reference = inner.mistakes, inner.known, inner.reference  # type: ignore
    return judge


register(Task(
    id="13_read_rope_layers",
    kind="read",
    title="Read a config: which layers rotate",
    points=2,
    entry="rope_layers",
    forbidden=(*GUIDE_FORBIDDEN, "posenc_lesson.lab.after_rope_attention"),
    cases=_rope_cases,
    hidden=_rope_cases,
    run=call,
    judge=_flags_judge(tensor_judge(_rope_ref, _ROPE_MISTAKES, ("config",),
                       "entry i is 1 if layer i rotates its queries and keys with RoPE as transformers "
                       "builds the model from this config, 0 if it has no position; a (num_hidden_layers,) "
                       "tensor.")),
))


# --------------------------------------------------------------------------------------
# 13_predict_far_stick (predict): the share of the stick that keys more than L back receive
# --------------------------------------------------------------------------------------

def _far_ref(i: int, big_l: int, z: float) -> Tensor:
    """Measured with the library: query i's stick-breaking weights (every logit z, keys j < i) summed over
    the keys more than L back, i - j > L (what lesson 13's section 10 masks)."""
    weights = _stick.stick_breaking_weights(torch.full((i + 1, i + 1), z, dtype=torch.float64))[i]  # (i+1,)
    return weights[: i - big_l].sum()


def _far(i: int, big_l: int, z: float, *, near: int | None = None, end: int | None = None) -> Tensor:
    """(1 - beta)^near - (1 - beta)^end: the stick left after the ``near`` nearest keys, less what the keys
    past the last (``end``) would have taken; the knobs real mistakes turn."""
    rest = 1 - 1 / (1 + math.exp(-z))  # 1 - beta
    left = rest ** (big_l if near is None else near)
    past_end = 0.0 if end == -1 else rest ** (i if end is None else end)  # what key 0 leaves
    return torch.tensor(left - past_end, dtype=torch.float64)


def _far_cases(seed: int = 0) -> list[tuple]:
    """(i, L, z): L 4 .. 32, L < i <= 4 L, every logit z in [-4, -1]; the far share above 1e-3."""
    if seed == 0:
        return [(40, 16, -3.0), (20, 8, -2.0), (100, 32, -3.5), (12, 4, -1.0)]
    g = seeded(1340 + seed)
    cases: list[tuple] = []
    while len(cases) < 4:
        big_l = draw(g, 4, 32)
        z = round(-1.0 - 3.0 * float(torch.rand((), generator=g)), 3)
        case = (draw(g, big_l + 1, 4 * big_l), big_l, z)
        if float(_far_ref(*case)) > 1e-3:
            cases.append(case)
    return cases


_FAR_MISTAKES = [
    Mistake(lambda i, L, z: _far(i, L, z, end=-1),
            "your share is what the L nearest keys leave, (1 - beta)^L: the stick does not go on forever, "
            "it ends at key 0, and what key 0 leaves nobody takes.",
            "subtract the part of the stick still left after the farthest key.",
            id="after_rope.stick_far_unending"),
    Mistake(lambda i, L, z: _far(i, L, z, near=L - 1),
            "off by one: 'more than L back' starts at distance L + 1, so the L nearest keys (distances "
            "1 .. L) break before them.", "count the keys a query at i sees at distances 1 .. L.",
            id="after_rope.stick_far_off_by_one"),
    Mistake(lambda i, L, z: 1 - _far(i, L, z, end=-1),
            "that is the share of the L nearest keys: the question asks for what the keys further back get.",
            "what is left of the stick after the L nearest keys?", id="after_rope.stick_near_share"),
    Mistake(lambda i, L, z: torch.tensor((i - L) / i, dtype=torch.float64),
            "you split the weight evenly, as a softmax over equal logits does: stick-breaking has no "
            "softmax, and the nearest key breaks off its share first.",
            "key j gets beta times what the nearer keys left.",
            id="after_rope.stick_as_softmax"),
]

register(Task(
    id="13_predict_far_stick",
    kind="predict",
    title="Predict: what stick-breaking leaves for the keys more than L back",
    points=2,
    entry="far_stick_share",
    forbidden=("posenc_lesson.stick_breaking_weights", "posenc_lesson.lab.after_rope_attention",
               "posenc_lesson.tasks.after_rope_questions._far_ref"),
    cases=_far_cases,
    hidden=_far_cases,
    run=call,
    judge=tensor_judge(_far_ref, _FAR_MISTAKES, ("i", "L", "z"),
                       "the sum of A[i, j] over the keys j with i - j > L, for a query at i whose logits to "
                       "every key j < i are z: a number."),
))


# --------------------------------------------------------------------------------------
# Concept questions
# --------------------------------------------------------------------------------------

ALIBI_HEADS, ALIBI_HEAD = 8, 1  # the second head of an 8-head ALiBi model, slope 2^-2


def _fox_gate(head: int = ALIBI_HEAD) -> float:
    """The constant forget gate f with FoX's bias (i - j) log f equal to ALiBi's -m (i - j): f = exp(-m)."""
    return math.exp(-float(_alibi.alibi_slopes(ALIBI_HEADS)[head]))


register(question(
    id="13_q_fox_alibi_gate", title="Predict: the forget gate that makes FoX one of ALiBi's heads",
    entry="answer_13_fox_alibi_gate",
    forbidden=("posenc_lesson.tasks.after_rope_questions._fox_gate",),
    judge=number_judge(_fox_gate, [
        Misconception(lambda: float(_alibi.alibi_slopes(ALIBI_HEADS)[ALIBI_HEAD]),
                      "you gave the slope as the gate: the gate multiplies the attention once per token, so "
                      "its log is what adds up in the logits.", "with a constant gate f, what is D[i, j]?",
                      id="after_rope.gate_is_slope"),
        Misconception(lambda: 1 - float(_alibi.alibi_slopes(ALIBI_HEADS)[ALIBI_HEAD]),
                      "1 - m is the first-order guess, log(1 - m) ~ -m; the bias is (i - j) log f "
                      "exactly, and log(1 - m) is not -m for this slope.", "solve log f = -m for f exactly.",
                      id="after_rope.gate_linearised"),
        Misconception(lambda: -float(_alibi.alibi_slopes(ALIBI_HEADS)[ALIBI_HEAD]),
                      "that is log f, not the gate f: a gate lies between 0 and 1.", "undo the log.",
                      id="after_rope.gate_as_log"),
        Misconception(lambda: 1 / _fox_gate(),
                      "your gate is above 1: it would make far keys weigh more, the opposite of ALiBi's "
                      "penalty.", "the sign: ALiBi's bias is -m (i - j), below 0.",
                      id="after_rope.gate_sign"),
        Misconception(lambda: _fox_gate(ALIBI_HEAD - 1),
                      "that is the gate of the first head, slope 2^-1: ALiBi's slopes for 8 heads are 2^-1, "
                      "2^-2, ..., 2^-8.", "which slope has the second head?",
                      id="after_rope.gate_wrong_head"),
    ], "FoX's bias with one gate f for every token is (i - j) log f; ALiBi's second head of eight has slope "
       "m = 2^-2. Give 4 decimals or more.", rtol=1e-4)))


XPOS_HEAD_DIM, XPOS_SCALE_BASE = 64, 512.0


def _xpos_half_offset(scale_base: float = XPOS_SCALE_BASE) -> float:
    """The offset at which xPos's decay zeta_0 ** (offset / scale_base) of pair 0 reaches 1/2."""
    zeta0 = float(_xpos.xpos_zeta(XPOS_HEAD_DIM)[0])
    return scale_base * math.log(0.5) / math.log(zeta0)


register(question(
    id="13_q_xpos_half_offset", title="Predict: where xPos halves its fastest-decaying pair",
    entry="answer_13_xpos_half_offset",
    forbidden=("posenc_lesson.tasks.after_rope_questions._xpos_half_offset",),
    judge=number_judge(_xpos_half_offset, [
        Misconception(lambda: _xpos_half_offset() / 2,
                      "you let the query's and the key's scales both shrink the score: they are inverses, "
                      "so in q'_m . k'_n they meet as one factor zeta ** ((m - n) / lambda).",
                      "write q'_m . k'_n for a single pair and collect the powers of zeta.",
                      id="after_rope.xpos_decay_counted_twice"),
        Misconception(lambda: XPOS_SCALE_BASE * math.log(0.5) / math.log(0.4),
                      "you took zeta_0 = 0.4: xPos's zeta_i = (2i / Dh + 0.4) / 1.4, so pair 0's is "
                      "0.4 / 1.4.",
                      "divide by 1.4.", id="after_rope.xpos_zeta_not_divided"),
        Misconception(lambda: _xpos_half_offset(1.0),
                      "that is the offset in units of the scale base: the exponent is offset / lambda, "
                      "lambda = 512.", "multiply by lambda.", id="after_rope.xpos_scale_base_left_out"),
        Misconception(XPOS_SCALE_BASE, "the scale base is where zeta's power reaches 1, a factor zeta_0, "
                      "not a half.", "solve zeta_0 ** (offset / 512) = 1/2.",
                      id="after_rope.xpos_half_at_scale_base"),
    ], "pair 0 of an xPos head (Dh = 64, scale_base lambda = 512): its term of q'_m . k'_n carries the "
       "factor zeta_0 ** ((m - n) / lambda). Give 1 decimal or more.", rtol=5e-4)))
