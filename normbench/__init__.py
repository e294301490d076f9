"""normbench: which normalization, placed where, holds up at which batch size and precision?"""

__version__ = "0.6.0"
