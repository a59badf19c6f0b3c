"""``taskloom.bench.zoo``: the CNNs are torchvision's architectures (parameter counts, stage
shapes), the builder's inputs, seeds and errors."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from taskloom.bench import zoo  # noqa: E402
from taskloom.errors import ArgumentError  # noqa: E402

# torchvision's counts: resnet50 25,557,032 and mobilenet_v2 3,504,872. inception_v3 has
# 27,161,264 with its auxiliary classifier, which inference does not run and zoo leaves out:
#   AuxLogits.conv0 BasicConv2d(768, 128, 1):  768*128     + 2*128 (bn) =    98,560
#   AuxLogits.conv1 BasicConv2d(128, 768, 5):  128*768*5*5 + 2*768 (bn) = 2,459,136
#   AuxLogits.fc    Linear(768, 1000):         768*1000    + 1000       =   769,000
PARAMETERS = {"resnet50": 25_557_032, "mobilenet_v2": 3_504_872,
              "inception_v3": 27_161_264 - (98_560 + 2_459_136 + 769_000)}

# the output of a few named stages, (channels, height, width), for a batch-1 image
STAGES = {"resnet50": {"layer1": (256, 56, 56), "layer2": (512, 28, 28), "layer3": (1024, 14, 14),
                       "layer4": (2048, 7, 7)},
          "inception_v3": {"Mixed_5d": (288, 35, 35), "Mixed_6e": (768, 17, 17), "Mixed_7c": (2048, 8, 8)},
          "mobilenet_v2": {"features": (1280, 7, 7)}}


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_cnn_is_torchvisions_architecture(name):
    model, (x,) = zoo.build(name)
    assert sum(p.numel() for p in model.parameters()) == PARAMETERS[name]
    assert not model.training
    size = zoo.IMAGE_MODELS[name]
    assert x.shape == (1, 3, size, size)
    shapes = {}
    hooks = [getattr(model, stage).register_forward_hook(
        lambda _m, _i, out, stage=stage: shapes.__setitem__(stage, tuple(out.shape[1:]))) for stage in STAGES[name]]
    try:
        with torch.inference_mode():
            y = model(x)
    finally:
        for h in hooks:
            h.remove()
    assert shapes == STAGES[name]
    assert y.shape == (1, 1000) and torch.isfinite(y).all()


def test_build_is_seeded_and_batched():
    (m1, (x1,)), (m2, (x2,)) = zoo.build("mobilenet_v2", batch=2), zoo.build("mobilenet_v2", batch=2)
    assert x1.shape[0] == 2 and torch.equal(x1, x2)
    assert all(torch.equal(a, b) for a, b in zip(m1.state_dict().values(), m2.state_dict().values()))
    bn = next(m for m in m1.modules() if isinstance(m, torch.nn.BatchNorm2d))
    assert not torch.all(bn.running_var == 1)  # statistics are not the identity, so folding shows


def test_build_rejects_unknown_models_and_sizes():
    with pytest.raises(ArgumentError, match="unknown model 'resnet18'.*resnet50"):
        zoo.build("resnet18")
    with pytest.raises(ArgumentError, match="batch"):
        zoo.build("resnet50", batch=0)


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_transformers_models_take_token_ids(name):
    pytest.importorskip("transformers")
    with pytest.raises(ArgumentError, match="longer than"):
        zoo.build(name, seq=4096)
    model, (ids,) = zoo.build(name, batch=1, seq=8)
    assert ids.shape == (1, 8) and ids.dtype == torch.int64
    assert sum(p.numel() for p in model.parameters()) > 80_000_000  # base/small sized, not a toy config


def test_the_mlp_takes_vectors():
    model, (x,) = zoo.build("mlp", batch=3)
    assert x.shape == (3, 784) and zoo.input_text("mlp", None) == "784 features"
    assert sum(p.numel() for p in model.parameters()) == 784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10
    with torch.inference_mode():
        assert model(x).shape == (3, 10)
