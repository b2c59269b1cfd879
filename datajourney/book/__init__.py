"""The book's machinery, kept apart from the measurement code.

``chapters`` (the twelve chapters and their modules), ``runner`` + ``profiles.yaml``
(papermill runs under named profiles), ``pages`` (what each chapter's page says), ``results`` (result
files and reference runs), ``fingerprint`` (the environment of a run), ``findings``
(sentences computed from results), ``published`` (figures quoted from the sources),
``report`` (tables and findings in a notebook), ``plotting`` (offline plotly charts),
``stats`` (summaries and intervals) and ``sphinx_ext`` (the Jupyter Book build).
"""
