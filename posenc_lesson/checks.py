r"""Instant feedback for the exercises, and the task registry the grader scores against.

Every graded task in ``exercises/`` has an entry here: a :class:`Task` says what name the
learner's cell defines, which inputs it is called on, and how to judge what came back.
Grading is split in two so that nothing a learner's code does can change a comparison:

    outputs = outputs_of(task_id, fn)    # runs the learner's code (inside their kernel)
    points, max_points, feedback = score(task_id, outputs)   # pure: no learner code runs

``outputs_of`` returns plain data (tensors, numbers, strings, lists, dicts); exceptions
come back as ``{"error": "Type: message"}``. ``score`` recomputes the reference answers
from this library in its own process, compares with explicit tolerances
(rtol 1e-4, atol 1e-5), and when an answer is wrong it compares it with the *wrong*
answers that real mistakes produce (exponent -i/d instead of -2i/d, the other RoPE
layout, the transposed rotation, slopes off by one, ...) to name the likely mistake and
give a hint. It never prints the right answer.

In a notebook, ``check(task_id, fn)`` does both steps and prints one verdict, e.g.

    ✅ 05_apply_rope_half: passed (3/3 points)

and never raises. ``assert_passes`` raises an AssertionError carrying the same feedback
(for nbgrader's autograder). An answer that calls the library's own implementation of
what the task asks for scores 0 for that task, with feedback saying why.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import math
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from . import alibi as _alibi
from . import attention as _attention
from . import rope as _rope
from . import sinusoidal as _sinusoidal

RTOL, ATOL = 1e-4, 1e-5
_MAX_MESSAGE = 300  # characters of an exception message kept in the outputs


@dataclass(frozen=True)
class Task:
    """One graded exercise task.

    Attributes:
        id: "05_apply_rope_half": lesson number, then a name.
        title: one line for tables and feedback.
        points: the most the task is worth.
        entry: the function or class name the solution cell defines.
        forbidden: dotted names of library functions the answer may not call.
        cases: deterministic inputs, a list of argument tuples (fresh tensors each call).
        run: calls the learner's entry on one case and returns its output.
        judge: (outputs, cases) -> (fraction of the points in 0..1, feedback).
    """

    id: str
    title: str
    points: int
    entry: str
    forbidden: tuple[str, ...]
    cases: Callable[[], list[tuple]]
    run: Callable[[Callable, tuple], Any]
    judge: Callable[[list, list], tuple[float, str]]


TASKS: dict[str, Task] = {}


def _register(task: Task) -> Task:
    if task.id in TASKS:
        raise ValueError(f"task id {task.id!r} is registered twice")
    TASKS[task.id] = task
    return task


# --------------------------------------------------------------------------------------
# Running the learner's code: outputs as plain data, library calls watched
# --------------------------------------------------------------------------------------

def _plain(obj: Any, depth: int = 0) -> Any:
    """Copy an output into plain data: tensors (no subclasses, detached, CPU), numbers,
    strings, lists and dicts. Anything else becomes a short description."""
    if depth > 4:
        return {"type": "too deeply nested"}
    if isinstance(obj, Tensor):
        return obj.detach().cpu().as_subclass(Tensor).clone()
    if isinstance(obj, np.ndarray):
        try:
            return torch.from_numpy(np.array(obj, copy=True))
        except TypeError:
            return {"type": f"numpy array of dtype {obj.dtype}"}
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj)
    if obj is None or isinstance(obj, str):
        return obj if obj is None else str(obj)[:_MAX_MESSAGE]
    if isinstance(obj, (list, tuple)):
        return [_plain(o, depth + 1) for o in list(obj)[:10_000]]
    if isinstance(obj, dict):
        return {str(k): _plain(v, depth + 1) for k, v in list(obj.items())[:100]}
    return {"type": type(obj).__name__}


def _error(exc: BaseException) -> dict:
    message = str(exc).splitlines()[0] if str(exc) else ""
    return {"error": f"{type(exc).__name__}: {message[:_MAX_MESSAGE]}".rstrip(": ")}


def _namespaces(fn: Any) -> list[dict]:
    """The global namespaces the learner's code looks names up in."""
    spaces = []
    candidates = [fn]
    if isinstance(fn, type):
        candidates = [v for v in vars(fn).values() if callable(v)]
    for c in candidates:
        g = getattr(c, "__globals__", None)
        if isinstance(g, dict) and all(g is not s for s in spaces):
            spaces.append(g)
    main = sys.modules.get("__main__")
    if main is not None and all(vars(main) is not s for s in spaces):
        spaces.append(vars(main))
    return spaces


@contextlib.contextmanager
def _watch(forbidden: tuple[str, ...], fn: Any) -> Iterator[list[str]]:
    """While active, every call to a forbidden function is recorded in the yielded list.

    Functions are replaced by recording wrappers in every posenc_lesson module, in the
    module that defines them, and wherever the learner's globals name them; classes get
    their ``__init__`` and ``forward`` wrapped (so subclasses are caught too). All is
    restored on exit.
    """
    called: list[str] = []
    patches: list[tuple[Any, str, Any]] = []  # (owner, attribute, original)

    def setattr_saved(owner: Any, name: str, value: Any) -> None:
        original = owner[name] if isinstance(owner, dict) else getattr(owner, name)
        patches.append((owner, name, original))
        if isinstance(owner, dict):
            owner[name] = value
        else:
            setattr(owner, name, value)

    def recorder(path: str, original: Callable) -> Callable:
        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            called.append(path)
            return original(*args, **kwargs)
        return wrapper

    try:
        for path in forbidden:
            module_name, _, attr = path.rpartition(".")
            original = getattr(importlib.import_module(module_name), attr)
            if isinstance(original, type):
                for method in ("__init__", "forward"):
                    if method in vars(original):
                        setattr_saved(original, method, recorder(path, vars(original)[method]))
                continue
            wrapper = recorder(path, original)
            owners: list[Any] = [m for name, m in list(sys.modules.items())
                                 if m is not None and (name == module_name or name == "posenc_lesson"
                                                       or name.startswith("posenc_lesson."))]
            for owner in owners:
                for name, value in list(vars(owner).items()):
                    if value is original:
                        with contextlib.suppress(AttributeError, TypeError):
                            setattr_saved(owner, name, wrapper)
            for space in _namespaces(fn):
                for name, value in list(space.items()):
                    if value is original:
                        setattr_saved(space, name, wrapper)
        yield called
    finally:
        for owner, name, original in reversed(patches):
            if isinstance(owner, dict):
                owner[name] = original
            else:
                setattr(owner, name, original)


def outputs_of(task_id: str, fn: Any) -> list:
    """Run the learner's ``fn`` on every case of the task; return plain data, one per case.

    An exception becomes ``{"error": "Type: message"}``; a call to a forbidden library
    function becomes ``{"forbidden": "posenc_lesson.name"}``.
    """
    task = _task(task_id)
    outputs = []
    for case in task.cases():
        with _watch(task.forbidden, fn) as called:
            try:
                out = _plain(task.run(fn, case))
            except Exception as exc:  # the learner's code may raise anything
                out = _error(exc)
        outputs.append({"forbidden": called[0]} if called else out)
    return outputs


# --------------------------------------------------------------------------------------
# Scoring: pure, in the grader's own process
# --------------------------------------------------------------------------------------

def _task(task_id: str) -> Task:
    if task_id not in TASKS:
        raise ValueError(f"task_id must be one of the exercise tasks {sorted(TASKS)}; got {task_id!r}")
    return TASKS[task_id]


def _is_marker(out: Any, key: str) -> bool:
    return isinstance(out, dict) and isinstance(out.get(key), str)


def _not_implemented(out: Any) -> bool:
    return _is_marker(out, "error") and out["error"].startswith("NotImplementedError")


NOT_IMPLEMENTED = ("not implemented yet: replace the raise line "
                   "(raise NotImplementedError(...)) with your code, then run this cell again.")


def score(task_id: str, outputs: list) -> tuple[float, int, str]:
    """(points awarded, max points, feedback) for a task's outputs. Runs no learner code."""
    task = _task(task_id)
    cases = task.cases()
    if not isinstance(outputs, list) or len(outputs) != len(cases):
        got = len(outputs) if isinstance(outputs, list) else type(outputs).__name__
        return 0.0, task.points, f"no answer to grade: expected {len(cases)} outputs, got {got}."
    for out in outputs:
        if _is_marker(out, "forbidden"):
            name = out["forbidden"]
            what = task.title.split(" (")[0]
            return 0.0, task.points, (
                f"this task asks you to implement it yourself ({what}); your answer calls "
                f"{name}. Write it with torch operations instead (the library is what we compare with).")
    if any(_not_implemented(out) for out in outputs):
        return 0.0, task.points, NOT_IMPLEMENTED
    try:
        fraction, feedback = task.judge(outputs, cases)
    except Exception as exc:  # a malformed output must not crash the grader
        reason = _error(exc)["error"]
        fraction, feedback = 0.0, f"could not compare your output with the reference ({reason})."
    fraction = min(max(float(fraction), 0.0), 1.0)
    return round(task.points * fraction, 2), task.points, feedback


def _format_points(x: float) -> str:
    return f"{x:g}"


def verdict(task_id: str, points: float, max_points: int, feedback: str) -> str:
    """The text ``check`` prints: a pass line, or the points, the diagnosis and the hint."""
    if points >= max_points:
        return f"✅ {task_id}: passed ({_format_points(points)}/{max_points} points)"
    body = "\n".join("   " + line for line in feedback.splitlines())
    return f"❌ {task_id}: {_format_points(points)}/{max_points} points\n{body}"


def check(task_id: str, fn: Any) -> None:
    """Run the task's checks on ``fn`` and print a verdict to stdout. Never raises."""
    try:
        points, max_points, feedback = score(task_id, outputs_of(task_id, fn))
        print(verdict(task_id, points, max_points, feedback))
    except Exception as exc:  # instant feedback must never fail with a traceback
        print(f"⚠️ {task_id}: could not run the check ({_error(exc)['error']})")


def assert_passes(task_id: str, fn: Any) -> None:
    """Raise AssertionError with the feedback unless ``fn`` earns full marks."""
    points, max_points, feedback = score(task_id, outputs_of(task_id, fn))
    if points < max_points:
        raise AssertionError(verdict(task_id, points, max_points, feedback))


# --------------------------------------------------------------------------------------
# Judging helpers
# --------------------------------------------------------------------------------------

def _as_float_tensor(out: Any) -> Tensor | None:
    """The output as a float64 tensor, or None if it is not numeric."""
    if isinstance(out, bool):
        return None
    if isinstance(out, Tensor):
        if out.is_complex() or out.dtype == torch.bool:
            return None
        return out.to(torch.float64)
    if isinstance(out, (int, float)):
        return torch.tensor(float(out), dtype=torch.float64)
    if isinstance(out, list):
        try:
            return torch.tensor(out, dtype=torch.float64)
        except (TypeError, ValueError, RuntimeError):
            return None
    return None


def _close(out: Tensor | None, ref: Tensor) -> bool:
    return (out is not None and tuple(out.shape) == tuple(ref.shape)
            and bool(torch.allclose(out, ref.to(torch.float64), rtol=RTOL, atol=ATOL)))


def _describe(value: Any) -> str:
    if isinstance(value, Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if callable(value):
        return getattr(value, "__name__", type(value).__name__)
    return repr(value)


def _case_text(names: tuple[str, ...], case: tuple) -> str:
    return ", ".join(f"{n}={_describe(v)}" for n, v in zip(names, case, strict=False))


def _type_text(out: Any) -> str:
    if isinstance(out, dict) and "type" in out:
        return f"a {out['type']}"
    if isinstance(out, Tensor):
        return f"a {out.dtype} tensor"
    if out is None:
        return "None (is a `return` missing?)"
    return f"a {type(out).__name__}"


@dataclass(frozen=True)
class _Mistake:
    """A wrong answer a real mistake produces, and what to say when it is matched."""

    compute: Callable[..., Tensor]   # same arguments as the reference
    diagnosis: str
    hint: str


def _feedback(diagnosis: str, hint: str) -> str:
    return f"{diagnosis}\nHint: {hint}"


def _tensor_judge(reference: Callable[..., Tensor], mistakes: list[_Mistake], names: tuple[str, ...],
                  hint: str, partial: bool = True,
                  symptom: Callable[[Tensor, tuple], str | None] | None = None,
                  ) -> Callable[[list, list], tuple[float, str]]:
    """A judge comparing tensor outputs with the reference, case by case.

    Failing cases are compared with each mistake; the first mistake that explains every
    failing case (or, failing that, any) names the diagnosis. Otherwise the feedback
    says what differs: an exception, the type, the shape, or how many entries are wrong.
    """
    def judge(outputs: list, cases: list) -> tuple[float, str]:
        refs = [reference(*case).to(torch.float64) for case in cases]
        got = [_as_float_tensor(out) for out in outputs]
        failing = [n for n, (g, r) in enumerate(zip(got, refs, strict=True)) if not _close(g, r)]
        if not failing:
            return 1.0, f"passed: all {len(cases)} cases match the reference."
        fraction = (1 - len(failing) / len(cases)) if partial else 0.0
        for n in failing:  # an exception speaks for itself
            if _is_marker(outputs[n], "error"):
                return fraction, _feedback(
                    f"your code raised {outputs[n]['error']}\n  on the case {_case_text(names, cases[n])}.",
                    hint)
        explained: list[tuple[int, _Mistake]] = []
        for mistake in mistakes:
            hits = 0
            for n in failing:
                try:
                    if _close(got[n], mistake.compute(*cases[n]).to(torch.float64)):
                        hits += 1
                except Exception:  # a mistake that cannot run on this case explains nothing
                    pass
            if hits == len(failing):
                return fraction, _feedback(mistake.diagnosis, mistake.hint)
            if hits:
                explained.append((hits, mistake))
        if explained:
            mistake = max(explained, key=lambda hm: hm[0])[1]
            return fraction, _feedback("on some cases: " + mistake.diagnosis, mistake.hint)
        n = failing[0]
        case = _case_text(names, cases[n])
        if got[n] is None:
            return fraction, _feedback(f"expected a tensor, got {_type_text(outputs[n])} for {case}.", hint)
        if tuple(got[n].shape) != tuple(refs[n].shape):
            return fraction, _feedback(
                f"wrong shape for {case}: expected {tuple(refs[n].shape)}, got {tuple(got[n].shape)}.",
                hint)
        if not torch.isfinite(got[n]).all():
            return fraction, _feedback(
                f"your output for {case} contains NaN or infinity (a division by zero, or a "
                f"softmax over a row that is all -inf?).", hint)
        if symptom is not None:
            for m in failing:
                said = symptom(got[m], cases[m]) if got[m] is not None else None
                if said:
                    return fraction, _feedback(f"{said} (for {_case_text(names, cases[m])})", hint)
        bad = ~torch.isclose(got[n], refs[n], rtol=RTOL, atol=ATOL)
        first = tuple(int(i) for i in bad.nonzero()[0]) if bad.dim() else ()
        where = f"; the first at index {first}" if first else ""
        return fraction, _feedback(
            f"wrong values for {case}: {int(bad.sum())} of {bad.numel()} entries differ from the "
            f"reference{where}.", hint)
    return judge


def _call(fn: Callable, case: tuple) -> Any:
    return fn(*case)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(g: torch.Generator, *shape: int) -> Tensor:
    return torch.randn(*shape, generator=g)


# --------------------------------------------------------------------------------------
# Wrong answers, computed from the library (shared by several tasks)
# --------------------------------------------------------------------------------------

def _interleaved_to_concat(pe: Tensor) -> Tensor:
    """[sin0, cos0, sin1, cos1, ...] -> [sin0, sin1, ..., cos0, cos1, ...] on the last axis."""
    return pe[..., _rope.rope_layout_permutation(pe.shape[-1])]


def _swap_pairs(pe: Tensor) -> Tensor:
    """Swap channel 2i with 2i+1: cos where sin belongs."""
    d = pe.shape[-1]
    idx = torch.arange(d).view(-1, 2).flip(-1).reshape(-1)
    return pe[..., idx]


def _table(max_len: int, d_model: int, base: float = 10_000.0, start: int = 0) -> Tensor:
    return _sinusoidal.get_sinusoidal_encoding(max_len + start, d_model, base)[0, start:]  # (L, D)


def _rope_ref(x: Tensor, positions: Tensor, layout: str, base: float = 10_000.0) -> Tensor:
    return _rope.apply_rope(x, positions, base=base, layout=layout)


def _rope_mixed(x: Tensor, positions: Tensor, rotate: str) -> Tensor:
    """Angles laid out for one layout, rotation pairs of the other (a real porting bug)."""
    dh = x.shape[-1]
    theta = _rope.rope_frequencies(dh).double()  # (Dh/2,)
    angle = positions.double()[:, None] * theta[None, :]  # (T, Dh/2)
    xd = x.double()
    if rotate == "half":  # rotate_half, but cos/sin repeated pairwise (interleaved layout)
        cos, sin = angle.cos().repeat_interleave(2, -1), angle.sin().repeat_interleave(2, -1)
        x1, x2 = xd.chunk(2, dim=-1)
        return xd * cos + torch.cat((-x2, x1), dim=-1) * sin
    cos, sin = torch.cat((angle.cos(), angle.cos()), -1), torch.cat((angle.sin(), angle.sin()), -1)
    rotated = torch.stack((-xd[..., 1::2], xd[..., 0::2]), dim=-1).flatten(-2)
    return xd * cos + rotated * sin


def _half_block(m: Tensor) -> Tensor:
    """A matrix acting on interleaved pairs, rewritten for pairs (i, i + D/2)."""
    perm = _rope.rope_layout_permutation(m.shape[-1])
    return m[perm][:, perm]


def _slopes_off_by_one(n: int) -> Tensor:
    """m_h = 2^(-8h/n) from h = 0 (first slope 1), with the paper's rule for other n."""
    def pow2(c: int) -> list[float]:
        return [2.0 ** (-8.0 * h / c) for h in range(c)]
    c = 2 ** math.floor(math.log2(n))
    out = pow2(c) + (pow2(2 * c)[0::2][: n - c] if c != n else [])
    return torch.tensor(out)


def _slopes_naive(n: int) -> Tensor:
    """2^(-8(h+1)/n) for every n: right only for powers of 2."""
    return torch.tensor([2.0 ** (-8.0 * (h + 1) / n) for h in range(n)])


def _slopes_odd_half(n: int) -> Tensor:
    """The extra heads taken from the odd-indexed slopes of 2c heads instead of the even."""
    c = 2 ** math.floor(math.log2(n))
    s = _alibi.alibi_slopes(c).tolist()
    if c != n:
        s += _alibi.alibi_slopes(2 * c).tolist()[1::2][: n - c]
    return torch.tensor(s)


def _slopes_round_up(n: int) -> Tensor:
    """The first n slopes of the next power of 2."""
    return _alibi.alibi_slopes(2 ** math.ceil(math.log2(n)))[:n]


def _sorted_slopes(n: int) -> Tensor:
    return _alibi.alibi_slopes(n).sort(descending=True).values


def _sdpa(q: Tensor, k: Tensor, v: Tensor, **kw: Any) -> Tensor:
    return _attention.scaled_dot_product_attention(q, k, v, **kw)[0]


def _softmax_attention(q: Tensor, k: Tensor, v: Tensor | None, scale: float | None, dim: int,
                       bias: Tensor | None = None, causal: bool = False,
                       bias_before_scale: bool = False) -> Tensor:
    """Attention with the knobs real mistakes turn: the scale, the softmax axis, the bias."""
    scores = q.double() @ k.double().transpose(-2, -1)  # (..., Tq, Tk)
    if bias is not None and bias_before_scale:
        scores = scores + bias.double()
    if scale is not None:
        scores = scores / scale
    if bias is not None and not bias_before_scale:
        scores = scores + bias.double()
    if causal:
        scores = scores.masked_fill(_attention.causal_mask(q.shape[-2], k.shape[-2]), float("-inf"))
    weights = torch.softmax(scores, dim=dim)
    return weights if v is None else weights @ v.double()


def _not_a_rotation(m: Tensor, case: tuple) -> str | None:
    """A square matrix that should be a rotation but is not orthogonal."""
    if m.dim() != 2 or m.shape[0] != m.shape[1] or not torch.isfinite(m).all():
        return None
    eye = torch.eye(m.shape[0], dtype=torch.float64)
    if torch.allclose(m @ m.T, eye, atol=1e-4):
        return None
    return ("your matrix is not a rotation: M @ M.T is not the identity, so some sin entries have "
            "the wrong sign, or the blocks sit in the wrong places")


# ======================================================================================
# Lesson 01: attention by hand, and why it needs positions
# ======================================================================================

_ATTN_FORBIDDEN = ("posenc_lesson.scaled_dot_product_attention",
                   "torch.nn.functional.scaled_dot_product_attention")


def _attention_cases() -> list[tuple]:
    g = _gen(101)
    return [
        (_randn(g, 5, 4), _randn(g, 5, 4), _randn(g, 5, 3)),
        (_randn(g, 2, 6, 8), _randn(g, 2, 7, 8), _randn(g, 2, 7, 5)),
        (_randn(g, 2, 3, 4, 8), _randn(g, 2, 3, 4, 8), _randn(g, 2, 3, 4, 8)),
    ]


def _attention_mistakes(with_v: bool) -> list[_Mistake]:
    """Attention (with_v) or its weights (not with_v) as real mistakes compute them."""
    def wrong(scale: Callable[[int], float | None], dim: int, use_v: bool = True) -> Callable[..., Tensor]:
        def compute(q: Tensor, k: Tensor, v: Tensor | None = None) -> Tensor:
            return _softmax_attention(q, k, v if (with_v and use_v) else None, scale(q.shape[-1]), dim)
        return compute

    mistakes = [
        _Mistake(wrong(math.sqrt, -2),
                 "the softmax normalises over the wrong axis: over the queries instead of the keys.",
                 "the scores have shape (..., Tq, Tk); each query's weights over the keys must sum "
                 "to 1, so take the softmax over the last axis (dim=-1)."),
        _Mistake(wrong(math.sqrt, 1),
                 "the softmax runs over axis 1, which is the key axis only for 2-D input; with "
                 "batch (and head) axes in front it normalises over the wrong axis.",
                 "count axes from the end: the keys are the last axis of (..., Tq, Tk) whatever "
                 "comes in front."),
        _Mistake(wrong(float, -1),
                 "the scores are divided by Dh instead of sqrt(Dh): the weights come out too flat.",
                 "scale by 1 / sqrt(Dh), where Dh = q.shape[-1] (math.sqrt or ** 0.5)."),
        _Mistake(wrong(lambda dh: None, -1),
                 "the scores are not scaled at all: the weights come out too peaked.",
                 "divide q k^T by sqrt(Dh) before the softmax, where Dh = q.shape[-1]."),
    ]
    if with_v:
        mistakes.append(_Mistake(
            wrong(math.sqrt, -1, use_v=False),
            "you returned the attention weights, not the output.",
            "multiply the weights (..., Tq, Tk) by v (..., Tk, Dv) to get (..., Tq, Dv)."))
    return mistakes


_register(Task(
    id="01_attention",
    title="Scaled dot-product attention",
    points=2,
    entry="attention",
    forbidden=_ATTN_FORBIDDEN,
    cases=_attention_cases,
    run=_call,
    judge=_tensor_judge(lambda q, k, v: _sdpa(q, k, v), _attention_mistakes(True), ("q", "k", "v"),
                        "out = softmax(q k^T / sqrt(Dh)) v, softmax over the keys (last axis)."),
))

_register(Task(
    id="01_fix_softmax_axis",
    title="Attention weights (find the bug)",
    points=1,
    entry="attention_weights",
    forbidden=_ATTN_FORBIDDEN,
    cases=lambda: [(q, k) for q, k, _ in _attention_cases()],
    run=_call,
    judge=_tensor_judge(lambda q, k: _attention.scaled_dot_product_attention(q, k, k)[1],
                        _attention_mistakes(False), ("q", "k"),
                        "weights = softmax(q k^T / sqrt(Dh)), each row summing to 1 over the keys.",
                        partial=False),
))


# ---- the permutation check ------------------------------------------------------------

def self_attention(x: Tensor) -> Tensor:
    """Plain self-attention, q = k = v = x."""
    return _sdpa(x, x, x)


def causal_self_attention(x: Tensor) -> Tensor:
    """Self-attention where token t sees tokens 0..t only."""
    return _sdpa(x, x, x, causal=True)


def attention_with_positions(x: Tensor) -> Tensor:
    """Self-attention after adding the sinusoidal encoding."""
    x = x + _table(x.shape[-2], x.shape[-1])
    return _sdpa(x, x, x)


def running_mean(x: Tensor) -> Tensor:
    """Mean of tokens 0..t at every t."""
    return x.cumsum(-2) / torch.arange(1, x.shape[-2] + 1, dtype=x.dtype)[:, None]


def rms_norm(x: Tensor) -> Tensor:
    """Each token divided by its root-mean-square, token by token."""
    return x / x.pow(2).mean(-1, keepdim=True).sqrt()


_PERM = torch.tensor([2, 0, 5, 1, 3, 4])  # not its own inverse, so the direction matters


def _permutation_cases() -> list[tuple]:
    g = _gen(102)
    fns = (self_attention, causal_self_attention, attention_with_positions, running_mean, rms_norm)
    return [(f, _randn(g, 6, 4), _PERM.clone()) for f in fns]


def _equivariant(f: Callable, x: Tensor, perm: Tensor) -> bool:
    return bool(torch.allclose(f(x[perm]), f(x)[perm], rtol=RTOL, atol=ATOL))


_NOT_PERMUTED_ALIKE = ("your answers match comparing f(x[perm]) with an output that is not permuted "
                       "the same way: f(x) unpermuted, or f(x) permuted with the inverse permutation.")
_PERMUTATION_MISTAKES: list[tuple[Callable[[Callable, Tensor, Tensor], bool], str, str]] = [
    (lambda f, x, p: bool(torch.allclose(f(x[p]), f(x)[torch.argsort(p)], rtol=RTOL, atol=ATOL)),
     _NOT_PERMUTED_ALIKE,
     "an equivariant f moves its output rows along with the input rows: apply the same perm to "
     "both sides, f(x[perm]) versus f(x)[perm]."),
    (lambda f, x, p: bool(torch.allclose(f(x[p]), f(x), rtol=RTOL, atol=ATOL)),
     _NOT_PERMUTED_ALIKE,
     "an equivariant f moves its output rows along with the input rows: apply the same perm to "
     "both sides, f(x[perm]) versus f(x)[perm]."),
    (lambda f, x, p: bool(torch.equal(f(x[p]), f(x)[p])),
     "your answers match an exact comparison (==): sums taken in a different order differ in "
     "the last bits.",
     "compare floats with a tolerance: torch.allclose(a, b, atol=1e-5)."),
]


def _judge_permutation(outputs: list, cases: list) -> tuple[float, str]:
    refs = [_equivariant(*case) for case in cases]
    got: list[bool | None] = []
    for out in outputs:
        if isinstance(out, bool):
            got.append(out)
        elif isinstance(out, Tensor) and out.numel() == 1 and not out.is_complex():
            got.append(bool(out.item()))
        else:
            got.append(None)
    if got == refs:
        return 1.0, f"passed: all {len(cases)} functions classified correctly."
    for n, out in enumerate(outputs):
        if _is_marker(out, "error"):
            return 0.0, _feedback(f"your code raised {out['error']}\n  for f={_describe(cases[n][0])}.",
                                  "index the token axis: x[perm] permutes the rows of a (T, D) x.")
        if got[n] is None:
            return 0.0, _feedback(f"expected True or False, got {_type_text(out)} for "
                                  f"f={_describe(cases[n][0])}.",
                                  "return a bool, e.g. bool(torch.allclose(a, b, atol=1e-5)).")
    for rule, diagnosis, hint in _PERMUTATION_MISTAKES:
        if got == [rule(*case) for case in cases]:
            return 0.0, _feedback(diagnosis, hint)
    wrong = [_describe(cases[n][0]) for n in range(len(cases)) if got[n] != refs[n]]
    return 0.0, _feedback(f"wrong answer for f = {', '.join(wrong)}.",
                          "permute the tokens of x, apply f, and compare with f(x) permuted the "
                          "same way, with a tolerance.")


_register(Task(
    id="01_permutation_check",
    title="The permutation check",
    points=2,
    entry="is_permutation_equivariant",
    forbidden=(),
    cases=_permutation_cases,
    run=_call,
    judge=_judge_permutation,
))


# ======================================================================================
# Lesson 02: the sinusoidal table and its wavelengths
# ======================================================================================

_SINUSOIDAL_FORBIDDEN = ("posenc_lesson.get_sinusoidal_encoding", "posenc_lesson.sinusoidal_frequencies",
                         "posenc_lesson.sinusoidal_wavelengths", "posenc_lesson.rope_frequencies")

_TABLE_HINT = ("PE[pos, 2i] = sin(pos / 10000^(2i/d_model)), PE[pos, 2i+1] = cos(same angle), "
               "with pos = 0 .. max_len-1 and i = 0 .. d_model/2-1.")

_TABLE_MISTAKES = [
    _Mistake(lambda n, d: _table(n, d, base=100.0),
             "the exponent is off by a factor of 2: your frequencies are 10000^(-i/d_model), "
             "not 10000^(-2i/d_model).",
             "i counts channel *pairs* (0 .. d_model/2-1), and the exponent is 2i/d_model; "
             "torch.arange(0, d_model, 2) already gives the values 2i."),
    _Mistake(lambda n, d: _table(n, d, base=1e8),
             "the exponent is twice too large: your frequencies are 10000^(-4i/d_model).",
             "torch.arange(0, d_model, 2) already holds 2i; do not multiply it by 2 again."),
    _Mistake(lambda n, d: _interleaved_to_concat(_table(n, d)),
             "your sin and cos are concatenated [sin ..., cos ...] (the tensor2tensor layout), "
             "not interleaved [sin, cos, sin, cos, ...].",
             "write the sines into the even channels and the cosines into the odd ones: "
             "pe[:, 0::2] and pe[:, 1::2]."),
    _Mistake(lambda n, d: _swap_pairs(_table(n, d)),
             "sin and cos are swapped: cos is in the even channels.",
             "channel 2i holds the sine, channel 2i+1 the cosine."),
    _Mistake(lambda n, d: _table(n, d, start=1),
             "the positions are off by one: your first row is position 1.",
             "positions are 0-based: torch.arange(max_len) gives 0 .. max_len-1."),
    _Mistake(lambda n, d: _table(n, d)[None],
             "your table has a leading batch axis, shape (1, max_len, d_model).",
             "this task asks for the 2-D table (max_len, d_model); drop the unsqueeze(0)."),
    _Mistake(lambda n, d: _table(n, d).T,
             "your table is transposed: (d_model, max_len).",
             "one row per position: shape (max_len, d_model)."),
]


def _table_cases() -> list[tuple]:
    return [(10, 8), (50, 16), (7, 6)]


_register(Task(
    id="02_sinusoidal_table",
    title="The sinusoidal table",
    points=3,
    entry="sinusoidal_table",
    forbidden=_SINUSOIDAL_FORBIDDEN,
    cases=_table_cases,
    run=_call,
    judge=_tensor_judge(_table, _TABLE_MISTAKES, ("max_len", "d_model"), _TABLE_HINT),
))


def _wavelengths(d: int, base: float = 10_000.0) -> Tensor:
    return _sinusoidal.sinusoidal_wavelengths(d, base)


_register(Task(
    id="02_wavelengths",
    title="The wavelengths",
    points=2,
    entry="wavelengths",
    forbidden=_SINUSOIDAL_FORBIDDEN,
    cases=lambda: [(8,), (64,), (512,), (6,)],
    run=_call,
    judge=_tensor_judge(_wavelengths, [
        _Mistake(lambda d: _sinusoidal.sinusoidal_frequencies(d),
                 "you returned the angular frequencies omega_i, not the wavelengths.",
                 "a wave sin(pos * omega) repeats every 2 pi / omega positions."),
        _Mistake(lambda d: _wavelengths(d) / (2 * math.pi),
                 "your wavelengths are 2 pi times too short: 10000^(2i/d_model) is 1/omega_i, in "
                 "positions per radian.",
                 "one full turn is 2 pi radians: lambda_i = 2 pi / omega_i."),
        _Mistake(lambda d: _wavelengths(d, base=100.0),
                 "the exponent is off by a factor of 2: 10000^(i/d_model) instead of 10000^(2i/d_model).",
                 "i counts channel pairs; the exponent is 2i/d_model."),
        _Mistake(lambda d: _wavelengths(d, base=1e8),
                 "the exponent is twice too large: 10000^(4i/d_model).",
                 "torch.arange(0, d_model, 2) already holds 2i."),
    ], ("d_model",), "lambda_i = 2 pi * 10000^(2i/d_model), one per channel pair, shape (d_model // 2,)."),
))

_register(Task(
    id="02_fix_exponent",
    title="The sinusoidal table (find the bug)",
    points=2,
    entry="sinusoidal_table_fixed",
    forbidden=_SINUSOIDAL_FORBIDDEN,
    cases=lambda: [(12, 8), (40, 32), (5, 4)],
    run=_call,
    judge=_tensor_judge(_table, _TABLE_MISTAKES, ("max_len", "d_model"), _TABLE_HINT, partial=False),
))


# ======================================================================================
# Lesson 03: PE[pos + k] = M_k PE[pos]
# ======================================================================================

_OFFSET_FORBIDDEN = ("posenc_lesson.sinusoidal_offset_matrix", "posenc_lesson.rope_rotation_matrix",
                     "posenc_lesson.apply_rope")


def _offset(k: int, d: int, base: float = 10_000.0) -> Tensor:
    return _sinusoidal.sinusoidal_offset_matrix(k, d, base)


_OFFSET_SIGN = ("the rotation turns the wrong way: your matrix is M_k transposed, which is "
                "M_(-k): it moves k positions back.")
_OFFSET_SIGN_HINT = ("write out sin(a + b) and cos(a + b) with the angle-addition formulas for a "
                     "(sin, cos) pair: which entry of the 2x2 block carries the minus sign? It is "
                     "not where the usual rotation matrix [[cos, -sin], [sin, cos]] has it.")

_register(Task(
    id="03_offset_matrix",
    title="The offset matrix M_k",
    points=3,
    entry="offset_matrix",
    forbidden=_OFFSET_FORBIDDEN,
    cases=lambda: [(1, 8), (5, 16), (-3, 8), (100, 4), (0, 6)],
    run=_call,
    judge=_tensor_judge(_offset, [
        _Mistake(lambda k, d: _offset(-k, d), _OFFSET_SIGN, _OFFSET_SIGN_HINT),
        _Mistake(lambda k, d: _offset(k, d, base=100.0),
                 "the exponent is off by a factor of 2: omega_i = 10000^(-i/d_model).",
                 "omega_i = 10000^(-2i/d_model), i = 0 .. d_model/2-1."),
        _Mistake(lambda k, d: _half_block(_offset(k, d)),
                 "your blocks pair channel i with i + d_model/2; the table pairs (2i, 2i+1).",
                 "put the 2x2 block of pair i at rows and columns 2i and 2i+1."),
        _Mistake(lambda k, d: _offset(1, d),
                 "your matrix does not depend on k: it shifts by one position.",
                 "the angle of pair i is k * omega_i."),
    ], ("k", "d_model"), "M_k is block-diagonal; block i acts on channels (2i, 2i+1) and turns the angle "
                         "by k * omega_i.", symptom=_not_a_rotation),
))


def _pe_dot(k: int, d: int, base: float = 10_000.0) -> Tensor:
    omega = _sinusoidal.sinusoidal_frequencies(d, base)  # (D/2,)
    return torch.cos(k * omega).sum()


_register(Task(
    id="03_offset_dot",
    title="The dot product PE[pos] . PE[pos + k]",
    points=2,
    entry="pe_dot",
    forbidden=(),
    cases=lambda: [(0, 8), (1, 8), (7, 16), (-7, 16), (30, 64)],
    run=lambda fn, case: (lambda out: out.reshape(()) if isinstance(out, Tensor) and out.numel() == 1
                          else out)(fn(*case)),
    judge=_tensor_judge(_pe_dot, [
        _Mistake(lambda k, d: _pe_dot(k, d, base=100.0),
                 "the exponent is off by a factor of 2: omega_i = 10000^(-i/d_model).",
                 "omega_i = 10000^(-2i/d_model)."),
        _Mistake(lambda k, d: torch.sin(k * _sinusoidal.sinusoidal_frequencies(d)).sum(),
                 "you summed sines; the sin*sin + cos*cos of each pair gives a cosine.",
                 "cos(a - b) = cos a cos b + sin a sin b."),
        _Mistake(lambda k, d: _pe_dot(k, d) / (d // 2),
                 "you took the mean over the pairs, not the sum.",
                 "a dot product sums over all d_model channels, that is over all d_model/2 pairs."),
        _Mistake(lambda k, d: torch.cos(k * _sinusoidal.sinusoidal_frequencies(d)),
                 "you returned one term per pair, not their sum.",
                 "return a single number: the sum over i."),
    ], ("k", "d_model"), "pair i contributes sin(a)sin(b) + cos(a)cos(b) with a - b = -k * omega_i."),
))

_register(Task(
    id="03_fix_rotation_sign",
    title="Shifting an encoding by k (find the bug)",
    points=2,
    entry="shift_encoding",
    forbidden=_OFFSET_FORBIDDEN,
    cases=lambda: [(_table(8, 8)[:, :], 5), (_randn(_gen(103), 4, 16), -2), (_table(20, 4, start=3), 11)],
    run=_call,
    judge=_tensor_judge(lambda pe, k: pe.double() @ _offset(k, pe.shape[-1]).double().T, [
        _Mistake(lambda pe, k: pe.double() @ _offset(-k, pe.shape[-1]).double().T,
                 "your rows move k positions back, not forward: the rotation's sign is flipped "
                 "(M_k transposed, or the rows multiplied by M_k from the wrong side).",
                 _OFFSET_SIGN_HINT),
    ], ("pe", "k"), "row r of the answer is M_k @ pe[r]: each (sin, cos) pair turned by k * omega_i.",
        partial=False),
))


# ======================================================================================
# Lesson 04: a learned table, and a sinusoidal one ported from tensor2tensor
# ======================================================================================

def _learned_cases() -> list[tuple]:
    g = _gen(104)
    return [(8, 4, _randn(g, 2, 5, 4), _randn(g, 8, 4)),
            (6, 3, _randn(g, 1, 6, 3), _randn(g, 6, 3)),
            (4, 2, _randn(g, 2, 7, 2), _randn(g, 4, 2))]


def _run_learned(cls: Callable, case: tuple) -> dict:
    """Build the module (seeded), check its table, load a known table, call it on x."""
    max_len, d_model, x, table = case
    with torch.random.fork_rng():
        torch.manual_seed(0)
        module = cls(max_len, d_model)
    found = getattr(module, "table", None)
    info: dict[str, Any] = {"is_module": isinstance(module, nn.Module),
                            "is_parameter": isinstance(found, nn.Parameter),
                            "table_shape": list(found.shape) if isinstance(found, Tensor) else None}
    if isinstance(found, Tensor) and tuple(found.shape) == (max_len, d_model):
        with torch.no_grad():
            found.copy_(table)
    try:
        info["out"] = module(x)
    except Exception as exc:  # judged: T > max_len must raise ValueError
        info.update(_error(exc))
    return info


_LEARNED_HINT = ("store the table as self.table = nn.Parameter(...) of shape (max_len, d_model); "
                 "forward(x) checks T = x.shape[1] against max_len and returns x + table[:T].")


def _judge_learned(outputs: list, cases: list) -> tuple[float, str]:
    problems: list[str] = []
    passed = 0
    for out, (max_len, d_model, x, table) in zip(outputs, cases, strict=True):
        t = x.shape[1]
        where = f"max_len={max_len}, d_model={d_model}, x of shape {tuple(x.shape)}"
        if _is_marker(out, "error") and "out" not in out and "table_shape" not in out:
            problems.append(f"building or calling your module raised {out['error']} ({where}).")
            continue
        if not isinstance(out, dict):
            problems.append(f"could not read your module's result ({where}).")
            continue
        if _not_implemented(out):
            return 0.0, NOT_IMPLEMENTED
        if not out.get("is_module"):
            problems.append("your class is not an nn.Module: subclass torch.nn.Module so the "
                            "table is trained and saved with the model.")
            continue
        if out.get("table_shape") != [max_len, d_model]:
            problems.append(f"self.table should have shape ({max_len}, {d_model}) = (max_len, d_model); "
                            f"got {out.get('table_shape')}.")
            continue
        if not out.get("is_parameter"):
            problems.append("self.table is a plain tensor, not an nn.Parameter: the optimiser "
                            "would never update it.")
            continue
        if t > max_len:
            error = out.get("error", "")
            if error.startswith("ValueError"):
                passed += 1
            elif error:
                problems.append(f"for T={t} > max_len={max_len} your module raised {error}; raise a "
                                f"ValueError yourself, with a message naming T and max_len.")
            else:
                problems.append(f"for T={t} > max_len={max_len} your module returned a result; a "
                                f"learned table has no rows past max_len, so raise a ValueError.")
            continue
        if "error" in out:
            problems.append(f"your forward raised {out['error']} ({where}).")
            continue
        got = _as_float_tensor(out.get("out"))
        expected = x.double() + table.double()[:t]
        if _close(got, expected):
            passed += 1
        elif got is not None and _close(got, table.double()[:t].expand_as(expected)):
            problems.append("your forward returns the position vectors only; add them to x.")
        elif got is not None and _close(got, x.double()):
            problems.append("your forward returns x unchanged; add the table's first T rows.")
        elif got is not None and t < max_len and _close(got, x.double() + table.double()[1:t + 1]):
            problems.append("the positions are off by one: token 0 must get row 0 of the table.")
        elif got is not None and tuple(got.shape) != tuple(expected.shape):
            problems.append(f"wrong shape for {where}: expected {tuple(expected.shape)}, "
                            f"got {tuple(got.shape)}.")
        else:
            problems.append(f"wrong values for {where}: expected x plus the first T rows of the table.")
    fraction = passed / len(cases)
    if not problems:
        return 1.0, f"passed: all {len(cases)} cases behave as expected."
    return fraction, _feedback(problems[0], _LEARNED_HINT)


_register(Task(
    id="04_learned_embedding",
    title="A learned positional embedding",
    points=3,
    entry="LearnedPositions",
    forbidden=("posenc_lesson.LearnedPositionalEmbedding",),
    cases=_learned_cases,
    run=_run_learned,
    judge=_judge_learned,
))


def _add_table(x: Tensor) -> Tensor:
    return x.double() + _table(x.shape[1], x.shape[2]).double()


_register(Task(
    id="04_fix_concat",
    title="Adding the sinusoidal table (find the bug)",
    points=2,
    entry="add_sinusoidal",
    forbidden=_SINUSOIDAL_FORBIDDEN,
    cases=lambda: [(_randn(_gen(105), 2, 5, 8),), (_randn(_gen(106), 1, 12, 16),),
                   (_randn(_gen(107), 3, 4, 6),)],
    run=_call,
    judge=_tensor_judge(_add_table, [
        _Mistake(lambda x: x + _interleaved_to_concat(_table(x.shape[1], x.shape[2])),
                 _TABLE_MISTAKES[2].diagnosis, _TABLE_MISTAKES[2].hint),
        _Mistake(lambda x: x + _table(x.shape[1], x.shape[2], base=100.0),
                 _TABLE_MISTAKES[0].diagnosis, _TABLE_MISTAKES[0].hint),
        _Mistake(lambda x: x + _swap_pairs(_table(x.shape[1], x.shape[2])),
                 _TABLE_MISTAKES[3].diagnosis, _TABLE_MISTAKES[3].hint),
        _Mistake(lambda x: _table(x.shape[1], x.shape[2]).expand_as(x),
                 "you returned the table alone; add it to x.", "return x + pe, pe of shape (T, D)."),
    ], ("x",), "return x + PE[:T] with the interleaved table of the paper.", partial=False),
))


# ======================================================================================
# Lesson 05: RoPE, both layouts, the matrix, converting between layouts
# ======================================================================================

_ROPE_FORBIDDEN = ("posenc_lesson.apply_rope", "posenc_lesson.rope_rotation_matrix",
                   "posenc_lesson.sinusoidal_offset_matrix")


def _rope_cases() -> list[tuple]:
    g = _gen(108)
    return [(_randn(g, 5, 8), torch.arange(5)),
            (_randn(g, 2, 3, 6, 4), torch.arange(6)),
            (_randn(g, 2, 4, 16), torch.arange(10, 14))]


def _rope_mistakes(layout: str) -> list[_Mistake]:
    other = "half" if layout == "interleaved" else "interleaved"
    pairs = {"interleaved": "(2i, 2i+1)", "half": "(i, i + Dh/2)"}
    return [
        _Mistake(lambda x, p: _rope_ref(x, p, other),
                 f"layouts swapped: your output is the {other} layout, pairs {pairs[other]}.",
                 f"this task pairs channels {pairs[layout]}."
                 + (" x[..., 0::2] and x[..., 1::2] are the two coordinates of each pair."
                    if layout == "interleaved" else
                    " The first half of the channels and the second half are the two coordinates.")),
        _Mistake(lambda x, p: _rope_ref(x, -p, layout),
                 "the sign is flipped: you rotate by -m theta_i (the transposed rotation).",
                 "x'_a = x_a cos - x_b sin and x'_b = x_a sin + x_b cos: the minus sign goes on "
                 "the first coordinate's update."),
        _Mistake(lambda x, p: _rope_ref(x, p, layout, base=100.0),
                 "the exponent is off by a factor of 2: theta_i = 10000^(-i/Dh) instead of "
                 "10000^(-2i/Dh).",
                 "i counts pairs, i = 0 .. Dh/2-1, and the exponent is -2i/Dh."),
        _Mistake(lambda x, p: _rope_ref(x, p, layout, base=1e8),
                 "the exponent is twice too large: theta_i = 10000^(-4i/Dh).",
                 "torch.arange(0, Dh, 2) already holds 2i."),
        _Mistake(lambda x, p: _rope_ref(x, p + 1, layout),
                 "the positions are off by one: you rotate token m by (m + 1) theta_i.",
                 "use the positions you are given as they are; they are 0-based."),
        _Mistake(lambda x, p: _rope_ref(x, p - 1, layout),
                 "the positions are off by one: you rotate token m by (m - 1) theta_i.",
                 "use the positions you are given as they are; they are 0-based."),
        _Mistake(lambda x, p: _rope_ref(x, torch.arange(x.shape[-2]), layout),
                 "you ignore the positions argument and rotate by 0 .. T-1.",
                 "rotate token t by positions[t] * theta_i (with a KV cache they do not start at 0)."),
        _Mistake(lambda x, p: _rope_mixed(x, p, "half" if layout == "interleaved" else "interleaved"),
                 "the pairing is mixed up: your cos/sin are laid out for one layout and the "
                 "rotation pairs channels the other way.",
                 f"the angle of pair i must multiply exactly the two channels {pairs[layout]}."),
        _Mistake(lambda x, p: _rope_mixed(x, p, layout),
                 "the pairing is mixed up: your cos/sin are laid out for one layout and the "
                 "rotation pairs channels the other way.",
                 f"the angle of pair i must multiply exactly the two channels {pairs[layout]}."),
    ]


for _layout, _points in (("interleaved", 3), ("half", 3)):
    _register(Task(
        id=f"05_apply_rope_{_layout}",
        title=f"RoPE, {_layout} layout",
        points=_points,
        entry=f"apply_rope_{_layout}",
        forbidden=_ROPE_FORBIDDEN,
        cases=_rope_cases,
        run=_call,
        judge=_tensor_judge(functools.partial(_rope_ref, layout=_layout), _rope_mistakes(_layout),
                            ("x", "positions"),
                            "rotate pair i of token t by the angle positions[t] * theta_i, "
                            "theta_i = 10000^(-2i/Dh)."),
    ))


def _rope_matrix(m: int, dh: int, base: float = 10_000.0) -> Tensor:
    return _rope.rope_rotation_matrix(m, dh, base)


_register(Task(
    id="05_rotation_matrix",
    title="The RoPE rotation matrix R_m",
    points=2,
    entry="rope_matrix",
    forbidden=_ROPE_FORBIDDEN,
    cases=lambda: [(1, 4), (3, 8), (-2, 8), (10, 6)],
    run=_call,
    judge=_tensor_judge(_rope_matrix, [
        _Mistake(lambda m, dh: _rope_matrix(-m, dh),
                 "the sign is flipped: your matrix is R_m transposed, a rotation by -m theta_i.",
                 "each block is [[cos, -sin], [sin, cos]] acting on a column vector: the minus "
                 "sign is in the first row."),
        _Mistake(lambda m, dh: _half_block(_rope_matrix(m, dh)),
                 "your blocks pair channel i with i + Dh/2 (the half layout); this task asks for "
                 "the interleaved one.",
                 "put block i at rows and columns 2i and 2i+1."),
        _Mistake(lambda m, dh: _rope_matrix(m, dh, base=100.0),
                 "the exponent is off by a factor of 2: theta_i = 10000^(-i/Dh).",
                 "theta_i = 10000^(-2i/Dh), i = 0 .. Dh/2-1."),
        _Mistake(lambda m, dh: _rope_matrix(m + 1, dh),
                 "the position is off by one: you rotate by (m + 1) theta_i.",
                 "position m turns pair i by exactly m * theta_i."),
    ], ("position", "head_dim"), "R_m is block-diagonal; block i rotates channels (2i, 2i+1) by "
                                 "m * theta_i, so that R_m @ x is RoPE applied to x at position m.",
        symptom=_not_a_rotation),
))


def _convert(w: Tensor, h: int) -> Tensor:
    return _rope.convert_rope_weight(w, h)


def _convert_cases() -> list[tuple]:
    g = _gen(109)
    return [(_randn(g, 8, 3), 1), (_randn(g, 16, 5), 2), (_randn(g, 24), 3)]


_register(Task(
    id="05_convert_layout",
    title="Converting a projection from the interleaved to the half layout",
    points=2,
    entry="interleaved_to_half",
    forbidden=("posenc_lesson.convert_rope_weight", "posenc_lesson.rope_layout_permutation"),
    cases=_convert_cases,
    run=_call,
    judge=_tensor_judge(_convert, [
        _Mistake(lambda w, h: _rope.convert_rope_weight(w, h, src="half", dst="interleaved"),
                 "you converted the other way, from the half layout to the interleaved one "
                 "(the inverse permutation).",
                 "row 2i of a head goes to row i, row 2i+1 to row i + Dh/2: the new order lists "
                 "the even rows first, then the odd ones."),
        _Mistake(lambda w, h: _convert(w, 1),
                 "you permuted all the rows as if there were one head: each head must be "
                 "permuted on its own.",
                 "reshape the rows to (num_heads, Dh, ...), permute the Dh axis, reshape back."),
        _Mistake(lambda w, h: _convert(w.T, h).T if w.dim() == 2 else _convert(w, h),
                 "you permuted the columns (the input features); the layout lives in the rows "
                 "(the output features of the projection).",
                 "nn.Linear.weight has shape (out_features, in_features); permute axis 0."),
    ], ("weight", "num_heads"), "per head, reorder the Dh output rows so that interleaved pair "
                                "(2i, 2i+1) becomes half pair (i, i + Dh/2)."),
))

_register(Task(
    id="05_fix_pairing",
    title="RoPE with rotate_half (find the bug)",
    points=2,
    entry="rope_half_fixed",
    forbidden=_ROPE_FORBIDDEN,
    cases=_rope_cases,
    run=_call,
    judge=_tensor_judge(functools.partial(_rope_ref, layout="half"), _rope_mistakes("half"),
                        ("x", "positions"),
                        "with rotate_half, channel j and channel j + Dh/2 form one pair and must "
                        "share the angle of that pair.", partial=False),
))


# ======================================================================================
# Lesson 06: ALiBi
# ======================================================================================

_SLOPE_CASES = [(8,), (16,), (1,), (12,), (6,), (24,)]


def _slope_mistakes() -> list[_Mistake]:
    return [
        _Mistake(_slopes_off_by_one,
                 "your slopes are off by one: the first head gets slope 1 = 2^0.",
                 "for n heads (n a power of 2) the slopes are 2^(-8/n), 2^(-16/n), ..., 2^(-8): "
                 "head h (0-based) has exponent -8(h+1)/n."),
        _Mistake(_slopes_naive,
                 "for a head count that is not a power of 2 you used the power-of-2 formula "
                 "with n itself: slopes for the wrong head count.",
                 "the paper takes the slopes of the largest power of 2 c below n, then adds "
                 "n - c slopes from 2c heads, every other one starting with the first."),
        _Mistake(_slopes_odd_half,
                 "the extra heads (n not a power of 2) are taken from every other slope of 2c "
                 "heads starting at the second; the paper starts at the first.",
                 "slopes(2c)[0::2], not [1::2]."),
        _Mistake(_slopes_round_up,
                 "for n not a power of 2 you took the first n slopes of the next power of 2: "
                 "slopes for the wrong head count.",
                 "start from the power of 2 *below* n, then append n - c slopes from 2c heads, "
                 "every other one."),
        _Mistake(_sorted_slopes,
                 "your slopes are right but sorted; the paper appends the extra heads at the "
                 "end, unsorted, and checkpoints depend on that order.",
                 "do not sort: the slopes of c heads first, then the extra ones."),
    ]


_SLOPE_HINT = ("m_h = 2^(-8(h+1)/n) for n a power of 2; otherwise the slopes of the power of 2 "
               "below n, then extra ones from twice that many heads.")

_register(Task(
    id="06_alibi_slopes",
    title="ALiBi slopes",
    points=3,
    entry="get_slopes",
    forbidden=("posenc_lesson.alibi_slopes", "posenc_lesson.alibi_bias"),
    cases=lambda: list(_SLOPE_CASES),
    run=_call,
    judge=_tensor_judge(_alibi.alibi_slopes, _slope_mistakes(), ("num_heads",), _SLOPE_HINT),
))

_register(Task(
    id="06_fix_slopes",
    title="ALiBi slopes (find the bug)",
    points=2,
    entry="get_slopes_fixed",
    forbidden=("posenc_lesson.alibi_slopes", "posenc_lesson.alibi_bias"),
    cases=lambda: list(_SLOPE_CASES),
    run=_call,
    judge=_tensor_judge(_alibi.alibi_slopes, _slope_mistakes(), ("num_heads",), _SLOPE_HINT,
                        partial=False),
))


def _distance(t: int) -> Tensor:
    pos = torch.arange(t)
    return (pos[:, None] - pos[None, :]).double()  # (T, T): i - j


_register(Task(
    id="06_alibi_bias",
    title="The ALiBi bias",
    points=2,
    entry="alibi_bias_matrix",
    forbidden=("posenc_lesson.alibi_bias",),
    cases=lambda: [(8, 5), (4, 6), (12, 3), (1, 1)],
    run=_call,
    judge=_tensor_judge(lambda h, t: _alibi.alibi_bias(h, t), [
        _Mistake(lambda h, t: -_alibi.alibi_bias(h, t),
                 "the sign is flipped: your bias rewards distant keys.",
                 "ALiBi's bias is negative, -m_h |i - j|: farther keys get less attention."),
        _Mistake(lambda h, t: -_alibi.alibi_slopes(h).double()[:, None, None] * _distance(t),
                 "your bias is -m_h (i - j) without the absolute value: right below the diagonal, "
                 "but positive above it.",
                 "this task asks for the symmetric bias -m_h |i - j| (the causal mask hides j > i)."),
        _Mistake(lambda h, t: _alibi.alibi_slopes(h).double()[:, None, None] * _distance(t),
                 "your bias is m_h (i - j): the sign is flipped, and it is not symmetric.",
                 "ALiBi's bias is -m_h |i - j|."),
        _Mistake(lambda h, t: -_slopes_off_by_one(h).double()[:, None, None] * _distance(t).abs(),
                 _slope_mistakes()[0].diagnosis, _slope_mistakes()[0].hint),
        _Mistake(lambda h, t: _alibi.alibi_bias(h, t).permute(1, 2, 0),
                 "your heads are on the last axis: shape (T, T, H).",
                 "return (num_heads, seq_len, seq_len), heads first, so it broadcasts against "
                 "(B, H, T, T) scores."),
    ], ("num_heads", "seq_len"), "bias[h, i, j] = -m_h * |i - j|, shape (num_heads, seq_len, seq_len)."),
))


def _alibi_attention_cases() -> list[tuple]:
    g = _gen(110)
    return [(_randn(g, 1, 4, 5, 8), _randn(g, 1, 4, 5, 8), _randn(g, 1, 4, 5, 8)),
            (_randn(g, 2, 8, 6, 4), _randn(g, 2, 8, 6, 4), _randn(g, 2, 8, 6, 3)),
            (_randn(g, 1, 6, 4, 8), _randn(g, 1, 6, 4, 8), _randn(g, 1, 6, 4, 8))]


def _alibi_attention(q: Tensor, k: Tensor, v: Tensor, **kw: Any) -> Tensor:
    bias = _alibi.alibi_bias(q.shape[1], q.shape[2]).double()
    options = {"scale": math.sqrt(q.shape[-1]), "dim": -1, "bias": bias, "causal": True} | kw
    return _softmax_attention(q, k, v, **options)


_register(Task(
    id="06_alibi_attention",
    title="Causal attention with ALiBi",
    points=3,
    entry="alibi_attention",
    forbidden=_ATTN_FORBIDDEN,
    cases=_alibi_attention_cases,
    run=_call,
    judge=_tensor_judge(_alibi_attention, [
        _Mistake(lambda q, k, v: _alibi_attention(q, k, v, bias=-_alibi.alibi_bias(q.shape[1], q.shape[2])),
                 "the bias has the wrong sign: distant keys get *more* attention.",
                 "add -m_h |i - j| to the scores, a penalty."),
        _Mistake(lambda q, k, v: _alibi_attention(q, k, v, causal=False),
                 "there is no causal mask: query i also sees keys j > i.",
                 "mask the scores above the diagonal with -inf before the softmax."),
        _Mistake(lambda q, k, v: _alibi_attention(q, k, v, bias=None),
                 "the ALiBi bias is missing: this is plain causal attention.",
                 "add the (H, T, T) bias to the scaled scores; it broadcasts over the batch."),
        _Mistake(lambda q, k, v: _alibi_attention(q, k, v, bias_before_scale=True),
                 "the bias is divided by sqrt(Dh) too: you added it before scaling.",
                 "scores = q k^T / sqrt(Dh) + bias: scale first, then add the bias."),
        _Mistake(lambda q, k, v: _alibi_attention(q, k, v, dim=-2),
                 _attention_mistakes(True)[0].diagnosis, _attention_mistakes(True)[0].hint),
        _Mistake(lambda q, k, v: _alibi_attention(
                     q, k, v, bias=-_slopes_off_by_one(q.shape[1]).double()[:, None, None]
                     * _distance(q.shape[2]).abs()),
                 _slope_mistakes()[0].diagnosis, _slope_mistakes()[0].hint),
    ], ("q", "k", "v"), "scores = q k^T / sqrt(Dh) - m_h |i - j|, causal mask, softmax over keys, "
                        "times v; q, k, v have shape (B, H, T, Dh)."),
))


# ======================================================================================
# Lesson 07: the lab's position schemes, and a prediction checked by measurement
# ======================================================================================

def _terms_cases() -> list[tuple]:
    g = _gen(111)
    x, table = _randn(g, 2, 6, 8), _randn(g, 10, 8)
    return [("none", x, 4, table), ("sinusoidal", x, 4, table), ("learned", x, 4, table),
            ("rope", x, 4, table), ("alibi", x, 4, table),
            ("alibi", _randn(g, 1, 5, 12), 6, _randn(g, 10, 12)),
            ("learned", _randn(g, 1, 12, 8), 4, table), ("relative", x, 4, table)]


def _terms_reference(scheme: str, x: Tensor, num_heads: int, table: Tensor) -> tuple[Tensor, Tensor | None]:
    t, d = x.shape[1], x.shape[2]
    if scheme == "sinusoidal":
        return x.double() + _table(t, d).double(), None
    if scheme == "learned":
        return x.double() + table.double()[:t], None
    if scheme == "alibi":
        return x.double(), _alibi.alibi_bias(num_heads, t).double()
    return x.double(), None  # "none" and "rope": nothing added, no bias


def _terms_problem(out: Any, case: tuple) -> str | None:
    """What is wrong with one case's output, or None if it is right."""
    scheme, x, num_heads, table = case
    t, d = x.shape[1], x.shape[2]
    raises = scheme not in ("none", "sinusoidal", "learned", "rope", "alibi") or (
        scheme == "learned" and t > table.shape[0])
    if raises:
        error = out.get("error", "") if isinstance(out, dict) else ""
        why = (f"T={t} is longer than the table's {table.shape[0]} rows" if scheme == "learned"
               else f"{scheme!r} is not a scheme")
        if error.startswith("ValueError"):
            return None
        if error:
            return f"for scheme={scheme!r} ({why}) your code raised {error}; raise a ValueError."
        return f"for scheme={scheme!r} ({why}) your code returned a result; raise a ValueError."
    if _is_marker(out, "error"):
        return f"for scheme={scheme!r} your code raised {out['error']}."
    if not (isinstance(out, list) and len(out) == 2):
        return f"for scheme={scheme!r} return a pair (x_in, bias); got {_type_text(out)}."
    x_ref, bias_ref = _terms_reference(*case)
    x_in, bias = _as_float_tensor(out[0]), out[1]
    if not _close(x_in, x_ref):
        if scheme in ("none", "rope", "alibi") and x_in is not None and x_in.shape == x_ref.shape:
            extra = (" RoPE acts inside attention, turning queries and keys." if scheme == "rope" else
                     " ALiBi acts on the attention scores only." if scheme == "alibi" else
                     " NoPE gives the model no position signal at all.")
            return f"for scheme={scheme!r} the embeddings must pass through unchanged.{extra}"
        concat = x.double() + _interleaved_to_concat(_table(t, d)).double()
        if scheme == "sinusoidal" and _close(x_in, concat):
            return f"for scheme='sinusoidal': {_TABLE_MISTAKES[2].diagnosis}"
        if scheme == "learned" and _close(x_in, x.double() + table.double()[1:t + 1]):
            return "for scheme='learned' the rows are off by one: token 0 gets row 0 of the table."
        if x_in is not None and x_in.shape != x_ref.shape:
            return (f"for scheme={scheme!r} x_in should have x's shape {tuple(x_ref.shape)}; "
                    f"got {tuple(x_in.shape)}.")
        return f"for scheme={scheme!r} x_in has the wrong values."
    if bias_ref is None:
        if bias is not None:
            return f"for scheme={scheme!r} there is no bias: return None as the second item."
        return None
    got = _as_float_tensor(bias)
    if got is None:
        return f"for scheme={scheme!r} the bias is missing: ALiBi adds -m_h |i - j| to the scores."
    if _close(got, -bias_ref):
        return "for scheme='alibi' the bias has the wrong sign: it must penalise distance."
    if tuple(got.shape) != tuple(bias_ref.shape):
        return (f"for scheme='alibi' the bias should have shape (num_heads, T, T) = "
                f"{tuple(bias_ref.shape)}; got {tuple(got.shape)}.")
    if not _close(got, bias_ref):
        return "for scheme='alibi' the bias has the wrong values: -m_h |i - j| with the paper's slopes."
    return None


def _judge_terms(outputs: list, cases: list) -> tuple[float, str]:
    problems = [_terms_problem(out, case) for out, case in zip(outputs, cases, strict=True)]
    wrong = [p for p in problems if p]
    if not wrong:
        return 1.0, f"passed: all {len(cases)} cases match the library's TinyDecoder."
    return 1 - len(wrong) / len(cases), _feedback(
        wrong[0] + (f" ({len(wrong) - 1} more case(s) wrong.)" if len(wrong) > 1 else ""),
        "only 'sinusoidal' and 'learned' add to the embeddings, only 'alibi' returns a bias; "
        "anything else, or a learned table too short for T, is a ValueError.")


_register(Task(
    id="07_position_terms",
    title="The scheme switch",
    points=3,
    entry="position_terms",
    forbidden=(),
    cases=_terms_cases,
    run=_call,
    judge=_judge_terms,
))

_ORDER_CASES = [(scheme, layers) for layers in (1, 2)
                for scheme in ("none", "sinusoidal", "learned", "rope", "alibi")]
_ORDER_TOKENS = (0, 5, 7, 3, 9, 4)


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """Run tiny models on one CPU thread: two threads only wait on each other at this size."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _run_one_thread(fn: Callable, case: tuple) -> Any:
    with _one_thread():
        return fn(*case)


@functools.lru_cache(maxsize=64)
def _order_sensitive(scheme: str, num_layers: int, last_only: bool = True) -> bool:
    """Does swapping tokens 1 and 2 change the untrained model's logits (at the last position)?

    Deterministic (seeded, no learner code), so each answer is computed once per process."""
    from .model import TinyDecoder

    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = TinyDecoder(12, d_model=16, num_heads=2, num_layers=num_layers, pos=scheme, max_len=16)
    model.eval()
    tokens = torch.tensor([_ORDER_TOKENS])  # (1, T)
    swapped = tokens[:, [0, 2, 1, 3, 4, 5]]  # (1, T)
    with torch.no_grad(), _one_thread():
        a, b = model(tokens), model(swapped)  # (1, T, vocab) each
    if last_only:
        a, b = a[0, -1], b[0, -1]
    return not torch.allclose(a, b, atol=1e-5)


def _judge_order(outputs: list, cases: list) -> tuple[float, str]:
    truth = [_order_sensitive(*case) for case in cases]
    got = [bool(o) if isinstance(o, bool) else
           (bool(o.item()) if isinstance(o, Tensor) and o.numel() == 1 else None) for o in outputs]
    if got == truth:
        return 1.0, f"passed: all {len(cases)} measurements agree with the reference."
    for out, case in zip(outputs, cases, strict=True):
        if _is_marker(out, "error"):
            return 0.0, _feedback(f"your code raised {out['error']} for scheme={case[0]!r}, "
                                  f"num_layers={case[1]}.", "build the model as the task says.")
    if None in got:
        out = outputs[got.index(None)]
        return 0.0, _feedback(f"expected True or False, got {_type_text(out)}.",
                              "return a bool: bool(...) of your comparison.")
    if got == [_order_sensitive(*case, last_only=False) for case in cases]:
        return 0.0, _feedback(
            "you compared the logits at every position: positions 1 and 2 hold different tokens "
            "after the swap, so their outputs differ for any model.",
            "compare the last position only, logits[0, -1].")
    return 0.0, _feedback(f"{sum(g != t for g, t in zip(got, truth, strict=True))} of {len(cases)} "
                          "answers differ from the measurement.",
                          "seed before building the model, put it in eval mode, swap tokens 1 and 2, "
                          "and compare the last position's logits.")


_register(Task(
    id="07_measure_order",
    title="Measuring order sensitivity",
    points=2,
    entry="order_sensitive",
    forbidden=(),
    cases=lambda: list(_ORDER_CASES),
    run=_run_one_thread,
    judge=_judge_order,
))

_PREDICTION_KEYS = ("none, 1 layer", "sinusoidal, 1 layer", "learned, 1 layer", "rope, 1 layer",
                    "alibi, 1 layer", "none, 2 layers")


def _judge_prediction(outputs: list, cases: list) -> tuple[float, str]:
    (out,) = outputs
    if _is_marker(out, "error"):
        return 0.0, _feedback(f"your code raised {out['error']}.", "return a dict of six bools.")
    if not isinstance(out, dict) or sorted(out) != sorted(_PREDICTION_KEYS) or not all(
            isinstance(v, bool) for v in out.values()):
        return 0.0, _feedback("return a dict with exactly the six keys of the statement, each True or False.",
                              f"the keys are {', '.join(repr(k) for k in _PREDICTION_KEYS)}.")
    truth = {key: _order_sensitive(key.split(",")[0], int(key.split(", ")[1][0]))
             for key in _PREDICTION_KEYS}
    wrong = sum(out[key] != truth[key] for key in _PREDICTION_KEYS)
    if not wrong:
        return 1.0, "passed: every prediction matches the measurement."
    return 0.0, _feedback(f"{wrong} of {len(_PREDICTION_KEYS)} predictions disagree with the measurement.",
                          "a model is order-blind when its last output is a function of the *set* of "
                          "earlier tokens; think about what the causal mask does in a second layer.")


_register(Task(
    id="07_predict_order",
    title="Predict: which models notice a swap?",
    points=1,
    entry="predicted_order_sensitive",
    forbidden=(),
    cases=lambda: [()],
    run=_call,
    judge=_judge_prediction,
))
