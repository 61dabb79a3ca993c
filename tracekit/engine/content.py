"""Token content: which tokens of two requests are the same, for prefix caching.

Standard library only: the driver of the real vLLM scheduler (``tracekit.vllm.driver``) builds its
``Request``'s token ids from these functions, and the embedded engine derives its block hashes
from the same model, so equal content gives equal token ids in vLLM and equal block hashes in the
engine.

**The content model.** A request may carry ``content_ids``: one id per ``content_block_tokens``
prompt tokens (Mooncake ``hash_ids``: one id per 512-token block; a shared prefix: one id for the
whole prefix). The first ``min(prompt_tokens, len(content_ids) * content_block_tokens)`` prompt
tokens are *content tokens*: the token at position ``p`` is a function of the pair
``(content_ids[p // content_block_tokens], p % content_block_tokens)`` only. Every other token (the
rest of the prompt, and every output token) is *unique to the request*: a function of the pair
``(request index, position)``. A request without content therefore shares no token with any other
request, as before content existed.

**Token ids.** Both maps are injective and their images disjoint (content tokens are even, unique
tokens odd, both at least 16, so neither meets the driver's stop token 7):

* content token ``16 + 2 * pair(zigzag(content_id), offset)``;
* unique token ``17 + 2 * pair(request_index, position)``;

where ``pair`` is Cantor's pairing function (a bijection of pairs of naturals onto the naturals), so
two requests with different ``content_block_tokens`` still share exactly the tokens whose pairs are
equal.

**Block keys.** The engine never builds token ids. vLLM chains each full block's hash through its
parent (``hash_block_tokens(parent, tokens)``), so two requests' block ``j`` hash equal exactly when
their first ``(j + 1) * block_size`` tokens are equal. :func:`block_segments` describes a block that
lies wholly inside the content region by its maximal runs of consecutive offsets within one content
id, ``((content_id, first_offset, length), ...)``: a canonical form of its tokens (a run ends at a
chunk boundary, where the offset restarts at 0, so no two descriptions give the same tokens). The
engine interns ``(parent key, segments)`` into an integer. A block that holds any unique token can
only equal the same block of the same request, so its key is ``(request index, block index)``.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "CONTENT_TOKEN_BASE",
    "MOONCAKE_BLOCK_TOKENS",
    "block_segments",
    "content_length",
    "content_token",
    "prompt_token_ids",
    "unique_token",
]

#: Tokens per Mooncake ``hash_ids`` entry.
MOONCAKE_BLOCK_TOKENS = 512
#: Smallest token id the content model uses (ids below are left to special tokens).
CONTENT_TOKEN_BASE = 16


def _pair(a: int, b: int) -> int:
    s = a + b
    return s * (s + 1) // 2 + b


def content_token(content_id: int, offset: int) -> int:
    """The token at ``offset`` of the content block ``content_id`` (any integer)."""
    # Zigzag folds negative ids onto the odd naturals, so the pairing stays injective.
    natural = 2 * content_id if content_id >= 0 else -2 * content_id - 1
    return CONTENT_TOKEN_BASE + 2 * _pair(natural, offset)


def unique_token(request_index: int, position: int) -> int:
    """The token at ``position`` of request ``request_index`` outside any content."""
    return CONTENT_TOKEN_BASE + 1 + 2 * _pair(request_index, position)


def content_length(
    prompt_tokens: int, content_ids: Sequence[int], content_block_tokens: int
) -> int:
    """How many leading prompt tokens are content tokens."""
    return min(prompt_tokens, len(content_ids) * content_block_tokens)


def prompt_token_ids(
    request_index: int,
    prompt_tokens: int,
    content_ids: Sequence[int],
    content_block_tokens: int,
) -> list[int]:
    """A request's prompt token ids under the content model (the driver's ``prompt_token_ids``)."""
    n = content_length(prompt_tokens, content_ids, content_block_tokens)
    ids = [
        content_token(content_ids[p // content_block_tokens], p % content_block_tokens)
        for p in range(n)
    ]
    ids.extend(unique_token(request_index, p) for p in range(n, prompt_tokens))
    return ids


def block_segments(
    content_ids: Sequence[int], content_block_tokens: int, start: int, end: int
) -> tuple[tuple[int, int, int], ...]:
    """The canonical description of the content tokens at positions ``[start, end)``.

    Precondition: ``end`` lies inside the content region.
    """
    segments = []
    position = start
    while position < end:
        chunk, offset = divmod(position, content_block_tokens)
        length = min(end - position, content_block_tokens - offset)
        segments.append((content_ids[chunk], offset, length))
        position += length
    return tuple(segments)
