"""What a reader reuses in their own training code: the pieces the chapters measure with.

Each module documents its public names (``__all__``) and carries a runnable example; the book's
Toolkit appendix is generated from them (:mod:`datajourney.book.toolkit_page`). The toolkit imports
only :mod:`datajourney.core`, never a chapter, and writes no sentence about a result.
"""
