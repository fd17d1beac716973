"""PopART-style transforms over the popart-unwind IR (installed as popart_unwind.transforms).

This layer depends on the library and never the other way round.
"""
