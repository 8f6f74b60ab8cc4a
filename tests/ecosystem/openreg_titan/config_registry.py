"""torchtitan's own Llama 3 configurations with its varlen attention in place of FlexAttention, which torch
2.13 refuses on any device outside a fixed list (docs/distributed.md, "Attention: varlen, not
FlexAttention"). Selected with torchtitan's own mechanism for configurations outside its tree
(``--module openreg_titan --config llama3_8b_varlen``, this folder on PYTHONPATH); torchtitan's code is
unchanged. Everything but the attention backend is torchtitan's published configuration."""

from torchtitan.components.optimizer.optimizer import default_adamw
from torchtitan.models.llama3 import config_registry as titan
from torchtitan.models.llama3 import model_registry


def _varlen(config, flavor: str):
    config.model_spec = model_registry(flavor, attn_backend="varlen")
    return config


def llama3_8b_varlen():
    return _varlen(titan.llama3_8b(), "8B")


def llama3_70b_varlen():
    return _varlen(titan.llama3_70b(), "70B")


def llama3_405b_varlen():
    """torchtitan's 405B configuration without its Float8 linears and torch.compile: torchtitan builds
    those converters when it makes the configuration, and they need torchao, which the ecosystem venv
    does not install (Float8 is not modelled yet). Its other settings are the 70B configuration's
    (tensor parallel 8, full activation checkpointing, sequence 8192); the batch and the learning rate
    are the 405B's."""
    config = _varlen(titan.llama3_70b(), "405B")
    config.training.local_batch_size = 2
    config.optimizer = default_adamw(lr=8e-5)
    return config
