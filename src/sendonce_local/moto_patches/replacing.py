"""How a patch changes moto: through ``replace(owner, attribute, value)``, which records what
the attribute held so that the change can be undone (``undo``), last change first.
"""

from __future__ import annotations

from collections.abc import Callable

Replace = Callable[[object, str, object], None]
PatchFunction = Callable[[Replace], None]

# What `recorder` notes for an attribute the owner did not hold itself: `undo` deletes it.
MISSING = object()


def recorder(replaced: list[tuple[object, str, object]]) -> Replace:
    def replace(owner: object, attribute: str, value: object) -> None:
        replaced.append((owner, attribute, vars(owner).get(attribute, MISSING)))
        setattr(owner, attribute, value)

    return replace


def undo(replaced: list[tuple[object, str, object]]) -> None:
    for owner, attribute, previous in reversed(replaced):
        if previous is MISSING:
            delattr(owner, attribute)
        else:
            setattr(owner, attribute, previous)
