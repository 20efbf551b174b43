"""Claims of the lab's training loop: it learns, it is reproducible, its metrics are fractions."""

import functools

import pytest
import torch

from posenc_lesson.lab import analysis
from posenc_lesson.lab.copy_task import copy_batch
from posenc_lesson.lab.model import SCHEMES, TinyDecoder
from posenc_lesson.lab.train import evaluate, masked_loss, position_accuracy, train

VOCAB = 10


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def tiny(pos: str = "rope") -> TinyDecoder:
    torch.manual_seed(0)
    return TinyDecoder(VOCAB, d_model=32, num_heads=2, num_layers=2, pos=pos, max_len=32)


def batches(length, batch_size=16):
    return functools.partial(copy_batch, batch_size, length, VOCAB)


def test_training_reduces_the_loss():
    losses = train(tiny(), batches((1, 4)), steps=150, lr=3e-3, seed=0, progress=False)
    assert len(losses) == 150
    first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
    assert last < 0.7 * first, (first, last)


def test_training_is_deterministic_with_a_seed():
    a = train(tiny(), batches((1, 4)), steps=20, seed=3, progress=False)
    b = train(tiny(), batches((1, 4)), steps=20, seed=3, progress=False)
    c = train(tiny(), batches((1, 4)), steps=20, seed=4, progress=False)
    assert a == b
    assert a != c


def test_evaluation_metrics_are_fractions_and_exact_match_is_at_most_token_accuracy():
    model = tiny()
    train(model, batches((1, 4)), steps=60, seed=0, progress=False)
    for n in (2, 4, 8):
        result = evaluate(model, batches(n), batches=2)
        assert set(result) == {"token_accuracy", "exact_match"}
        assert 0.0 <= result["exact_match"] <= result["token_accuracy"] <= 1.0


def test_evaluation_counts_only_the_copied_tokens():
    """A model that always predicts symbol 2 scores the fraction of copied symbols equal to 2."""

    class Always2(torch.nn.Module):
        def forward(self, tokens):
            logits = torch.zeros(*tokens.shape, VOCAB)
            logits[..., 2] = 1.0
            return logits

    make = batches(6, batch_size=64)
    tokens, targets = make(generator=torch.Generator().manual_seed(12345))
    expected = (tokens[:, 1:7] == 2).float().mean().item()
    result = evaluate(Always2(), make, batches=1, seed=12345)
    assert result["token_accuracy"] == pytest.approx(expected)
    assert result["exact_match"] == 0.0


def test_position_accuracy_averages_to_token_accuracy():
    model = tiny()
    train(model, batches((1, 4)), steps=40, seed=0, progress=False)
    per_position = position_accuracy(model, batches(5), batches=3)
    assert per_position.shape == (5,)
    result = evaluate(model, batches(5), batches=3)
    assert per_position.mean().item() == pytest.approx(result["token_accuracy"])


def test_masked_loss_ignores_minus_100():
    logits = torch.randn(2, 3, VOCAB)
    targets = torch.tensor([[-100, 4, -100], [1, -100, -100]])
    expected = torch.nn.functional.cross_entropy(torch.stack([logits[0, 1], logits[1, 0]]),
                                                 torch.tensor([4, 1]))
    torch.testing.assert_close(masked_loss(logits, targets), expected)


def test_experiments_write_a_csv_with_one_row_per_scheme_seed_and_length(tmp_path, monkeypatch):
    from posenc_lesson.lab import experiments

    config = experiments.LabConfig(train_length=3, eval_lengths=(2, 4, 6), d_model=16, num_heads=2,
                                   num_layers=1, steps=5, batch_size=4, eval_batches=1, eval_batch_size=4,
                                   seeds=(0, 1), schemes=("learned", "alibi"))
    path = tmp_path / "results.csv"
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        result = experiments.run_lab(config, csv_path=path, why_path=tmp_path / "why.csv", progress=False,
                                     threads=1)
        assert torch.get_num_threads() == 2  # run_lab puts the thread count back
    finally:
        torch.set_num_threads(before)
    assert path.read_text().splitlines()[0] == ",".join(experiments.CSV_COLUMNS)
    rows = experiments.read_csv(path)
    assert rows == result.rows
    assert [(r["scheme"], r["seed"], r["length"]) for r in rows] == [
        (s, seed, n) for seed in (0, 1) for s in ("learned", "alibi") for n in (2, 4, 6)]
    assert all(r["train_length"] == 3 for r in rows)
    assert all(0.0 <= r["exact_match"] <= r["token_accuracy"] <= 1.0 for r in rows)
    # the why CSV: one row per scheme, seed and cell measured, cells in analysis.CELLS order
    why = experiments.read_why_csv(tmp_path / "why.csv")
    assert why == result.why
    assert [(r["scheme"], r["seed"], r["cell"]) for r in why] == [
        (s, seed, c) for seed in (0, 1) for s in ("learned", "alibi") for c in analysis.CELLS]
    assert all(0.0 <= r["accuracy"] <= 1.0 for r in why)
    # the learned table has rows for the longest test sequence, 2 * 6 + 2
    assert result.models["learned", 0].pos_embed.max_len == 14
    monkeypatch.setenv("POSENC_FAST", "1")
    assert experiments.config_from_env() is experiments.FAST
    monkeypatch.setenv("POSENC_FAST", "0")
    assert experiments.config_from_env() is experiments.FULL


def test_lab_results_csv_in_the_repository_is_a_full_lab_run():
    """notebooks/08_results.csv is what `make experiments` writes: every scheme at every length."""
    from posenc_lesson.lab import experiments

    rows = experiments.read_csv(experiments.RESULTS_CSV)
    full = experiments.FULL
    assert {(r["scheme"], r["seed"], r["length"]) for r in rows} == {
        (s, seed, n) for s in full.schemes for seed in full.seeds for n in full.eval_lengths}
    assert all(r["train_length"] == full.train_length for r in rows)


def test_training_leaves_learned_rows_past_the_training_length_exactly_as_initialised():
    """The lab's claim about the learned table: rows 0 .. 2L get gradients; rows from 2L + 1 on
    (the last token of the longest sequence predicts nothing) stay bit for bit at their initial values."""
    model = tiny("learned")
    initial = model.pos_embed.table.detach().clone()
    train(model, batches((1, 4)), steps=30, seed=0, progress=False)  # T <= 2 * 4 + 2 = 10
    table = model.pos_embed.table.detach()
    assert torch.equal(table[9:], initial[9:])
    assert not torch.equal(table[8], initial[8])


def _tiny_config(**changes):
    from posenc_lesson.lab import experiments

    base = dict(train_length=3, eval_lengths=(2, 4, 6, 8, 9), d_model=16, num_heads=2, num_layers=1, steps=5,
                batch_size=4, eval_batches=1, eval_batch_size=4, seeds=(0, 1), schemes=("sinusoidal", "shaw"))
    return experiments.LabConfig(**{**base, **changes})


def test_the_full_lab_is_seven_schemes_times_three_seeds():
    from posenc_lesson.lab import experiments

    assert experiments.FULL.schemes == SCHEMES and len(SCHEMES) == 7
    assert experiments.FULL.seeds == (0, 1, 2)
    assert experiments.FAST.train_length < experiments.FULL.train_length and experiments.FAST.fast


def test_two_workers_train_exactly_the_models_one_worker_trains():
    """workers only changes the wall time: every model has its seed and one thread."""
    from posenc_lesson.lab import experiments

    config = _tiny_config()
    one = experiments.run_lab(config, progress=False)
    two = experiments.run_lab(config, progress=False, workers=2)
    assert one.rows == two.rows and one.losses == two.losses
    assert list(one.models) == list(two.models) == [(s, seed) for seed in (0, 1)
                                                    for s in ("sinusoidal", "shaw")]
    for key in one.models:
        a, b = one.models[key].state_dict(), two.models[key].state_dict()
        assert all(torch.equal(a[name], b[name]) for name in a)
    with pytest.raises(ValueError, match="workers must be a positive integer"):
        experiments.run_lab(config, progress=False, workers=0)


def test_with_a_lab_cache_a_second_run_loads_the_same_models_and_trains_nothing(tmp_path, monkeypatch):
    """POSENC_LAB_CACHE (make test's notebooks): a job trains once; a changed config trains anew."""
    import dataclasses
    import functools

    from posenc_lesson.lab import experiments

    config = _tiny_config()
    monkeypatch.setenv("POSENC_LAB_CACHE", str(tmp_path / "cache"))
    first = experiments.run_lab(config, progress=False)
    assert len(list((tmp_path / "cache").glob("*.pt"))) == len(first.models) == 4
    trained = []
    real = experiments._train_one

    @functools.wraps(real)  # the same name, so the same cache entries
    def counted(*args, **kwargs):
        trained.append(args[1:3])
        return real(*args, **kwargs)

    monkeypatch.setattr(experiments, "_train_one", counted)
    again = experiments.run_lab(config, progress=False)
    assert trained == [] and again.rows == first.rows and again.losses == first.losses
    for key, model in first.models.items():
        a, b = model.state_dict(), again.models[key].state_dict()
        assert all(torch.equal(a[name], b[name]) for name in a)
    experiments.run_lab(dataclasses.replace(config, steps=6), progress=False)  # another config
    assert len(trained) == 4
    monkeypatch.delenv("POSENC_LAB_CACHE")
    trained.clear()
    experiments.run_lab(config, progress=False)
    assert len(trained) == 4  # off: every model trains


def test_summarize_averages_over_the_lengths_past_training_then_over_seeds():
    from posenc_lesson.lab import experiments

    rows = [{"scheme": "a", "seed": seed, "train_length": 2, "length": n, "token_accuracy": acc,
             "exact_match": 0.0}
            for seed, accs in ((0, (1.0, 0.5, 0.3, 0.1)), (1, (1.0, 0.7, 0.5, 0.3)))
            for n, acc in zip((2, 3, 6, 7), accs, strict=True)]
    summary = experiments.summarize(rows)  # L = 2: lengths 3 and 6 count (2 < n <= 6), 2 and 7 do not
    assert summary["a"]["per_seed"] == {0: pytest.approx(0.4), 1: pytest.approx(0.6)}
    assert summary["a"]["mean"] == pytest.approx(0.5)
    assert summary["a"]["std"] == pytest.approx(0.1414, abs=1e-4)
    assert (summary["a"]["min"], summary["a"]["max"]) == (pytest.approx(0.4), pytest.approx(0.6))
    text = experiments.format_summary(summary)
    assert "0.500" in text and "0.400 .. 0.600" in text
    with pytest.raises(ValueError, match="no rows with 7 < length <= 9"):
        experiments.summarize(rows, lengths=(7, 9))
    with pytest.raises(ValueError, match="rows must hold"):
        experiments.summarize([])


def test_readme_quotes_the_lab_as_the_csv_says():
    """docs/lessons.md's summary of lesson 08 is the mean over L < n <= 3L of the committed CSV, mean +- std
    over the seeds, for every scheme: no single-n number, nothing the CSV does not back."""
    import re
    from pathlib import Path

    from posenc_lesson.lab import experiments

    readme = (Path(__file__).resolve().parents[1] / "docs" / "lessons.md").read_text()
    summary = experiments.summarize(experiments.read_csv(experiments.RESULTS_CSV))
    names = {"alibi": "ALiBi", "shaw": "Shaw", "t5": "T5", "rope": "RoPE", "learned": "learned",
             "none": "NoPE", "sinusoidal": "sinusoidal"}
    section = readme[readme.index("**08 · Length extrapolation**"):readme.index("**09 · ")]
    for scheme, name in names.items():
        s = summary[scheme]
        quoted = re.search(rf"{name} (\d\.\d\d) ± (\d\.\d\d)", section)
        assert quoted, f"docs/lessons.md does not quote {name}'s mean over L < n <= 3L"
        assert (float(quoted[1]), float(quoted[2])) == (round(s["mean"], 2), round(s["std"], 2)), name
