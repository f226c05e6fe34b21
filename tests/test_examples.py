"""Run every example in ``examples/`` at its smallest size and check what it shows."""
import importlib.util
import math

import pytest

from _examples import load_example as load


def have_sklearn():
    return importlib.util.find_spec("sklearn") is not None


def test_perceptron_reaches_zero_mistakes(capsys):
    mistakes = load("perceptron").main(["--n", "40", "--epochs", "100"])
    assert mistakes[-1] == 0
    assert mistakes[0] > 0                     # it did have something to learn
    assert "mistakes" in capsys.readouterr().out


def test_two_layer_sigmoid_golden_numbers(capsys):
    r = load("two_layer_sigmoid").main([])
    assert r["y_hat"] == pytest.approx([0.7609, 0.7760], abs=1e-4)
    assert r["loss"] == pytest.approx(0.0478, abs=1e-4)
    assert r["grad_W2_10"] == pytest.approx(-0.0152, abs=1e-4)
    assert r["W2_10_after"] == pytest.approx(0.3652, abs=1e-4)
    # The step is exactly W2 - lr * grad.
    assert r["W2_10_after"] == pytest.approx(0.35 - r["grad_W2_10"], abs=1e-12)
    assert "0.3652" in capsys.readouterr().out


def test_softmax_regression_accuracy():
    m = load("softmax_regression")
    if have_sklearn():
        r = m.main(["--epochs", "3"])
        assert r["dataset"] == "digits"
        assert r["accuracy"] > 0.85
    # The spirals fallback: a linear model beats chance (1/3) but cannot separate them.
    r = m.main(["--dataset", "spirals", "--epochs", "3"])
    assert 0.4 < r["accuracy"] < 0.8
    assert r["losses"][-1] < r["losses"][0]


def test_kaiming_depth_vanish_stable_explode(tmp_path):
    path = tmp_path / "kaiming.png"
    r = load("kaiming_depth").main(["--batch", "64", "--plot", str(path)])
    ratios = r["ratios"]
    assert ratios[1.0] < 1e-3                  # c = 1: vanishes
    assert 0.1 <= ratios[2.0] <= 10            # c = 2 (Kaiming): stable
    assert ratios[3.0] > 1e3                   # c = 3: explodes
    assert all(len(n) == 51 for n in r["norms"].values())
    if importlib.util.find_spec("matplotlib") is not None:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert not path.exists()


def test_norm_comparison_losses_decrease():
    r = load("norm_comparison").main(["--depth", "10", "--epochs", "3", "--n-per-class", "50"])
    assert set(r) == {"none", "batchnorm", "layernorm"}
    for name, losses in r.items():
        assert len(losses) == 3
        assert all(math.isfinite(v) for v in losses), name
        assert losses[-1] < losses[0], name
    # Normalization is what lets a 10-layer default-init MLP learn quickly.
    assert r["batchnorm"][-1] < r["none"][-1] - 0.2
    assert r["layernorm"][-1] < r["none"][-1] - 0.2


def test_char_gpt_loss_decreases(capsys):
    r = load("char_gpt").main(["--steps", "12", "--block-size", "8", "--batch-size", "8",
                               "--d-model", "16", "--layers", "1", "--heads", "2",
                               "--log-every", "6", "--sample-len", "10"])
    losses = r["losses"]
    assert losses[0] == pytest.approx(math.log(r["vocab_size"]), abs=0.5)  # starts near chance
    assert losses[-1] < losses[0]
    assert len(r["sample"]) == 8 + 10          # prompt + generated characters
    assert "sample" in capsys.readouterr().out


def test_char_gpt_text_file(tmp_path):
    f = tmp_path / "abc.txt"
    f.write_text("abcabcabcabcabcabcabcabcabcabc\n" * 4, encoding="utf-8")
    r = load("char_gpt").main(["--text-file", str(f), "--steps", "2", "--block-size", "4",
                               "--batch-size", "4", "--d-model", "8", "--layers", "1",
                               "--heads", "1", "--sample-len", "3"])
    assert r["vocab_size"] == 4
    assert set(r["sample"]) <= set("abc\n")


def test_gaussian_process_learns_hyperparameters(capsys):
    r = load("gaussian_process").main(["--n", "40", "--steps", "120"])
    assert r["nlml_after"] < r["nlml_before"] - 30     # the marginal likelihood went up
    assert 0.05 < r["noise"] < 0.2                      # the data's noise std is 0.1
    assert r["rmse"] < 0.5 * r["rmse_before"] and r["rmse"] < 0.1
    assert "learnt hyperparameters" in capsys.readouterr().out


def test_per_sample_grads_vmap_of_grad_matches_the_loop(capsys):
    r = load("per_sample_grads").main(["--batch", "6", "--hidden", "16", "--repeat", "1"])
    assert r["shapes"]["0.weight"] == (6, 16, 64) and r["shapes"]["4.bias"] == (6, 10)
    assert r["max_abs_grad"] > 0
    assert r["max_abs_diff"] <= 1e-5 * r["max_abs_grad"]      # float32 rounding only
    assert "max |loop - vmap(grad)|" in capsys.readouterr().out
    r = load("per_sample_grads").main(["--model", "cnn", "--batch", "4", "--hidden", "8",
                                       "--repeat", "1"])
    assert r["shapes"]["3.weight"] == (4, 64, 32, 3, 3)
    assert r["max_abs_diff"] <= 1e-5 * r["max_abs_grad"]


def test_model_ensembling_vmap_over_stacked_weights_matches_the_loop(capsys):
    r = load("model_ensembling").main(["--models", "3", "--batch", "4", "--hidden", "16",
                                       "--repeat", "1"])
    assert r["shape"] == (3, 4, 10)
    assert r["diff_minibatches"] <= 1e-5 and r["same_minibatch"] <= 1e-5
    assert "same minibatch" in capsys.readouterr().out


def test_vae_digits_elbo_improves(capsys):
    pytest.importorskip("sklearn")             # the digits ship with scikit-learn
    r = load("vae_digits").main(["--epochs", "3", "--latent", "4"])
    elbo = r["train_elbo"]
    assert elbo[-1] > elbo[0] + 3                # training raises the bound
    # NOTE: independent fair coins score 64 log 2 = -44.4 nats; a VAE does far better
    assert -30 < r["test_elbo"] < 0
    assert "held-out ELBO" in capsys.readouterr().out
