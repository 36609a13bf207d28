"""Approximate nearest-neighbour first stage: the interface (``base``), its light defaults (``defaults``), the FAISS IVFPQ and ScaNN backends, and the factory above them (``factory``)."""
