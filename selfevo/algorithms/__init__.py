"""Recipes: one readable file per algorithm. Each module has a ``Config`` dataclass and ``main(cfg)``."""
