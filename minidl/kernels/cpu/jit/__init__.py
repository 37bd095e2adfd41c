"""Every Numba-compiled function of the CPU kernels, one file per kernel family.

The wrappers beside this package (``minidl/kernels/cpu/*.py``) plan layouts and pick kernels; the code
here sees only arrays and numbers. Numba's disk cache keys a kernel on its own file, which would
miss an edit to a helper inlined from another file: ``kernel_cache`` keys every kernel on the text
of this whole package instead, so any edit here recompiles what could depend on it.

- ``op_codes.py``, ``formulas.py``: generated from ``minidl/formulas/table.py`` (do not edit);
- ``scalar_math.py``: the formula language's library functions, one meaning per dtype;
- ``vector_math.py``: loops over packed runs that vectorise (exp in float32, sums, dot products);
- ``rows.py``: where the work is (rows, work items, element positions);
- ``convert.py``: one element from one dtype to another, bfloat16 included;
- ``elementwise.py``, ``reduce.py``, ``indexing.py``, ``conv.py``, ``optim.py``, ``sort.py``,
  ``softmax.py``, ``random.py``, ``norm_rows.py``: the kernels, by family.
"""
