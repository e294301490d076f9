"""experiment: one run's config, from the command line to a validated dict.

Owns: the schema of keys (schema), where choices come from (options: conf/, config
directories, plugins), the refused combinations (rules), Hydra's composition (compose), and the
probe that builds a config's plugins once before anything is written (probe). May import:
core, data, layers. Only probe and budget (a model's parameter count) import torch.
"""
