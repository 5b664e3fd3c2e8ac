"""Recipes: the YAML format (``schema``), its loading with includes and overrides (``load``), TRL's field names
(``trl_fields``), the equation-3 guard (``guard``).

Validation only: nothing here imports torch, and TRL only in ``trl_fields.installed_kinds``, the helper that reads
the installed ``GRPOConfig`` to regenerate the field table (a test compares the two).
"""

from whileai.config.load import LoadedRecipe, load_recipe, parse_overrides, validate_recipe
from whileai.config.schema import Recipe

__all__ = ["LoadedRecipe", "Recipe", "load_recipe", "parse_overrides", "validate_recipe"]
