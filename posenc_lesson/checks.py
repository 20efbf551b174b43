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
            what = task.title.split(" (")[0].lower()
            return 0.0, task.points, (
                f"this task asks you to implement {what} yourself; your answer calls "
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
                  hint: str, partial: bool = True) -> Callable[[list, list], tuple[float, str]]:
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


_PERMUTATION_MISTAKES: list[tuple[Callable[[Callable, Tensor, Tensor], bool], str, str]] = [
    (lambda f, x, p: bool(torch.allclose(f(x[p]), f(x)[torch.argsort(p)], rtol=RTOL, atol=ATOL)),
     "your answers match permuting the output with the inverse permutation.",
     "apply the same perm to both: compare f(x[perm]) with f(x)[perm]."),
    (lambda f, x, p: bool(torch.allclose(f(x[p]), f(x), rtol=RTOL, atol=ATOL)),
     "your answers match comparing f(x[perm]) with the unpermuted f(x).",
     "an equivariant f moves its output rows along with the input rows: compare with f(x)[perm]."),
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
