"""The base layer: what every chapter measures with and stores, with no knowledge of any chapter.

* :mod:`~datajourney.core.results`: result files (schema, checks, loading, the reference runs);
  :mod:`~datajourney.core.fingerprint`: the machine a result came from.
* :mod:`~datajourney.core.facts`: typed facts and advice, what a chapter's analysis finds;
  :mod:`~datajourney.core.phrasing`: the one wording module: numbers, a value, a comparison, a share, advice,
  and the shapes a chapter opens with (:class:`~datajourney.core.phrasing.Finding`, ``Action``, ``Opening``).
* :mod:`~datajourney.core.params`: declared parameters and their one validator.
* :mod:`~datajourney.core.stats` (with the direction of two sets of runs), :mod:`~datajourney.core.timing`,
  :mod:`~datajourney.core.units`:
  summaries with their spread, timers, byte and rate units.
* :mod:`~datajourney.core.charts`: the book's plotly renderer and the charts several chapters share
  (a chapter's own charts live in its folder); :mod:`~datajourney.core.files`, :mod:`~datajourney.core.paths`:
  atomic writes and the checkout's paths.
"""
