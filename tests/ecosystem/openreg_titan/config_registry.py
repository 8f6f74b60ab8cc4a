"""torchtitan's own Llama 3 configurations with its varlen attention in place of FlexAttention, which torch
2.13 refuses on any device outside a fixed list (docs/distributed.md, "Attention: varlen, not
FlexAttention"). Selected with torchtitan's own mechanism for configurations outside its tree
(``--module openreg_titan --config llama3_8b_varlen``, this folder on PYTHONPATH); torchtitan's code is
unchanged. Everything but the attention backend is torchtitan's published configuration."""

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
    return _varlen(titan.llama3_405b(), "405B")
