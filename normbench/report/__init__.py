"""report: runs into verdicts. Statistics as pure functions (stats; seeds until decided:
sequential); what every table shares
(base: the metric, the method, sections; labels; grouping: runs into groups; results: each
group's results by seed); one module per question, each computing
its table from grouped runs through stats (convergence, batch, precision, stability,
diagnostics; across workloads: aggregate and across), put into sections (sections); one
renderer per output format: terminal (rich), markdown, tidy (CSV and JSON), html, with the
captions and number formats they share (text); figures (plots); scaling ladders (scaling:
measured multipliers and trends; scaling_curves: the forms beyond the runs; scaling_section:
``--scaling``; scaling_plots).

Owns: every number and word a report shows. May import: core, data (split sizes, numpy
only), experiment, layers.keys, store. No torch.
"""

# Every table a report can show alone (``--table``, ``report(table=...)``), the one list the
# help, the errors and the API derive from: the table across workloads, each section's
# tables in the order they are shown, and a tuned sweep's.
TABLE_NAMES = (
    "across",
    "convergence",
    "batch_sensitivity",
    "precision",
    "lr_stability",
    "depth_stability",
    "cost",
    "diagnostics_init",
    "diagnostics",
    "tuning",
    "scaling",
    "scaling_rungs",
)
