"""Built-in example models, built from code with fixed-seed weights (no downloads)."""

from kiln.models.bert import bert, bert_tiny  # noqa: F401
from kiln.models.branching import ensemble, inception_net, multi_head  # noqa: F401
from kiln.models.cnn import small_cnn  # noqa: F401
from kiln.models.efficientnet import efficientnet_b0  # noqa: F401
from kiln.models.gpt import gpt, gpt_tiny  # noqa: F401
from kiln.models.mlp import mlp  # noqa: F401
from kiln.models.mobilenet import mobilenet_v2  # noqa: F401
from kiln.models.resnet import resnet18, resnet50  # noqa: F401
