"""Chapter 1: Introduction: the journey and your machine.

the pipeline map and the reader's machine, recorded as a result.
"""

TITLE = 'Introduction: the journey and your machine'
