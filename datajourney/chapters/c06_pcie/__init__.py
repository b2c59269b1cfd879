"""Chapter 6: Crossing PCIe.

crossing the PCIe bus - host-to-device and device-to-host copies.
"""

TITLE = 'Crossing PCIe'
