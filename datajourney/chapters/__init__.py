"""The chapters: one folder each (``c02_random_vs_sequential`` ...), found by :mod:`~datajourney.book.registry`.

A chapter folder holds ``params`` (its declared parameters, the one set of defaults), ``experiment``
(``preflight`` and ``measure``: measures into the result the harness starts, never a sentence),
``analysis`` (``analyse``: the result's typed facts and advice, and the keys it exports to chapter 12 and the
front page), ``page`` (the words: its opening and findings from facts) and, where it draws its own, ``charts``.
No chapter imports another; :mod:`~datajourney.chapters.common` and :mod:`~datajourney.chapters.published`
(figures quoted from the published sources) are shared by all.
"""
