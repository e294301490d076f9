"""core: what every role may use, and what imports nothing of normbench's above it.

Owns: the errors every command reports in one line (errors), what one config key accepts
(keys), the trusted reader of untrusted files (files), the word a mistyped one meant
(suggest), text made safe for a terminal or a markdown page (text), the registry of plugins
(registry: import paths, entry points, signatures), whether an optional dependency is
installed (extras), and SIGTERM as Ctrl-C for the commands that train (interrupt). No torch,
no pandas.
May import: nothing of normbench outside core.
"""
