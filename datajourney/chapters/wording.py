"""Sentences several chapters' pages word the same way from their facts (pages only: analyses may not word)."""
from __future__ import annotations

import re

from datajourney.core import phrasing as say
from datajourney.core.phrasing import Finding


def cap(s: str) -> str:
    """``s`` with its first letter capitalised (the rest unchanged)."""
    return s[:1].upper() + s[1:]


def fact_value(facts, key: str, runs: bool = False) -> str:
    """Fact ``key`` as the book prints a value (without its run count unless ``runs``)."""
    return say.value(facts.get(key), runs=runs)


def pair_words(facts, key: str) -> str:
    """"A ran at x MB/s and B at y MB/s, both S: N× faster than B" for the comparison fact ``key`` (S: the setting
    the two labels share, named once)."""
    c = facts[key]
    a, b = facts[c.of], facts[c.basis]
    own_a, own_b, shared = say.shared_setting(say.text(a.label), say.text(b.label))
    both = f", both {shared}" if shared else ""   # said once, before the comparison (a level one included)
    return (f"{cap(own_a)} ran at **{say.value(a)}** and {own_b} at **{say.value(b)}**{both}: "
            f"**{say.comparison(c, facts, baseline=own_b)}**")


def ran(facts, key: str, lead: str = "") -> str:
    """"A ran **N× faster than B**, both S" for the comparison fact ``key`` (S: the setting both labels share, named
    once; none when they share none), after ``lead`` ("With every page in RAM, "), capitalised where it starts."""
    subject, comparison, shared = say.contrast(facts[key], facts)
    return (f"{lead}{subject}" if lead else cap(subject)) + f" ran **{comparison}**" + (
        f", both {shared}" if shared else "")


def fact_finding(facts, key: str, text: str):
    """A finding worded ``text`` carrying fact ``key``'s number, unit, published figure and spread."""
    f = facts[key]
    return Finding(key, text, f.number, f.unit, f.published, f.spread)


def residency_words(facts, unit: str) -> str:
    """Whether cold ``unit`` (runs, epochs) started cold and warm ones warm: the page-cache residency measured
    when each began, from the ``residency.cold``/``residency.warm`` facts."""
    parts = []
    c, w = facts.get("residency.cold"), facts.get("residency.warm")
    if c is not None:
        share = "**none** of the data" if c.number == 0 else f"at most **{say.value(c)}** of the data"
        parts.append(f"{say.text(facts.data.get('cold_label') or 'cold')} {unit} started with {share} resident")
    if w is not None:
        share = "**all** of the data" if w.number >= 100 else f"at least **{say.value(w)}** of the data"
        parts.append(f"warm {unit} with {share} resident")
    return ("Residency: " + "; ".join(parts) + ".") if parts else f"No timed {unit} to check."


# ----------------------------------------------------------------------------- chapter 7's end-to-end recipe
#: The ceiling a recipe's share of its ceiling is read against, by the step it ran (chapter 7's ``recipe`` setting).
CEILING_WORDS = {"eager": "the eager ceiling", "graphed": "the graphed ceiling"}


def recipe_sentence(facts, key: str = "recipe") -> str | None:
    """Chapter 7's end-to-end verdict, the fact ``key`` in ``facts`` (its ``recipe`` fact, or chapter 12's copy
    ``07.recipe`` with both its sides): the setting that fed the highest share of its own ceiling, as the knobs a
    reader sets, with that share and its gain over what a reader runs without the book. One sentence wherever the
    recipe is worded; None where there is no such setting or its gain does not clear the declared threshold."""
    r = facts.get(key)
    if r is None or r.number is None or r.setting.get("verdict") != "change":
        return None
    s = r.setting
    kind = CEILING_WORDS.get(str(s.get("ceiling")), CEILING_WORDS["eager"])
    data, loader, *rest = s["parts"]   # the dataset, read by the DataLoader with its workers, then the rest
    workers = loader.get("knob") or f"num_workers={s.get('workers')}"
    knobs = [f"{say.text(data['what'])} with {say.code(workers)}"]
    knobs += [say.text(part["what"]) + (f" ({say.code(part['knob'])})" if part.get("knob") else "") for part in rest]
    return (f"End to end, feed the GPU from {say.and_list(knobs)}: it fed **{say.num(s['share'], '%')}** of {kind}'s "
            f"images/s, {say.comparison(r, facts)}.")


#: The side of the square images chapter 7's loaders hand out (its decode resizes every image to it).
IMAGE_SIDE = 224


def _uint8_code(part: dict, dataset_code: str, device: str) -> list[str]:
    """The code of chapter 7's uint8 part, whole: the Dataset handing out each image decoded and resized as uint8
    (a torchvision ``ImageFolder`` given the transform that does it; another Dataset told so in a comment), the
    statistics the part normalises with (the toolkit's, on the device, scaled to uint8), then the part's own line."""
    from datajourney.toolkit.imagenet import MEAN, STD

    on = f', device="{device}"' if device == "cuda" else ""
    lines = ([f"dataset.transform = v2.Compose([v2.Resize(({IMAGE_SIDE}, {IMAGE_SIDE})), v2.PILToTensor()])"
              "  # each image as uint8 (C, H, W)"] if "ImageFolder(" in dataset_code else
             ["# the Dataset hands out each image decoded and resized, as uint8 (C, H, W)"])
    for name, values in (("mean", MEAN), ("std", STD)):
        lines.append(f"{name} = torch.tensor([{', '.join(f'{v:g}' for v in values)}]{on}).view(1, 3, 1, 1) * 255")
    return lines + [f"{part['code']}  # each batch x from the loader"]


def recipe_snippet(setting: dict, device: str = "cuda") -> str | None:
    """The code of chapter 7's end-to-end recipe (its exported ``recipe`` setting): its own ``snippet`` where it gives
    one, else its parts' code in order, each under a comment naming it: the data set and the DataLoader assigned to
    names, a part that is a DataLoader argument (``worker_init_fn=…``) passed to it, the uint8 part whole
    (:func:`_uint8_code`), with the imports they use. ``device``: where chapter 7's step ran. None when that does not
    compile: code shown to paste must."""
    if setting.get("snippet"):
        return str(setting["snippet"])
    parts = [part for part in setting.get("parts") or [] if part.get("code")]
    args = [str(part["code"]) for part in parts if re.match(r"^\w+=(?!=)", str(part["code"]))]
    body = []
    dataset = ""
    for i, part in enumerate(parts):
        code = str(part["code"])
        if code in args:
            continue
        if code.startswith("DataLoader("):
            code = "loader = " + (code[:-1] + ", " + ", ".join(args) + ")" if args else code)
        elif i == 0 and not re.match(r"^\w+\s*=", code):
            code = "dataset = " + code
        if i == 0:
            dataset = code
        what = str(part.get("what") or "")
        lines = _uint8_code(part, dataset, device) if what.startswith("uint8 ") else [code]
        body += [f"# {what}".rstrip(), *lines]
    text = "\n".join(body)
    used = [("import os", r"\bos\."), ("import torch", r"\btorch\."), ("import torchvision", r"\btorchvision\."),
            ("from torch.utils.data import DataLoader", r"\bDataLoader\("),
            ("from torchvision.transforms import v2", r"\bv2\.")]
    imports = [line for line, name in used if re.search(name, text)]
    text = "\n".join(imports + [""] * bool(imports) + body)
    try:
        compile(text, "<recipe>", "exec")
    except SyntaxError:
        return None
    return text if body else None
