r"""The copy task: a synthetic job where order is everything.

A sequence of n random symbols is shown, then a separator, then the model must say the
same symbols again, in the same order:

    tokens   BOS  x1  x2 ... xn  SEP  x1  x2 ... xn            T = 2n + 2 tokens
    index     0   1   2  ... n   n+1  n+2 ...    2n+1

As a language model it predicts token t + 1 from tokens 0 .. t, so the targets are the
tokens shifted left by one, kept only where the answer is a copied symbol and set to
IGNORE = -100 (what ``torch.nn.functional.cross_entropy`` skips) everywhere else:

    targets[t] = tokens[t + 1]   for t = n+1 .. 2n    (predict x1 at SEP, ..., xn at x(n-1))
    targets[t] = -100            otherwise

Token ids: BOS = 0, SEP = 1; the symbols are 2 .. vocab_size - 1 (vocab_size - 2 of them),
drawn uniformly and independently. A bag of tokens cannot solve the task: the model must
know which symbol came first, second, ..., so a model with no sense of position fails.
Taught in notebooks/08_length_extrapolation.ipynb.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import _checks

BOS = 0  # start of sequence
SEP = 1  # "now copy"
IGNORE = -100  # target value skipped by the loss and by the metrics
FIRST_SYMBOL = 2  # symbols are FIRST_SYMBOL .. vocab_size - 1


def _check_length(length: object) -> tuple[int, int]:
    """length n, or an inclusive range (lo, hi) to draw n from."""
    if isinstance(length, tuple) and len(length) == 2:
        lo = _checks.positive_int("length[0]", length[0])
        hi = _checks.positive_int("length[1]", length[1])
        if lo > hi:
            raise ValueError(f"length must be (lo, hi) with lo <= hi; got {length!r}")
        return lo, hi
    if isinstance(length, tuple):
        raise ValueError(f"length must be an int n or a pair (lo, hi); got {length!r}")
    n = _checks.positive_int("length", length)
    return n, n


def copy_batch(batch_size: int, length: int | tuple[int, int], vocab_size: int, *,
               generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """A batch of copy problems, BOS x1..xn SEP x1..xn, with loss only on the copy.

    Args:
        batch_size: B.
        length: n, the number of symbols to copy; or a pair (lo, hi): then one n is drawn
            uniformly from lo .. hi (inclusive) for the whole batch, so every row has the same
            T = 2n + 2 and no padding is needed. Training draws n from (1, L); evaluation fixes n.
        vocab_size: total number of token ids, including BOS = 0 and SEP = 1; at least 3.
        generator: the torch.Generator that draws n and the symbols (seeded by the caller).
    Returns:
        (tokens, targets), both (B, 2n + 2) int64; targets are -100 except at t = n+1 .. 2n.
    """
    b = _checks.positive_int("batch_size", batch_size)
    lo, hi = _check_length(length)
    vocab_size = _checks.positive_int("vocab_size", vocab_size)
    if vocab_size < FIRST_SYMBOL + 1:
        raise ValueError(f"vocab_size must be at least 3 (BOS = 0, SEP = 1 and one symbol); "
                         f"got {vocab_size}")
    if not isinstance(generator, torch.Generator):
        raise ValueError(f"generator must be a torch.Generator (e.g. torch.Generator().manual_seed(0)); "
                         f"got {type(generator).__name__}")
    n = int(torch.randint(lo, hi + 1, (), generator=generator)) if lo < hi else lo
    x = torch.randint(FIRST_SYMBOL, vocab_size, (b, n), generator=generator)  # (B, n)
    bos = torch.full((b, 1), BOS)  # (B, 1)
    sep = torch.full((b, 1), SEP)  # (B, 1)
    tokens = torch.cat((bos, x, sep, x), dim=1)  # (B, T), T = 2n + 2
    targets = torch.full_like(tokens, IGNORE)  # (B, T)
    targets[:, n + 1:2 * n + 1] = x  # targets[t] = tokens[t + 1] for t = n+1 .. 2n
    return tokens, targets


def copy_mask(targets: Tensor) -> Tensor:
    """True where a target is a copied symbol (not IGNORE). (B, T) bool."""
    return targets != IGNORE  # (B, T)
