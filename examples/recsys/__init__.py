"""What examples/wide_deep_ps.py and examples/ncf_ps.py share: MovieLens data and its splits
(``data``), the papers' metrics (``metrics``), the two models (``models``) and the training loop
through minidl.dist.ps, one process or many (``runner``)."""
