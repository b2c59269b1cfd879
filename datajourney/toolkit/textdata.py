"""Real text for the CPU-side chapters: the Alpaca instruction data and the GPT-2 tokenizer.

Where they come from, in this order:

1. explicit local files (``dataset_path``: Alpaca JSON; ``tokenizer_dir``: a directory with
   GPT-2's ``vocab.json`` and ``merges.txt``);
2. an offline copy in ``$DATAJOURNEY_TEXT_DATA`` (a directory holding ``alpaca_data_first2000.json``
   and ``gpt2/``), when set;
3. the copy that travels with the checkout in ``data/text/`` (see its README for sources and licences);
4. the public names (``tatsu-lab/alpaca`` through the ``datasets`` library, ``gpt2`` through
   ``tokenizers``) when a model hub is reachable.

With none of these the loader fails before any work, saying how to provide the data. It
never substitutes synthetic text.
"""
from __future__ import annotations

import json
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path

from datajourney.core.params import ParameterError, positive_int
from datajourney.core.paths import REPO_ROOT

DATASET_NAME = "tatsu-lab/alpaca"
TOKENIZER_NAME = "gpt2"
OFFLINE_JSON = "alpaca_data_first2000.json"
#: Environment variable naming a directory laid out like :data:`CHECKOUT_TEXT_DIR`.
TEXT_DATA_ENV = "DATAJOURNEY_TEXT_DATA"
#: The copy of the text data committed with the project.
CHECKOUT_TEXT_DIR = REPO_ROOT / "data" / "text"


@dataclass(frozen=True)
class Template:
    """A named way of joining an Alpaca record's fields into one training text."""

    with_input: str        #: format over {instruction}, {input}, {output} for records with an input
    without_input: str     #: ... and for records whose input is empty
    tidy: bool             #: collapse blank-line runs left by an empty field and strip the ends
    description: str


#: Named ways of joining an Alpaca record's fields into one training text.
TEMPLATES = {
    "spaces": Template(
        "{instruction} {input} {output}", "{instruction} {input} {output}", False,
        "the three fields joined by single spaces, an empty input included, which leaves two spaces; "
        "the joining that reproduces the source's length table and efficiencies"),
    "plain": Template(
        "{instruction}\n\n{input}\n\n{output}", "{instruction}\n\n{output}", True,
        "the fields separated by blank lines, an empty input left out"),
    "alpaca": Template(
        "Below is an instruction that describes a task, paired with an input that provides further context. "
        "Write a response that appropriately completes the request.\n\n"
        "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n{output}",
        "Below is an instruction that describes a task. Write a response that appropriately completes the "
        "request.\n\n### Instruction:\n{instruction}\n\n### Response:\n{output}", True,
        "the prompt format published with Stanford Alpaca (tatsu-lab/stanford_alpaca)"),
}
DEFAULT_TEMPLATE = "plain"
HUB_HOST = "huggingface.co"


def offline_dir() -> Path | None:
    """The local copy of the text data: ``$DATAJOURNEY_TEXT_DATA`` when set, else ``data/text/``
    in the checkout; None when neither holds the Alpaca file and ``gpt2/vocab.json``. A variable
    that names an incomplete directory is an error (it would otherwise be silently ignored)."""
    env = os.environ.get(TEXT_DATA_ENV)
    if env:
        d = Path(env).expanduser()
        missing = [f for f in (OFFLINE_JSON, "gpt2/vocab.json", "gpt2/merges.txt") if not (d / f).is_file()]
        if missing:
            raise ParameterError(TEXT_DATA_ENV, env, f"a directory holding {OFFLINE_JSON} and gpt2/vocab.json, "
                                 f"gpt2/merges.txt (missing: {', '.join(missing)})")
        return d
    d = CHECKOUT_TEXT_DIR
    return d if (d / OFFLINE_JSON).is_file() and (d / "gpt2" / "vocab.json").is_file() else None


def hub_reachable(timeout: float = 3.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        return False
    try:
        with socket.create_connection((HUB_HOST, 443), timeout=timeout):
            return True
    except OSError:
        return False


HOW = ("pass dataset_path=<alpaca_data.json> and tokenizer_dir=<dir with vocab.json and merges.txt>, "
       "set DATAJOURNEY_TEXT_DATA to a directory holding alpaca_data_first2000.json and gpt2/ "
       "(the checkout's data/text/ is one), or run where huggingface.co is reachable")


@dataclass
class Source:
    """Where the records and the tokenizer were loaded from (recorded with results)."""

    dataset: str
    tokenizer: str


def load_records(n: int, dataset: str = DATASET_NAME, dataset_path=None) -> tuple[list[dict], str]:
    """The first ``n`` Alpaca records (dicts with instruction, input, output) and their origin."""
    positive_int("n_samples", n, maximum=10_000_000)
    if dataset_path:
        p = Path(dataset_path).expanduser()
        if not p.is_file():
            raise ParameterError("dataset_path", str(dataset_path), "an existing Alpaca-style JSON file")
        try:
            records, origin = json.loads(p.read_text()), f"file {p.name}"
        except (UnicodeDecodeError, json.JSONDecodeError, OSError) as e:
            raise ParameterError("dataset_path", str(dataset_path),
                                 f"a readable Alpaca-style JSON file ({type(e).__name__})") from None
    elif dataset == DATASET_NAME and offline_dir():
        records, origin = json.loads((offline_dir() / OFFLINE_JSON).read_text()), f"offline copy {OFFLINE_JSON}"
    elif hub_reachable():
        try:
            import datasets as hf
        except ImportError:
            raise ParameterError("dataset", dataset, "a local file (dataset_path) or the 'datasets' package "
                                 "installed to load a public name") from None
        records, origin = list(hf.load_dataset(dataset, split=f"train[:{n}]")), f"hub {dataset}"
    else:
        raise ParameterError("dataset", dataset, f"a data set that can be loaded without a network here: {HOW}")
    if not isinstance(records, list) or not records or not all(
        isinstance(r, dict) and {"instruction", "output"} <= set(r) for r in records[:50]
    ):
        raise ParameterError("dataset_path", str(dataset_path), "a JSON list of records with instruction/output")
    if len(records) < n:
        raise ParameterError("n_samples", n, f"at most {len(records):,} (records available from {origin})")
    return records[:n], origin


def load_tokenizer(tokenizer: str = TOKENIZER_NAME, tokenizer_dir=None):
    """A fast GPT-2 byte-level BPE tokenizer (``tokenizers.Tokenizer``) and its origin."""
    from tokenizers import ByteLevelBPETokenizer, Tokenizer

    if tokenizer_dir:
        d = Path(tokenizer_dir).expanduser()
        missing = [f for f in ("vocab.json", "merges.txt") if not (d / f).is_file()]
        if missing:
            raise ParameterError("tokenizer_dir", str(tokenizer_dir),
                                 f"a directory holding vocab.json and merges.txt (missing: {', '.join(missing)})")
        tok, origin = ByteLevelBPETokenizer(str(d / "vocab.json"), str(d / "merges.txt")), f"files in {d.name}/"
    elif tokenizer == TOKENIZER_NAME and offline_dir():
        d = offline_dir() / "gpt2"
        tok, origin = ByteLevelBPETokenizer(str(d / "vocab.json"), str(d / "merges.txt")), "offline copy gpt2/"
    elif hub_reachable():
        tok, origin = Tokenizer.from_pretrained(tokenizer), f"hub {tokenizer}"
    else:
        raise ParameterError("tokenizer", tokenizer, f"a tokenizer that can be loaded without a network here: {HOW}")
    if tok.encode("Hello world").ids != [15496, 995]:  # guards against a silently broken vocabulary
        raise ParameterError("tokenizer_dir", str(tokenizer_dir), "GPT-2's vocabulary ('Hello world' -> [15496, 995])")
    return tok, origin


def eos_id(tok) -> int:
    return tok.token_to_id("<|endoftext|>")


TEMPLATE_FIELDS = ("instruction", "input", "output")
TEMPLATE_ALLOWED = (", ".join(repr(t) for t in TEMPLATES)
                    + ", or a format string that names {instruction} and {output} (and may name {input})")


def check_template(template) -> str:
    """A known template name or a format string over the record's fields; anything else (a typo
    such as ``alpacca``, a string naming no field, an unknown field) fails naming ``template``."""
    if isinstance(template, str) and template in TEMPLATES:
        return template
    if not isinstance(template, str) or "{instruction}" not in template or "{output}" not in template:
        raise ParameterError("template", template, TEMPLATE_ALLOWED)
    try:
        template.format(instruction="", input="", output="")
    except (KeyError, IndexError, ValueError, AttributeError):
        raise ParameterError("template", template, TEMPLATE_ALLOWED) from None
    return template


def join(record: dict, template: str = DEFAULT_TEMPLATE) -> str:
    """One training text from a record. ``template`` is a name from :data:`TEMPLATES` (each has a
    form for records with and without ``input``) or a format string over {instruction},
    {input} and {output} (blank-line runs left by an empty field are collapsed)."""
    t = TEMPLATES.get(template) or Template(template, template, True, "custom format string")
    fields = {k: (record.get(k) or "") for k in TEMPLATE_FIELDS}
    text = (t.with_input if fields["input"] else t.without_input).format(**fields)
    return re.sub(r"\n{3,}", "\n\n", text).strip() if t.tidy else text


def texts_and_source(n: int, *, dataset=DATASET_NAME, dataset_path=None, tokenizer=TOKENIZER_NAME,
                     tokenizer_dir=None, template=DEFAULT_TEMPLATE):
    """Load records and tokenizer up front (both must succeed before any work starts)."""
    check_template(template)
    records, d_origin = load_records(n, dataset, dataset_path)
    tok, t_origin = load_tokenizer(tokenizer, tokenizer_dir)
    return [join(r, template) for r in records], tok, Source(d_origin, t_origin)
