"""Chapter 6: Crossing PCIe.

crossing the PCIe bus - host-to-device and device-to-host copies.
"""

TITLE = 'Crossing PCIe'
#: The key result the front page shows (a fact key, or ? and a declared question's key; what it measures).
HEADLINE = ('h2d_pinned', 'pinned host-to-device copy')
