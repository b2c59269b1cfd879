"""The Data Journey: measure every hop of a training sample from disk to GPU memory.

Four layers, imports only pointing down (checked by import-linter):

* :mod:`datajourney.core`: result files, the machine's fingerprint, facts and their one
  phrasing, declared parameters, statistics, timing, units, shared charts; no chapter knowledge.
* :mod:`datajourney.toolkit`: what a reader reuses in their own training code: page-cache
  purge and residency, generated data sets, ``/proc/diskstats``, disk-to-GPU readers, images,
  text, tokens, models. Public API, documented on the book's Toolkit page.
* :mod:`datajourney.chapters`: one folder per chapter (``c02_random_vs_sequential`` ...):
  ``params`` (the one set of defaults), ``experiment`` (measures, writes no sentence),
  ``analysis`` (typed facts and advice, stored in the result; what chapter 12 reads), ``page``
  (what the chapter says). A chapter reads another only through the facts its result file exports.
* :mod:`datajourney.book`: the registry that finds the chapters (no chapter imports it), the runner
  and its profiles, reports, stability, the Jupyter Book build; :mod:`datajourney.cli` is the command line.
"""

__version__ = "0.1.0"

import sys as _sys

# jsonschema, which nbformat imports (and plotly imports nbformat in every kernel that draws a chart), compiles the
# IRI grammar of rfc3987_syntax when that optional package is installed (jupyter-events asks for it): over 2 s of
# CPU in each process. Nothing here validates IRIs, so jsonschema is left without that one format check.
_sys.modules.setdefault("rfc3987_syntax", None)
