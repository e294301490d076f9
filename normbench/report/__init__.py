"""report: runs into verdicts. Statistics as pure functions (stats), runs grouped into tables
(tables), and the renderers: terminal, markdown, CSV and JSON (render), figures (plots), one
self-contained HTML file (html).

Owns: every number and word a report shows. May import: core, experiment, layers.keys, store.
No torch.
"""
