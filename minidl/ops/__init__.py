"""Every op, written once for all devices. Each public op declares itself with ``registry.op``
beside its code; ``minidl``'s functions and ``Tensor``'s methods are made from those declarations.

Reading order, bottom-up (a module imports only those listed before it):

- ``overrides``: ops given an object of another tensor type (a DTensor), which takes them
- ``registry``: the declarations of the public ops
- ``core``: launching primitives on tensors, casting, scalars, broadcasting gradients
- ``random``: the counter-based generators
- ``conversion``: moving between dtypes and devices
- ``take_put``: ``Take`` and ``IndexPut``, the two movers indexing is made of
- ``views``: new layouts over the same storage
- ``inplace``: writing into a tensor's memory with autograd kept right
- ``creation``: factories and numpy interop
- ``autocast_mode``: autocast's state and the wrapper that applies its policies
- ``elementwise``: unary, binary, compare, where, clamp and their composites
- ``math_ops``: elementwise math composed of those (logit, float_power, sinc, polygamma, torch.special's entr, ...)
- ``shape_ops``: cat, stack, split, repeat, flip, roll, pad, ...
- ``stacking``: numpy's stacking and splitting (hstack, atleast_2d, tensor_split, hsplit, ...)
- ``view_copies``: torch's ``*_copy`` ops, a view then a copy
- ``indexing``: ``x[...]``, ``x[...] = v``, gather/scatter
- ``reduction``: sum, prod, max/min, scans, softmax
- ``reduction_more``: nansum, aminmax, cummax, logcumsumexp, trapezoid, cov, renorm, ... composed
- ``linalg``: matrix products
- ``arranging``: values moved to new places: region writes, diagonals and blocks, differences, sets
- ``sorting``: sort, topk, unique, bincount, histc
- ``search``: median, kthvalue, mode, quantile, searchsorted, isin, histogram, ... on argsort
- ``scatter_reductions``: scatter_reduce and index_reduce, folding elements into places
- ``conv``: convolution and pooling
- ``norm_rows``: layer, RMS and group norm's graph node on the norm_rows primitives, and ``rms_norm``
- ``normalization``: layer, batch and group norm, local response norm
- ``attention``: the split of a projection into heads
- ``embeddings``: the table lookup, its gradient dense or (by a rule attached later) sparse; embedding_bag
- ``fused``: the fused optimizer steps
- ``dropout``: dropout in one kernel each way
- ``batchnorm``: batch norm as one kernel each way; instance norm on it
- ``rnn``: the recurrent part of an RNN/LSTM/GRU layer over a whole sequence, one node
- ``cross_entropy``: cross-entropy and the negative log-likelihood over rows of classes
- ``activations``: nn.functional's activations beyond relu, gelu and silu (hardtanh, selu, glu, prelu, ...)
- ``factorisations``: the decompositions' graph nodes (LU, triangular and general solves, det, Cholesky, QR, eigh,
  SVD, pinv) with their adjoints, and the checks and launches of the ``linalg`` primitive they share
- ``decompositions``: torch.linalg's factorisations as ops (det, slogdet, cholesky, qr, eigh, svd, lu, geqrf)
- ``solvers``: solve, inv, pinv, lstsq, matrix_rank, cond, lu_solve, householder_product, matrix_exp, ...
- ``distances``: cosine similarity, pairwise and pdist distances, the bilinear form
- ``products``: mv, tensordot, cross, kron, addmv, multi_dot, ... (and linalg's cross, vecdot, matrix_power)
- ``norms``: linalg's vector_norm, matrix_norm and norm
- ``resampling``: interpolate, grid_sample, affine_grid, pixel and channel shuffles
- ``losses``: nn.functional's margin, embedding, Gaussian/Poisson likelihood and CTC losses
- ``conv_nd``: conv3d and the 1-D/3-D transposed convolutions, as 2-D work on the 2-D primitives
- ``pooling``: pooling in 1 to 3 spatial dims beyond conv's (max, average, adaptive, Lp, fractional, unpooling)
"""
# every module, in the reading order (each declares its ops as it is imported)
from . import (overrides, registry, core, random, conversion, take_put, views, inplace, creation,  # noqa: F401,I001
               autocast_mode, elementwise, math_ops, shape_ops, stacking, view_copies, indexing, reduction,
               reduction_more, linalg, arranging, sorting, search, scatter_reductions, conv, norm_rows, normalization,
               attention, embeddings, fused, dropout, batchnorm, rnn, cross_entropy, activations,
               factorisations, decompositions, solvers, distances, products, norms, resampling, losses, conv_nd,
               pooling)

# (the reduction helpers of the losses, for nn.functional's older losses too)
_legacy_reduction, _no_grad_through, _reduce = losses._legacy_reduction, losses._no_grad_through, losses._reduce
globals().update(registry.functions())
globals().update(registry.functions("nn.functional"))  # (for minidl.nn.functional)
__all__ = sorted(registry.functions()) + ["random"]  # (minidl.random is torch.random's counterpart)


def __getattr__(name):
    """``minidl.ops.<namespace>``: the ops users defined in that namespace with ``minidl.library.custom_op``."""
    return registry.user_namespace(name)
