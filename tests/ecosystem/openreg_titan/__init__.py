"""torchtitan configurations for sizing runs on openreg (``--module openreg_titan``)."""
