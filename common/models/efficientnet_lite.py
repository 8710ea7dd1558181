"""EfficientNet-Lite as a transformers model (config, backbone body, image classifier), without timm.

EfficientNet-Lite (Google, 2020: github.com/tensorflow/tpu, `models/official/efficientnet/lite`) is EfficientNet
(Tan and Le 2019, "EfficientNet: Rethinking Model Scaling for Convolutional Neural Networks", arXiv:1905.11946)
made for mobile accelerators: no squeeze-and-excitation, ReLU6 instead of swish, and the stem (32 channels) and head
(1280 channels) kept fixed while the network is scaled. transformers' own `EfficientNet*` classes always have
squeeze-and-excitation, and timm (which has `tf_efficientnet_lite0`) needs torchvision, so this module builds the
network from torch layers. The convolutions use TensorFlow's "SAME" padding, as the TF-trained weights expect.

The module is self-contained: `save_pretrained` copies it into the checkpoint (`auto_map` in config.json), and
`AutoModelForImageClassification.from_pretrained(folder, trust_remote_code=True)` loads it without this package.
"""

import math

from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.backbone_utils import BackboneConfigMixin, BackboneMixin
from transformers.modeling_outputs import (
    BackboneOutput,
    BaseModelOutputWithPoolingAndNoAttention,
    ImageClassifierOutputWithNoAttention,
)


class EfficientNetLiteConfig(BackboneConfigMixin, PretrainedConfig):
    """Configuration of an EfficientNet-Lite network; the defaults are EfficientNet-Lite0 (4.7 M parameters).

    Args:
        num_channels: input image channels.
        image_size: side in pixels of the square images the weights were trained on (224 for Lite0).
        stem_channels / head_channels: output channels of the stem 3x3 convolution and of the final 1x1
            convolution (fixed in every Lite variant).
        kernel_sizes, in_channels, out_channels, strides, num_block_repeats, expand_ratios: one entry per stage of
            inverted-residual (MBConv) blocks; a stage's first block has the stage's stride and input channels,
            its other blocks stride 1 and `out_channels` in and out.
        hidden_act: activation after every batch norm except the projections ("relu6" in every Lite variant).
        batch_norm_eps / batch_norm_momentum: `nn.BatchNorm2d` settings (TF's 1e-3 and decay 0.99, i.e. torch
            momentum 0.01).
        dropout_rate: dropout before the classifier.
        drop_connect_rate: stochastic-depth probability of the last block's residual branch, rising linearly from
            0 at the first block (Huang et al. 2016, "Deep Networks with Stochastic Depth"; EfficientNet's
            `drop_connect_rate`).
        out_features / out_indices: as a backbone (`EfficientNetLiteBackbone`, e.g. DETR's), which of the stages
            "stem", "stage1" ... "stage7" it returns; default the last one (stride 32).
    """

    model_type = "efficientnet_lite"

    def __init__(
        self,
        num_channels=3,
        image_size=224,
        stem_channels=32,
        head_channels=1280,
        kernel_sizes=(3, 3, 5, 3, 5, 5, 3),
        in_channels=(32, 16, 24, 40, 80, 112, 192),
        out_channels=(16, 24, 40, 80, 112, 192, 320),
        strides=(1, 2, 2, 2, 1, 2, 1),
        num_block_repeats=(1, 2, 2, 3, 3, 4, 1),
        expand_ratios=(1, 6, 6, 6, 6, 6, 6),
        hidden_act="relu6",
        batch_norm_eps=1e-3,
        batch_norm_momentum=0.01,
        dropout_rate=0.2,
        drop_connect_rate=0.2,
        initializer_range=0.02,
        out_features=None,
        out_indices=None,
        **kwargs,
    ):
        stages = [kernel_sizes, in_channels, out_channels, strides, num_block_repeats, expand_ratios]
        if len({len(s) for s in stages}) != 1:
            raise ValueError("EfficientNetLiteConfig: kernel_sizes, in_channels, out_channels, strides, "
                             f"num_block_repeats and expand_ratios need one entry per stage; got lengths "
                             f"{[len(s) for s in stages]}")
        self.num_channels = num_channels
        self.image_size = image_size
        self.stem_channels = stem_channels
        self.head_channels = head_channels
        self.kernel_sizes = list(kernel_sizes)
        self.in_channels = list(in_channels)
        self.out_channels = list(out_channels)
        self.strides = list(strides)
        self.num_block_repeats = list(num_block_repeats)
        self.expand_ratios = list(expand_ratios)
        self.hidden_act = hidden_act
        self.batch_norm_eps = batch_norm_eps
        self.batch_norm_momentum = batch_norm_momentum
        self.dropout_rate = dropout_rate
        self.drop_connect_rate = drop_connect_rate
        self.initializer_range = initializer_range
        self.stage_names = ["stem"] + [f"stage{i}" for i in range(1, len(self.out_channels) + 1)]
        if out_features is None and out_indices is None:
            out_features = [self.stage_names[-1]]
        self.set_output_features_output_indices(out_indices=out_indices, out_features=out_features)
        super().__init__(**kwargs)


class SamePaddingConv2d(nn.Conv2d):
    """`nn.Conv2d` with TensorFlow's "SAME" padding for any input size.

    Output side = ceil(input side / stride); the total padding max((out - 1) * stride + kernel - in, 0) goes half
    before and the rest (one more when odd) after, as in TF's `tf.nn.conv2d(padding="SAME")`. With stride 2 on an
    even side that is (0, 1) for a 3x3 kernel, which torch's symmetric `padding=` cannot express.
    Input and output: (batch, channels, height, width).
    """

    def forward(self, hidden_states):
        pads = []
        for size, kernel, stride in zip(hidden_states.shape[-2:], self.kernel_size, self.stride):
            total = max((math.ceil(size / stride) - 1) * stride + kernel - size, 0)
            pads.append((total // 2, total - total // 2))
        (top, bottom), (left, right) = pads
        if top or bottom or left or right:
            hidden_states = nn.functional.pad(hidden_states, (left, right, top, bottom))
        return self._conv_forward(hidden_states, self.weight, self.bias)


def drop_path(hidden_states, rate, training):
    """Stochastic depth: zeroes a whole sample's residual branch with probability `rate` and scales the kept ones
    by 1 / (1 - rate), in training only (Huang et al. 2016). Shape (batch, ...) in and out."""
    if not training or rate == 0.0:
        return hidden_states
    keep = 1.0 - rate
    mask = hidden_states.new_empty((hidden_states.shape[0],) + (1,) * (hidden_states.ndim - 1)).bernoulli_(keep)
    return hidden_states * mask / keep


class EfficientNetLiteBlock(nn.Module):
    """Inverted-residual (MBConv) block without squeeze-and-excitation: 1x1 expansion (skipped when
    `expand_ratio` is 1), depthwise k x k convolution with `stride`, 1x1 projection; a residual connection (with
    stochastic depth) when the stride is 1 and the channels do not change."""

    def __init__(self, config, in_dim, out_dim, kernel_size, stride, expand_ratio, drop_path_rate):
        super().__init__()
        hidden_dim = in_dim * expand_ratio
        norm = {"eps": config.batch_norm_eps, "momentum": config.batch_norm_momentum}
        self.expand = expand_ratio != 1
        if self.expand:
            self.expand_conv = nn.Conv2d(in_dim, hidden_dim, 1, bias=False)
            self.expand_bn = nn.BatchNorm2d(hidden_dim, **norm)
        self.depthwise_conv = SamePaddingConv2d(
            hidden_dim, hidden_dim, kernel_size, stride=stride, groups=hidden_dim, bias=False
        )
        self.depthwise_bn = nn.BatchNorm2d(hidden_dim, **norm)
        self.project_conv = nn.Conv2d(hidden_dim, out_dim, 1, bias=False)
        self.project_bn = nn.BatchNorm2d(out_dim, **norm)
        self.activation = ACT2FN[config.hidden_act]
        self.residual = stride == 1 and in_dim == out_dim
        self.drop_path_rate = drop_path_rate

    def forward(self, hidden_states):
        inputs = hidden_states
        if self.expand:
            hidden_states = self.activation(self.expand_bn(self.expand_conv(hidden_states)))
        hidden_states = self.activation(self.depthwise_bn(self.depthwise_conv(hidden_states)))
        hidden_states = self.project_bn(self.project_conv(hidden_states))
        if self.residual:
            hidden_states = drop_path(hidden_states, self.drop_path_rate, self.training) + inputs
        return hidden_states


class EfficientNetLitePreTrainedModel(PreTrainedModel):
    """Weight initialisation and loading for the EfficientNet-Lite models."""

    config_class = EfficientNetLiteConfig
    base_model_prefix = "efficientnet_lite"
    main_input_name = "pixel_values"
    input_modalities = ("image",)
    _no_split_modules = ["EfficientNetLiteBlock"]

    def _init_weights(self, module):
        """Convolutions: Kaiming normal, fan-out (as EfficientNet's reference code); linear layers: normal with
        `initializer_range`; batch norms: identity with fresh running statistics."""
        if isinstance(module, nn.Conv2d):
            init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Linear):
            init.normal_(module.weight, mean=0.0, std=self.config.initializer_range)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.BatchNorm2d):
            init.ones_(module.weight)
            init.zeros_(module.bias)
            init.zeros_(module.running_mean)
            init.ones_(module.running_var)
            init.zeros_(module.num_batches_tracked)

    def _build_body(self, config):
        """The stem (3x3 convolution, stride 2, batch norm, activation) and the MBConv stages, as `stem_conv`,
        `stem_bn`, `activation` and `stages` (a `ModuleList` of one `Sequential` of blocks per stage; stochastic
        depth rising linearly with the block's position in the whole network). Shared by the model and the backbone,
        so that their parameter names agree."""
        norm = {"eps": config.batch_norm_eps, "momentum": config.batch_norm_momentum}
        self.stem_conv = SamePaddingConv2d(config.num_channels, config.stem_channels, 3, stride=2, bias=False)
        self.stem_bn = nn.BatchNorm2d(config.stem_channels, **norm)
        self.activation = ACT2FN[config.hidden_act]
        total = sum(config.num_block_repeats)
        self.stages, index = nn.ModuleList(), 0
        for kernel, in_dim, out_dim, stride, repeats, ratio in zip(
            config.kernel_sizes, config.in_channels, config.out_channels, config.strides,
            config.num_block_repeats, config.expand_ratios,
        ):
            blocks = []
            for repeat in range(repeats):
                blocks.append(EfficientNetLiteBlock(
                    config, in_dim if repeat == 0 else out_dim, out_dim, kernel, stride if repeat == 0 else 1,
                    ratio, config.drop_connect_rate * index / total,
                ))
                index += 1
            self.stages.append(nn.Sequential(*blocks))

    def _body_states(self, pixel_values):
        """[stem output, stage 1 output, ..., last stage output], each (batch, channels, height, width)."""
        states = [self.activation(self.stem_bn(self.stem_conv(pixel_values)))]
        for stage in self.stages:
            states.append(stage(states[-1]))
        return states


class EfficientNetLiteModel(EfficientNetLitePreTrainedModel):
    """The network without its classifier.

    Input: `pixel_values` (batch, num_channels, height, width), normalised as the checkpoint's image processor
    says ((x - 0.5) / 0.5 for the TF-trained weights). Output: `last_hidden_state` (batch, head_channels,
    height / 32, width / 32, rounded up), `pooler_output` (batch, head_channels), the spatial mean, and, with
    `output_hidden_states=True`, `hidden_states`: the stem output and each stage's output.
    """

    def __init__(self, config):
        super().__init__(config)
        self._build_body(config)
        self.head_conv = nn.Conv2d(config.out_channels[-1], config.head_channels, 1, bias=False)
        self.head_bn = nn.BatchNorm2d(config.head_channels, eps=config.batch_norm_eps,
                                      momentum=config.batch_norm_momentum)
        self.post_init()

    def forward(self, pixel_values=None, output_hidden_states=None, return_dict=None, **kwargs):
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        states = self._body_states(pixel_values)
        all_hidden_states = tuple(states) if output_hidden_states else None
        hidden_states = self.activation(self.head_bn(self.head_conv(states[-1])))
        pooled = hidden_states.mean(dim=(2, 3))
        if not return_dict:
            return tuple(v for v in (hidden_states, pooled, all_hidden_states) if v is not None)
        return BaseModelOutputWithPoolingAndNoAttention(
            last_hidden_state=hidden_states, pooler_output=pooled, hidden_states=all_hidden_states
        )


class EfficientNetLiteBackbone(BackboneMixin, EfficientNetLitePreTrainedModel):
    """EfficientNet-Lite as a backbone (`AutoBackbone`; DETR's `backbone_config`): the feature maps of the stages
    in `config.out_features`, without the 1x1 head convolution.

    Input: `pixel_values` (batch, num_channels, height, width). Output: `feature_maps`, one (batch, channels,
    height / stride, width / stride) tensor per selected stage (stem: stride 2, 32 channels; stage7: stride 32,
    320 channels for Lite0). Its parameter names are those of `EfficientNetLiteModel` (`stem_conv`, `stages.*`),
    so a classifier's `efficientnet_lite.*` weights load into it.
    """

    has_attentions = False

    def __init__(self, config):
        super().__init__(config)
        self.num_features = [config.stem_channels] + list(config.out_channels)
        self._build_body(config)
        self.post_init()

    def forward(self, pixel_values=None, output_hidden_states=None, return_dict=None, **kwargs):
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        all_hidden_states = self._body_states(pixel_values)
        feature_maps = tuple(all_hidden_states[i] for i, name in enumerate(self.stage_names)
                             if name in self.out_features)
        hidden = tuple(all_hidden_states) if output_hidden_states else None
        if not return_dict:
            return (feature_maps,) + ((hidden,) if hidden is not None else ())
        return BackboneOutput(feature_maps=feature_maps, hidden_states=hidden, attentions=None)


class EfficientNetLiteForImageClassification(EfficientNetLitePreTrainedModel):
    """EfficientNet-Lite with dropout and a linear classifier on the pooled features.

    Input: `pixel_values` (batch, num_channels, height, width); `labels` (batch,) class ids (or per the config's
    `problem_type`, as every transformers classifier). Output: `logits` (batch, num_labels) and, with labels,
    `loss` (transformers' `loss_function`: cross-entropy for single-label classification).
    """

    def __init__(self, config):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.efficientnet_lite = EfficientNetLiteModel(config)
        self.dropout = nn.Dropout(p=config.dropout_rate)
        self.classifier = (
            nn.Linear(config.head_channels, config.num_labels) if config.num_labels > 0 else nn.Identity()
        )
        self.post_init()

    def forward(self, pixel_values=None, labels=None, output_hidden_states=None, return_dict=None, **kwargs):
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        outputs = self.efficientnet_lite(pixel_values, output_hidden_states=output_hidden_states, return_dict=True)
        logits = self.classifier(self.dropout(outputs.pooler_output))
        loss = self.loss_function(labels, logits, self.config) if labels is not None else None
        if not return_dict:
            output = (logits,) + ((outputs.hidden_states,) if outputs.hidden_states is not None else ())
            return ((loss,) + output) if loss is not None else output
        return ImageClassifierOutputWithNoAttention(loss=loss, logits=logits, hidden_states=outputs.hidden_states)


def register_auto_classes():
    """Registers the classes with transformers' Auto classes in this process (`AutoConfig` for the model type
    "efficientnet_lite", `AutoBackbone`, `AutoModel`, `AutoModelForImageClassification`).

    Needed where the config is nested in another (DETR's `backbone_config`), which `trust_remote_code` does not
    reach: a DETR checkpoint with this backbone loads after this call. Calling it again does nothing."""
    from transformers import AutoBackbone, AutoConfig, AutoModel, AutoModelForImageClassification

    AutoConfig.register(EfficientNetLiteConfig.model_type, EfficientNetLiteConfig, exist_ok=True)
    AutoBackbone.register(EfficientNetLiteConfig, EfficientNetLiteBackbone, exist_ok=True)
    AutoModel.register(EfficientNetLiteConfig, EfficientNetLiteModel, exist_ok=True)
    AutoModelForImageClassification.register(
        EfficientNetLiteConfig, EfficientNetLiteForImageClassification, exist_ok=True
    )


__all__ = [
    "EfficientNetLiteBackbone",
    "EfficientNetLiteConfig",
    "EfficientNetLiteModel",
    "EfficientNetLiteForImageClassification",
    "EfficientNetLitePreTrainedModel",
]
