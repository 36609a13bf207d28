"""Capacity planning: the bill of an index of N passages (``mvr plan``), with no FAISS or torch import."""
