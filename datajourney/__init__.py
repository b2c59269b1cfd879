"""The Data Journey: measure every hop of a training sample from disk to GPU memory.

The package has two halves.

Measurement code a reader can reuse in their own training code, one module per hop of
the journey (the chapter that measures it in brackets):

==============  ============================================================  =======
module          what it measures or provides                                   chapter
==============  ============================================================  =======
``intro``       the pipeline map and the machine's fingerprint                 1
``pagecache``   purge the page cache (drop_caches or fadvise), residency       2, 3, 7
``datasets``    generated data sets: manifest, atomic publish, reuse           2, 3, 7
``storage``     random small files vs one sequential shard                     2
``loader``      the DataLoader over small files vs a shard                     3
``starvation``  per-sample CPU cost vs GPU step (D·B/W vs G), AU               4
``textdata``    Alpaca + GPT-2 tokens from local files                         4, 5
``padding``     padding vs packing: layouts, efficiency, GPU cost              5
``pcie``        host↔device copies: pinned/pageable, overlap, ceilings         6
``images``      synthetic JPEG data sets (ImageFolder, MDS)                    7
``training``    the profiled training loop and its ceiling                     7
``timing``      synchronised host clocks and CUDA-event timing                 4, 6, 7
==============  ============================================================  =======

Parameter checks shared by every chapter are in :mod:`datajourney.params`.

The book's machinery lives in :mod:`datajourney.book`: the chapter list, the runner and
its profiles, result files, computed findings, published figures, report helpers,
charts and the Jupyter Book build. What each chapter's page says (its key results,
computed notes and display tables) is in :mod:`datajourney.book.pages`, one module per
chapter named like the measurement module it reads.
"""
from pathlib import Path

__version__ = "0.1.0"

#: The repository checkout this package lives in (notebooks, profiles, reference data).
REPO_ROOT = Path(__file__).resolve().parent.parent
