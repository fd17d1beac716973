"""Build and install popart-unwind.

The Python package lives in ``popart_unwind/``; the top-level ``transforms/`` folder installs
inside it as ``popart_unwind.transforms`` (a top-level ``transforms`` module would collide with
an unrelated published package); the C++ layout hooks in ``cpp_hooks/`` build into the
extension module ``popart_unwind._hooks`` with pybind11. The demo's model ships as package
data.
"""

from pybind11.setup_helpers import Pybind11Extension, build_ext
from setuptools import find_packages, setup

library_packages = find_packages(include=["popart_unwind", "popart_unwind.*"])
transform_packages = ["popart_unwind.transforms"] + [
    "popart_unwind.transforms." + name for name in find_packages(where="transforms")
]

hooks = Pybind11Extension(
    "popart_unwind._hooks",
    sources=[
        "cpp_hooks/bindings.cpp",
        "cpp_hooks/counting_bindings.cpp",
        "cpp_hooks/linear_mapping.cpp",
        "cpp_hooks/matmul_mapping.cpp",
        "cpp_hooks/sliceable_mapping.cpp",
        "cpp_hooks/transpose_bindings.cpp",
        "cpp_hooks/unwind_core/bindings.cpp",
        "cpp_hooks/unwind_core/canonical.cpp",
        "cpp_hooks/unwind_core/canonical_swaps.cpp",
        "cpp_hooks/unwind_core/chain.cpp",
        "cpp_hooks/unwind_core/graph.cpp",
        "cpp_hooks/unwind_core/greedy.cpp",
        "cpp_hooks/unwind_core/dim_set.cpp",
        "cpp_hooks/unwind_core/fill_sample.cpp",
        "cpp_hooks/unwind_core/region.cpp",
        "cpp_hooks/unwind_core/score.cpp",
    ],
    include_dirs=["cpp_hooks"],
    cxx_std=17,
)

setup(
    packages=library_packages + transform_packages,
    package_dir={"popart_unwind.transforms": "transforms"},
    # the demo's model (popart_unwind/report/demo_model.py)
    package_data={"popart_unwind.report": ["demo_gpt2_training.json.gz"]},
    ext_modules=[hooks],
    cmdclass={"build_ext": build_ext},
)
