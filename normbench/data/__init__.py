"""data: every data set normbench trains on, offline: made by code and cached (MNIST-1D,
digits, tokens), read from the running interpreter (pysource), or brought by the user (an npz
file, a data plugin).

Owns: splits, descriptions, caches. May import: core. No torch: arrays are numpy.
"""
