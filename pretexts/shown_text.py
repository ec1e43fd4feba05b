"""Text from outside (a file name, a shard's key) made safe to print and to write one record a line."""

import unicodedata

# bidirectional overrides and isolates: they reorder what a terminal shows after them
BIDI_CONTROLS = {chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))}


def escape_controls(text: str) -> str:
    """Control characters (a terminal's escape sequences, a newline, a tab), surrogates (a name's bytes that are not
    UTF-8) and bidirectional controls written as Python writes them (\\x1b, \\n, \\udcff); every other character,
    Unicode spaces and joiners included, as it is, so a shown name is still the file's name."""
    return "".join(ascii(c)[1:-1] if unsafe(c) else c for c in text)


def unsafe(c: str) -> bool:
    return unicodedata.category(c) in ("Cc", "Cs") or c in BIDI_CONTROLS
