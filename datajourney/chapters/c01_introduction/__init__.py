"""Chapter 1: Introduction: the journey and your machine.

the pipeline map and the reader's machine, recorded as a result.
"""

TITLE = 'Introduction: the journey and your machine'
#: Chapter 12 diagnoses hops; this chapter records the machine, so the diagnosis reads none of its facts.
DIAGNOSED = False
