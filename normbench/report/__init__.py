"""report: runs into verdicts. Statistics as pure functions (stats; seeds until decided:
sequential); what every table shares
(base: the metric, the method, sections, grouping); one module per question, each computing
its table from grouped runs through stats (convergence, batch, precision, stability,
diagnostics; across workloads: aggregate and across), put into sections (sections); one
renderer per output format: terminal (rich), markdown, tidy (CSV and JSON), html, with the
captions and number formats they share (text); figures (plots); scaling ladders (scaling:
pure fits, multipliers and trends; scaling_section: ``--scaling``; scaling_plots).

Owns: every number and word a report shows. May import: core, data (split sizes, numpy
only), experiment, layers.keys, store. No torch.
"""
