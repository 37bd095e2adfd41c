"""What examples/wide_deep_ps.py and examples/ncf_ps.py share: MovieLens data and its splits
(``data``) and the training loop through minidl.dist.ps, one process or many (``runner``). The models and
their metrics are the library's: minidl.models."""
