"""Experiment configs: the schema with every default, dotted overrides, validation, files.

schema     every key and its default; ``base_config()`` is where config files start
overrides  ``--config.model.pe.type=alibi``: parsed by the type of the value it replaces
validate   every key, type and value checked before anything is compiled
files      ``configs/<name>.py`` -> ConfigDict
"""

from pe_research.config.files import (
    call_user_code,
    flat_config,
    from_mapping,
    load_config,
    load_user_module,
    to_dict,
)
from pe_research.config.overrides import apply_overrides, override_text, parse_value
from pe_research.config.schema import (
    BLOCK_DEFAULTS,
    MODEL_DEFAULTS,
    TOP_LEVEL_DEFAULTS,
    base_config,
    complete,
    default_task_block,
)
from pe_research.config.validate import best_mode, validate_config
from pe_research.core.arguments import collect_overrides, split_override

__all__ = [
    "BLOCK_DEFAULTS", "MODEL_DEFAULTS", "TOP_LEVEL_DEFAULTS", "apply_overrides", "base_config",
    "best_mode", "call_user_code", "collect_overrides", "complete", "default_task_block",
    "flat_config", "from_mapping", "load_config", "load_user_module",
    "override_text",
    "parse_value", "split_override", "to_dict", "validate_config",
]
