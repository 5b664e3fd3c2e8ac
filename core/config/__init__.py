"""Recipes: the YAML format (``schema``), its loading with includes and overrides (``load``), TRL's field names
(``trl_fields``), and the one build from a recipe to the library's objects and the application's frozen setups
(``build``; ``verl`` for verl's registered reward manager).

A loaded recipe goes no further than this package and the commands. Nothing here imports torch but ``verl``, which
verl's plugin system loads inside a verl process, and TRL only in ``trl_fields.installed_kinds``, the helper that reads
the installed ``GRPOConfig`` to regenerate the field table (a test compares the two).
"""

from whileai.config.load import LoadedRecipe, load_recipe, parse_overrides, validate_recipe
from whileai.config.schema import Recipe

__all__ = ["LoadedRecipe", "Recipe", "load_recipe", "parse_overrides", "validate_recipe"]
