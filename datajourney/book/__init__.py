"""The book's machinery, above the chapters: running, rendering and building.

:mod:`~datajourney.book.runner` (papermill runs under the profiles of ``profiles.yaml``, rerender, promote),
:mod:`~datajourney.book.opening` and :mod:`~datajourney.book.report` (what a notebook shows: the opening,
tables, the computed text), :mod:`~datajourney.book.overview` (the front page and the checklist, from
stored facts), :mod:`~datajourney.book.analyse` (facts stored again for older result files),
:mod:`~datajourney.book.stability` (reference runs compared), :mod:`~datajourney.book.cells` (the
generated parameters cells), :mod:`~datajourney.book.contracts` (the import contracts, built from the
registry), :mod:`~datajourney.book.toolkit_page`, :mod:`~datajourney.book.scaffold` (a new chapter) and
:mod:`~datajourney.book.sphinx_ext` (the Jupyter Book build).
"""
