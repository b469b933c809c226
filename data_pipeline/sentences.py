"""Splits running text into sentences, the unit BERT's NSP task pairs up.

A "sentence" only needs to be a sensible contiguous span: a wrong split costs a
little NSP signal, never correctness. The rules, in order:

1. Paragraphs end at blank lines and at horizontal rules / heading underlines
   (a line of one repeated symbol, e.g. `=====`), which are dropped.
2. Inside a paragraph, hard-wrapped lines are re-joined. A paragraph holding a
   line longer than `_WRAP_WIDTH` is not hard-wrapped (Wikipedia puts one
   paragraph or heading per line), so each of its lines stands alone. A list
   item (`- `, `* `, `1. `, `(a) `) starts a new block.
3. A paragraph indented deeper than the text (a code sample or a quotation) is
   re-joined whatever its line lengths, so a code listing yields a few long
   segments instead of one junk sentence per line.
4. Blocks split after `.`, `!` or `?` (plus closing quotes or brackets) followed
   by whitespace and a letter that is not lower-case, a digit, or an opening
   quote or bracket. Not after an abbreviation (`e.g.`, `Dr.`, `vs.`), an initial
   (`J. Smith`), or `No.`, `Fig.`, `p.` before a number. Splits need whitespace,
   so numbers, versions (3.11) and URLs are never cut. CJK full stops split
   without whitespace.
5. Segments without a single letter (`* * *`, `1.`) are dropped.
"""

import re

# Hard-wrapped prose is narrower than this; a longer line means one line per paragraph.
_WRAP_WIDTH = 120

# Never the end of a sentence (compared lower-cased, without the final period).
_ABBREVIATIONS = frozenset(
    "al approx ca capt cf co col corp dept dr e.g eg esp etc gen gov hon i.e ie inc jr "  # noqa: SIM905
    "lt ltd mr mrs ms mt prof rep rev sen sgt sr st viz vs".split()
)
# Not the end of a sentence when a number follows: "No. 5", "Fig. 3", "pp. 12", "Jan. 1".
_NUMBER_ABBREVIATIONS = frozenset(
    "art ch eq eqs fig figs no nos nr op p pp ref sec vol vols "  # noqa: SIM905
    "jan feb mar apr jun jul aug sep sept oct nov dec".split()
)
_OPENERS = "\"'“‘«([¿¡"

_RULE = re.compile(r"\s*([-=~^*_#+.:`'\"])\1{2,}\s*$")
_LIST_ITEM = re.compile(r"\s*(?:[-*+•‣◦]|\d{1,2}[.)]|\(?[A-Za-z0-9]\))\s+\S")
# A run of end punctuation, closing quotes/brackets, then whitespace; or a CJK stop.
_BOUNDARY = re.compile(r"([.!?]+)[\"'”’»)\]]*\s+|[。！？]+[」』）]*\s*")
_INITIALISM = re.compile(r"(?:[a-z]\.)+[a-z]")
_LETTER = re.compile(r"[^\W\d_]")
_LEADING_PUNCTUATION = _OPENERS + "”’»)]"


def split_sentences(text: str) -> list[str]:
    """Splits `text` into stripped, non-empty sentences without newlines."""
    lines = text.splitlines()
    base_indent = min((_indent(line) for line in lines if line.strip()), default=0)
    sentences = []
    for paragraph in _paragraphs(lines):
        for block in _blocks(paragraph, base_indent):
            for sentence in _split_block(block):
                if _LETTER.search(sentence):
                    sentences.append(sentence)
    return sentences


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _paragraphs(lines: list[str]):
    paragraph = []
    for line in lines:
        if not line.strip() or _RULE.match(line):
            if paragraph:
                yield paragraph
            paragraph = []
        else:
            paragraph.append(line)
    if paragraph:
        yield paragraph


def _blocks(paragraph: list[str], base_indent: int) -> list[str]:
    indented = min(_indent(line) for line in paragraph) > base_indent
    if not indented and any(len(line) > _WRAP_WIDTH for line in paragraph):
        return [line.strip() for line in paragraph]
    blocks = []
    current = []
    for line in paragraph:
        if current and _LIST_ITEM.match(line):
            blocks.append(" ".join(current))
            current = []
        current.append(line.strip())
    blocks.append(" ".join(current))
    return blocks


def _split_block(block: str) -> list[str]:
    sentences = []
    start = 0
    for match in _BOUNDARY.finditer(block):
        end = match.end()
        if end == len(block):
            break
        stops = match.group(1)
        if stops is not None and not _ends_sentence(block, match.start(), stops, end):
            continue
        sentences.append(block[start:end].strip())
        start = end
    sentences.append(block[start:].strip())
    return [s for s in sentences if s]


def _ends_sentence(block: str, stop_at: int, stops: str, next_at: int) -> bool:
    following = block[next_at]
    if following in _OPENERS and next_at + 1 < len(block):
        following = block[next_at + 1]
    if not (following.isdigit() or (following.isalpha() and not following.islower())):
        return False
    if stops != ".":
        return True
    word_start = max(block.rfind(" ", 0, stop_at), block.rfind("\t", 0, stop_at)) + 1
    word = block[word_start:stop_at].lstrip(_LEADING_PUNCTUATION).lower()
    if len(word) == 1 and word.isalpha():
        return False  # an initial: "J. R. R. Tolkien"
    if word in _ABBREVIATIONS or _INITIALISM.fullmatch(word):
        return False
    return not (word in _NUMBER_ABBREVIATIONS and following.isdigit())
