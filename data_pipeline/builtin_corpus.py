"""The built-in default corpus: the Python interpreter's own documentation.

Every Python ships the reference manual's topics (`pydoc_data.topics`, what
`help('assert')` prints) and the standard library's docstrings. Together they
make a small, real English corpus that needs no download, so the whole pipeline
runs anywhere. One topic is one document, and so is one module: its docstring,
then those of its public top-level classes and functions, in source order
(method docstrings are mostly one-line repeats such as "Return self.").

Modules are read by parsing their source with `ast`, never by importing them:
some (`antigravity`, `this`) act on import. Code is removed before sentence
splitting: doctest sessions, reST literal blocks (after `::`), grammar
productions, tables, and indented blocks that do not read as prose.

Parsing and cleaning take about 2 s of CPU, which every program reading the corpus
paid at its start; the result is kept in $XDG_CACHE_HOME/bertjax (~/.cache/bertjax),
under a key of what it depends on: this Python's build (`sys.version`), its standard
library's folder and topics, and the source of the code that cleans them (this module
and sentences.py).
"""

import ast
import contextlib
import functools
import gc
import hashlib
import json
import os
import re
import sys
import sysconfig
from pydoc_data import topics

from data_pipeline import files
from data_pipeline import sentences as sentences_lib
from data_pipeline.sentences import split_sentences

# Standard-library folders without prose: tests, tools, demos, codec tables,
# and the topics themselves (read above, not parsed twice).
_SKIPPED_DIRS = frozenset(
    "test tests idle_test idlelib lib2to3 tkinter turtledemo ensurepip encodings "  # noqa: SIM905
    "pydoc_data site-packages dist-packages lib-dynload".split()
)
# A docstring is skipped when cleaning keeps less than this share of its words.
_MIN_PROSE_SHARE = 0.5
# A paragraph is prose when this share of its tokens are plain words.
_MIN_WORD_SHARE = 0.6

_WORD = re.compile(r"[(\"'“‘]*[A-Za-z][a-z]*(?:[-'’][a-z]+)*[)\"'”’,.;:!?]*")
_SENTENCE_END = re.compile(r"[.!?:][\"'”’)]*$")
_TABLE_LINE = re.compile(r"\s*(?:\+[-=+]+\+|\|.*\|)\s*$")
_FOOTNOTES_HEADER = re.compile(r"\s*-\[ .* \]-\s*$")
_DIRECTIVE = re.compile(r"\s*\.\. ")
_TYPE_FIELD = re.compile(r"\s*:(?:type|rtype|vartype)\b[^:]*:")
_PARAM_FIELD = re.compile(
    r":(?:param|parameter|arg|argument|key|keyword|var|ivar|cvar)(?: [^:]+)? (\w+):"
)
_RETURNS_FIELD = re.compile(r":returns?:")
_RAISES_FIELD = re.compile(r":raises? ([\w.]+):")
_ROLE = re.compile(r":[\w:.-]+:`[~!]?([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")
_INTERPRETED = re.compile(r"`([^`]+)`_{0,2}")
_STRONG = re.compile(r"(?<![\w*])\*\*(\w[^*\n]*?)\*\*(?![\w*])")
_EMPHASIS = re.compile(r"(?<![\w*])\*(\w[^*\n]*?)\*(?![\w*])")


@functools.cache
def documents() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(doc_id, sentences) of every built-in document, in an order fixed for a Python
    version: from the cache file when there is one for this Python and this code, else
    parsed (`parse_documents`) and cached. A cache that cannot be written is skipped."""
    path = cache_file()
    try:
        with open(path, encoding="utf-8") as f:
            return tuple((doc_id, tuple(sentences)) for doc_id, sentences in json.load(f))
    except (OSError, ValueError):  # none yet, or cut short
        pass
    docs = parse_documents()
    with contextlib.suppress(OSError):
        files.atomic_write(path, json.dumps(docs, ensure_ascii=False))
    return docs


def cache_file() -> str:
    """Where this Python's corpus is cached, named by a hash of what it depends on."""
    key = hashlib.sha256(f"{sys.version}\0{sysconfig.get_paths()['stdlib']}\0".encode())
    for module in (topics, sys.modules[__name__], sentences_lib):
        with open(module.__file__, "rb") as f:
            key.update(f.read())
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "bertjax", f"builtin_corpus-{key.hexdigest()[:16]}.json")


def parse_documents() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The built-in documents, parsed and cleaned from the interpreter's files."""
    docs = []
    for name in sorted(topics.topics):
        sentences = split_sentences(_prose(topics.topics[name]))
        if sentences:
            docs.append((f"builtin:topic:{name}", tuple(sentences)))
    for module, path in _stdlib_modules():
        sentences = []
        with _gc_paused():
            docstrings = _docstrings(path)
        for docstring in docstrings:
            prose = _prose(docstring)
            if len(prose.split()) >= _MIN_PROSE_SHARE * len(docstring.split()):
                sentences.extend(split_sentences(prose))
        if sentences:
            docs.append((f"builtin:module:{module}", tuple(sentences)))
    return tuple(docs)


@contextlib.contextmanager
def _gc_paused():
    """Pauses the cyclic garbage collector: its passes over the many fresh AST
    nodes, which hold no cycles, would triple the parsing time."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _stdlib_modules() -> list[tuple[str, str]]:
    """(module name, path) of the public pure-Python standard library, sorted by name."""
    root = sysconfig.get_paths()["stdlib"]
    modules = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = [
            d
            for d in subfolders
            if d not in _SKIPPED_DIRS and not d.startswith(("_", ".", "config-"))
        ]
        package = os.path.relpath(folder, root).replace(os.sep, ".").removeprefix(".")
        for file in names:
            if not file.endswith(".py") or (file.startswith("_") and file != "__init__.py"):
                continue
            stem = file.removesuffix(".py")
            name = package if stem == "__init__" else f"{package}.{stem}".removeprefix(".")
            modules.append((name, os.path.join(folder, file)))
    return sorted(modules)


def _docstrings(path: str) -> list[str]:
    """The docstrings of a module and of its public top-level classes and functions."""
    with open(path, "rb") as f:
        source = f.read()
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError):
        return []  # not valid for this interpreter; nothing to learn from it
    nodes = [tree] + [
        node
        for node in tree.body
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and not node.name.startswith("_")
    ]
    return [doc for doc in map(ast.get_docstring, nodes) if doc]


def _prose(text: str) -> str:
    """`text` without code, tables and reST markup; paragraphs stay apart."""
    kept = []
    literal_indent = None  # set while inside a literal block that follows "::"
    for paragraph in _paragraphs(text):
        indent = min(len(line) - len(line.lstrip()) for line in paragraph)
        if literal_indent is not None and indent > literal_indent:
            continue
        literal_indent = None
        lines = []
        for line in paragraph:
            if line.lstrip().startswith(">>>"):
                break  # a doctest session and its output run to the paragraph's end
            dropped = (_TABLE_LINE, _FOOTNOTES_HEADER, _DIRECTIVE, _TYPE_FIELD)
            if not any(pattern.match(line) for pattern in dropped):
                lines.append(line)
        if not lines:
            continue
        if lines[-1].rstrip().endswith("::"):
            literal_indent = indent
            lines[-1] = lines[-1].rstrip()[:-1].removesuffix(" :")
        paragraph_text = _strip_markup("\n".join(lines))
        if _is_prose(paragraph_text, indented=indent > 0):
            kept.append(paragraph_text)
    return "\n\n".join(kept)


def _paragraphs(text: str) -> list[list[str]]:
    paragraphs = [[]]
    for line in text.expandtabs().splitlines():
        if line.strip():
            paragraphs[-1].append(line)
        elif paragraphs[-1]:
            paragraphs.append([])
    return [p for p in paragraphs if p]


def _strip_markup(text: str) -> str:
    text = _PARAM_FIELD.sub(r"\1:", text)
    text = _RETURNS_FIELD.sub("Returns:", text)
    text = _RAISES_FIELD.sub(r"Raises \1:", text)
    text = _ROLE.sub(r"\1", text)
    text = _LITERAL.sub(r"\1", text)
    text = _INTERPRETED.sub(r"\1", text)
    text = _STRONG.sub(r"\1", text)
    return _EMPHASIS.sub(r"\1", text)


def _is_prose(text: str, *, indented: bool) -> bool:
    """Most tokens are plain words; an indented block must also end like a sentence."""
    tokens = text.split()
    if not tokens:
        return False
    words = sum(1 for token in tokens if _WORD.fullmatch(token))
    if words < _MIN_WORD_SHARE * len(tokens):
        return False
    return not indented or bool(_SENTENCE_END.search(text))
