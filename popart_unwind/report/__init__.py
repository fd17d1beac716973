"""The outputs of ``popart-unwind``: the plan file, the annotated ONNX model, the summary
table, the progress display and the HTML report with its pictures (docs/cli.md).

``session`` runs a planning session without touching files; every other module turns its
result into one output, and ``atomic`` makes sure each output is complete or absent.
"""
