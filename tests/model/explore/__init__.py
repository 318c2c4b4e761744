"""An exhaustive small-scope check of the delivery protocol (issue 18): see search.py."""

from tests.model.explore.search import Counterexample, Exploration, explore

__all__ = ["Counterexample", "Exploration", "explore"]
