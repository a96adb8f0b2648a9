"""How a worker shares its free slots among the partitions it reads at once (pure)."""

from __future__ import annotations

from collections.abc import Sequence


def share(total: int, tags: Sequence[str], offset: int) -> list[tuple[str, int]]:
    """Split `total` slots over `tags` as evenly as possible: each gets total // len(tags), and
    the remainder goes one each to the tags from position `offset` on (wrapping). The caller
    moves `offset` on by the remainder each time, so the extra slots rotate and, when there are
    fewer slots than tags, every tag gets its turn. Tags that get nothing are left out."""
    if total <= 0 or not tags:
        return []
    n = len(tags)
    base, extra = divmod(total, n)
    start = offset % n
    shares = []
    for i in range(n):
        count = base + (1 if (i - start) % n < extra else 0)
        if count:
            shares.append((tags[i], count))
    return shares
