"""The CUDA kernels: the primitives' contract in CUDA C (``csrc/``), their launch wrappers
(``primitives/``, registered on first use through ``minidl.kernels``) and the runtime that compiles
and launches them (``runtime.py``: CuPy on a GPU, or the simulator in ``sim/``). The user-facing
``minidl.cuda`` sits above the ops and uses this package's runtime."""
