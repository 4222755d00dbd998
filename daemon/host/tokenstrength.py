"""How much guessing an API token is worth (docs/security.md: at least 128 bits of estimated
entropy; no repeats, sequences or dictionary words padded to length).

A conservative estimate in the spirit of zxcvbn, on the standard library only: the token is
read left to right, and each stretch is charged what an attacker who knows the patterns
pays to guess it —
- a run of one character (`aaaa`), or a repeat of an earlier stretch (`abcdabcd`): a few
  bits (which stretch, how long), not a character's worth each;
- a sequence (`abcdef`, `12345`, `zyxw`, `2468`): its start, step and length;
- a word people put in tokens (`password`, `worktrain`, `token`, `secret`, ...): a word's
  worth from a list of `len(WORDS)`;
- any other character: log2 of the alphabet the token draws from (lower case, upper case,
  digits, symbols: the classes it uses).
`secrets.token_urlsafe(32)` scores about 250 bits; a 36-character token made of a word and
a counting run scores a few dozen.
"""

from __future__ import annotations

import math

MIN_ENTROPY_BITS = 128
MIN_RUN = 3  # shorter runs, repeats and sequences happen by chance in random tokens
WORDS = (
    "password", "passwd", "secret", "token", "apitoken", "api", "key", "worktrain", "admin",
    "changeme", "change", "letmein", "welcome", "qwerty", "asdf", "zxcv", "default", "test",
    "testing", "example", "sample", "dummy", "placeholder", "replace", "local", "localhost",
    "server", "bearer", "auth", "login", "user", "root", "master", "dragon", "monkey",
    "football", "iloveyou", "sunshine", "shadow", "hello", "access", "trustno1", "github",
    "redis", "anthropic", "claude", "agent", "steer", "session", "workflow", "dev", "prod",
)  # fmt: skip
_WORDS_BY_LENGTH = sorted({w for w in WORDS if len(w) >= MIN_RUN}, key=len, reverse=True)
_WORD_BITS = math.log2(len(WORDS)) + 1  # which word, and its case
_PATTERN_BITS = 4.0  # which kind of pattern, roughly


def alphabet_size(token: str) -> int:
    """How many characters the token's character classes hold (lower, upper, digits, other)."""
    size = 0
    if any(c.islower() for c in token):
        size += 26
    if any(c.isupper() for c in token):
        size += 26
    if any(c.isdigit() for c in token):
        size += 10
    if any(not c.isalnum() for c in token):
        size += 33
    return max(size, 1)


def _word_at(folded: str, i: int) -> int:
    for word in _WORDS_BY_LENGTH:
        if folded.startswith(word, i):
            return len(word)
    return 0


def _run_at(token: str, i: int) -> int:
    """The length of the run of one character, or of an arithmetic sequence (step -2..2) of
    code points, starting at i; 0 when shorter than MIN_RUN."""
    if i + 1 >= len(token):
        return 0
    step = ord(token[i + 1]) - ord(token[i])
    if abs(step) > 2:
        return 0
    end = i + 1
    while end + 1 < len(token) and ord(token[end + 1]) - ord(token[end]) == step:
        end += 1
    length = end - i + 1
    return length if length >= MIN_RUN else 0


def _repeat_at(token: str, i: int) -> int:
    """The length of the longest stretch at i that already occurred before i; 0 when short."""
    best = 0
    length = MIN_RUN
    while i + length <= len(token) and token[i : i + length] in token[: i + length - 1]:
        best = length
        length += 1
    return best


def estimated_entropy_bits(token: str) -> float:
    """A lower-side estimate of the bits an attacker must guess (see the module doc)."""
    folded = token.lower()
    per_character = math.log2(alphabet_size(token))
    bits = 0.0
    i = 0
    while i < len(token):
        word = _word_at(folded, i)
        pattern = max(_run_at(token, i), _repeat_at(token, i))
        if word and word >= pattern:
            bits += _WORD_BITS
            i += word
        elif pattern:
            bits += _PATTERN_BITS + per_character + math.log2(pattern)
            i += pattern
        else:
            bits += per_character
            i += 1
    return bits


def weakness(token: str) -> str | None:
    """Why `token` carries too little entropy to guard an API, or None when it is enough."""
    bits = estimated_entropy_bits(token)
    if bits < MIN_ENTROPY_BITS:
        return (
            f"it carries about {bits:.0f} bits of estimated entropy, under {MIN_ENTROPY_BITS} "
            "(repeats, sequences and common words count for little)"
        )
    return None
