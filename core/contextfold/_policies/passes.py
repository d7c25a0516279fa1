"""Small reusable passes for a [`Pipeline`][contextfold.Pipeline].

A pass is a policy that never needs a summary: cheap, deterministic, pure. The first one
is the threshold design's step 1: images in tool results are the largest consumers of context and
are of no use once the model has analysed them, so they are replaced by a one-line marker.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Annotated

from .._config import NonBlank, check_fields
from .._contract.policy import CompactionContext, PolicyOutcome, Target
from .._messages.model import ContentPart, ImagePart, Message, TextPart
from ..errors import ConfigurationError
from .simple import SimplePolicy

__all__ = ["IMAGE_MARKER", "StripImagesPass", "strip_images"]

IMAGE_MARKER = "[Screenshot analyzed — image omitted from context]"
"""The text the threshold design puts in place of stripped images (prepended once per message)."""

_ROLES = frozenset({"user", "assistant", "tool"})


def strip_images(
    messages: Sequence[Message],
    context: CompactionContext,
    *,
    roles: frozenset[str] = frozenset({"tool"}),
    marker: Annotated[str, NonBlank] = IMAGE_MARKER,
    keep_unseen: bool = True,
    keep: frozenset[int] = frozenset(),
) -> tuple[Sequence[Message], tuple[Target, ...]]:
    """``messages`` with the images of ``roles`` messages removed, and one target per change.

    The marker is prepended to a changed message unless its text already starts with it.
    With ``keep_unseen`` the messages after the last assistant message keep their images:
    the model has not analysed them yet, so the marker would be false. Returns the input
    object itself when nothing changed. Messages whose index is in ``keep`` are left alone.
    """
    last_assistant = -1
    if keep_unseen:
        last_assistant = max(
            (i for i, m in enumerate(messages) if m.role == "assistant"), default=-1
        )
    out: list[Message] | None = None
    targets: list[Target] = []
    for i, m in enumerate(messages):
        if m.role not in roles or not m.images or i in keep or (keep_unseen and i > last_assistant):
            continue
        stripped = _without_images(m, marker)
        if out is None:
            out = list(messages)
        out[i] = stripped
        count = context.counter.count_message
        targets.append(
            Target(index=i, role=m.role, method="image_stripped", original_tokens=count(m),
                   new_tokens=count(stripped), tool_name=m.name if m.role == "tool" else None)
        )
    return (messages if out is None else out), tuple(targets)


def _without_images(message: Message, marker: str) -> Message:
    parts: tuple[ContentPart, ...] = ()
    if not isinstance(message.content, str):
        parts = tuple(p for p in message.content if not isinstance(p, ImagePart))
    if not message.text.startswith(marker):
        parts = (TextPart(marker), *parts)
    if all(isinstance(p, TextPart) for p in parts):
        return replace(message, content="\n".join(p.text for p in parts if isinstance(p, TextPart)))
    return replace(message, content=parts)


@dataclass(frozen=True)
class StripImagesPass(SimplePolicy):
    """Replace analysed images with the threshold design's marker (``"[Screenshot analyzed —
    ...]"``).

    It does not look at the budget: whenever it runs, every analysed image goes (a message
    changes only once). Images the model has not seen yet (after the last assistant
    message) are kept, since the marker would say they were analysed.

    Args:
        roles: the roles whose images are stripped; the threshold design strips tool results only,
            leaving images the user sent.
        marker: the text put in their place.
        keep_unseen: keep images the model has not analysed yet.
    """

    roles: frozenset[str] = frozenset({"tool"})
    marker: Annotated[str, NonBlank] = IMAGE_MARKER
    keep_unseen: bool = True
    name = "strip_images"

    def __post_init__(self) -> None:
        roles = frozenset(self.roles)
        object.__setattr__(self, "roles", roles)
        unknown = roles - _ROLES
        if not roles or unknown:
            raise ConfigurationError(
                f"roles must be a non-empty subset of {sorted(_ROLES)}, got {sorted(roles)}"
            )
        check_fields(self)

    def apply(self, messages: Sequence[Message], context: CompactionContext) -> PolicyOutcome:
        """Strip the images; the input itself when there is none to strip."""
        out, targets = strip_images(
            messages, context, roles=self.roles, marker=self.marker, keep_unseen=self.keep_unseen
        )
        if out is messages:
            return PolicyOutcome(messages=messages)
        return PolicyOutcome(
            messages=out, method=self.name, targets=targets,
            details={"images_stripped": len(targets)},
        )
