"""The models of ``taskloom bench model``, built offline with random weights.

    model, inputs = build("resnet50", batch=1)       # an eval-mode torch module and its inputs
    model(*inputs)

The MLP is a small classifier of flattened 28 x 28 images (784 -> 512 -> 512 -> 10, ReLU
between), where a call's fixed costs weigh as much as its arithmetic. The three CNNs are
defined here layer for layer as torchvision defines them (same layers, same shapes, same
parameter counts; the tests pin the counts), so they need torch alone:
torchvision's CPU builds pin another torch than the test environment's. BERT-base and GPT-2
small come from ``transformers`` configs (``pip install 'taskloom[models]'``), GPT-2 without
its key/value cache. Weights are drawn from a fixed seed, so every system in a benchmark
runs the same model on the same inputs.
"""
from __future__ import annotations

from typing import Any, Callable

from taskloom.errors import ArgumentError

#: The models ``build`` knows, with what they take: images of a size, vectors of a length,
#: or token ids (the others).
MODELS = ("resnet50", "inception_v3", "mobilenet_v2", "bert", "gpt2", "mlp")
IMAGE_MODELS = {"resnet50": 224, "mobilenet_v2": 224, "inception_v3": 299}
VECTOR_MODELS = {"mlp": 784}
SEQUENCE_MODELS = ("bert", "gpt2")


def input_text(name: str, seq: int | None) -> str:
    """What one input of ``name`` is, for tables: ``224x224``, ``784 features`` or ``sequence 128``."""
    if name in IMAGE_MODELS:
        return f"{IMAGE_MODELS[name]}x{IMAGE_MODELS[name]}"
    return f"{VECTOR_MODELS[name]} features" if name in VECTOR_MODELS else f"sequence {seq}"


def mlp() -> Any:
    """784 -> 512 -> 512 -> 10 linears with ReLU between: a model small enough that the cost
    of a call (the framework's dispatch, waking threads) is a good share of its time."""
    nn = _nn()
    return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))


def _nn() -> Any:
    import torch.nn as nn
    return nn


def _conv_bn(nn: Any, cin: int, cout: int, k: int, stride: int = 1, pad: int = 0, groups: int = 1,
             act: Any = None) -> Any:
    layers = [nn.Conv2d(cin, cout, k, stride, pad, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, act) if act is not None else nn.Sequential(*layers)


def resnet50(num_classes: int = 1000) -> Any:
    """ResNet-50 v1.5 (the stride in each bottleneck's 3x3 conv), as torchvision's ``resnet50``."""
    import torch
    nn = _nn()

    class Bottleneck(nn.Module):
        def __init__(self, cin: int, width: int, stride: int) -> None:
            super().__init__()
            cout = width * 4
            self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3, self.bn3 = nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = (_conv_bn(nn, cin, cout, 1, stride) if stride != 1 or cin != cout else None)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return self.relu(out + (x if self.downsample is None else self.downsample(x)))

    class ResNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1, self.relu = nn.BatchNorm2d(64), nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            cin, stages = 64, []
            for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
                layer = []
                for i in range(blocks):
                    layer.append(Bottleneck(cin, width, stride if i == 0 else 1))
                    cin = width * 4
                stages.append(nn.Sequential(*layer))
            self.layer1, self.layer2, self.layer3, self.layer4 = stages
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(2048, num_classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    return ResNet()


def mobilenet_v2(num_classes: int = 1000) -> Any:
    """MobileNet-V2 (width 1.0), as torchvision's ``mobilenet_v2``."""
    import torch
    nn = _nn()

    class InvertedResidual(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
            super().__init__()
            hidden = cin * expand
            self.use_res_connect = stride == 1 and cin == cout
            layers = [] if expand == 1 else [_conv_bn(nn, cin, hidden, 1, act=nn.ReLU6(inplace=True))]
            layers += [_conv_bn(nn, hidden, hidden, 3, stride, 1, groups=hidden, act=nn.ReLU6(inplace=True)),
                       nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
            self.conv = nn.Sequential(*layers)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.conv(x) if self.use_res_connect else self.conv(x)

    class MobileNetV2(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            features, cin = [_conv_bn(nn, 3, 32, 3, 2, 1, act=nn.ReLU6(inplace=True))], 32
            for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                               (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
                for i in range(n):
                    features.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                    cin = c
            features.append(_conv_bn(nn, cin, 1280, 1, act=nn.ReLU6(inplace=True)))
            self.features = nn.Sequential(*features)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
            return self.classifier(torch.flatten(x, 1))

    return MobileNetV2()


def bert(seq: int) -> Any:
    """BERT-base (12 layers, hidden 768, 12 heads) from ``transformers``' default ``BertConfig``;
    called with token ids, it returns the last hidden state."""
    transformers = _transformers("bert")
    import torch
    config = transformers.BertConfig(attn_implementation="eager")
    model = transformers.BertModel(config, add_pooling_layer=False)

    class LastHidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = model

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.bert(input_ids=input_ids).last_hidden_state

    if seq > config.max_position_embeddings:
        raise ArgumentError(f"bench model bert: --seq {seq} is longer than BERT's "
                            f"{config.max_position_embeddings} positions")
    return LastHidden()


def gpt2(seq: int) -> Any:
    """GPT-2 small (12 layers, hidden 768) from ``transformers``' default ``GPT2Config``, without
    the key/value cache; called with token ids, it returns the last hidden state."""
    transformers = _transformers("gpt2")
    import torch
    config = transformers.GPT2Config(use_cache=False, attn_implementation="eager")
    model = transformers.GPT2Model(config)

    class LastHidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gpt2 = model

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.gpt2(input_ids=input_ids, use_cache=False).last_hidden_state

    if seq > config.n_positions:
        raise ArgumentError(f"bench model gpt2: --seq {seq} is longer than GPT-2's {config.n_positions} positions")
    return LastHidden()


def _transformers(name: str) -> Any:
    try:
        import transformers
    except ImportError as exc:
        raise ArgumentError(f"bench model {name}: needs the 'transformers' package "
                            "(pip install 'taskloom[models]')") from exc
    transformers.logging.set_verbosity_error()
    return transformers


def inception_v3(num_classes: int = 1000) -> Any:
    """Inception-V3 (without the auxiliary classifier, which inference does not run)."""
    from taskloom.bench.inception import inception_v3 as build_inception
    return build_inception(num_classes)


_BUILDERS: dict[str, Callable[..., Any]] = {"resnet50": resnet50, "mobilenet_v2": mobilenet_v2,
                                            "inception_v3": inception_v3, "mlp": mlp}


def build(name: str, batch: int = 1, seq: int = 128, seed: int = 0) -> tuple[Any, tuple[Any, ...]]:
    """An eval-mode torch model and example inputs for it (:func:`inputs`); weights and
    inputs from ``seed``."""
    import torch
    if name not in MODELS:
        raise ArgumentError(f"bench model: unknown model {name!r} (known: {', '.join(MODELS)})")
    if batch < 1 or seq < 1:
        raise ArgumentError(f"bench model {name}: batch ({batch}) and seq ({seq}) must be at least 1")
    torch.manual_seed(seed)
    if name in SEQUENCE_MODELS:
        model = bert(seq) if name == "bert" else gpt2(seq)
    else:
        model = _BUILDERS[name]()
        if name in IMAGE_MODELS:
            _randomize_norms(model)
    return model.eval(), inputs(name, batch, seq)


def inputs(name: str, batch: int = 1, seq: int = 128) -> tuple[Any, ...]:
    """Random inputs of ``name``: images of the model's size for the CNNs, vectors for the
    MLP, ``seq`` token ids for BERT and GPT-2 (from torch's current seed)."""
    import torch
    if name in IMAGE_MODELS:
        size = IMAGE_MODELS[name]
        return (torch.randn(batch, 3, size, size),)
    if name in VECTOR_MODELS:
        return (torch.randn(batch, VECTOR_MODELS[name]),)
    vocab = 30522 if name == "bert" else 50257
    return (torch.randint(0, vocab, (batch, seq), dtype=torch.int64),)


def _randomize_norms(model: Any) -> None:
    """Give batch norms non-trivial statistics (freshly built ones are the identity), so a
    wrongly folded norm shows in the outputs; scaled to keep activations in range."""
    import torch
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.0)
                m.bias.uniform_(-0.1, 0.1)
