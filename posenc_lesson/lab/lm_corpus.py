r"""A byte-level language-modelling corpus that ships, and how a language model is scored on it.

The corpus is real English prose nobody here wrote: Genesis to Esther of the King James Version
(the modern standard text descended from the 1769 revision; data/corpus/README.md gives its
licence), 1.9 MB of ASCII, committed as data/corpus/kjv_genesis_esther.txt with its
source, licence and SHA-256 (data/corpus/README.md; tools/make_corpus.py rebuilt it from Debian's
bible-kjv-text package). ``load_corpus`` checks the checksum, so a changed file fails loudly.

Tokens are bytes (vocabulary 256), so a model's loss converts to bits per byte (bpb):

    bpb = - (1 / N) sum_t log2 p(x_{t+1} | x_{<=t})  =  cross-entropy in nats / ln 2

Targets are the inputs moved one byte on: tokens = x[s : s + T], targets = x[s + 1 : s + T + 1].

Split: the text is cut into blocks of BLOCK_SIZE = 8192 bytes; every VAL_EVERY-th block
(block i with i % 10 == 9) is validation, the rest training. The blocks are contiguous and never
overlap, and a training window never crosses into a validation block.

Two ways to score a validation block of length B with windows of T bytes (Press et al., 2021,
arXiv:2108.12409, sec. 2 and appendix B):

    non-overlapping   windows start at 0, T, 2T, ...; every target in every window is scored, so the
                      k-th target of a window sees only k - 1 bytes of context
    sliding window    windows start at 0, S, 2S, ... (stride S < T); the first window scores all
                      of its T targets, every later one only its last S, so each byte is scored once
                      and, after the first window, with at least T - S + 1 bytes of context (position
                      t of a window sees its bytes 0 .. t)

Used by posenc_lesson.lab.lm_lab and notebooks/10_language_extrapolation.ipynb.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import _checks

CORPUS = Path(__file__).resolve().parents[2] / "data" / "corpus" / "kjv_genesis_esther.txt"
SHA256 = "27d970cc2ca2b122e72eab9d485e3f633b5357c902c745ffe73eb563ff829b58"
VOCAB_SIZE = 256  # bytes
BLOCK_SIZE, VAL_EVERY = 8192, 10


def load_corpus(path: str | Path = CORPUS, *, sha256: str | None = SHA256) -> bytes:
    """The corpus as bytes, after checking its SHA-256 (sha256=None skips the check, for other texts)."""
    data = Path(path).read_bytes()
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise ValueError(f"{path} does not have the SHA-256 recorded in data/corpus/README.md ({sha256}); "
                         "restore it with git, or rebuild it with tools/make_corpus.py")
    return data


def split_blocks(n_bytes: int, *, block_size: int = BLOCK_SIZE,
                 val_every: int = VAL_EVERY) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Cut bytes 0 .. n_bytes - 1 into contiguous blocks [start, end); every val_every-th is validation.

    Returns:
        (train, validation): lists of (start, end) ranges, in order, disjoint, covering 0 .. n_bytes.
    """
    n_bytes = _checks.positive_int("n_bytes", n_bytes)
    block_size = _checks.positive_int("block_size", block_size)
    val_every = _checks.positive_int("val_every", val_every)
    if val_every < 2:
        raise ValueError(f"val_every must be at least 2 (1 would leave no training text); got {val_every}")
    train, val = [], []
    for i, start in enumerate(range(0, n_bytes, block_size)):
        block = (start, min(start + block_size, n_bytes))
        (val if i % val_every == val_every - 1 else train).append(block)
    return train, val


@dataclass(frozen=True)
class ByteCorpus:
    """A byte string split into training and validation blocks (see ``split_blocks``)."""

    data: bytes
    block_size: int = BLOCK_SIZE
    val_every: int = VAL_EVERY

    @cached_property
    def tokens(self) -> Tensor:
        """All the bytes as token ids. (N,) int64"""
        return torch.frombuffer(bytearray(self.data), dtype=torch.uint8).long()  # (N,)

    @cached_property
    def blocks(self) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        return split_blocks(len(self.data), block_size=self.block_size, val_every=self.val_every)

    @property
    def train_blocks(self) -> list[tuple[int, int]]:
        return self.blocks[0]

    @property
    def val_blocks(self) -> list[tuple[int, int]]:
        return self.blocks[1]

    def window_starts(self, length: int) -> Tensor:
        """Every s such that x[s : s + length + 1] lies inside one training block. (M,) int64"""
        length = _checks.positive_int("length", length)
        starts = [torch.arange(a, b - length) for a, b in self.train_blocks if b - a > length]
        if not starts:
            raise ValueError(f"length={length} is longer than every training block ({self.block_size} bytes)")
        return torch.cat(starts)  # (M,)

    def train_batch(self, batch_size: int, length: int, *, generator: torch.Generator,
                    starts: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Random training windows: (tokens (B, T), targets (B, T)), targets = tokens moved one byte on.

        starts: ``window_starts(length)``, if already computed (it is the same at every step)."""
        starts = self.window_starts(length) if starts is None else starts
        pick = starts[torch.randint(len(starts), (batch_size,), generator=generator)]  # (B,)
        index = pick[:, None] + torch.arange(length + 1)  # (B, T + 1)
        window = self.tokens[index]  # (B, T + 1)
        return window[:, :-1], window[:, 1:]  # (B, T), (B, T)

    def val_texts(self, blocks: int | None = None) -> list[Tensor]:
        """The first ``blocks`` validation blocks (all if None), each as a (B_i,) tensor of byte ids."""
        chosen = self.val_blocks if blocks is None else self.val_blocks[:_checks.positive_int("blocks",
                                                                                               blocks)]
        return [self.tokens[a:b] for a, b in chosen]


def bits_per_byte(logits: Tensor, targets: Tensor) -> float:
    """Mean cross-entropy in bits: logits (..., V) against targets (...), already aligned (x[t + 1])."""
    return F.cross_entropy(logits.flatten(0, -2), targets.flatten()).item() / math.log(2)


def window_plan(text_length: int, length: int, stride: int | None = None) -> list[tuple[int, int]]:
    """(start, first scored index in the window) of every window over a text of ``text_length`` bytes.

    stride None: non-overlapping windows (start = 0, T, 2T, ...), each scoring all T targets.
    stride S: windows start at 0, S, 2S, ...; the first scores from index 0, every later one from T - S,
    so target x[j] (j = 1 .. last) is scored exactly once. Windows need T + 1 bytes (inputs and targets).
    """
    length = _checks.positive_int("length", length)
    step = length if stride is None else _checks.positive_int("stride", stride)
    if step > length:
        raise ValueError(f"stride must be at most the window length {length} (or None); got {stride}")
    plan = []
    for start in range(0, text_length - length, step):
        plan.append((start, 0 if start == 0 or stride is None else length - step))
    return plan


@torch.no_grad()
def window_losses(model: nn.Module, texts: list[Tensor], length: int, *, stride: int | None = None,
                  batch_size: int = 32, start: int = 0) -> tuple[Tensor, Tensor]:
    """Negative log-likelihood (nats) of every scored target, by position in its window.

    start: the position the model gives each window's first byte (TinyDecoder's ``start``; 0, the
    default, calls ``model(tokens)``): a window of T bytes then sits at positions start .. start + T - 1.

    Returns:
        (nll (W, T), scored (W, T) bool): one row per window of ``window_plan`` over every text; the
        unscored targets of a sliding window are False in ``scored``.
    """
    rows, masks = [], []
    for text in texts:
        plan = window_plan(len(text), length, stride)
        for i in range(0, len(plan), batch_size):
            chunk = plan[i:i + batch_size]
            index = torch.tensor([s for s, _ in chunk])[:, None] + torch.arange(length + 1)  # (b, T + 1)
            window = text[index]  # (b, T + 1)
            logits = model(window[:, :-1], start=start) if start else model(window[:, :-1])  # (b, T, V)
            nll = F.cross_entropy(logits.transpose(1, 2), window[:, 1:], reduction="none")  # (b, T)
            first = torch.tensor([f for _, f in chunk])[:, None]  # (b, 1)
            rows.append(nll)
            masks.append(torch.arange(length)[None, :] >= first)  # (b, T)
    if not rows:
        raise ValueError(f"every text is shorter than length + 1 = {length + 1} bytes")
    return torch.cat(rows), torch.cat(masks)  # (W, T) each


def evaluate_bpb(model: nn.Module, texts: list[Tensor], length: int, *, stride: int | None = None,
                 batch_size: int = 32, start: int = 0) -> float:
    """Bits per byte over every target scored by ``window_plan`` (non-overlapping, or sliding with stride);
    start as for ``window_losses``."""
    nll, scored = window_losses(model, texts, length, stride=stride, batch_size=batch_size, start=start)
    return (nll[scored].sum() / scored.sum()).item() / math.log(2)


def position_bpb(model: nn.Module, texts: list[Tensor], length: int, *, bin_size: int = 1,
                 batch_size: int = 32) -> Tensor:
    """Bits per byte at each position of non-overlapping windows of ``length``, averaged over the windows
    and over bins of ``bin_size`` positions (position t predicts byte t + 1 from t + 1 bytes).
    Returns (T / bin_size,)."""
    bin_size = _checks.positive_int("bin_size", bin_size)
    if length % bin_size:
        raise ValueError(f"bin_size must divide length={length}; got {bin_size}")
    nll, _ = window_losses(model, texts, length, batch_size=batch_size)  # (W, T)
    return nll.mean(dim=0).view(-1, bin_size).mean(dim=1) / math.log(2)  # (T / bin_size,)
