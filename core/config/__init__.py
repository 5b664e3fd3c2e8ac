"""Recipes: the YAML format (``schema``), its loading with includes and overrides (``load``), TRL's field names.

Validation only: nothing here imports torch or TRL.
"""

from whileai.config.load import LoadedRecipe, load_recipe, parse_overrides, validate_recipe
from whileai.config.schema import Recipe

__all__ = ["LoadedRecipe", "Recipe", "load_recipe", "parse_overrides", "validate_recipe"]
